#!/usr/bin/python3
"""Issue 23 in `shardrec train`, as a user meets it: a --memory-budget
smaller than the tables keeps the largest ones larger than memory
(fused_ssd_caching, docs/cache.md), and the run is still the unsharded
run's bit for bit (--verify) under threads and gloo processes, table-,
row- and column-wise; a plan file's cache_params are honoured; the row
files are removed at the end; checkpoints flush the caches and a resumed
cached run ends where a straight in-memory run does, bit for bit; bad
budgets, directories and foreign files are refused by name.

usage: train_cache_cli_test.py SHARDREC_EXE
Exit 77 (skip) when numpy is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np  # noqa: F401  (checkpoint_tables needs it)
except ImportError:
    print("SKIP: numpy is not importable under", sys.executable)
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_tables import largest_difference, last  # noqa: E402

exe = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
TABLES = "1x6000x16,1x800x8,1x300x12"  # t0: 6000 x 16 x 4 B + Adagrad's state = 768000 B
failures = []


def run(*args, timeout=180):
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, None, e.stdout or "", (e.stderr or "") + "(timed out)")


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)


def auto_io_ok(io):
    """io auto: io_uring where this machine allows it, else 8 threads saying why."""
    return io == "io_uring" or io.startswith("8 threads (io auto: io_uring cannot be used here: ")


def train(cache_dir, *extra, world=2, comm="local", steps=12):
    return run("train", "--tables", TABLES, "--steps", str(steps), "--world-size", str(world), "--comm", comm,
               "--batch", str(32 // world), "--seed", "3", "--ids", "zipf:1.1", "--cache-dir", cache_dir, *extra)


def report(p):
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


with tempfile.TemporaryDirectory(prefix="shardrec-train-cache-") as tmp:
    def d(name):
        return os.path.join(tmp, name)

    cache = d("cache")
    # 1. The budget caches t0 (and nothing that fits); the numbers are the unsharded run's.
    # (The last through a shared mapping of its row file, io mmap.)
    for comm, sharder, io in (("local", "table_wise", "auto"), ("gloo", "row_wise", "auto"),
                              ("local", "table_row_wise", "auto"), ("local", "table_wise", "mmap")):
        p = train(cache, "--memory-budget", "400KiB", "--verify", "--json", "--sharder", sharder, comm=comm,
                  *(["--cache-params", "io=mmap"] if io == "mmap" else []))
        j = report(p)
        tag = f"{comm} {sharder} io {io}"
        ok = p.returncode == 0 and j is not None
        expect(f"a budget smaller than the tables trains ({tag})", ok, p.stdout + p.stderr)
        if not ok:
            continue
        kernels = {t: e["compute_kernel"] for t, e in j["plan"]["plan"].items()}
        expect(f"the largest table is cached, the others stay in memory ({tag})",
               kernels == {"t0": "fused_ssd_caching", "t1": "cpu", "t2": "cpu"}, kernels)
        lf = j["plan"]["plan"]["t0"]["cache_params"]["load_factor"]
        expect(f"its load factor is the budget's ({tag})", 0.05 <= lf < 1, lf)
        c = j.get("cache", {}).get("tables", {}).get("t0", {})
        expect(f"the cache's counters are reported ({tag})",
               c.get("lookups", 0) > 0 and 0 < c.get("hit_rate", 0) < 1 and c["hits"] + c["misses"] == c["lookups"]
               and c.get("cached_rows", 0) < 6000, c)
        expect(f"every rank holds at most the budget ({tag})", max(j["bytes_per_rank"]) <= 400 * 1024, j["bytes_per_rank"])
        # Every row and optimizer state bit for bit; the outputs too, but for
        # row-wise partial pools summed in another order (within 1e-5).
        v = j["verify"]
        expect(f"bit for bit the unsharded run ({tag})", v["ok"] and v["max_abs_diff_weights"] == 0
               and v["max_abs_diff_optimizer_state"] == 0 and (sharder != "table_wise" or v["max_abs_diff_output"] == 0),
               v)
        expect(f"the row files are removed at the end ({tag})", os.listdir(cache) == [], os.listdir(cache))
        rss, anon = j["cache"]["rss_max_bytes_per_rank"], j["cache"]["rss_max_without_files_bytes_per_rank"]
        expect(f"resident memory is sampled, with and without file-backed pages ({tag})",
               (auto_io_ok(j["cache"]["io"]) if io == "auto" else j["cache"]["io"] == io) and len(rss) == len(anon) == 2
               and all(0 < a <= r for a, r in zip(anon, rss)), j["cache"])

    p = train(cache, "--memory-budget", "400KiB", "--cache-params", "io=mmap")
    expect("io mmap's report says what its RSS holds", p.returncode == 0 and "moved by mmap" in p.stdout
           and "without mapped files' pages" in p.stdout, p.stdout + p.stderr)

    # 1b. Managed collision over a cached table: its evictions reset rows in
    # the cache and on the file; still the unsharded run's.
    for sharder in ("table_wise", "row_wise"):
        p = run("train", "--tables", "1x1500x16,1x800x8", "--managed-collision", "t0:zch_size=1500,eviction_interval=2",
                "--raw-id-space", "20000", "--memory-budget", "100KiB", "--cache-params", "overflow=256", "--cache-dir", cache, "--verify", "--steps", "12",
                "--batch", "16", "--sharder", sharder, "--json")
        j = report(p)
        ok = p.returncode == 0 and j is not None
        expect(f"managed collision over a cached table ({sharder})",
               ok and j["plan"]["plan"]["t0"]["compute_kernel"] == "fused_ssd_caching"
               and j["managed_collision"]["t0"]["evictions"] > 0 and j["cache"]["tables"]["t0"]["evictions"] > 0
               and j["verify"]["ok"] and j["verify"]["max_abs_diff_weights"] == 0
               and j["verify"]["max_abs_diff_optimizer_state"] == 0, p.stdout[-3000:] + p.stderr)

    # 1c. prefetch_pipeline: the pipeline's thread reads each next batch's
    # rows from the file while the step thread trains; nothing changes.
    p = train(cache, "--memory-budget", "400KiB", "--cache-params", "prefetch_pipeline=true,algorithm=lfu",
              "--pipeline", "sparse_dist", "--verify", "--json", "--sharder", "row_wise",
              steps=20)
    j = report(p)
    c = (j or {}).get("cache", {}).get("tables", {}).get("t0", {})
    expect("prefetch_pipeline reads rows ahead and the run is unchanged",
           p.returncode == 0 and j["pipeline"] == "sparse_dist" and c.get("prefetched_rows", 0) > 0
           and c.get("prefetched_rows_taken", 0) > 0 and j["verify"]["ok"] and j["verify"]["max_abs_diff_weights"] == 0
           and j["verify"]["max_abs_diff_optimizer_state"] == 0, (p.stdout + p.stderr)[-3000:])

    # 2. A plan file's fused_ssd_caching and cache_params; text report.
    plan = d("plan.json")
    with open(plan, "w") as f:
        json.dump({"plan": {"t0": {"sharding_type": "row_wise", "compute_kernel": "fused_ssd_caching",
                                   "cache_params": {"algorithm": "lfu", "load_factor": 0.1, "ways": 4}},
                            "t1": {"sharding_type": "table_wise", "compute_kernel": "fused"},
                            "t2": {"sharding_type": "table_wise"}}}, f)
    p = train(cache, "--plan", plan, "--verify")
    expect("a plan file's cache_params", p.returncode == 0 and "cached t0: algorithm=lfu,load_factor=0.1,ways=4"
           in p.stdout and "t0: hit rate" in p.stdout and "verify against the unsharded run" in p.stdout
           and ": OK" in p.stdout, p.stdout + p.stderr)

    # 3. Checkpoints: 12 steps straight in memory == 6 cached + 6 more resumed cached.
    p = train(cache, "--checkpoint-dir", d("straight"), "--optimizer", "rowwise_adagrad")
    q = train(cache, "--checkpoint-dir", d("cached"), "--optimizer", "rowwise_adagrad", "--memory-budget", "300KiB",
              steps=6)
    r = train(cache, "--resume", d("cached"), "--checkpoint-dir", d("cached"), "--optimizer", "rowwise_adagrad",
              "--memory-budget", "300KiB")
    good = p.returncode == 0 and q.returncode == 0 and r.returncode == 0
    expect("checkpoints of cached tables: runs succeed", good, p.stderr + q.stderr + r.stderr)
    if good:
        expect("the resumed run caches t0", "cached t0:" in r.stdout and "resumed from" in r.stdout, r.stdout)
        ok, worst, detail = largest_difference(last(d("cached")), last(d("straight")))
        expect("saved from a cache, loaded into its file: bit for bit the straight run", ok and worst == 0,
               f"largest scaled difference {worst:.3g}; {detail}")

    # 4. What is refused, by name.
    p = train(cache, "--memory-budget", "2KiB")
    expect("a budget too small for any cache", p.returncode == 2 and "do not fit a memory budget of 2.0 KiB"
           in p.stderr, p.stderr)
    p = train(cache, "--memory-budget", "lots")
    expect("a budget that is not a size", p.returncode == 2 and "--memory-budget" in p.stderr, p.stderr)
    p = train(cache, "--memory-budget", "400KiB", "--memory-per-rank", "1MiB")
    expect("--memory-budget with --memory-per-rank", p.returncode == 2 and "not both" in p.stderr, p.stderr)
    p = train(cache, "--memory-budget", "400KiB", "--cache-params", "algorithm=lfu,lf=0.1")
    expect("an unknown cache parameter", p.returncode == 2 and "unknown cache parameter 'lf'" in p.stderr, p.stderr)
    afile = d("a-file")
    open(afile, "w").write("x")
    p = train(afile, "--memory-budget", "400KiB")
    expect("a --cache-dir that is a file", p.returncode == 2 and "is not a directory" in p.stderr, p.stderr)
    shared = d("shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    p = train(shared, "--memory-budget", "400KiB")
    expect("a --cache-dir others may write to", p.returncode == 2 and "others may write to it" in p.stderr, p.stderr)
    foreign = os.path.join(cache, "t0@0.rows")
    open(foreign, "w").write("someone's notes")
    p = train(cache, "--memory-budget", "400KiB")
    expect("someone's file where a row file goes is refused and kept",
           p.returncode != 0 and "not a row file" in p.stderr and open(foreign).read() == "someone's notes", p.stderr)

if failures:
    print(f"{len(failures)} failure(s): {failures}")
    sys.exit(1)
print("all passed")
