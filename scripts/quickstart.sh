#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run
# `shardrec` on its embedded default job.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh" "$repo/build"
exec "$repo/build/bin/shardrec" "$@"
