#!/usr/bin/python3
"""`shardrec train --pipeline`: the sparse_dist pipeline gives the
unpipelined run's numbers bit for bit, as a user runs it.

Over gloo processes (2 and 3 ranks; shared memory, and once Gloo's TCP)
for every built-in sharder, with managed collision, with a whole DLRM and
with position weights, each run
twice (--pipeline none, --pipeline sparse_dist) saving a checkpoint after
the last step; every data file's checksum in the two manifests must be
equal. The report's time split says what the pipeline hid. A bad
--pipeline value is refused. --pipeline auto picks none over shared memory
and sparse_dist over TCP, and the two transports train the same tables.

usage: pipeline_cli_test.py SHARDREC_EXE"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

exe = sys.argv[1]
failures = []


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-2000:]))
    if not cond:
        failures.append(name)


def train(ckpt, *args):
    r = subprocess.run([exe, "train", "--comm", "gloo", "--json", "--checkpoint-dir", ckpt, *args],
                       capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        return None, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def checksums(ckpt):
    """sha256 of every file of the newest checkpoint but its manifest (which
    records times): tables, optimizer state, dense parameters, managed
    collision's maps."""
    steps = sorted(d for d in os.listdir(ckpt) if d.startswith("step-"))
    top = os.path.join(ckpt, steps[-1])
    out = {}
    for root, _, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            if name == "manifest.json":
                continue
            with open(path, "rb") as f:
                out[os.path.relpath(path, top)] = hashlib.sha256(f.read()).hexdigest()
    return out


base = ["--batch", "48", "--steps", "7", "--ids", "zipf:1.05"]
small = ["--tables", "3x4000x16,2x900x8"]
cases = []
for sharder in ["table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"]:
    cases.append((f"{sharder}, 2 processes", [*small, "--sharder", sharder, "--world-size", "2"]))
cases.append(("row_wise, 3 processes", [*small, "--sharder", "row_wise", "--world-size", "3"]))
cases.append(("table_wise, 3 processes", [*small, "--sharder", "table_wise", "--world-size", "3"]))
cases.append(("managed collision, 2 processes",
              [*small, "--sharder", "row_wise", "--world-size", "2", "--managed-collision",
               "t0:policy=lfu,eviction_interval=2,buckets=4", "--raw-id-space", "40000"]))
cases.append(("managed collision, 3 processes",
              [*small, "--sharder", "table_wise", "--world-size", "3", "--managed-collision",
               "t1:policy=lru,eviction_interval=3,buckets=3"]))
tcp = ["--plugin-opt", "comm.gloo.transport=tcp"]
cases.append(("row_wise, 2 processes over Gloo's TCP", [*small, "--sharder", "row_wise", "--world-size", "2", *tcp]))
cases.append(("DLRM, 2 processes", ["--model", "dlrm", "--tables", "26x2000x64", "--sharder", "row_wise",
                                    "--world-size", "2"]))
cases.append(("DLRM with position weights, 2 processes",
              ["--model", "dlrm", "--tables", "26x2000x64", "--sharder", "table_wise", "--world-size", "2",
               "--position-weighted", "8", "--pooling-factor", "3"]))

with tempfile.TemporaryDirectory() as tmp:
    for i, (name, args) in enumerate(cases):
        runs = {}
        for mode in ["none", "sparse_dist"]:
            ckpt = os.path.join(tmp, f"{i}-{mode}")
            report, err = train(ckpt, *base, *args, "--pipeline", mode)
            expect(f"{name}: --pipeline {mode} trains", report is not None, err)
            if report is None:
                break
            runs[mode] = (report, checksums(ckpt))
        if len(runs) != 2:
            continue
        (r0, c0), (r1, c1) = runs["none"], runs["sparse_dist"]
        expect(f"{name}: the same files", sorted(c0) == sorted(c1), (sorted(c0), sorted(c1)))
        differ = [f for f in c0 if c1.get(f) != c0[f]]
        expect(f"{name}: pipelined equals unpipelined bit for bit ({len(c0)} files)", not differ, differ)
        expect(f"{name}: the report names the pipeline", r1["pipeline"] == "sparse_dist" and r0["pipeline"] == "none",
               (r0["pipeline"], r1["pipeline"]))
        d0, d1 = r0["input_dist_s"], r1["input_dist_s"]
        expect(f"{name}: unpipelined, all of the input dist is exposed", d0["hidden"] <= 0.05 * d0["total"] + 1e-3,
               d0)
        expect(f"{name}: the split adds up", abs(d1["total"] - d1["exposed"] - d1["hidden"]) < 1e-6 + 1e-6 * d1["total"],
               d1)
        if "model" in r0:
            expect(f"{name}: the same losses", r0["model"]["last_loss"] == r1["model"]["last_loss"],
                   (r0["model"]["last_loss"], r1["model"]["last_loss"]))

    # --pipeline auto: none where the processes share one host's memory (gloo's
    # shared-memory transport), sparse_dist over TCP. And the two transports
    # train the same tables bit for bit (table-wise: all-to-alls and
    # rank-order reductions only, no ring sums).
    tw = [*base, *small, "--sharder", "table_wise", "--world-size", "2"]
    auto = {}
    for name, extra in [("shared memory", []), ("tcp", tcp)]:
        ckpt = os.path.join(tmp, "auto-" + name.replace(" ", "_"))
        report, err = train(ckpt, *tw, *extra)
        expect(f"--pipeline auto over {name} trains", report is not None, err)
        if report is not None:
            auto[name] = (report, checksums(ckpt))
    if len(auto) == 2:
        expect("--pipeline auto: none over shared memory, sparse_dist over TCP",
               auto["shared memory"][0]["pipeline"] == "none" and auto["tcp"][0]["pipeline"] == "sparse_dist",
               (auto["shared memory"][0]["pipeline"], auto["tcp"][0]["pipeline"]))
        c0, c1 = auto["shared memory"][1], auto["tcp"][1]
        expect(f"shared memory equals TCP bit for bit ({len(c0)} files)",
               sorted(c0) == sorted(c1) and all(c1[f] == c0[f] for f in c0), (c0, c1))

    r = subprocess.run([exe, "train", "--pipeline", "sparse"], capture_output=True, text=True, timeout=60)
    expect("--pipeline sparse is refused, naming the choices",
           r.returncode != 0 and "none or sparse_dist" in r.stderr and "--pipeline" in r.stderr, r.stderr)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
