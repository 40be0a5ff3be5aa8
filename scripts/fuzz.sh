#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, and runs each for a while from
# its seed corpus. CI runs it with --seconds 60; for a real hunt, hours:
#   bash scripts/fuzz.sh --seconds 3600 [--seed N] [TARGET...]
# Targets: npy tables_json plan_json kjt config checkpoint_manifest (default: all). New inputs go to
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
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(npy tables_json plan_json kjt config checkpoint_manifest model_config checkpoint_dense criteo_line
                               row_file)
build="$repo/build-fuzz"
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHARDREC_FUZZ=ON -DSHARDREC_SANITIZE=address,undefined -DSHARDREC_WITH_CUDA=OFF -DBUILD_TESTING=ON \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "${SHARDREC_JOBS:-$(nproc)}" --target shardrec_fuzz_targets
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t" artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  echo "=== fuzz $t for ${seconds} s"
  # -rss_limit_mb: a hostile size must be refused, not allocated.
  if ! "$build/bin/fuzz_$t" -max_total_time="$seconds" -seed="$seed" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" "$repo/tests/fuzz/corpus/$t" >"$build/fuzz_$t.log" 2>&1; then
    echo "FAIL fuzz $t: see $build/fuzz_$t.log and $artifacts/"
    tail -40 "$build/fuzz_$t.log"
    failed=$((failed + 1))
    continue
  fi
  # libFuzzer's last status line and final stats: executions, coverage, corpus.
  grep -E "^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz_$t.log" | tr '\n' ' '
  echo
  echo "PASS fuzz $t"
done
echo "fuzz: $(( ${#targets[@]} - failed )) passed, $failed failed"
exit $((failed > 0))
