#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the
# main job on its embedded default: `shardrec train` (2 ranks as threads,
# local comm, CPU kernel, the balanced table-wise plan). Arguments replace
# the default, e.g. `bash scripts/quickstart.sh train --sharder row_wise --verify`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh" "$repo/build"
if [[ $# -eq 0 ]]; then set -- train; fi
exec "$repo/build/bin/shardrec" "$@"
