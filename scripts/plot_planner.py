#!/usr/bin/python3
"""Draws `shardrec bench planner --train --json` as a picture: per comm and
world size, each plan's measured step against its estimated step (the
planner's plan marked), so a reader sees at a glance whether the planner's
plan is the fastest and whether the model ranks the plans as they ran.

usage: shardrec bench planner --train --json | tail -1 > planner.json
       scripts/plot_planner.py planner.json -o planner.png
Needs matplotlib (Debian: python3-matplotlib, under /usr/bin/python3)."""
import argparse
import json
import math
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_file", help="the last line of `shardrec bench planner --train --json`")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    args = ap.parse_args()
    try:
        with open(args.json_file) as f:
            doc = json.load(f)
        runs = doc["runs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_planner: {args.json_file}: not the JSON of `shardrec bench planner --train --json`: {e}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_planner: matplotlib is not importable under " + sys.executable)

    groups = {}
    for r in runs:
        groups.setdefault((r["comm"], r["world_size"]), []).append(r)
    keys = sorted(groups)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [r for r in groups[key] if r.get("estimated_step_s") is not None
               and math.isfinite(r["estimated_step_s"])]
        for r in pts:
            x, y = r["estimated_step_s"] * 1e3, r["measured_step_s"] * 1e3
            mine = r["plan"] == "planner"
            ax.scatter([x], [y], s=80 if mine else 40, marker="*" if mine else "o",
                       color="tab:red" if mine else "tab:blue", zorder=3)
            ax.annotate(r["plan"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if pts:
            lo = min(min(r["estimated_step_s"], r["measured_step_s"]) for r in pts) * 1e3 * 0.9
            hi = max(max(r["estimated_step_s"], r["measured_step_s"]) for r in pts) * 1e3 * 1.1
            ax.plot([lo, hi], [lo, hi], color="0.7", linewidth=1, zorder=1)
        ax.set_title(f"{key[0]} x {key[1]} ranks")
        ax.set_xlabel("estimated step (ms)")
        ax.set_ylabel("measured step (ms)")
        ax.grid(alpha=0.3)
    fig.suptitle("shardrec bench planner --train: the planner's plan (star) and the others")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_planner: wrote {args.output}")


if __name__ == "__main__":
    main()
