#!/usr/bin/python3
"""shardrec.torch.ShardedEmbeddingBagCollection and ShardedEmbeddingCollection
over 2 processes equal the unsharded modules (tests/python/
sharded_ebc_worker.py), under each sharder; a checkpoint the 2 ranks save
loads into the unsharded module; the planner plans.

The ranks are started as torchrun starts its workers: environment variables
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
MASTER_PORT; the module finds its group from them alone. (Debian's torch
1.13 ships a torchrun that fails under Python 3.11 before starting any
worker, so the test does the starting itself.)

usage: sharded_ebc_test.py   (PYTHONPATH must reach the built package)
Exit 77 (skip) when torch is missing."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable under", sys.executable)
    sys.exit(77)

worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharded_ebc_worker.py")
failures = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


for sharder in ["table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"]:
    port, procs = free_port(), []
    checkpoints = tempfile.mkdtemp(prefix="shardrec-python-ckpt-")
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   SHARDREC_TEST_CHECKPOINTS=checkpoints)
        # Output to files: a rank blocked on a full pipe would stall the other.
        log = tempfile.TemporaryFile(mode="w+")
        procs.append((subprocess.Popen([sys.executable, worker, sharder], env=env, stdout=log,
                                       stderr=subprocess.STDOUT, text=True), log))
    outs = []
    for p, log in procs:
        try:
            p.wait(timeout=240)
            note = ""
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            p.wait()
            note = "TIMEOUT after 240 s\n"
        log.seek(0)
        outs.append(note + log.read())
        log.close()
    procs = [p for p, _ in procs]
    shutil.rmtree(checkpoints, ignore_errors=True)
    ok = all(p.returncode == 0 for p in procs) and all("RANK %d OK" % r in outs[r] for r in range(2))
    print(("PASS " if ok else "FAIL ") + sharder + ": " + " | ".join(o.strip().splitlines()[-1] if o.strip() else ""
                                                                   for o in outs))
    if not ok:
        for r, o in enumerate(outs):
            print("--- rank %d (exit %s):\n%s" % (r, procs[r].returncode, o[-3000:]))
        failures.append(sharder)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
