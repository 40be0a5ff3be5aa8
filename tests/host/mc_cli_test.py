#!/usr/bin/python3
"""`shardrec replay-evictions` and `shardrec bench mc` as a user runs them.

A stream written by scripts/make_id_stream.py is replayed through the
built-in policies and a third party's (decayed_lfu, by path): the counters
add up, and with room for every id they equal what NumPy computes from the
stream itself. Other integer dtypes give the same result; floats, 2-D
arrays, unknown policies, missing libraries and bad numbers are refused
with a clear message. `bench mc` runs at a tiny size and its figures hang
together.

usage: mc_cli_test.py SHARDREC_EXE MAKE_ID_STREAM_PY DECAYED_LFU_SO
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

exe, make_stream, decayed_so = sys.argv[1:4]
failures = []
BUILTIN = ["lru", "lfu", "distance_lfu"]


def run(*args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=100)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail[-2000:]))
    if not cond:
        failures.append(name)


def last_json(r):
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None


def replay(stream, capacity, *extra, policies=",".join(BUILTIN + [decayed_so]), batch=1000):
    r = run("replay-evictions", "--ids", stream, "--capacity", str(capacity), "--batch", str(batch), "--policy",
            policies, "--json", *extra)
    return r, last_json(r) if r.returncode == 0 else None


def resident_lookups(ids, batch):
    """Lookups whose id was seen in an earlier step: with a slot for every id,
    exactly the ids that hold a slot before their step."""
    steps = np.arange(len(ids)) // batch
    _, first_pos, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return int(np.sum(steps > steps[first_pos][inverse]))


def stats_only(policy):
    return {k: v for k, v in policy.items() if k not in ("seconds", "ids_per_s", "policy", "library")}


with tempfile.TemporaryDirectory() as d:
    stream = os.path.join(d, "ids.npy")
    r = subprocess.run([sys.executable, make_stream, stream, "--ids", "20000", "--distinct", "3000", "--alpha", "1.05",
                        "--seed", "1"], capture_output=True, text=True)
    expect("make_id_stream.py writes a stream", r.returncode == 0 and os.path.exists(stream), r.stdout + r.stderr)
    ids = np.load(stream)
    distinct = len(np.unique(ids))
    expect("the stream is 1-D int64 with repeats", ids.dtype == np.int64 and ids.ndim == 1 and distinct < len(ids),
           f"{ids.dtype} {ids.shape} {distinct}")

    # Room for every id: nothing is ever evicted, every id is admitted by the
    # round of its first step (before that step's remap), for every policy.
    r, j = replay(stream, distinct + 100)
    expect("replay with room for every id exits 0", j is not None, r.stderr)
    if j:
        want_resident = resident_lookups(ids, 1000)
        expect("stream summary", j["ids"] == len(ids) and j["distinct_ids"] == distinct and j["steps"] == 20 and
               j["zch_size"] == distinct + 101, json.dumps(j)[:500])
        expect("every policy present, in order", [p["component"] for p in j["policies"]] == BUILTIN + ["decayed_lfu"],
               str([p.get("component") for p in j["policies"]]))
        for p in j["policies"]:
            name = p["component"]
            expect(f"{name}: every lookup hits", p["hits"] == p["lookups"] == len(ids) and p["defaulted"] == 0, str(p))
            expect(f"{name}: resident lookups match NumPy ({want_resident})", p["resident"] == want_resident, str(p))
            expect(f"{name}: no evictions, one admission per id",
                   p["evictions"] == 0 and p["admissions"] == distinct == p["occupied"], str(p))
        tp = j["policies"][-1]
        expect("third-party policy comes from its library",
               os.path.realpath(tp["library"]) == os.path.realpath(decayed_so) and tp["policy"] == decayed_so, str(tp))

    # A table far too small: the counters still add up.
    r, j = replay(stream, 300)
    expect("replay at capacity 300 exits 0", j is not None, r.stderr)
    if j:
        for p in j["policies"]:
            name = p["component"]
            expect(f"{name}: hits + defaulted == lookups", p["hits"] + p["defaulted"] == p["lookups"] == len(ids), str(p))
            expect(f"{name}: occupancy <= capacity", 0 < p["occupied"] <= p["capacity"] == 300, str(p))
            expect(f"{name}: resident <= hits, under the bound",
                   p["resident"] <= p["hits"] and p["resident_rate"] <= j["max_resident_rate"] + 1e-12, str(p))
            expect(f"{name}: evictions = admissions - occupied",
                   p["evictions"] == p["admissions"] - p["occupied"] and p["evictions"] > 0, str(p))
            expect(f"{name}: warm half is steps 11..20", p["warm"] and p["warm"]["lookups"] == len(ids) // 2, str(p))
            expect(f"{name}: ids/s measured", p["ids_per_s"] > 0 and p["seconds"] > 0, str(p))
        by_name = {p["component"]: p for p in j["policies"]}

        # The same ids as uint64 and as int32-sized values widened give the same counters.
        u = os.path.join(d, "ids_u64.npy")
        np.save(u, ids.astype(np.uint64))
        r2, j2 = replay(u, 300)
        expect("uint64 stream replays identically", j2 is not None and
               [stats_only(p) for p in j2["policies"]] == [stats_only(p) for p in j["policies"]], r2.stderr)

    # int32 and ids at or above 2^63 as uint64 are accepted.
    small = os.path.join(d, "ids_i32.npy")
    np.save(small, (ids % 1000).astype(np.int32))
    r, j = replay(small, 300, policies="lru")
    expect("int32 stream accepted", j is not None and j["distinct_ids"] == len(np.unique(ids % 1000)), r.stderr)
    big = os.path.join(d, "ids_big.npy")
    np.save(big, np.array([2**63, 2**64 - 1, 2**63, 5], dtype=np.uint64))
    r, j = replay(big, 10, policies="lru", batch=2)
    expect("uint64 ids >= 2^63 are distinct ids", j is not None and j["distinct_ids"] == 3, r.stderr)

    # Text output: the table with every policy.
    r = run("replay-evictions", "--ids", stream, "--capacity", "300", "--policy", "lru,lfu")
    expect("text table", r.returncode == 0 and "hit rate" in r.stdout and "\nlru " in r.stdout and
           "\nlfu " in r.stdout, r.stdout + r.stderr)

    # The third-party policy by name, its library loaded with --plugin.
    r, j = replay(stream, 300, "--plugin", decayed_so, policies="lru,decayed_lfu")
    expect("third-party policy by name (--plugin)", j is not None and
           [p["component"] for p in j["policies"]] == ["lru", "decayed_lfu"], r.stdout + r.stderr)

    # Policy options reach built-in and third-party policies alike.
    r, j = replay(stream, 300, "--plugin-opt", "eviction.lru.decay_exponent=2", policies="lru")
    expect("--plugin-opt reaches lru", j is not None and "decay_exponent=2" in j["policies"][0]["config"], r.stderr)
    r = run("replay-evictions", "--ids", stream, "--capacity", "300", "--policy", decayed_so,
            "--plugin-opt", "eviction.decayed_lfu.half_life=-1")
    expect("--plugin-opt reaches a policy given by path", r.returncode == 1 and "half_life" in r.stderr,
           r.stdout + r.stderr)
    # The fast (incremental) round against the exact one (issue 22): every
    # policy twice; lru and lfu run the incremental round, distance_lfu the
    # exact one in both; the hit rates within a point.
    r, j = replay(stream, 300, "--eviction-mode", "both", policies="lru,lfu,distance_lfu")
    expect("--eviction-mode both runs", j is not None and j["eviction_mode"] == "both", r.stderr)
    if j:
        got = [(p["component"], p["eviction_mode"], p["round"]) for p in j["policies"]]
        expect("each policy fast then exact, with the round it ran", got == [
            ("lru", "fast", "incremental"), ("lru", "exact", "exact"), ("lfu", "fast", "incremental"),
            ("lfu", "exact", "exact"), ("distance_lfu", "fast", "exact"), ("distance_lfu", "exact", "exact")], str(got))
        for fast, exact in zip(j["policies"][0::2], j["policies"][1::2]):
            name = fast["component"]
            expect(f"{name}: fast hit rate within a point of exact ({fast['hit_rate']:.4f} vs {exact['hit_rate']:.4f})",
                   abs(fast["hit_rate"] - exact["hit_rate"]) <= 0.01, str(fast) + str(exact))
            expect(f"{name}: fast round keeps the spec", "eviction_mode" not in fast["config"] and
                   "eviction_mode=exact" in exact["config"], fast["config"] + " / " + exact["config"])
    r = run("replay-evictions", "--ids", stream, "--capacity", "300", "--policy", "lru", "--eviction-mode", "both")
    expect("text: fast against exact", r.returncode == 0 and "lru: fast - exact hit rate" in r.stdout and
           "\nlru exact " in r.stdout and "incremental" in r.stdout, r.stdout + r.stderr)
    r, j = replay(stream, 300, "--threshold", "average", policies="lfu")
    expect("--threshold average runs", j is not None and j["threshold"] == "average", r.stderr)

    # Refusals.
    def refused(name, args, code, *words):
        r = run("replay-evictions", *args)
        expect(name, r.returncode == code and all(w in r.stderr for w in words), f"rc {r.returncode}: {r.stderr}")

    refused("unknown policy lists what exists", ["--ids", stream, "--capacity", "10", "--policy", "lru,lur"], 2,
            "unknown eviction 'lur'", "available:", "distance_lfu")
    refused("missing policy library", ["--ids", stream, "--capacity", "10", "--policy", d + "/libnope.so"], 2,
            "libnope.so does not exist")
    refused("--capacity 0", ["--ids", stream, "--capacity", "0"], 2, "--capacity must be a positive")
    refused("--capacity is required", ["--ids", stream], 2, "capacity")
    refused("--batch 0", ["--ids", stream, "--capacity", "10", "--batch", "0"], 2, "--batch must be positive")
    refused("bad --threshold", ["--ids", stream, "--capacity", "10", "--threshold", "high"], 2,
            "expected none, average or dynamic")
    refused("bad --eviction-mode", ["--ids", stream, "--capacity", "10", "--eviction-mode", "quick"], 2,
            "expected fast, exact or both")
    refused("same policy twice", ["--ids", stream, "--capacity", "10", "--policy", "lru,lru"], 2, "lru twice")
    refused("missing stream", ["--ids", d + "/none.npy", "--capacity", "10"], 1, "none.npy")
    floats = os.path.join(d, "f.npy")
    np.save(floats, np.array([1.0, 2.0], dtype=np.float32))
    refused("float ids", ["--ids", floats, "--capacity", "10"], 1, "f.npy", "integers", "float32")
    two_d = os.path.join(d, "m.npy")
    np.save(two_d, np.zeros((2, 3), dtype=np.int64))
    refused("2-D ids", ["--ids", two_d, "--capacity", "10"], 1, "m.npy", "1-D", "[2, 3]")
    empty = os.path.join(d, "e.npy")
    np.save(empty, np.zeros((0,), dtype=np.int64))
    refused("empty stream", ["--ids", empty, "--capacity", "10"], 1, "holds no ids")

# bench mc at a tiny size: every figure measured and consistent.
for policy in ["lru", decayed_so]:
    r = run("bench", "mc", "--slots", "1000", "--ids", "2000", "--reps", "1", "--policy", policy, "--json")
    j = last_json(r) if r.returncode == 0 else None
    expect(f"bench mc ({os.path.basename(policy)}) exits 0 with JSON", j is not None, r.stdout + r.stderr)
    if not j:
        continue
    expect("sizes echoed", j["slots"] == 1000 and j["zch_size"] == 1001 and j["ids"] == 2000 and j["reps"] == 1, str(j))
    for key in ["probe", "hits_inference", "hits_training", "half_new_training", "step_with_round"]:
        f = j[key + "_mids_per_s"]
        expect(f"{key}: best >= median > 0", f["best"] >= f["median"] > 0, str(f))
        if key != "probe":
            expect(f"{key}: ratio to the probe", abs(j[key + "_over_probe"] - f["best"] / j["probe_mids_per_s"]["best"])
                   < 1e-9, str(j))
    # 1000 never-seen ids compete with 1000 residents, of which the window saw
    # about 1 - 1/e; lru admits new ids into the others' slots. The table is
    # full, so every admission evicts.
    expect("rounds: every new id is a candidate, each admission evicts",
           j["round_candidates"] == 1000 and j["round_admissions"] == j["round_evictions"] <= 1000, str(j))
    if policy == "lru":
        expect("lru admits new ids over residents the window missed", 200 < j["round_admissions"] < 600, str(j))
    expect("round timed", j["round_ms"]["best"] > 0, str(j))
    expect("target reported", isinstance(j["target_met"], bool) and j["target_hits_mids_per_s"] == 50, str(j))
    expect("probe target reported", j["target_hits_over_probe"] == 0.5 and
           j["target_over_probe_met"] == (j["hits_inference_over_probe"] >= 0.5), str(j))
r = run("bench", "mc", "--slots", "0")
expect("bench mc --slots 0 refused", r.returncode == 2 and "--slots" in r.stderr, r.stderr)
r = run("bench", "mc", "--slots", "1000", "--ids", "1000", "--reps", "1", "--policy", "nope")
expect("bench mc unknown policy", r.returncode == 2 and "unknown eviction 'nope'" in r.stderr, r.stderr)
r = run("bench", "mc", "--slots", "1000", "--ids", "10000", "--reps", "1")
expect("bench mc text", r.returncode == 0 and "/ probe" in r.stdout and "eviction round alone" in r.stdout and
       "of the probe:" in r.stdout,
       r.stdout + r.stderr)

# --stream: a tenth-by-tenth report whose memory does not grow with the stream.
r = run("bench", "mc", "--stream", "400000", "--slots", "2000", "--distinct", "10000000", "--batch", "4096", "--json")
ok = r.returncode == 0
expect("bench mc --stream", ok, r.stdout + r.stderr)
if ok:
    report = json.loads(r.stdout.strip().splitlines()[-1])
    tenths = report["tenths"]
    expect("stream: ten reports ending at the stream's length", len(tenths) == 10 and tenths[-1]["ids_done"] == 400000,
           str(tenths))
    expect("stream: module bytes flat over the second half",
           max(t["module_bytes"] for t in tenths[5:]) == min(t["module_bytes"] for t in tenths[5:]), str(tenths))
    expect("stream: hits and throughput", all(0 < t["hit_rate"] < 1 and t["ids_per_s"] > 0 for t in tenths), str(tenths))
    # Each tenth beside the probe run on its ids; the run's ratio is the
    # median of the tenths' own ratios, not a ratio of two medians.
    ratios = sorted(t["ids_per_s"] / t["probe_ids_per_s"] for t in tenths if t["probe_ids_per_s"] > 0)
    expect("stream: a probe per tenth", len(ratios) == 10 and report["probe_bytes"] > 0, str(report))
    expect("stream: the median tenth's ratio to its probe",
           len(ratios) == 10 and abs(report["median_over_probe"] - ratios[5]) <= 1e-9 * ratios[5], str(report))

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
