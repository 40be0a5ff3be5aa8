#!/usr/bin/env bash
# Installs the Debian packages shardrec needs that are missing, then
# configures and builds. Used by quickstart.sh and test.sh; usable alone:
#   bash scripts/setup.sh [--tests] [BUILD_DIR] [extra cmake args...]
# Without --tests: what the main job needs (compiler, libraries, Gloo,
# Google Benchmark for `shardrec bench`), tests not built. With --tests:
# also GoogleTest, redis-server, numpy and torch (the reference checks),
# clang and its libFuzzer runtime (scripts/fuzz.sh).
# Environment: SHARDREC_JOBS (parallel jobs, default: nproc),
# SHARDREC_APT_WAIT (seconds to wait for a held apt/dpkg lock, default 600;
# see scripts/apt_get_waiting.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
with_tests=0
if [[ "${1:-}" == "--tests" ]]; then with_tests=1; shift; fi
build_dir="${1:-$repo/build}"
shift || true

main_packages=(
  build-essential cmake ninja-build ccache git
  libboost-dev libboost-program-options-dev
  libtbb-dev libhwy-dev libdlpack-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgloo-dev libhiredis-dev
  libxxhash-dev     # checkpoint checksums
  liburing-dev      # tables larger than memory: row files through io_uring
  zlib1g-dev        # gzip click logs
  libopenblas-dev pkg-config  # the dense layers' matrix products
  libbenchmark-dev  # `shardrec bench abi`
)
test_packages=(
  libgtest-dev libgmock-dev
  redis-server                 # the Redis rendezvous tests
  python3-numpy python3-torch  # tests/python: results against torch.nn.EmbeddingBag
  python3-xxhash               # scripts/torchrec_checkpoint.py: checkpoint checksums
  python3-sklearn              # tests/python: metrics against scikit-learn
  python3-matplotlib           # `shardrec plot`, train --plot (and its test)
  pybind11-dev python3-dev     # the Python package (python/), built and tested from build/python
  python3-venv                 # docs/python.md: pip install . into a venv
  clang libclang-rt-14-dev     # scripts/fuzz.sh: libFuzzer targets (tests/fuzz)
)
packages=("${main_packages[@]}")
((with_tests)) && packages+=("${test_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# shellcheck source=scripts/apt_get_waiting.sh
source "$repo/scripts/apt_get_waiting.sh"

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
fi

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
jobs="${SHARDREC_JOBS:-$(nproc)}"
mkdir -p "$build_dir"
testing=OFF
((with_tests)) && testing=ON
cmake -S "$repo" -B "$build_dir" -G Ninja -DBUILD_TESTING=$testing "$@" >"$build_dir/configure.log" 2>&1 || {
  cat "$build_dir/configure.log"; exit 1; }
grep -E "^-- (shardrec |CUDA:|NCCL:|Gloo:)" "$build_dir/configure.log" || true
cmake --build "$build_dir" -j "$jobs"
