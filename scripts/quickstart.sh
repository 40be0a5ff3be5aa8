#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the
# main job on its embedded default: `shardrec train` (2 ranks as threads,
# local comm, CPU kernel, the balanced table-wise plan). It installs only
# what that needs (scripts/setup.sh; tests are not built: scripts/test.sh
# adds them). Arguments replace the default, e.g.
#   bash scripts/quickstart.sh train --sharder row_wise --verify
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh" "$repo/build"
exec "$repo/build/bin/shardrec" "$@"
