#!/usr/bin/python3
"""`shardrec metrics` (core/metrics, what `train` reports) against
scikit-learn on the same predictions: roc_auc_score, log_loss and
accuracy_score, plus NE and calibration from their definitions; random
cases with ties, a skewed click rate, and extreme logits.

usage: metrics_match_sklearn_test.py SHARDREC_EXE
Exit 77 (skip) when numpy or scikit-learn is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score
except ImportError as e:
    print(f"SKIP: {e.name} is not importable under {sys.executable}")
    sys.exit(77)

exe = os.path.abspath(sys.argv[1])
failures = []


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)))
    if not cond:
        failures.append(name)


def run(tmp, logits, labels):
    lp, yp = os.path.join(tmp, "logits.npy"), os.path.join(tmp, "labels.npy")
    np.save(lp, logits.astype(np.float32))
    np.save(yp, labels.astype(np.float32))
    r = subprocess.run([exe, "metrics", lp, yp, "--json"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout)


def main():
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for n, rate, scale, rounding in ((1000, 0.5, 1.0, None), (20000, 0.03, 2.0, None), (5000, 0.25, 3.0, 1),
                                         (300, 0.6, 12.0, None)):
            labels = (rng.random(n) < rate).astype(np.float64)
            logits = rng.normal(size=n) * scale + labels * 0.8
            if rounding is not None:  # many ties
                logits = np.round(logits, rounding)
            cases.append((f"n={n}, click rate {rate}, logit scale {scale}" + (", ties" if rounding else ""),
                          logits.astype(np.float32), labels))
        for name, logits, labels in cases:
            ours = run(tmp, logits, labels)
            p = 1 / (1 + np.exp(-logits.astype(np.float64)))
            auc = roc_auc_score(labels, logits)
            l64 = logits.astype(np.float64)
            if np.abs(l64).max() < 30:
                ll = log_loss(labels, p)
            else:
                # sklearn clips p to [eps, 1 - eps] (eps 2.2e-16) before the log; ours takes the
                # logit itself, so compare with the exact value there.
                ll = float(np.mean(np.logaddexp(0, l64) - labels * l64))
            acc = accuracy_score(labels, p >= 0.5)
            q = labels.mean()
            ne = ll / -(q * np.log(q) + (1 - q) * np.log(1 - q))
            cal = p.sum() / labels.sum()
            expect(f"{name}: AUC equals roc_auc_score", abs(ours["auc"] - auc) <= 1e-9, f"{ours['auc']} vs {auc}")
            expect(f"{name}: log loss equals log_loss" + ("" if np.abs(l64).max() < 30 else " (exact, unclipped)"), abs(ours["log_loss"] - ll) <= 1e-6 * max(1, ll),
                   f"{ours['log_loss']} vs {ll}")
            expect(f"{name}: accuracy equals accuracy_score", ours["accuracy"] == acc, f"{ours['accuracy']} vs {acc}")
            expect(f"{name}: NE", abs(ours["ne"] - ne) <= 1e-6 * ne, f"{ours['ne']} vs {ne}")
            expect(f"{name}: calibration", abs(ours["calibration"] - cal) <= 1e-6 * cal, f"{ours['calibration']} vs {cal}")
        # Refusals name the file.
        np.save(os.path.join(tmp, "bad.npy"), np.array([0.0, 2.0], dtype=np.float32))
        np.save(os.path.join(tmp, "two.npy"), np.array([0.1, 0.2], dtype=np.float32))
        r = subprocess.run([exe, "metrics", os.path.join(tmp, "two.npy"), os.path.join(tmp, "bad.npy")],
                           capture_output=True, text=True, timeout=60)
        expect("labels other than 0/1 are refused", r.returncode != 0 and "labels must be 0 or 1" in r.stderr, r.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
