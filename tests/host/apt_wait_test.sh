#!/usr/bin/env bash
# scripts/apt_get_waiting.sh against a fake apt-get: it waits (saying so
# once) while the lock is held, then succeeds; it gives up after
# SHARDREC_APT_WAIT seconds; any other failure is shown and returned.
set -uo pipefail
script="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/apt-get" <<'FAKE'
#!/usr/bin/env bash
n=$(cat "$FAKE_COUNT" 2>/dev/null || echo 0); echo $((n + 1)) >"$FAKE_COUNT"
if [[ "$FAKE_MODE" == broken ]]; then echo "E: Unable to locate package nosuch"; exit 100; fi
if ((n < FAKE_LOCKED_TRIES)); then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)"
  exit 100
fi
echo "ok"
FAKE
chmod +x "$tmp/apt-get"
export PATH="$tmp:$PATH" SHARDREC_APT_POLL=0.05 FAKE_COUNT="$tmp/count"
sudo() { "$@"; }  # not root in some sandboxes: the fake needs no sudo
# shellcheck source=/dev/null
source "$script"
failed=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; failed=$((failed + 1)); fi; }

rm -f "$FAKE_COUNT"; out="$(FAKE_MODE=lock FAKE_LOCKED_TRIES=3 SHARDREC_APT_WAIT=5 apt_get update 2>&1)"; rc=$?
check "waits while the lock is held, then succeeds" '[[ $rc == 0 && $(cat $FAKE_COUNT) == 4 ]]'
check "says so once, naming the holder" '[[ $(grep -c "waiting up to" <<<"$out") == 1 && "$out" == *"process 4242"* ]]'

rm -f "$FAKE_COUNT"; out="$(FAKE_MODE=lock FAKE_LOCKED_TRIES=1000 SHARDREC_APT_WAIT=0.2 apt_get update 2>&1)"; rc=$?
check "gives up after SHARDREC_APT_WAIT seconds" '[[ $rc == 1 && "$out" == *"apt-get update failed"* ]]'

rm -f "$FAKE_COUNT"; out="$(FAKE_MODE=broken FAKE_LOCKED_TRIES=0 apt_get install nosuch 2>&1)"; rc=$?
check "another failure is shown at once" '[[ $rc == 1 && $(cat $FAKE_COUNT) == 1 && "$out" == *"Unable to locate"* ]]'
echo "apt wait: $((4 - failed)) passed, $failed failed"
exit $((failed > 0))
