#!/usr/bin/python3
"""examples/python/dlrm_torchrun.py as a user runs it: 2 ranks (started as
torchrun starts them, --nproc 2), shardrec's sharded tables under both
sharders; the loss must fall clearly below where it starts. A bad flag is
refused with the usage message.

usage: dlrm_example_test.py   (PYTHONPATH must reach the built package)
Exit 77 (skip) when torch is missing."""
import json
import os
import subprocess
import sys

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable under", sys.executable)
    sys.exit(77)

example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python",
                       "dlrm_torchrun.py")
failures = []
for sharder in ["row_wise", "table_wise"]:
    r = subprocess.run([sys.executable, example, "--nproc", "2", "--sparse", "shardrec", "--sharder", sharder,
                        "--steps", "150", "--json"], capture_output=True, text=True, timeout=300)
    try:
        summary = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    except (IndexError, ValueError):  # no output, or not the JSON summary
        summary = {}
    ok = summary.get("ranks") == 2 and summary.get("last_loss", 1) < summary.get("first_loss", 0) - 0.03
    print(("PASS " if ok else "FAIL ") + sharder + ": " + (json.dumps(summary) if summary else r.stderr[-2000:]))
    if not ok:
        failures.append(sharder)
bad = subprocess.run([sys.executable, example, "--steps", "0"], capture_output=True, text=True, timeout=60)
ok = bad.returncode == 2 and "--steps must be positive" in bad.stderr
print(("PASS " if ok else "FAIL ") + "--steps 0 is refused: " + (bad.stderr.strip().splitlines() or [""])[-1])
if not ok:
    failures.append("bad flag")
print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
