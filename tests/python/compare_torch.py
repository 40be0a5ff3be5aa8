#!/usr/bin/python3
"""Checks `shardrec embed` against torch.nn.EmbeddingBag on random cases.

For every case (a few random tables, a random KJT batch, random weights and a
random gradient of the pooled output) it runs

  shardrec embed --tables T.json --weights W --batch K --out O --json
      forward: O/values.npy against torch's EmbeddingBag outputs, concatenated
      in feature order (table order, then each table's feature_names);
  ... --grad g.npy --optimizer sgd,lr=0.1
      O/tables/NAME.npy against EmbeddingBag(sparse=True), out.backward(g),
      torch.optim.SGD(lr=0.1).step();
  ... --grad g.npy --optimizer adagrad,lr=0.1,eps=1e-10
      O/tables/NAME.npy and O/tables/NAME.state.npy against
      torch.optim.Adagrad(lr=0.1, eps=1e-10) and its state_sum.

Tolerance (FP32): a value passes when |shardrec - torch| <= atol + rtol * scale
with rtol = 1e-5, atol = 1e-6 and scale = max(|torch|, magnitude), where the
magnitude is what the value is computed from: sum |w_i * s_i| over the bag for
a pooled value (torch's EmbeddingBag on |W| and |per-sample weights|), |w| +
lr * G for a weight after SGD with G = sum |grad contributions| of the row,
|w| + lr after Adagrad, G^2 for Adagrad's state. Without the magnitude this is
np.allclose(rtol=1e-5, atol=1e-6); with it, a sum that cancels to nearly zero is
judged by the size of its terms, as floating-point error is (a different, equally
valid summation order must not fail; a wrong row, weight or scale still does).
"max rel err" is max |shardrec - torch| / scale.

Run with Debian's interpreter, which has torch:
  /usr/bin/python3 tests/python/compare_torch.py --shardrec build/bin/shardrec [--cases N] [--seed S] [--keep DIR]
Exit codes: 0 all checks passed, 1 a mismatch or a failed run, 2 bad usage,
77 torch or numpy cannot be imported (CTest reports the test as skipped).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
RTOL = 1e-5
ATOL = 1e-6
LR = 0.1
EPS = 1e-10
DIMS = (1, 3, 16, 63, 128)

try:
    import numpy as np
    import torch
except Exception as e:  # ImportError, or a broken install raising anything else
    print(f"SKIP: cannot import torch and numpy under {sys.executable}: {e}")
    sys.exit(SKIP)


class Mismatch(Exception):
    pass


class Stats:
    """Largest errors seen by one check over all cases."""

    def __init__(self, name):
        self.name = name
        self.cases = 0
        self.compared = 0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.failures = []

    def line(self):
        status = "OK" if not self.failures else f"FAILED ({len(self.failures)} mismatch(es))"
        return (f"{self.name}: {self.cases} cases, {self.compared} values, max rel err {self.max_rel:.2g}, "
                f"max abs err {self.max_abs:.2g} (rtol {RTOL:g}, atol {ATOL:g}) {status}")


def compare(stats, got, want, magnitude, where):
    """Records the errors of got vs want (see the tolerance above); returns a failure message or None."""
    if got.shape != want.shape:
        return f"{where}: shape {got.shape}, torch has {want.shape}"
    if got.size == 0:
        return None
    got64 = got.astype(np.float64)
    want64 = want.astype(np.float64)
    if not np.all(np.isfinite(got64)):
        return f"{where}: {int(np.sum(~np.isfinite(got64)))} non-finite value(s)"
    diff = np.abs(got64 - want64)
    scale = np.maximum(np.abs(want64), np.abs(magnitude.astype(np.float64)))
    rel = np.divide(diff, scale, out=np.where(diff > 0, np.inf, 0.0), where=scale > 0)
    max_abs = float(diff.max())
    max_rel = float(rel.max())
    stats.compared += got.size
    stats.max_abs = max(stats.max_abs, max_abs)
    stats.max_rel = max(stats.max_rel, max_rel)
    bad = diff > ATOL + RTOL * scale
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{where}: {int(bad.sum())} of {got.size} values differ; max abs err {max_abs:.3g}, "
            f"max rel err {max_rel:.3g}; first at index {list(idx)}: shardrec {got64[idx]!r}, "
            f"torch {want64[idx]!r} (magnitude {float(scale[idx]):.3g})")


# --------------------------------------------------------------------------- cases

class DimPool:
    """Draws embedding dims so that every dim in DIMS comes up once per len(DIMS) tables."""

    def __init__(self, rng):
        self.rng = rng
        self.pool = []

    def draw(self):
        if not self.pool:
            self.pool = list(self.rng.permutation(DIMS))
        return int(self.pool.pop())


def make_case(rng, index, dims):
    """One random case: tables, weights, a batch and a gradient (all NumPy)."""
    num_tables = int(rng.integers(2 if index == 0 else 1, 5))
    tables = []
    for t in range(num_tables):
        # Case 0 pins down the interesting combinations; the others are free.
        pooling = ("sum", "mean")[t % 2] if index == 0 else str(rng.choice(["sum", "mean"]))
        num_features = 2 if (index == 0 and t == 0) or rng.random() < 0.35 else 1
        weighted = pooling == "sum" and ((index == 0 and t == 0) or rng.random() < 0.5)
        tables.append({
            "name": f"t{t}",
            "num_embeddings": int(rng.integers(5, 501)),
            "embedding_dim": dims.draw(),
            "feature_names": [f"c{index}_t{t}_f{k}" for k in range(num_features)],
            "pooling": pooling,
            "is_weighted": weighted,
        })
    batch = 1 if index == 1 else int(rng.integers(1, 41))
    features = [(tab, f) for tab in tables for f in tab["feature_names"]]

    # Per feature: lengths [B] (about a fifth of the bags empty) and ids.
    per_feature = {}
    for tab, f in features:
        max_len = int(rng.integers(1, 21))
        lengths = rng.integers(1, max_len + 1, size=batch)
        lengths[rng.random(batch) < 0.2] = 0
        if index == 0:
            lengths[0] = 0  # an empty bag in every feature (mean of nothing is 0)
        ids = rng.integers(0, tab["num_embeddings"], size=int(lengths.sum()))
        if ids.size >= 2 and rng.random() < 0.5:  # repeated ids, within and across bags
            ids[rng.random(ids.size) < 0.3] = ids[0]
        per_feature[f] = (lengths.astype(np.int64), ids.astype(np.int64))
    any_weighted = any(tab["is_weighted"] for tab in tables)
    has_weights = any_weighted or rng.random() < 0.3  # unweighted tables must ignore them

    # The batch lists its keys in a shuffled order, sometimes with an extra one.
    keys = [f for _, f in features]
    keys = [keys[i] for i in rng.permutation(len(keys))]
    if rng.random() < 0.3:
        keys.insert(int(rng.integers(0, len(keys) + 1)), f"c{index}_unused")
        per_feature[f"c{index}_unused"] = (np.ones(batch, np.int64), np.full(batch, 10**9, np.int64))
    kjt_lengths = np.concatenate([per_feature[k][0] for k in keys])
    kjt_values = np.concatenate([per_feature[k][1] for k in keys])
    kjt_weights = rng.uniform(-1.0, 2.0, size=kjt_values.size).astype(np.float32) if has_weights else None
    # Per-id weights as seen by each feature.
    feature_weights = {}
    pos = 0
    for k in keys:
        n = per_feature[k][1].size
        if kjt_weights is not None:
            feature_weights[k] = kjt_weights[pos:pos + n]
        pos += n

    weights = {tab["name"]: rng.uniform(-1.0, 1.0, size=(tab["num_embeddings"], tab["embedding_dim"]))
               .astype(np.float32) for tab in tables}
    width = sum(tab["embedding_dim"] * len(tab["feature_names"]) for tab in tables)
    grad = rng.standard_normal((batch, width)).astype(np.float32)
    return {
        "index": index, "tables": tables, "batch": batch, "keys": keys, "per_feature": per_feature,
        "kjt_lengths": kjt_lengths, "kjt_values": kjt_values, "kjt_weights": kjt_weights,
        "feature_weights": feature_weights, "weights": weights, "grad": grad,
        "index_dtype": np.int32 if rng.random() < 0.25 else np.int64,
    }


def write_case(case, rng, root):
    """Writes the case's input files under root; returns their paths."""
    os.makedirs(root, exist_ok=True)
    entries = []
    for tab in case["tables"]:
        e = {"name": tab["name"], "num_embeddings": tab["num_embeddings"],
             "embedding_dim": tab["embedding_dim"], "feature_names": tab["feature_names"]}
        # Leave the defaults (pooling sum, data_type fp32, is_weighted false) out now and then.
        if tab["pooling"] != "sum" or rng.random() < 0.5:
            e["pooling"] = tab["pooling"]
        if rng.random() < 0.5:
            e["data_type"] = "fp32"
        if tab["is_weighted"] or rng.random() < 0.5:
            e["is_weighted"] = tab["is_weighted"]
        entries.append(e)
    paths = {k: os.path.join(root, k) for k in ("tables.json", "weights", "batch", "g.npy")}
    with open(paths["tables.json"], "w") as f:
        json.dump({"tables": entries}, f, indent=2)
    os.makedirs(paths["weights"], exist_ok=True)
    for name, w in case["weights"].items():
        np.save(os.path.join(paths["weights"], name + ".npy"), w)
    os.makedirs(paths["batch"], exist_ok=True)
    with open(os.path.join(paths["batch"], "keys.txt"), "w") as f:
        f.write("".join(k + "\n" for k in case["keys"]))
    np.save(os.path.join(paths["batch"], "lengths.npy"), case["kjt_lengths"].astype(case["index_dtype"]))
    np.save(os.path.join(paths["batch"], "values.npy"), case["kjt_values"].astype(case["index_dtype"]))
    if case["kjt_weights"] is not None:
        np.save(os.path.join(paths["batch"], "weights.npy"), case["kjt_weights"])
    np.save(paths["g.npy"], case["grad"])
    return paths


