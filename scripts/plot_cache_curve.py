#!/usr/bin/python3
"""Draws `shardrec bench cache --json` as a picture: per eviction policy,
the miss rate per lookup against the load factor beside CacheStatistics'
expected curve (a fully associative LRU cache), and each run's lookups/s
as a fraction of an in-memory table's timed beside it, so a reader sees at a glance how
much cache a stream needs and what it costs.

usage: shardrec bench cache --ids ids.npy --load-factors 0.01,0.05,0.2,0.5,1 --json | tail -1 > cache.json
       scripts/plot_cache_curve.py cache.json -o cache.png
Needs matplotlib (Debian: python3-matplotlib, under /usr/bin/python3)."""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_file", help="the last line of `shardrec bench cache --json`")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--title", default="", help="the figure's title")
    args = ap.parse_args()
    try:
        with open(args.json_file) as f:
            doc = json.load(f)
        runs, curve = doc["runs"], doc["expected_curve"]
        for r in runs:  # each run's ratio to the in-memory table timed beside it
            float(r["over_memory"]), float(r["memory_ids_per_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_cache_curve: {args.json_file}: not the JSON of `shardrec bench cache --json`: {e}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_cache_curve: matplotlib is not importable under " + sys.executable)

    memory = [r["memory_ids_per_s"] for r in runs] or [0.0]
    policies = {}
    for r in runs:
        policies.setdefault(r["policy"], []).append(r)
    fig, (miss, speed) = plt.subplots(1, 2, figsize=(10, 4.2))
    miss.plot([p[0] for p in curve], [100 * p[1] for p in curve], color="0.5", linestyle="--",
              label="expected (fully associative LRU)")
    for name, rs in sorted(policies.items()):
        rs.sort(key=lambda r: r["load_factor"])
        lfs = [r["load_factor"] for r in rs]
        miss.plot(lfs, [100 * r["miss_rate"] for r in rs], marker="o", label=name)
        speed.plot(lfs, [r["over_memory"] for r in rs], marker="o", label=name)
    miss.set_xlabel("load factor (cached rows / rows)")
    miss.set_ylabel("misses per lookup (%)")
    miss.set_ylim(0, 100)
    miss.grid(alpha=0.3)
    miss.legend()
    speed.axhline(0.5, color="tab:red", linewidth=1, linestyle=":", label="aim (0.5)")
    speed.set_xlabel("load factor (cached rows / rows)")
    speed.set_ylabel("lookups/s / the in-memory table's beside it")
    speed.set_ylim(0, 1)
    speed.grid(alpha=0.3)
    speed.legend()
    fig.suptitle(args.title or f"shardrec bench cache: {doc['ids']:,} ids over {doc['rows']:,} rows of {doc['dim']}, "
                 f"steps of {doc['batch']:,}; in-memory {statistics.median(memory) / 1e6:.1f} M ids/s (median)")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_cache_curve: wrote {args.output}")


if __name__ == "__main__":
    main()
