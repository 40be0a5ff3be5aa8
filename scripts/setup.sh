#!/usr/bin/env bash
# Installs the Debian packages shardrec needs that are missing, then
# configures and builds. Sourced by quickstart.sh and test.sh; usable alone:
#   bash scripts/setup.sh [BUILD_DIR] [extra cmake args...]
# Environment: SHARDREC_JOBS (parallel jobs, default: nproc).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$repo/build}"
shift || true

packages=(
  build-essential cmake ninja-build ccache git
  libboost-dev libboost-program-options-dev
  libtbb-dev libhwy-dev libdlpack-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libhiredis-dev redis-server
  python3-numpy python3-torch  # tests/python: `shardrec embed` against torch.nn.EmbeddingBag
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
jobs="${SHARDREC_JOBS:-$(nproc)}"
mkdir -p "$build_dir"
cmake -S "$repo" -B "$build_dir" -G Ninja "$@" >"$build_dir/configure.log" 2>&1 || {
  cat "$build_dir/configure.log"; exit 1; }
grep -E "^-- (shardrec |CUDA:|NCCL:|Gloo:)" "$build_dir/configure.log" || true
cmake --build "$build_dir" -j "$jobs"
