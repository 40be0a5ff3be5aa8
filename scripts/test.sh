#!/usr/bin/env bash
# The README's second command: install what is missing, build, and run the
# whole test suite with CTest (which prints the summary).
#   bash scripts/test.sh              # build/       Release (the default build type)
#   bash scripts/test.sh --sanitize   # build-asan/  AddressSanitizer + UBSan
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == "--sanitize" ]]; then
  # CUDA stays off here: nvcc objects and ASan runtimes do not mix, and the
  # CUDA plugin is built and tested by the plain build.
  build="$repo/build-asan"
  bash "$repo/scripts/setup.sh" --tests "$build" -DSHARDREC_SANITIZE=address,undefined \
    -DSHARDREC_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
else
  build="$repo/build"
  bash "$repo/scripts/setup.sh" --tests "$build"
fi
cd "$build"
ctest --output-on-failure -j "${SHARDREC_JOBS:-$(nproc)}" --timeout 600
