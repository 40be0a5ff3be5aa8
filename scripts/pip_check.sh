#!/usr/bin/env bash
# docs/python.md's installation, as a user does it and as CI checks it: a
# fresh venv that sees Debian's python3-torch, `pip install .` from this
# checkout, then the package's tests run against the installed package
# (site-packages/shardrec with its own plugins), not the CMake build's
# build/python.
#   bash scripts/pip_check.sh            # needs the README's second command's packages
# The venv lives in a temporary folder removed on exit; pip's build folder is
# the persistent build/pip-<tag>/ of pyproject.toml (a second run rebuilds
# only what changed).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${SHARDREC_PIP_PYTHON:-/usr/bin/python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# ccache (when CMake finds it) then serves the objects the CMake build of
# the same checkout already compiled, whatever the build folder's name.
export CCACHE_BASEDIR="$repo" CCACHE_NOHASHDIR=1
"$python" -m venv --system-site-packages "$work/venv"
start=$SECONDS
echo "pip_check: pip install $repo (log: $work/pip.log while it runs)"
if ! "$work/venv/bin/pip" install --disable-pip-version-check "$repo" >"$work/pip.log" 2>&1; then
  tail -n 60 "$work/pip.log"
  echo "pip_check: pip install failed" >&2
  exit 1
fi
echo "pip_check: pip install took $((SECONDS - start)) s"

# Outside the checkout, so that `import shardrec` can only find the install.
cd "$work"
PYTHONPATH= "$work/venv/bin/python" - <<'PY'
import os, shardrec
where = os.path.dirname(shardrec.__file__)
assert "site-packages" in where, "imported shardrec from %s, not the venv" % where
print("pip_check: shardrec %s from %s; plugins: %s" % (
    shardrec.__version__, where, ", ".join(sorted(n for k, n in shardrec.plugins().components()))))
PY
for t in ebc_module_test.py sharded_ebc_test.py quant_ebc_test.py; do
  echo "pip_check: tests/python/$t against the installed package"
  PYTHONPATH= timeout 900 "$work/venv/bin/python" "$repo/tests/python/$t"
done
echo "pip_check: passed in $((SECONDS - start)) s"
