#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, and runs each for a while from
# its seed corpus, as many targets at once as there are cores
# (SHARDREC_JOBS): each target is one process on one core, so the wall time
# is the budget times the targets over the cores. CI runs it with --seconds
# 30; for a real hunt, hours:
#   bash scripts/fuzz.sh --seconds 3600 [--seed N] [TARGET...]
# Targets: the NAMEs of tests/fuzz/fuzz_NAME.cc (default: all). New inputs go to
# build-fuzz/corpus/TARGET (the seeds in tests/fuzz/corpus are only read);
# a crash leaves build-fuzz/artifacts/TARGET/crash-* and exits 1: add that
# file to tests/fuzz/corpus/TARGET/ with the fix, so CTest replays it.
# --seed N makes a run repeatable (CI uses --seed 1, so a CI failure is a
# regression, reproducible with the same command); without it each run
# explores afresh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=60
seed=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
# Default: every target in tests/fuzz (fuzz_NAME.cc), so a new parser's
# target is fuzzed without being listed here too (the list written out
# here had missed topology_json and constraints_json).
if ((${#targets[@]} == 0)); then
  for f in "$repo"/tests/fuzz/fuzz_*.cc; do
    name="$(basename "$f" .cc)"
    targets+=("${name#fuzz_}")
  done
fi
# A target named twice runs once (two at once would share a log and a corpus).
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | awk '!seen[$0]++')
build="$repo/build-fuzz"
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHARDREC_FUZZ=ON -DSHARDREC_SANITIZE=address,undefined -DSHARDREC_WITH_CUDA=OFF -DBUILD_TESTING=ON \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "${SHARDREC_JOBS:-$(nproc)}" --target shardrec_fuzz_targets
for t in "${targets[@]}"; do
  [[ -x "$build/bin/fuzz_$t" ]] || { echo "fuzz: no target '$t' was built (SHARDREC_FUZZ_TARGETS in tests/fuzz/CMakeLists.txt)"; exit 1; }
done
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# One target: its log in build-fuzz/fuzz_TARGET.log, its verdict (PASS or
# FAIL lines) in build-fuzz/fuzz_TARGET.result, printed in order below.
fuzz_one() {
  local t="$1" corpus="$build/corpus/$1" artifacts="$build/artifacts/$1" result="$build/fuzz_$1.result"
  mkdir -p "$corpus" "$artifacts"
  # -rss_limit_mb: a hostile size must be refused, not allocated.
  if ! "$build/bin/fuzz_$t" -max_total_time="$seconds" -seed="$seed" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" "$repo/tests/fuzz/corpus/$t" >"$build/fuzz_$t.log" 2>&1; then
    { echo "FAIL fuzz $t: see $build/fuzz_$t.log and $artifacts/"; tail -40 "$build/fuzz_$t.log"; } >"$result"
    return
  fi
  # libFuzzer's last status line and final stats: executions, coverage, corpus.
  { grep -E "^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz_$t.log" | tr '\n' ' '
    echo
    echo "PASS fuzz $t"; } >"$result"
}
jobs_at_once="${SHARDREC_JOBS:-$(nproc)}"
# Stopped (a CI timeout, Ctrl-C), the script takes its fuzzers with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
echo "=== fuzz ${#targets[@]} targets for ${seconds} s each, ${jobs_at_once} at a time"
running=0
for t in "${targets[@]}"; do
  rm -f "$build/fuzz_$t.result"
  if ((running >= jobs_at_once)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
  echo "=== fuzz $t"
  if [[ -f "$build/fuzz_$t.result" ]]; then cat "$build/fuzz_$t.result"; else echo "FAIL fuzz $t: no result (killed?)"; fi
  grep -q "^PASS fuzz $t\$" "$build/fuzz_$t.result" 2>/dev/null || failed=$((failed + 1))
done
echo "fuzz: $(( ${#targets[@]} - failed )) passed, $failed failed"
exit $((failed > 0))
