#!/usr/bin/python3
"""`shardrec plan`, `bench topology`, `train --planner` and `embed --planner`
as a user runs them.

plan writes a plan file that train replays with --verify; --explain says why;
--json is one object; a measured topology and a constraints file are honoured;
bad inputs (a missing or malformed topology, constraints naming no table, a
pinned rank outside the world, hosts that do not divide the ranks, an
infeasible memory budget) are refused by name with nothing written; embed
--planner writes the same files as the unsharded run; train --planner runs
and reports its estimate; plan --memory-budget caches the tables over it in
the plan file, which train replays with --verify.

usage: planner_cli_test.py SHARDREC_EXE
Exit 77 (skip) when numpy is missing."""
import json
import math
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
TABLES = "1x20000x32,3x2000x16,6x500x8"
POOLING = "1,20,20,20,2,2,2,2,2,2"


def run(*args, timeout=240):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail[-2000:]))
    if not cond:
        failures.append(name)


def refused(name, r, says, path=None):
    ok = r.returncode != 0 and says in r.stderr
    expect(name, ok, f"exit {r.returncode}, stderr: {r.stderr}")
    if path is not None:
        expect(name + ": nothing written", not os.path.exists(path), path)


with tempfile.TemporaryDirectory() as d:
    common = ["--tables", TABLES, "--pooling-factor", POOLING, "--world-size", "2"]

    # A plan, explained, written, and replayed by train with --verify.
    plan = os.path.join(d, "plan.json")
    r = run("plan", *common, "-o", plan, "--explain", "--compare")
    expect("plan runs", r.returncode == 0, r.stderr)
    expect("plan --explain says why", "chose " in r.stdout and "per rank" in r.stdout, r.stdout)
    expect("plan says how far its step is from the bound", "no plan of these options can be estimated below" in r.stdout
           and "% above that" in r.stdout, r.stdout)
    expect("plan --compare lists the default", "balanced table_wise (the default)" in r.stdout, r.stdout)
    doc = {}
    if os.path.exists(plan):
        with open(plan) as f:
            doc = json.load(f)
    expect("the plan file names every table", len(doc.get("plan", {})) == 10, json.dumps(doc)[:400])
    r = run("train", "--tables", TABLES, "--pooling-factor", POOLING, "--world-size", "2", "--steps", "3",
            "--batch", "64", "--plan", plan, "--verify")
    expect("train replays the plan with --verify", r.returncode == 0 and "verify against the unsharded run" in r.stdout
           and "): OK" in r.stdout, r.stdout + r.stderr)

    # --memory-budget: the tables over it are kept larger than memory in the
    # plan file (fused_ssd_caching with cache_params), and train replays it,
    # checked against the unsharded run.
    cached_plan = os.path.join(d, "cached.json")
    r = run("plan", *common, "--batch", "64", "--memory-budget", "4MiB", "--cache-params", "algorithm=lfu", "-o",
            cached_plan)
    expect("plan --memory-budget runs and names the cached table",
           r.returncode == 0 and "cached t0: algorithm=lfu" in r.stdout and "in RAM per rank" in r.stdout,
           r.stdout + r.stderr)
    entry = {}
    if os.path.exists(cached_plan):
        with open(cached_plan) as f:
            entry = json.load(f)["plan"].get("t0", {})
    lf = entry.get("cache_params", {}).get("load_factor", 0)
    expect("the plan file caches t0 under the budget, its overflow left to the run's step",
           entry.get("compute_kernel") == "fused_ssd_caching" and 0 < lf < 1 and "overflow" not in entry["cache_params"],
           json.dumps(entry)[:400])
    r = run("train", "--tables", TABLES, "--pooling-factor", POOLING, "--world-size", "2", "--steps", "3",
            "--batch", "64", "--plan", cached_plan, "--verify", "--cache-dir", os.path.join(d, "cache"))
    expect("train replays the cached plan with --verify", r.returncode == 0 and "): OK" in r.stdout
           and "cached tables" in r.stdout, r.stdout + r.stderr)
    never = os.path.join(d, "never-cached.json")
    refused("--memory-budget with --memory-per-rank",
            run("plan", *common, "--memory-budget", "2MiB", "--memory-per-rank", "1GiB", "-o", never), "not both",
            never)
    refused("a --memory-budget that is no size", run("plan", *common, "--memory-budget", "2XB", "-o", never),
            "--memory-budget", never)

    r = run("plan", *common, "--json")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        expect("plan --json is one object with the step", "estimated_step_s" in json.dumps(j), r.stdout)
        expect("plan --json has the bound below the step, with its reason",
               0 < j.get("bound_step_s", 0) <= j.get("estimated_step_s", 0) * (1 + 1e-9) and j.get("bound_reason"),
               r.stdout)
    except (ValueError, IndexError):
        expect("plan --json is one object", False, r.stdout + r.stderr)

    # A measured topology, and constraints.
    topo = os.path.join(d, "topo.json")
    r = run("bench", "topology", "--world-size", "2", "--min-time", "0.02", "--bytes", "65536", "-o", topo)
    expect("bench topology writes a file", r.returncode == 0 and os.path.exists(topo), r.stderr)
    t = {}
    if os.path.exists(topo):
        with open(topo) as f:
            t = json.load(f)
    expect("the topology has this machine's kernel and link", "cpu" in t.get("kernels", {}) and
           t.get("intra_host", {}).get("bytes_per_s", 0) > 0 and t.get("cores_per_host", 0) >= 1, json.dumps(t))
    cons = os.path.join(d, "constraints.json")
    with open(cons, "w") as f:
        json.dump({"constraints": {"t0": {"sharding_types": ["row_wise"]},
                                   "t1": {"ranks": [1]},
                                   "t2": {"sharding_types": ["column_wise"], "sharder_options": {"block_cols": "8"}}}}, f)
    plan2 = os.path.join(d, "plan2.json")
    r = run("plan", *common, "--topology", topo, "--constraints", cons, "-o", plan2)
    expect("plan with a topology and constraints runs", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        with open(plan2) as f:
            p = json.load(f)["plan"]
        expect("row_wise constraint honoured", p["t0"]["sharding_type"] == "row_wise", json.dumps(p["t0"]))
        expect("pinned rank honoured", {s["rank"] for s in p["t1"].get("shards", [])} == {1}, json.dumps(p["t1"]))
        expect("column blocks of 8", p["t2"]["sharding_type"] == "column_wise" and
               all(s["cols"][1] == 8 for s in p["t2"]["shards"]), json.dumps(p["t2"]))

    # A table larger than the topology's memory per rank: refused under
    # that memory, cached under --memory-budget (the planner then places it
    # as if memory were unlimited).
    small_topo = os.path.join(d, "small_topo.json")
    if t:
        with open(small_topo, "w") as f:
            json.dump(dict(t, memory_bytes_per_rank=64 << 20), f)
        big = ["--tables", "1x2000000x32", "--world-size", "2", "--topology", small_topo, "--batch", "64"]
        r = run("plan", *big)
        expect("a table over the topology's memory is refused", r.returncode == 1 and "needs" in r.stderr, r.stderr)
        r = run("plan", *big, "--memory-budget", "32MiB", "--json")
        ok = r.returncode == 0
        expect("... and cached under --memory-budget", ok, r.stderr)
        if ok:
            e = json.loads(r.stdout.strip().splitlines()[-1])["plan"]["plan"]["t0"]
            expect("the cached entry", e["compute_kernel"] == "fused_ssd_caching"
                   and 0 < e["cache_params"]["load_factor"] < 1, json.dumps(e))
        # A table over the budget is never data_parallel (a replica on every
        # rank cannot be cached): the planner is kept to the others, and one
        # the constraints allow only data_parallel is refused as not fitting.
        dp_cons = os.path.join(d, "dp.json")
        with open(dp_cons, "w") as f:
            json.dump({"constraints": {"t0": {"sharding_types": ["data_parallel", "table_wise"]}}}, f)
        r = run("plan", *big, "--memory-budget", "32MiB", "--constraints", dp_cons, "--json")
        ok = r.returncode == 0
        expect("under a budget, data_parallel is ruled out for a table over it", ok, r.stderr)
        if ok:
            e = json.loads(r.stdout.strip().splitlines()[-1])["plan"]["plan"]["t0"]
            expect("... so it is table_wise and cached", e["sharding_type"] == "table_wise"
                   and e["compute_kernel"] == "fused_ssd_caching", json.dumps(e))
        with open(dp_cons, "w") as f:
            json.dump({"constraints": {"t0": {"sharding_types": ["data_parallel"]}}}, f)
        refused("a table over the budget constrained to data_parallel",
                run("plan", *big, "--memory-budget", "32MiB", "--constraints", dp_cons, "-o", never), "do not fit",
                never)

    # Bad inputs, refused by name, nothing written.
    out = os.path.join(d, "never.json")
    refused("a missing topology", run("plan", *common, "--topology", os.path.join(d, "nope.json"), "-o", out),
            "nope.json", out)
    bad_topo = os.path.join(d, "bad_topo.json")
    with open(bad_topo, "w") as f:
        f.write('{"kernels": {"cpu": {"forward": {"seconds_per_lookup": -1, "seconds_per_byte": 0}}}}')
    refused("a malformed topology", run("plan", *common, "--topology", bad_topo, "-o", out), "bad_topo.json", out)
    bad_cons = os.path.join(d, "bad_cons.json")
    with open(bad_cons, "w") as f:
        json.dump({"constraints": {"nosuch": {"ranks": [0]}}}, f)
    refused("constraints naming no table", run("plan", *common, "--constraints", bad_cons, "-o", out), "nosuch", out)
    with open(bad_cons, "w") as f:
        json.dump({"constraints": {"t1": {"ranks": [7]}}}, f)
    refused("a pinned rank outside the world", run("plan", *common, "--constraints", bad_cons, "-o", out),
            "rank 7", out)
    refused("hosts that do not divide the ranks", run("plan", *common, "--hosts", "3", "-o", out), "--hosts 3", out)
    refused("an infeasible budget", run("plan", *common, "--memory-per-rank", "1MiB", "-o", out), "needs", out)
    refused("--topology without --planner", run("train", "--topology", topo, "--steps", "1"), "add --planner")
    refused("embed --planner with --sharder",
            run("embed", "--tables", "x", "--batch", d, "--out", out, "--planner", "--sharder", "row_wise"),
            "one of them")

    # embed --planner: the same files as the unsharded run.
    tables = os.path.join(d, "t.json")
    with open(tables, "w") as f:
        json.dump({"tables": [
            {"name": "hot", "num_embeddings": 300, "embedding_dim": 16, "feature_names": ["h"]},
            {"name": "big", "num_embeddings": 5000, "embedding_dim": 8, "feature_names": ["b"]},
            {"name": "seq", "num_embeddings": 50, "embedding_dim": 4, "feature_names": ["s"], "pooling": "none"}]}, f)
    rng = np.random.default_rng(3)
    batch_size = 16
    keys, rows, mean_len = ["h", "b", "s"], {"h": 300, "b": 5000, "s": 50}, {"h": 12, "b": 1, "s": 2}
    lengths = np.concatenate([rng.integers(0, 2 * mean_len[k] + 1, size=batch_size) for k in keys]).astype(np.int64)
    values = np.concatenate([rng.integers(0, rows[k], size=int(lengths[i * batch_size:(i + 1) * batch_size].sum()))
                             for i, k in enumerate(keys)]).astype(np.int64)
    batch = os.path.join(d, "batch")
    os.mkdir(batch)
    with open(os.path.join(batch, "keys.txt"), "w") as f:
        f.write("\n".join(keys) + "\n")
    np.save(os.path.join(batch, "lengths.npy"), lengths)
    np.save(os.path.join(batch, "values.npy"), values)
    grad = os.path.join(d, "grad.npy")
    np.save(grad, rng.standard_normal((batch_size, 16 + 8)).astype(np.float32))
    args = ["--tables", tables, "--batch", batch, "--grad", grad, "--optimizer", "adagrad,lr=0.1", "--init-seed", "2"]
    ref_dir, planned_dir = os.path.join(d, "ref"), os.path.join(d, "planned")
    r = run("embed", *args, "--out", ref_dir)
    expect("unsharded embed runs", r.returncode == 0, r.stderr)
    r = run("embed", *args, "--out", planned_dir, "--planner", "--world-size", "2")
    expect("embed --planner runs and prints the plan", r.returncode == 0 and "estimated step" in r.stdout,
           r.stdout + r.stderr)
    if r.returncode == 0:
        worst = 0.0
        for base, _, names in os.walk(ref_dir):
            for n in names:
                if n.endswith(".npy"):
                    rel = os.path.relpath(os.path.join(base, n), ref_dir)
                    a = np.load(os.path.join(ref_dir, rel)).astype(np.float64)
                    b = np.load(os.path.join(planned_dir, rel)).astype(np.float64)
                    worst = max(worst, float(np.max(np.abs(a - b), initial=0)) if a.shape == b.shape else 1e9)
        expect("embed --planner equals the unsharded run", worst <= 1e-5, f"max |diff| {worst}")

    # train --planner: plans, runs, reports the estimate beside the measurement.
    r = run("train", "--tables", TABLES, "--pooling-factor", POOLING, "--world-size", "2", "--steps", "3",
            "--batch", "64", "--planner", "--topology", topo, "--json")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        expect("train --planner reports its estimate", j.get("planner", {}).get("estimated_step_s", 0) > 0,
               r.stdout[-400:])
    except (ValueError, IndexError):
        expect("train --planner --json", False, r.stdout + r.stderr)

    # bench planner: the speed mode at a small size, and --train end to end
    # (topology measured, every plan trained), drawn by scripts/plot_planner.py.
    r = run("bench", "planner", "--tables-count", "50", "--world-size", "8", "--hosts", "2", "--reps", "1", "--json")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        expect("bench planner times a plan", j.get("seconds_median", -1) >= 0 and j.get("limit_s") == 1.0, r.stdout)
    except (ValueError, IndexError):
        expect("bench planner --json", False, r.stdout + r.stderr)
    r = run("bench", "planner", "--train", "--comms", "local", "--world-sizes", "2", "--reps", "1", "--steps", "6",
            "--batch", "32", "--skew-tables", "1x5000x16,2x500x8,4x100x8", "--skew-pooling", "1,10,10,2", "--json",
            timeout=400)
    bench_json = os.path.join(d, "bench.json")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        plans = {x["plan"] for x in j["runs"]}
        expect("bench planner --train trains every plan", {"planner", "balanced table_wise", "row_wise",
                                                           "data_parallel"} <= plans and len(j["verdicts"]) == 1
               and "paired" in j["verdicts"][0]
               and len(j["bounds"]) == 1 and 0 < j["bounds"][0]["bound_step_s"]
               <= j["bounds"][0]["planner_estimated_step_s"] * (1 + 1e-9),
               r.stdout[-1500:])
        with open(bench_json, "w") as f:
            f.write(r.stdout.strip().splitlines()[-1])
        # The sign test: each paired plan's p is the binomial tail of its wins.
        pairs = j["verdicts"][0]["paired"]
        tail = lambda w, n: sum(math.comb(n, i) for i in range(w, n + 1)) / 2 ** n
        expect("bench planner's sign test is the binomial tail of the rounds won",
               pairs and all(abs(q["sign_test_p"] - tail(q["planner_faster"], q["rounds"])) < 1e-9 for q in pairs)
               and j["verdicts"][0]["paired_faster_by_sign_test"]
               == sum(q["sign_test_p"] < 0.05 for q in pairs), json.dumps(j["verdicts"]))
    except (ValueError, IndexError, KeyError):
        expect("bench planner --train --json", False, r.stdout[-1500:] + r.stderr)
    # scripts/planner_sign_test.py pools runs; the same run twice is refused.
    sign = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "planner_sign_test.py")
    if os.path.exists(bench_json):
        p = subprocess.run([sys.executable, sign, bench_json, "--json"], capture_output=True, text=True, timeout=60)
        try:
            pooled = json.loads(p.stdout)
            expect("planner_sign_test.py pools a run", p.returncode in (0, 1) and pooled["runs"] == 1
                   and len(pooled["pooled"]) == len(j["verdicts"][0]["paired"])
                   and (p.returncode == 0) == pooled["faster_everywhere"], p.stdout + p.stderr)
        except (ValueError, KeyError, NameError):
            expect("planner_sign_test.py --json", False, p.stdout + p.stderr)
        p = subprocess.run([sys.executable, sign, bench_json, bench_json], capture_output=True, text=True, timeout=60)
        expect("planner_sign_test.py refuses the same run twice", p.returncode == 2 and "the same run" in p.stderr,
               p.stdout + p.stderr)
    p = subprocess.run([sys.executable, sign, tables], capture_output=True, text=True, timeout=60)
    expect("planner_sign_test.py refuses other JSON by name", p.returncode == 2 and "t.json" in p.stderr, p.stderr)
    png = os.path.join(d, "planner.png")
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot_planner.py")
    if os.path.exists(bench_json):
        p = subprocess.run([sys.executable, plot, bench_json, "-o", png], capture_output=True, text=True, timeout=120)
        expect("plot_planner draws it", p.returncode == 0 and os.path.getsize(png) > 1000, p.stdout + p.stderr)
    p = subprocess.run([sys.executable, plot, tables, "-o", png], capture_output=True, text=True, timeout=120)
    expect("plot_planner refuses other JSON by name", p.returncode != 0 and "t.json" in p.stderr, p.stderr)

print(f"planner cli: {len(failures)} failed" if failures else "planner cli: all passed")
sys.exit(1 if failures else 0)
