#!/usr/bin/python3
"""It learns (issue 19): on a planted click log of 2M training samples
(`shardrec datagen`), a small DLRM trained for one epoch reaches a held-out
AUC of at least 0.98 x the planted model's own, on 1 rank and on 2 Gloo
processes with row-wise sharding.

usage: click_log_learns_test.py SHARDREC_EXE"""
import csv
import json
import os
import subprocess
import sys
import tempfile

exe = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
failures = []
MODEL = {"model": "dlrm", "dense_in_features": 13, "dense_arch_layer_sizes": [64, 16],
         "over_arch_layer_sizes": [64, 32, 1]}


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)
    return cond


def main():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "clicks")
        r = subprocess.run([exe, "datagen", log, "--train-samples", "2000000", "--eval-samples", "200000"],
                           capture_output=True, text=True, env=ENV, timeout=300)
        if not expect("datagen", r.returncode == 0, r.stderr):
            return 1
        planted = json.load(open(os.path.join(log, "planted.json")))["planted_on_eval"]["auc"]
        model = os.path.join(tmp, "model.json")
        json.dump(MODEL, open(model, "w"))
        for name, extra in (("1 rank", ["--world-size", "1"]),
                            ("2 Gloo processes, row-wise", ["--world-size", "2", "--comm", "gloo", "--sharder",
                                                            "row_wise"])):
            metrics = os.path.join(tmp, "metrics.csv")
            r = subprocess.run([exe, "train", "--model", model, "--tables", "26x20000x16", "--data",
                                "criteo:" + os.path.join(log, "train"), "--eval-data",
                                "criteo:" + os.path.join(log, "eval"), "--epochs", "1", "--batch",
                                "1024" if name == "1 rank" else "512", "--metrics-out", metrics, *extra],
                               capture_output=True, text=True, env=ENV, timeout=600)
            if not expect(f"{name}: trains one epoch", r.returncode == 0, r.stderr):
                continue
            with open(metrics, newline="") as f:
                evals = [row for row in csv.DictReader(f) if row["split"] == "eval"]
            auc = float(evals[-1]["auc"])
            print(f"{name}: held-out AUC {auc:.4f}, planted {planted:.4f}, ratio {auc / planted:.4f}")
            expect(f"{name}: held-out AUC >= 0.98 x the planted model's", auc >= 0.98 * planted,
                   f"{auc:.4f} vs {planted:.4f}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
