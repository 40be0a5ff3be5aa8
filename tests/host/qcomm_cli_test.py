#!/usr/bin/python3
"""`shardrec train --qcomm` and plan files' `qcomm_codecs`, as a user runs
them: a sharded --verify run with fp16 and with bf16 codecs stays within
the codecs' documented tolerance of the float32 unsharded run (over gloo
processes, the all-to-all and the reduce-scatter paths); the bytes on the
wire shrink as comm.md says; a plan file's codecs are used, --qcomm wins
over them op by op, and --plan-out writes the codecs in effect; bad ops and
codecs are refused before any work, naming them.

usage: qcomm_cli_test.py SHARDREC_EXE"""
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


def train(*args):
    r = subprocess.run([exe, "train", "--json", *args], capture_output=True, text=True, timeout=240)
    report = None
    if r.returncode == 0:
        report = json.loads(r.stdout.strip().splitlines()[-1])
    return r, report


base = ["--tables", "3x3000x16,2x500x8", "--batch", "64", "--steps", "8", "--comm", "gloo", "--world-size", "2"]

# --verify with fp16 and bf16: within the default codec tolerance, both paths, SGD and Adagrad.
for codec, tol in [("fp16", 2e-3), ("bf16", 1e-2)]:
    for sharder, op in [("table_wise", "pooled_embeddings_all_to_all"), ("row_wise", "pooled_embeddings_reduce_scatter")]:
        for optimizer, extra in [("sgd,lr=0.05", 0.0), ("adagrad,lr=0.05", 0.1)]:
            name = f"--verify with {codec} on {op} ({sharder}, {optimizer})"
            r, rep = train(*base, "--sharder", sharder, "--verify", "--qcomm", f"{op}={codec}", "--optimizer", optimizer)
            expect(name + " passes", rep is not None and rep["verify"]["ok"], r.stdout + r.stderr)
            if rep is not None:
                v = rep["verify"]
                expect(name + ": the documented tolerance", abs(v["tolerance"] - (tol + extra)) < 1e-12, v)
                expect(name + ": not bit-identical (the codec is used)", v["max_scaled_diff"] > 0, v)
                expect(name + ": the report names the codecs", rep["qcomm"] == f"{op}={codec}:{codec}", rep["qcomm"])

# Bytes on the wire: halved by fp16, about a quarter with int8 (table-wise).
sizes = {}
for codec in ["fp32", "fp16", "int8"]:
    r, rep = train(*base, "--sharder", "table_wise", "--qcomm", f"all={codec}")
    expect(f"train --qcomm all={codec}", rep is not None, r.stderr)
    if rep is not None:
        sizes[codec] = rep["bytes_per_step"]["output_dist"]
if len(sizes) == 3:
    expect("fp16 halves the output dist's bytes", sizes["fp16"] * 2 == sizes["fp32"], sizes)
    expect("int8 sends a quarter plus 8 bytes a row", sizes["fp32"] / 4 < sizes["int8"] < sizes["fp32"] / 3, sizes)

with tempfile.TemporaryDirectory() as tmp:
    plan = os.path.join(tmp, "plan.json")
    with open(plan, "w") as f:
        json.dump({"plan": {f"t{i}": {"sharding_type": "table_wise"} for i in range(5)},
                   "qcomm_codecs": {"pooled_embeddings_all_to_all": {"forward": "bf16", "backward": "fp16"}}}, f)
    out = os.path.join(tmp, "out.json")
    r, rep = train(*base, "--plan", plan, "--plan-out", out)
    expect("a plan file's qcomm_codecs are used", rep is not None and
           rep["qcomm"] == "pooled_embeddings_all_to_all=bf16:fp16", r.stdout + r.stderr)
    if os.path.exists(out):
        with open(out) as f:
            written = json.load(f)
        expect("--plan-out writes the codecs in effect", written.get("qcomm_codecs") ==
               {"pooled_embeddings_all_to_all": {"forward": "bf16", "backward": "fp16"}}, written)
    r, rep = train(*base, "--plan", plan, "--qcomm", "pooled_embeddings_all_to_all=int8")
    expect("--qcomm wins over the plan file", rep is not None and rep["qcomm"] == "pooled_embeddings_all_to_all=int8:int8",
           r.stdout + r.stderr)
    bad_plan = os.path.join(tmp, "bad.json")
    with open(bad_plan, "w") as f:
        json.dump({"plan": {}, "qcomm_codecs": {"pooled_embeddings_all_to_all": {"forward": 16}}}, f)
    r, _ = train(*base, "--plan", bad_plan)
    expect("a plan file's bad codec is refused, naming the file and key",
           r.returncode != 0 and "bad.json" in r.stderr and "forward" in r.stderr, r.stderr)

for args, words in [(["--qcomm", "pooled=fp16"], ["unknown comm op 'pooled'"]),
                    (["--qcomm", "all=fp4"], ["codec 'fp4'", "fp16", "bf16", "int8", "fp8"]),
                    (["--qcomm", "all"], ["is not OP=CODEC"])]:
    r, _ = train("--steps", "1", *args)
    expect(f"{' '.join(args)} is refused", r.returncode != 0 and all(w in r.stderr for w in words), r.stderr)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
