#!/usr/bin/python3
"""`shardrec embed` sharded and `shardrec train` as a user runs them.

embed with --sharder/--plan and --world-size writes the same files as the
unsharded run (pooled, weighted, mean, sequence tables; a backward step with
Adagrad), over local threads and gloo processes. train runs its default job,
prints JSON, passes --verify for every sharder, and refuses bad plans before
any work, naming the table.

usage: sharded_cli_test.py SHARDREC_EXE
Exit 77 (skip) when numpy is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable under", sys.executable)
    sys.exit(77)

exe = sys.argv[1]
failures = []
SHARDERS = ["table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"]


def run(*args, timeout=240):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail[-2000:]))
    if not cond:
        failures.append(name)


def files(root):
    out = {}
    for base, _, names in os.walk(root):
        for n in names:
            if n.endswith(".npy"):
                out[os.path.relpath(os.path.join(base, n), root)] = np.load(os.path.join(base, n))
    return out


with tempfile.TemporaryDirectory() as d:
    tables = os.path.join(d, "t.json")
    with open(tables, "w") as f:
        json.dump({"tables": [
            {"name": "a", "num_embeddings": 40, "embedding_dim": 12, "feature_names": ["fa", "fb"],
             "pooling": "sum", "is_weighted": True},
            {"name": "m", "num_embeddings": 3, "embedding_dim": 6, "feature_names": ["fm"], "pooling": "mean"},
            {"name": "s", "num_embeddings": 17, "embedding_dim": 5, "feature_names": ["fs"], "pooling": "none"}]}, f)
    rng = np.random.default_rng(5)
    batch_size = 7
    keys = ["fa", "fb", "fm", "fs"]
    rows = {"fa": 40, "fb": 40, "fm": 3, "fs": 17}
    lengths = rng.integers(0, 4, size=len(keys) * batch_size)
    values = np.concatenate([rng.integers(0, rows[k], size=int(lengths[i * batch_size:(i + 1) * batch_size].sum()))
                             for i, k in enumerate(keys)]).astype(np.int64)
    batch = os.path.join(d, "batch")
    os.mkdir(batch)
    with open(os.path.join(batch, "keys.txt"), "w") as f:
        f.write("\n".join(keys) + "\n")
    np.save(os.path.join(batch, "lengths.npy"), lengths.astype(np.int64))
    np.save(os.path.join(batch, "values.npy"), values)
    np.save(os.path.join(batch, "weights.npy"), rng.uniform(0.5, 1.5, size=values.size).astype(np.float32))
    grad = os.path.join(d, "grad.npy")
    np.save(grad, rng.standard_normal((batch_size, 12 * 2 + 6)).astype(np.float32))
    common = ["--tables", tables, "--batch", batch, "--grad", grad, "--optimizer", "adagrad,lr=0.1",
              "--init-seed", "4"]

    ref_dir = os.path.join(d, "ref")
    r = run("embed", *common, "--out", ref_dir)
    expect("unsharded embed runs", r.returncode == 0, r.stderr)
    ref = files(ref_dir)
    expect("the reference wrote pooled, sequence and tables", {"values.npy", "sequence/fs/values.npy",
                                                              "tables/a.npy", "tables/m.state.npy"} <= set(ref),
           str(sorted(ref)))

    def same_as_reference(name, out):
        got = files(out)
        if set(got) != set(ref):
            expect(name + " writes the same files", False, f"{sorted(got)} vs {sorted(ref)}")
            return
        worst = max(float(np.max(np.abs(got[k].astype(np.float64) - ref[k]), initial=0)) for k in ref)
        expect(name + " equals the unsharded run", worst <= 1e-5, f"max |diff| {worst}")

    for sharder in SHARDERS:
        for world in (2, 3):
            out = os.path.join(d, f"{sharder}_{world}")
            r = run("embed", *common, "--out", out, "--sharder", sharder, "--world-size", str(world))
            expect(f"embed --sharder {sharder} --world-size {world} runs", r.returncode == 0, r.stderr)
            if r.returncode == 0:
                same_as_reference(f"embed {sharder} x{world}", out)
    out = os.path.join(d, "gloo")
    r = run("embed", *common, "--out", out, "--sharder", "row_wise", "--comm", "gloo", "--world-size", "2")
    expect("embed over gloo processes runs", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        same_as_reference("embed row_wise over gloo", out)
    plan = os.path.join(d, "plan.json")
    with open(plan, "w") as f:
        json.dump({"plan": {"a": {"sharding_type": "column_wise", "ranks": [2, 0], "sharder_options": {"block_cols": "8"}},
                            "m": {"sharding_type": "data_parallel"},
                            "s": {"sharding_type": "row_wise"}}}, f)
    out = os.path.join(d, "mixed")
    r = run("embed", *common, "--out", out, "--plan", plan, "--world-size", "3")
    expect("embed with a mixed plan runs", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        same_as_reference("embed mixed plan", out)

    # train: the default job, JSON, --verify for every sharder.
    r = run("train", "--steps", "5")
    expect("train with its defaults runs", r.returncode == 0 and "samples/s" in r.stdout and "time split" in r.stdout,
           r.stdout + r.stderr)
    r = run("train", "--steps", "3", "--json", "--tables", "2x500x8,300x4:mean")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        expect("train --json reports throughput, split and memory",
               j["samples_per_s"] > 0 and len(j["bytes_per_rank"]) == 2 and
               set(j["time_split_s"]) == {"input_dist", "lookup", "output_dist", "backward", "other", "rank_mean"},
               r.stdout)
    except (ValueError, KeyError, IndexError) as e:
        expect("train --json is one JSON object", False, f"{e}: {r.stdout} {r.stderr}")
    for sharder in SHARDERS:
        r = run("train", "--sharder", sharder, "--world-size", "3", "--steps", "4", "--verify", "--batch", "64",
                "--tables", "2x500x8,3x40:mean", "--ids", "zipf:1.1")
        expect(f"train --verify --sharder {sharder}", r.returncode == 0 and ": OK" in r.stdout, r.stdout + r.stderr)
    r = run("train", "--comm", "gloo", "--world-size", "2", "--sharder", "table_row_wise", "--steps", "3", "--verify",
            "--batch", "64", "--tables", "2x500x8")
    expect("train --verify over gloo processes", r.returncode == 0 and ": OK" in r.stdout, r.stdout + r.stderr)

    # Bad plans: refused before any work, naming the table.
    def refused(name, path_or_flags, needle):
        args = path_or_flags if isinstance(path_or_flags, list) else ["--plan", path_or_flags]
        r = run("train", "--steps", "1", "--tables", "2x100x8", *args)
        expect(name, r.returncode == 2 and needle in r.stderr and "samples/s" not in r.stdout, r.stdout + r.stderr)

    def plan_file(name, doc):
        p = os.path.join(d, name)
        with open(p, "w") as f:
            json.dump({"plan": doc}, f)
        return p

    refused("a rank outside the world", plan_file("p1.json", {"t0": {"sharding_type": "table_wise", "ranks": [4]}}),
            "table 't0': rank 4 is outside")
    refused("shards that do not tile", plan_file("p2.json", {"t0": {"sharding_type": "table_wise"}, "t1": {"sharding_type": "row_wise", "shards": [
        {"rows": [0, 50], "cols": [0, 8], "rank": 0}]}}), "table 't1'")
    refused("an unknown sharder", ["--sharder", "diagonal"], "unknown sharder 'diagonal'")
    refused("an unknown kernel", plan_file("p3.json", {"t0": {"sharding_type": "table_wise",
                                                              "compute_kernel": "abacus"}}), "unknown kernel 'abacus'")
    refused("a table over a rank's memory budget", ["--memory-per-rank", "2KiB"], "does not fit")
    refused("a plan naming no such table", plan_file("p4.json", {"t9": {"sharding_type": "table_wise"}}), "'t9'")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