def describe(case):
    parts = []
    for tab in case["tables"]:
        parts.append(f"{tab['name']}[{tab['num_embeddings']}x{tab['embedding_dim']} {tab['pooling']}"
                     f"{' weighted' if tab['is_weighted'] else ''} x{len(tab['feature_names'])}]")
    return f"B={case['batch']} " + " ".join(parts)


# --------------------------------------------------------------------------- torch

def torch_modules(case, absolute=False):
    """Fresh EmbeddingBags (sparse gradients) holding the case's initial weights (or their |w|)."""
    mods = {}
    for tab in case["tables"]:
        bag = torch.nn.EmbeddingBag(tab["num_embeddings"], tab["embedding_dim"], mode=tab["pooling"],
                                    sparse=True)
        w = case["weights"][tab["name"]]
        with torch.no_grad():
            bag.weight.copy_(torch.from_numpy(np.abs(w) if absolute else w))
        mods[tab["name"]] = bag
    return mods


def torch_forward(case, mods, absolute=False):
    """The pooled output [B, sum of dims], features in table order (|per-sample weights| if absolute)."""
    outs = []
    for tab in case["tables"]:
        for f in tab["feature_names"]:
            lengths, ids = case["per_feature"][f]
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            psw = None
            if tab["is_weighted"]:
                psw = case["feature_weights"][f]
                psw = torch.from_numpy(np.abs(psw) if absolute else psw.copy())
            outs.append(mods[tab["name"]](torch.from_numpy(ids.copy()), torch.from_numpy(offsets),
                                          per_sample_weights=psw))
    return torch.cat(outs, dim=1)


