#!/usr/bin/python3
"""`shardrec bench cache` as a user runs it.

A skewed stream of raw (sparse) ids trains through cached tables at two
load factors under lru and lfu, beside the in-memory kernel and a
random-read probe of a row file of the same size: the figures
hang together (a bigger cache hits at least as often and reads fewer rows
from its file; misses bound the rows read; with every row cached the hit
rate approaches the stream's reuse; a warm pass over a cache that holds
every row never misses, and warm misses are read back), the row files are
removed, the rows' numbering (--row-order) changes no hit, --io mmap moves
the same rows as the threads, and so does the row file laid out in place
as it does as a log (--layout), whose ring, come round, moves rows again, --drop-page-cache changes no hit or row
moved and reports what the page cache held, and bad input
is refused with a message naming it. The probe
script docs/cache.md quotes (scripts/row_write_probe.py) runs too.

A third party's policy (the SDK example's decayed_lfu, by path, with an
option) runs the cache the same way.

usage: cache_cli_test.py SHARDREC_EXE [DECAYED_LFU_SO]
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
third_party = sys.argv[2] if len(sys.argv) > 2 else ""
failures = []


def run(*args):
    return subprocess.run([exe, "bench", "cache", *args], capture_output=True, text=True, timeout=100)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail[-2000:]))
    if not cond:
        failures.append(name)


with tempfile.TemporaryDirectory() as d:
    rng = np.random.default_rng(5)
    distinct = 800
    ranks = np.minimum(rng.zipf(1.2, 40000), distinct) - 1
    raw = (ranks.astype(np.int64) * 2654435761 + 12345) % (1 << 40)  # sparse raw ids
    ids = os.path.join(d, "ids.npy")
    np.save(ids, raw)
    files = os.path.join(d, "files")
    os.mkdir(files)
    # One set of 1024 ways: the cache is fully associative, so with every
    # row cached only first sights miss.
    r = run("--ids", ids, "--load-factors", "0.05,1", "--policies", "lru,lfu", "--batch", "512", "--dim", "8",
            "--ways", "1024", "--dir", files, "--json")
    ok = r.returncode == 0
    expect("bench cache runs", ok, r.stdout + r.stderr)
    if ok:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        n_distinct = len(np.unique(raw))
        expect("one row per distinct raw id", j["rows"] == n_distinct, str(j["rows"]))
        runs = {(x["policy"], x["load_factor"]): x for x in j["runs"]}
        expect("every policy and load factor ran", sorted(runs) == [("lfu", 0.05), ("lfu", 1.0), ("lru", 0.05),
                                                                     ("lru", 1.0)], str(sorted(runs)))
        expect("runs and the in-memory table take turns in blocks of steps", j["paired_block_steps"] >= 1, str(j))
        expect("the random-read probe was timed", j["probe_rows_per_s"] > 0, str(j))
        for p in ("lru", "lfu"):
            small, big = runs[(p, 0.05)], runs[(p, 1.0)]
            expect(f"{p}: a bigger cache hits at least as often", big["hit_rate"] >= small["hit_rate"],
                   f"{small['hit_rate']} vs {big['hit_rate']}")
            expect(f"{p}: a bigger cache reads fewer rows", big["rows_read"] <= small["rows_read"], str((small, big)))
            for x in (small, big):
                misses = round((1 - x["hit_rate"]) * len(raw))
                expect(f"{p}@{x['load_factor']}: rows read <= misses - first sights",
                       x["rows_read"] <= misses - n_distinct + 5, f"{x['rows_read']} vs {misses}")
                expect(f"{p}@{x['load_factor']}: the in-memory table timed beside it, and the ratio to it",
                       x["memory_ids_per_s"] > 0 and abs(x["over_memory"] - x["ids_per_s"] / x["memory_ids_per_s"])
                       < 1e-9, str(x))
            # The stream's reuse: ids seen before / all ids.
            reuse = 1 - n_distinct / len(raw)
            expect(f"{p}: every row cached, only first sights miss ({reuse:.4f})",
                   abs(big["hit_rate"] - reuse) < 1e-9 and big["rows_read"] == 0, str(big))
        # Two passes by default: the first meets an empty cache (cold), the
        # second the cache the first left (warm); a run's own fields are its
        # cold pass.
        for x in j["runs"]:
            passes = x["passes"]
            expect(f"{x['policy']}@{x['load_factor']}: a cold and a warm pass",
                   [p["pass"] for p in passes] == ["cold", "warm"] and passes[0]["hit_rate"] == x["hit_rate"]
                   and passes[0]["rows_read"] == x["rows_read"], str(x))
            for p in passes:
                expect(f"{x['policy']}@{x['load_factor']}/{p['pass']}: ratio to that pass's in-memory run",
                       p["memory_ids_per_s"] > 0 and abs(p["over_memory"] - p["ids_per_s"] / p["memory_ids_per_s"])
                       < 1e-9, str(p))
            # (One set of 1024 ways holds every row at both load factors.)
            warm = passes[1]
            expect(f"{x['policy']}@{x['load_factor']}: every row cached after the cold pass, the warm pass never "
                   "misses", x["cached_rows"] >= j["rows"] and warm["hit_rate"] == 1.0 and warm["misses"] == 0
                   and warm["rows_read"] == 0, str(x))
        expect("the row files are removed", os.listdir(files) == [], str(os.listdir(files)))
        # CacheStatistics of the stream: the seeds' ranges and endpoints.
        expect("cacheability in [0, 1]", 0 <= j["cacheability"] <= 1, str(j["cacheability"]))
        batches = -(-len(raw) // 512)
        expect("expected lookups: distinct ids per step", abs(j["expected_lookups"] * batches - j["lookups"]) < 1e-6,
               str((j["expected_lookups"], j["lookups"])))
        expect("expected miss rate falls with the load factor and is 0 with every row cached",
               runs[("lru", 1.0)]["expected_miss_rate"] == 0 <= runs[("lru", 0.05)]["expected_miss_rate"],
               str(runs))
        for x in j["runs"]:
            expect(f"{x['policy']}@{x['load_factor']}: misses per lookup", abs(x["miss_rate"] - x["misses"] / j["lookups"])
                   < 1e-9, str(x))
        # The aim's verdict, recomputed here from the passes, both readings
        # of "hits": per id, and per lookup (1 - misses per distinct id of a step).
        aim = j["aim"]
        expect("the aim: half the in-memory table at 90%+ hits", aim["ratio"] == 0.5 and aim["hit_rate"] == 0.9,
               str(aim))
        for reading, hit in (("per_id", lambda p: p["hit_rate"]), ("per_lookup", lambda p: 1 - p["miss_rate"])):
            at = [(p["over_memory"], f"{x['policy']}@{x['load_factor']:g}/{p['pass']}") for x in j["runs"]
                  for p in x["passes"] if hit(p) >= 0.9]
            got = aim[reading]
            want_met = sum(1 for ratio, _ in at if ratio >= 0.5)
            expect(f"the aim {reading}: passes at 90%+ hits, those at the aim, the lowest and where",
                   got["passes"] == len(at) and got["met"] == want_met
                   and got["aim_met"] == (len(at) > 0 and want_met == len(at))
                   and (not at or (abs(got["lowest_ratio"] - min(at)[0]) < 1e-12
                                   and got["lowest_at"].startswith(min(at)[1] + ","))), f"{got} vs {at}")
        curve = j["expected_curve"]
        expect("the expected curve: 101 load factors, from 1.0 at 0 down to 0.0 at 1, never rising",
               len(curve) == 101 and curve[0] == [0, 1] and curve[-1] == [1, 0]
               and all(a[1] >= b[1] for a, b in zip(curve, curve[1:])), str(curve[:3]))
        # The picture docs/cache.md shows, from this JSON.
        doc = os.path.join(d, "cache.json")
        with open(doc, "w") as f:
            f.write(r.stdout.strip().splitlines()[-1])
        plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot_cache_curve.py")
        png = os.path.join(d, "cache.png")
        p = subprocess.run([sys.executable, plot, doc, "-o", png], capture_output=True, text=True, timeout=100)
        if "matplotlib is not importable" in p.stderr:
            print("note: matplotlib is missing; the plot did not run")
        else:
            expect("plot_cache_curve draws it", p.returncode == 0 and os.path.getsize(png) > 1000, p.stdout + p.stderr)

    if third_party and os.path.exists(third_party):
        r = run("--ids", ids, "--load-factors", "0.05", "--policies", "lru," + third_party, "--batch", "512",
                "--dim", "4", "--plugin-opt", "eviction.decayed_lfu.half_life=50", "--json")
        ok = r.returncode == 0
        expect("a third-party policy by path runs the cache", ok, r.stdout + r.stderr)
        if ok:
            j = json.loads(r.stdout.strip().splitlines()[-1])
            expect("both policies ran", [x["policy"] for x in j["runs"]] == ["lru", third_party], str(j["runs"]))
            expect("the third party's cache hits", j["runs"][1]["hit_rate"] > 0.5, str(j["runs"][1]))
    else:
        print("note: no third-party policy library given; that case did not run")

    # A cache smaller than the table (32-way sets), three passes: warm
    # misses were all seen before, so they come from the file (or, for an
    # overflow row asked for again, from its write-back).
    r = run("--ids", ids, "--load-factors", "0.1", "--policies", "lru", "--batch", "512", "--dim", "4",
            "--passes", "3", "--json")
    ok = r.returncode == 0
    expect("three passes run", ok, r.stdout + r.stderr)
    if ok:
        x = json.loads(r.stdout.strip().splitlines()[-1])["runs"][0]
        expect("cold, warm, warm", [p["pass"] for p in x["passes"]] == ["cold", "warm", "warm"], str(x))
        for p in x["passes"][1:]:
            expect("a warm pass misses and reads its misses back", 0 < p["rows_read"] <= p["misses"]
                   and p["rows_written"] > 0, str(p))

    # Per pass of a report's first run: its hits and rows moved.
    def moves(report):
        return [[p[k] for k in ("hit_rate", "rows_read", "rows_written")] for p in report["runs"][0]["passes"]]

    # One run's --json report, or None (a failure recorded as `name`).
    def report(name, *args):
        r = run("--ids", ids, "--batch", "512", "--dim", "4", *args, "--json")
        expect(name, r.returncode == 0, r.stdout + r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None

    # --row-order scattered: the same rows under a fixed permutation. In one
    # fully associative set the cache cannot tell (same hit rates, rows
    # moved), and the first-seen numbering puts the hottest id at row 0.
    seen, scattered = (report(f"--row-order {order} runs", "--load-factors", "0.05,1", "--policies", "lru",
                              "--ways", "1024", "--row-order", order) for order in ("first-seen", "scattered"))
    if seen and scattered:
        expect("the JSON names the row order", seen["row_order"] == "first-seen"
               and scattered["row_order"] == "scattered", str((seen["row_order"], scattered["row_order"])))
        for a, b in zip(seen["runs"], scattered["runs"]):
            expect(f"lru@{a['load_factor']}: a permutation of the rows changes no hit or row moved",
                   all(a[k] == b[k] for k in ("hit_rate", "misses", "rows_read", "rows_written")), str((a, b)))
    # --io mmap: the rows copied through a shared mapping of the file move
    # the same rows as the threads' preadv/pwritev, and the probe says so.
    threads, mapped = (report(f"--io {io} runs", "--load-factors", "0.1", "--policies", "lfu", "--passes", "2",
                              "--io", io) for io in ("threads", "mmap"))
    if threads and mapped:
        expect("the JSON names the way rows moved", mapped["io"] == "mmap" and threads["io"] == "8 threads",
               str((threads["io"], mapped["io"])))
        expect("mmap and threads: the same hits and rows moved in every pass",
               moves(threads) == moves(mapped)
               and mapped["runs"][0]["passes"][1]["rows_read"] > 0, str((threads["runs"], mapped["runs"])))
    # --layout: the row file's rows in place or as a log (the default) move
    # the same rows in every pass; only the log moves rows again, once its
    # ring (about 2 x the stream's rows) comes round: three warm passes at a
    # small load factor write back far more rows than that.
    in_place, logged = (report(f"--layout {lay} runs", "--load-factors", "0.1", "--policies", "lfu", "--passes", "4",
                               "--layout", lay) for lay in ("in_place", "log"))
    if in_place and logged:
        expect("the JSON names the layout", in_place["layout"] == "in_place" and logged["layout"] == "log",
               str((in_place["layout"], logged["layout"])))
        expect("in place and as a log: the same hits and rows moved in every pass",
               moves(in_place) == moves(logged),
               str((in_place["runs"], logged["runs"])))
        written = sum(p["rows_written"] for p in logged["runs"][0]["passes"])
        expect("the passes write back more rows than the log's ring holds", written > 2 * logged["rows"] + 2,
               str((written, logged["rows"])))
        expect("rows in place are never moved again",
               all(p["rows_relocated"] == 0 for p in in_place["runs"][0]["passes"]), str(in_place["runs"]))
        expect("the log's ring came round and moved rows still current",
               sum(p["rows_relocated"] for p in logged["runs"][0]["passes"]) > 0, str(logged["runs"]))
    # --drop-page-cache: the row file's pages leave the page cache before
    # each turn, which changes no hit or row moved, and each pass says how
    # much of the file the page cache held at its end.
    dropped = report("--drop-page-cache runs", "--load-factors", "0.1", "--policies", "lfu", "--passes", "2",
                     "--drop-page-cache")
    if threads and dropped:
        expect("the JSON says the page cache was dropped", dropped["drop_page_cache"] is True
               and threads["drop_page_cache"] is False, str(dropped.keys()))
        expect("dropping the page cache changes no hit or row moved",
               moves(threads) == moves(dropped),
               str((threads["runs"], dropped["runs"])))
        expect("each pass reports the file's bytes in the page cache",
               all(p["file_resident_bytes"] >= 0 for p in dropped["runs"][0]["passes"]), str(dropped["runs"]))
    r = run("--ids", ids, "--load-factors", "0.1", "--policies", "lru", "--batch", "512", "--dim", "4",
            "--drop-page-cache")
    expect("the report says the probe read the disk and what the page cache held",
           r.returncode == 0 and "its pages dropped from the page cache first" in r.stdout
           and "in page cache" in r.stdout, r.stdout + r.stderr)
    r = run("--ids", ids, "--load-factors", "0.1", "--policies", "lru", "--batch", "512", "--dim", "4",
            "--row-order", "scattered")
    expect("the report says how rows were numbered", r.returncode == 0 and "(rows scattered)" in r.stdout,
           r.stdout + r.stderr)

    # The human report.
    r = run("--ids", ids, "--load-factors", "0.1", "--policies", "lru", "--batch", "512", "--dim", "4")
    expect("the report names policy, hit rate, the passes, the in-memory ratio and the probe",
           r.returncode == 0 and "hit rate" in r.stdout and " cold " in r.stdout and " warm " in r.stdout
           and "in-memory table" in r.stdout and "random-read probe" in r.stdout, r.stdout + r.stderr)
    expect("the report ends with the aim's verdict, hits per id and per lookup",
           r.returncode == 0 and "aim (>= 0.5 of the in-memory table at 90%+ hits" in r.stdout
           and "hits per id" in r.stdout and "hits per lookup" in r.stdout, r.stdout + r.stderr)

    np.save(os.path.join(d, "floats.npy"), np.ones(10, dtype=np.float32))
    np.save(os.path.join(d, "rows.npy"), np.array([0, 5, 9], dtype=np.int64))
    bad = {
        "no --ids": ([], "--ids FILE.npy is required"),
        "a load factor of 0": (["--ids", ids, "--load-factors", "0"], "outside (0, 1]"),
        "an unknown layout": (["--ids", ids, "--layout", "tree"], "--layout 'tree': expected in_place or log"),
        "a load factor of 2": (["--ids", ids, "--load-factors", "0.1,2"], "outside (0, 1]"),
        "a bad list": (["--ids", ids, "--load-factors", "0.1,,0.2"], "expected numbers"),
        "float ids": (["--ids", os.path.join(d, "floats.npy")], "floats.npy"),
        "an id outside --rows": (["--ids", os.path.join(d, "rows.npy"), "--rows", "9"], "id 9 is not a row of --rows 9"),
        "a missing --dir": (["--ids", ids, "--dir", os.path.join(d, "nope")], "not a directory"),
        "an unknown policy": (["--ids", ids, "--policies", "clairvoyant", "--load-factors", "0.1"], "clairvoyant"),
        "ways of 0": (["--ids", ids, "--ways", "0", "--load-factors", "0.1"], "ways 0 is outside 1..1024"),
        "no passes": (["--ids", ids, "--passes", "0"], "--passes 0 is outside 1..10"),
        "an unknown row order": (["--ids", ids, "--row-order", "sideways"],
                                 "--row-order 'sideways': expected first-seen or scattered"),
        "scattered with --rows": (["--ids", os.path.join(d, "rows.npy"), "--rows", "10", "--row-order", "scattered"],
                                  "leave --rows out"),
    }
    for name, (flags, needle) in bad.items():
        r = run(*flags)
        expect("refuses " + name, r.returncode != 0 and needle in r.stderr, f"rc={r.returncode} {r.stderr}")

    # scripts/row_write_probe.py, which docs/cache.md quotes: the three
    # cases, and its file removed.
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "row_write_probe.py")
    probe_dir = os.path.join(d, "probe")
    os.mkdir(probe_dir)
    p = subprocess.run([sys.executable, probe, probe_dir, "--rows", "200", "--file-rows", "1000"],
                       capture_output=True, text=True, timeout=100)
    cases = [line.split()[0] for line in p.stdout.splitlines()[1:]]
    expect("row_write_probe measures fresh, folios and mapped", p.returncode == 0 and cases == ["fresh", "folios", "mapped"]
           and all("us a row" in line for line in p.stdout.splitlines()[1:]), p.stdout + p.stderr)
    expect("row_write_probe removes its file", os.listdir(probe_dir) == [], str(os.listdir(probe_dir)))
    p = subprocess.run([sys.executable, probe, os.path.join(d, "nope")], capture_output=True, text=True, timeout=100)
    expect("row_write_probe refuses a missing directory", p.returncode != 0 and "not a directory" in p.stderr, p.stderr)

if failures:
    print(f"{len(failures)} FAILED: " + ", ".join(failures))
    sys.exit(1)
print("all passed")
