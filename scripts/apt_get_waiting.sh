# apt_get ARGS...: apt-get that waits, saying so once, while another apt or
# dpkg holds its lock (a fresh machine's unattended upgrades), instead of
# failing with exit 100. Any other failure prints apt's output and returns 1.
# Sourced by setup.sh; tests/host/apt_wait_test.sh runs it against a fake apt-get.
# Environment: SHARDREC_APT_WAIT (seconds to wait at most, default 600),
# SHARDREC_APT_POLL (seconds between tries, default 5).
apt_get() {
  local sudo_cmd=() waited=0 limit="${SHARDREC_APT_WAIT:-600}" poll="${SHARDREC_APT_POLL:-5}" log holder
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  log="$(mktemp)"
  while true; do
    if DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get "$@" >"$log" 2>&1; then
      rm -f "$log"
      return 0
    fi
    if grep -qE "Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock" "$log" &&
       awk -v w="$waited" -v l="$limit" 'BEGIN { exit !(w < l) }'; then
      if [[ "$waited" == 0 ]]; then
        holder="$(grep -m1 -oE 'held by process [0-9]+( \([^)]*\))?' "$log" || true)"
        echo "setup: another apt/dpkg holds its lock${holder:+ ($holder)}; waiting up to ${limit} s for it"
      fi
      sleep "$poll"
      waited="$(awk -v w="$waited" -v p="$poll" 'BEGIN { print w + p }')"
      continue
    fi
    cat "$log" >&2
    rm -f "$log"
    echo "setup: apt-get $* failed" >&2
    return 1
  done
}