def torch_magnitudes(case):
    """Per output value sum |w * s|, and per table row G = sum over its uses of |s * grad|."""
    mods = torch_modules(case, absolute=True)
    out = torch_forward(case, mods, absolute=True)
    out.backward(torch.from_numpy(np.abs(case["grad"])))
    grads = {}
    for tab in case["tables"]:
        g = mods[tab["name"]].weight.grad
        if g is None:
            grads[tab["name"]] = np.zeros_like(case["weights"][tab["name"]])
        else:
            grads[tab["name"]] = (g.coalesce().to_dense() if g.is_sparse else g).numpy().copy()
    return out.detach().numpy(), grads


def torch_step(case, optimizer):
    """One backward + optimizer step; returns {table: (weights, state or None)}."""
    mods = torch_modules(case)
    params = [mods[tab["name"]].weight for tab in case["tables"]]
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=LR)
    else:
        opt = torch.optim.Adagrad(params, lr=LR, eps=EPS, initial_accumulator_value=0.0)
    out = torch_forward(case, mods)
    out.backward(torch.from_numpy(case["grad"]))
    for p in params:
        # A table none of whose ids occur gets an empty sparse gradient, on which
        # torch 1.13's sparse Adagrad fails; no gradient at all means the same.
        if p.grad is not None and p.grad.is_sparse and p.grad._nnz() == 0:
            p.grad = None
    opt.step()
    result = {}
    for tab in case["tables"]:
        p = mods[tab["name"]].weight
        state = None
        if optimizer == "adagrad":
            state = opt.state[p]["sum"].detach().numpy().copy()
        result[tab["name"]] = (p.detach().numpy().copy(), state)
    return result


