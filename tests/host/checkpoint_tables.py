"""Whole tables out of a `shardrec train` checkpoint, with numpy alone (as
docs/checkpoints.md promises another tool can): shared by the host tests
that compare checkpoints."""
import json
import os

import numpy as np


def tables_of(ckpt):
    """(manifest, {(table, kind): float64 [rows, dim]}) from the manifest's
    files; row-wise Adagrad's per-block value is spread over its block's
    columns. Managed-collision state (kinds "mc.*") is left out."""
    m = json.load(open(os.path.join(ckpt, "manifest.json")))
    dims = {t["name"]: (t["num_embeddings"], t["embedding_dim"]) for t in m["tables"]}
    out = {}
    for f in m["files"]:
        if f["kind"].startswith("mc."):
            continue
        rows, dim = dims[f["table"]]
        key = (f["table"], f["kind"])
        full = out.setdefault(key, np.full((rows, dim), np.nan))
        a = np.load(os.path.join(ckpt, f["path"]), mmap_mode="r").astype(np.float64)
        r0, r1 = f["rows"]
        c0, c1 = f["cols"]
        if a.shape[1] == 1 and c1 - c0 > 1:
            a = np.repeat(a, c1 - c0, axis=1)
        if "row_ids" in f:
            ids = np.load(os.path.join(ckpt, f["row_ids"]["path"]), mmap_mode="r")
            full[ids, c0:c1] = a
        else:
            full[r0:r1, c0:c1] = a
    return m, out


def largest_difference(got_dir, want_dir):
    """(same keys, steps and optimizer; no NaN; largest |got - want| /
    max(1, |want|)) between two checkpoints' tables."""
    gm, got = tables_of(got_dir)
    wm, want = tables_of(want_dir)
    ok = set(got) == set(want) and gm["step"] == wm["step"] and gm["optimizer"] == wm["optimizer"]
    worst = 0.0
    for key in want:
        if key not in got:
            continue
        g, w = got[key], want[key]
        ok &= not np.isnan(g).any() and not np.isnan(w).any()
        worst = max(worst, float(np.max(np.abs(g - w) / np.maximum(1.0, np.abs(w)))))
    return ok, worst, f"steps {gm['step']} vs {wm['step']}; optimizer {gm['optimizer']} vs {wm['optimizer']}; " \
                      f"kinds {sorted(got)} vs {sorted(want)}"


def last(root):
    names = sorted(n for n in os.listdir(root) if n.startswith("step-"))
    return os.path.join(root, names[-1])
