"""Draws a `shardrec train --metrics-out` CSV: loss and AUC against samples
trained, the windowed training metric and the held-out passes side by side.
Run by `shardrec plot` (and `train --plot`), which embeds this file.

usage: plot_metrics.py METRICS.csv OUT.png [REFERENCE_AUC] [TITLE]"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src, out = sys.argv[1], sys.argv[2]
    reference = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else None
    title = sys.argv[4] if len(sys.argv) > 4 else src
    series = {}
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            s = series.setdefault(row["split"], {"samples": [], "loss": [], "auc": []})
            s["samples"].append(int(row["samples"]))
            s["loss"].append(float(row["log_loss"]))  # the window's (or the pass's) log loss
            s["auc"].append(float(row["auc"]))
    if not series:
        sys.exit(f"{src}: no rows")
    fig, (ax_loss, ax_auc) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = {"train": "training (windowed)", "eval": "held-out"}
    for split, s in series.items():
        style = "-" if split == "train" else "o-"
        ax_loss.plot(s["samples"], s["loss"], style, label=names.get(split, split), markersize=4)
        ax_auc.plot(s["samples"], s["auc"], style, label=names.get(split, split), markersize=4)
    if reference is not None:
        ax_auc.axhline(reference, color="gray", linestyle="--", label=f"planted model ({reference:.4f})")
    ax_loss.set_xlabel("samples trained")
    ax_loss.set_ylabel("log loss")
    ax_auc.set_xlabel("samples trained")
    ax_auc.set_ylabel("AUC")
    for ax in (ax_loss, ax_auc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
