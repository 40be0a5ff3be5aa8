#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the
# main job: `shardrec` with no arguments (= `shardrec demo`), a small DLRM
# learning a planted click log on 2 ranks as threads, scored against the
# planted model (about a minute). It installs only what that needs
# (scripts/setup.sh; tests are not built: scripts/test.sh adds them).
# Arguments replace the default, e.g.
#   bash scripts/quickstart.sh train --sharder row_wise --verify
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh" "$repo/build"
exec "$repo/build/bin/shardrec" "$@"
