#!/usr/bin/env python3
"""Pools the paired rounds of several `shardrec bench planner --train --json`
runs and asks, per configuration and plan, how likely the planner's wins are
if neither plan were faster: the one-sided sign test over every round.

One run of five rounds can show a win only as five of five (p = 0.031): on a
VM whose speed drifts by 20% within the hour, a steady gap of a few percent
loses a round now and then. Rounds of separate runs are separate trials, so
runs of the same plans pool.

usage: planner_sign_test.py RUN.json [RUN.json ...] [--alpha 0.05] [--json]

Each RUN.json is the last line `bench planner --train --json` printed (the
whole output is accepted too: the last line that parses is taken). Exit 0
when the planner is faster than every plan in every configuration at the
given level, 1 when not, 2 on bad input."""
import argparse
import json
import math
import sys


def sign_test_p(wins, rounds):
    """P(X >= wins) for X ~ Binomial(rounds, 1/2). A tied round is not a win
    (the textbook test drops ties): never kinder to the planner."""
    return sum(math.comb(rounds, i) for i in range(wins, rounds + 1)) / 2 ** rounds


def load(path):
    """The paired rounds of one run and its measured rates (which tell runs
    apart), or an error naming the file."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror}")
    for line in reversed(lines):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "verdicts" in doc:
            break
    else:
        raise ValueError(f"{path}: no line of `shardrec bench planner --train --json` output (an object with "
                         "'verdicts')")
    verdicts = doc["verdicts"]
    if not isinstance(verdicts, list):
        raise ValueError(f"{path}: 'verdicts' is not a list")
    out = []
    for v in verdicts:
        try:
            key = (str(v["comm"]), int(v["world_size"]))
            for p in v["paired"]:
                wins, rounds = int(p["planner_faster"]), int(p["rounds"])
                if not 0 <= wins <= rounds or rounds > 10000:
                    raise ValueError(f"{wins} wins of {rounds} rounds")
                out.append((key, str(p["plan"]), wins, rounds))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: a verdict without paired rounds the way bench planner writes them ({e})")
    return out, json.dumps(doc.get("runs"), sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="bench planner --train --json outputs")
    ap.add_argument("--alpha", type=float, default=0.05, help="the level a win must reach (default 0.05)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    a = ap.parse_args()
    if not 0 < a.alpha < 1:
        print("planner_sign_test.py: --alpha must be in (0, 1)", file=sys.stderr)
        return 2
    pooled, seen = {}, {}
    try:
        for path in a.runs:
            paired, rates = load(path)
            # The same rounds counted twice would look twice as sure.
            if rates in seen:
                raise ValueError(f"{path}: the same run as {seen[rates]} (identical measured rates); give each run once")
            seen[rates] = path
            for key, plan, wins, rounds in paired:
                w, r = pooled.get((key, plan), (0, 0))
                pooled[(key, plan)] = (w + wins, r + rounds)
    except ValueError as e:
        print(f"planner_sign_test.py: {e}", file=sys.stderr)
        return 2
    if not pooled:
        print("planner_sign_test.py: the runs hold no paired rounds (was the planner's own run refused?)",
              file=sys.stderr)
        return 2
    rows = []
    for ((comm, world), plan), (wins, rounds) in sorted(pooled.items()):
        p = sign_test_p(wins, rounds)
        rows.append({"comm": comm, "world_size": world, "plan": plan, "planner_faster": wins, "rounds": rounds,
                     "sign_test_p": p, "faster": p < a.alpha})
    everywhere = all(r["faster"] for r in rows)
    if a.json:
        print(json.dumps({"runs": len(a.runs), "alpha": a.alpha, "pooled": rows, "faster_everywhere": everywhere}))
    else:
        print(f"{len(a.runs)} runs pooled; the planner against each plan, rounds won (one-sided sign test):")
        print(f"{'comm x ranks':<14} {'plan':<22} {'won':>9} {'p':>8}  verdict")
        for r in rows:
            verdict = "faster" if r["faster"] else f"not shown at p < {a.alpha:g}"
            print(f"{r['comm'] + ' x ' + str(r['world_size']):<14} {r['plan']:<22} "
                  f"{str(r['planner_faster']) + ' of ' + str(r['rounds']):>9} {r['sign_test_p']:>8.4f}  {verdict}")
        configs = sorted({(r["comm"], r["world_size"]) for r in rows})
        print(("the planner is faster than every plan in all " if everywhere else
               "the planner is NOT shown faster than every plan in all ") + f"{len(configs)} configurations")
    return 0 if everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