# --------------------------------------------------------------------------- shardrec

def run_shardrec(args, paths, out, extra):
    cmd = [args.shardrec, "embed", "--tables", paths["tables.json"], "--weights", paths["weights"],
           "--batch", paths["batch"], "--out", out, "--kernel", args.kernel, "--json"] + extra
    for d in args.plugin_dir:
        cmd += ["--plugin-dir", d]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise Mismatch(f"`{' '.join(cmd)}` exited with {proc.returncode}:\n{proc.stderr.strip()}")
    lines = proc.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise Mismatch(f"`{' '.join(cmd)}`: the last line of stdout is not JSON: {proc.stdout!r}")
    return report


def load(path):
    if not os.path.exists(path):
        raise Mismatch(f"{path}: not written")
    return np.load(path)


def check_case(args, case, paths, root, stats):
    """Runs the three checks of one case; failures are recorded in stats."""
    label = f"case {case['index']} ({describe(case)})"
    expected_keys = [f for tab in case["tables"] for f in tab["feature_names"]]

    magnitude, grad_magnitude = torch_magnitudes(case)

    # Forward.
    s = stats["forward"]
    s.cases += 1
    try:
        out = os.path.join(root, "out_forward")
        report = run_shardrec(args, paths, out, [])
        want = torch_forward(case, torch_modules(case)).detach().numpy()
        np.save(os.path.join(root, "torch_forward.npy"), want)
        with open(os.path.join(out, "keys.txt")) as f:
            keys = [line.strip() for line in f if line.strip()]
        if keys != expected_keys:
            raise Mismatch(f"{out}/keys.txt lists {keys}, expected {expected_keys}")
        if report.get("pooled_shape") != list(want.shape):
            raise Mismatch(f"--json reports pooled_shape {report.get('pooled_shape')}, expected {list(want.shape)}")
        got = load(os.path.join(out, "values.npy"))
        if got.dtype != np.float32:
            raise Mismatch(f"{out}/values.npy has dtype {got.dtype}, expected float32")
        if got.shape != want.shape:
            raise Mismatch(f"{out}/values.npy has shape {got.shape}, torch {want.shape}")
        col = 0
        for tab in case["tables"]:
            for f in tab["feature_names"]:
                d = tab["embedding_dim"]
                msg = compare(s, got[:, col:col + d], want[:, col:col + d], magnitude[:, col:col + d],
                              f"{label}, table {tab['name']} feature {f}")
                if msg:
                    s.failures.append(msg)
                col += d
    except Mismatch as e:
        s.failures.append(f"{label}: {e}")

    # One optimizer step each.
    for opt, spec in (("sgd", f"sgd,lr={LR}"), ("adagrad", f"adagrad,lr={LR},eps={EPS}")):
        checks = [stats[opt]] + ([stats["adagrad state"]] if opt == "adagrad" else [])
        for c in checks:
            c.cases += 1
        try:
            out = os.path.join(root, "out_" + opt)
            report = run_shardrec(args, paths, out, ["--grad", paths["g.npy"], "--optimizer", spec])
            want = torch_step(case, opt)
            names = [tab["name"] for tab in case["tables"]]
            if report.get("updated_tables") != names:
                raise Mismatch(f"--json reports updated_tables {report.get('updated_tables')}, expected {names}")
            for tab in case["tables"]:
                name = tab["name"]
                w_want, st_want = want[name]
                np.save(os.path.join(root, f"torch_{opt}_{name}.npy"), w_want)
                w_got = load(os.path.join(out, "tables", name + ".npy"))
                w0 = np.abs(case["weights"][name])
                touched = grad_magnitude[name] > 0
                w_mag = w0 + LR * (grad_magnitude[name] if opt == "sgd" else touched)
                msg = compare(stats[opt], w_got, w_want, w_mag, f"{label}, {opt}, table {name} weights")
                if msg:
                    stats[opt].failures.append(msg)
                if st_want is not None:
                    np.save(os.path.join(root, f"torch_{opt}_{name}.state.npy"), st_want)
                    st_got = load(os.path.join(out, "tables", name + ".state.npy"))
                    msg = compare(stats["adagrad state"], st_got, st_want, grad_magnitude[name] ** 2,
                                  f"{label}, adagrad, table {name} state (torch state_sum)")
                    if msg:
                        stats["adagrad state"].failures.append(msg)
        except Mismatch as e:
            checks[0].failures.append(f"{label}, {opt}: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shardrec", required=True, help="path to the shardrec program")
    parser.add_argument("--cases", type=int, default=8, help="number of random cases (default 8)")
    parser.add_argument("--seed", type=int, default=20240611, help="seed of the random cases")
    parser.add_argument("--keep", metavar="DIR",
                        help="write the cases under DIR and keep them (default: a temporary directory, "
                             "removed unless a check fails)")
    parser.add_argument("--kernel", default="cpu", help="kernel plugin to run (default cpu)")
    parser.add_argument("--plugin-dir", action="append", default=[],
                        help="passed on to shardrec (repeatable)")
    args = parser.parse_args()
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    if not (os.path.isfile(args.shardrec) and os.access(args.shardrec, os.X_OK)):
        print(f"error: {args.shardrec}: not an executable file (build the shardrec target)", file=sys.stderr)
        return 1

    start = time.monotonic()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if args.keep:
        top = os.path.abspath(args.keep)
        os.makedirs(top, exist_ok=True)
    else:
        top = tempfile.mkdtemp(prefix="shardrec_compare_torch_")
    stats = {name: Stats(name) for name in ("forward", "sgd", "adagrad", "adagrad state")}
    dims = DimPool(rng)
    try:
        for i in range(args.cases):
            case = make_case(rng, i, dims)
            root = os.path.join(top, f"case{i:03d}")
            if os.path.isdir(root):
                shutil.rmtree(root)
            paths = write_case(case, rng, root)
            check_case(args, case, paths, root, stats)
    except BaseException:
        print(f"inputs and outputs kept in {top}", file=sys.stderr)
        raise

    failures = [f for s in stats.values() for f in s.failures]
    for s in stats.values():
        print(s.line())
    print(f"{args.cases} cases (seed {args.seed}, kernel {args.kernel}, torch {torch.__version__}) "
          f"in {time.monotonic() - start:.1f} s")
    if failures:
        shown = 20
        for f in failures[:shown]:
            print("MISMATCH " + f, file=sys.stderr)
        if len(failures) > shown:
            print(f"... and {len(failures) - shown} more", file=sys.stderr)
        print(f"FAILED: {len(failures)} mismatch(es); inputs, shardrec outputs (out_*/) and torch's "
              f"results (torch_*.npy) are in {top}", file=sys.stderr)
        return 1
    if not args.keep:
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
