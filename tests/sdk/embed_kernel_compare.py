#!/usr/bin/python3
"""The out-of-tree kernel `scalar_example` gives the cpu kernel's numbers.

Runs the installed host's `shardrec embed` on one small batch with
`--kernel cpu` and with `--plugin-dir BUILD --kernel scalar_example`, and checks
both against a NumPy float64 reference (and each other):

  1. forward (no --grad, so optimizer none) from --init-seed 7: values.npy,
     keys.txt, offset_per_key.npy; the initial weights are recomputed here
     with the SDK's InitialWeight (plugin_api/include/shardrec/sdk/init.hpp);
  2. --grad g.npy --optimizer sgd,lr=0.1: values.npy and tables/NAME.npy;
  3. a batch with ids outside their table, --bounds-check ignore: forward and
     SGD as if those ids were absent (mean still divides by the full length),
     and the JSON's invalid_ids count;
  4. the same batch with --bounds-check fatal: both runs fail and write no
     values.npy.

Tables: a sum table read by two features (one row's gradient comes from
both), a mean table of odd dim, a weighted sum table; the batch has empty
bags and ids repeated within and across bags.

Tolerance (FP32): |got - want| <= 1e-6 + 1e-5 * max(|want|, magnitude), the
magnitude being the same formula over absolute values (sum |w_i * W[id]| for a
pooled value, |W| + lr * sum |contributions| for an updated weight), so a sum
that cancels to almost zero is judged by the size of its terms.

  /usr/bin/python3 tests/sdk/embed_kernel_compare.py --shardrec PREFIX/bin/shardrec --plugin-dir BUILD
Exit codes: 0 passed, 1 a mismatch or a failed run, 2 bad usage, 77 numpy missing.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except Exception as e:  # ImportError or a broken install
    print(f"SKIP: cannot import numpy under {sys.executable}: {e}")
    sys.exit(77)

RTOL, ATOL, LR, SEED = 1e-5, 1e-6, 0.1, 7
M64 = (1 << 64) - 1

TABLES = [  # name, rows, dim, pooling, weighted, features
    ("t_sum", 50, 8, "sum", False, ["f_a", "f_b"]),
    ("t_mean", 30, 5, "mean", False, ["f_m"]),
    ("t_w", 20, 3, "sum", True, ["f_w"]),
]
INIT = {"t_sum": (-0.1, 0.1), "t_mean": (-0.5, 0.25), "t_w": (0.0, 1.0)}
B = 4
# Bags per feature (B each), key-major. Empty bags, repeats within and across bags.
BAGS = {
    "f_a": [[1, 2, 2], [], [49, 0], [7]],
    "f_b": [[2], [3, 3, 3], [], [49]],
    "f_m": [[0, 29, 0], [5], [], [11, 12, 13, 14]],
    "f_w": [[19], [0, 1], [4, 4], []],
}
BAD = {"f_a": (0, 50), "f_m": (3, -1)}  # (bag, id) appended to make a bad batch


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def initial_weight(seed, row, col, lo, hi):
    """sdk::InitialWeight: uniform in [lo, hi) from (seed, global row, global column)."""
    h = mix64((mix64(seed ^ mix64(row)) + col) & M64)
    return np.float32(lo + (hi - lo) * ((h >> 11) * 2.0**-53))


def initial_table(name, rows, dim):
    lo, hi = INIT[name]
    return np.array([[initial_weight(SEED, r, c, lo, hi) for c in range(dim)] for r in range(rows)],
                    dtype=np.float32)


def feature_list():
    """(feature, table index) in output order: table order, then feature_names."""
    return [(f, t) for t, spec in enumerate(TABLES) for f in spec[5]]


def sample_weights(bags):
    """A per-id weight for every id of every bag (key-major), fixed by position."""
    n = sum(len(b) for f, _ in feature_list() for b in bags[f])
    return (0.5 + 0.25 * (np.arange(n) % 5)).astype(np.float32)


def reference(weights, bags, grad):
    """Forward output, magnitudes, and tables after one SGD step (float64)."""
    feats = feature_list()
    dims = [TABLES[t][2] for _, t in feats]
    out = np.zeros((B, sum(dims)))
    mag = np.zeros_like(out)
    tables = {TABLES[t][0]: weights[TABLES[t][0]].astype(np.float64) for t in range(len(TABLES))}
    grad_sum = {k: np.zeros_like(v) for k, v in tables.items()}
    grad_mag = {k: np.zeros_like(v) for k, v in tables.items()}
    psw = sample_weights(bags)
    pos, col = 0, 0
    for (f, t), dim in zip(feats, dims):
        name, rows, _, pooling, weighted = TABLES[t][:5]
        W = tables[name]
        for b, ids in enumerate(bags[f]):
            div = max(len(ids), 1) if pooling == "mean" else 1
            for i in ids:
                w = float(psw[pos]) if weighted else 1.0
                pos += 1
                if not 0 <= i < rows:
                    continue  # absent (bounds-check ignore)
                out[b, col:col + dim] += w * W[i] / div
                mag[b, col:col + dim] += abs(w) * np.abs(W[i]) / div
                if grad is not None:
                    grad_sum[name][i] += w / div * grad[b, col:col + dim]
                    grad_mag[name][i] += abs(w / div * grad[b, col:col + dim])
        col += dim
    updated = {k: tables[k] - LR * grad_sum[k] for k in tables}
    updated_mag = {k: np.abs(tables[k]) + LR * grad_mag[k] for k in tables}
    return out, mag, updated, updated_mag, dims


def close(got, want, magnitude, what):
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
    err = np.abs(got.astype(np.float64) - want)
    bound = ATOL + RTOL * np.maximum(np.abs(want), magnitude)
    if np.any(err > bound):
        idx = np.unravel_index(np.argmax(err - bound), err.shape)
        raise AssertionError(f"{what}: at {tuple(int(i) for i in idx)} got {got[idx]!r}, "
                             f"expected {want[idx]!r} (|err| {err[idx]:.3g} > {bound[idx]:.3g})")


def write_inputs(d, bags, grad):
    os.makedirs(os.path.join(d, "batch"), exist_ok=True)
    tables = {"tables": [{"name": n, "num_embeddings": r, "embedding_dim": dim, "feature_names": fs,
                          "pooling": p, "data_type": "fp32", "is_weighted": w,
                          "weight_init_min": INIT[n][0], "weight_init_max": INIT[n][1]}
                         for n, r, dim, p, w, fs in TABLES]}
    with open(os.path.join(d, "tables.json"), "w") as f:
        json.dump(tables, f)
    feats = [f for f, _ in feature_list()]
    with open(os.path.join(d, "batch", "keys.txt"), "w") as f:
        f.write("\n".join(feats) + "\n")
    np.save(os.path.join(d, "batch", "lengths.npy"),
            np.array([len(b) for f in feats for b in bags[f]], dtype=np.int64))
    np.save(os.path.join(d, "batch", "values.npy"),
            np.array([i for f in feats for b in bags[f] for i in b], dtype=np.int64))
    np.save(os.path.join(d, "batch", "weights.npy"), sample_weights(bags))
    np.save(os.path.join(d, "grad.npy"), grad.astype(np.float32))


def embed(args, d, kernel, out, extra, expect_ok=True):
    cmd = [args.shardrec, "embed", "--tables", os.path.join(d, "tables.json"),
           "--batch", os.path.join(d, "batch"), "--out", os.path.join(d, out),
           "--init-seed", str(SEED), "--kernel", kernel, "--json"] + extra
    if kernel != "cpu":
        cmd += ["--plugin-dir", args.plugin_dir]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if (r.returncode == 0) != expect_ok:
        raise AssertionError(f"{' '.join(cmd)}: exit {r.returncode} (expected "
                             f"{'success' if expect_ok else 'failure'})\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1]) if expect_ok else r.stderr


def check_case(args, d, bags, bounds, expected_invalid):
    rng = np.random.default_rng(3)
    dims = [TABLES[t][2] for _, t in feature_list()]
    grad = rng.uniform(-1, 1, size=(B, sum(dims)))
    write_inputs(d, bags, grad)
    grad = np.load(os.path.join(d, "grad.npy")).astype(np.float64)
    init = {n: initial_table(n, r, dim) for n, r, dim, *_ in TABLES}
    want, mag, updated, updated_mag, dims = reference(init, bags, grad)
    offsets = np.concatenate([[0], np.cumsum(dims)])
    results = {}
    for kernel in ("cpu", "scalar_example"):
        for step, extra in (("fwd", []), ("sgd", ["--grad", os.path.join(d, "grad.npy"),
                                                  "--optimizer", f"sgd,lr={LR}"])):
            out = f"{kernel}_{step}"
            info = embed(args, d, kernel, out, extra + ["--bounds-check", bounds])
            where = f"[{bounds}] {kernel} {step}"
            if info["invalid_ids"] != expected_invalid:
                raise AssertionError(f"{where}: invalid_ids {info['invalid_ids']}, expected "
                                     f"{expected_invalid}")
            values = np.load(os.path.join(d, out, "values.npy"))
            close(values, want, mag, f"{where} values.npy")
            with open(os.path.join(d, out, "keys.txt")) as f:
                keys = f.read().split()
            if keys != [f for f, _ in feature_list()]:
                raise AssertionError(f"{where}: keys.txt {keys}")
            opk = np.load(os.path.join(d, out, "offset_per_key.npy"))
            if not np.array_equal(opk, offsets):
                raise AssertionError(f"{where}: offset_per_key {opk}, expected {offsets}")
            results[(kernel, step, "values")] = values
            if step == "sgd":
                for n, *_ in TABLES:
                    t = np.load(os.path.join(d, out, "tables", n + ".npy"))
                    close(t, updated[n], updated_mag[n], f"{where} tables/{n}.npy")
                    if np.array_equal(t, init[n]):
                        raise AssertionError(f"{where}: tables/{n}.npy did not change")
                    results[(kernel, step, n)] = t
    # The two kernels against each other, value by value.
    for key in [k for k in results if k[0] == "cpu"]:
        other = results[("scalar_example",) + key[1:]]
        magnitude = mag if key[2] == "values" else updated_mag[key[2]]
        close(other, results[key].astype(np.float64), magnitude, f"[{bounds}] scalar_example vs cpu {key[1:]}")
    print(f"ok: bounds-check {bounds}: forward and one sgd step agree (cpu, scalar_example, numpy)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shardrec", required=True, help="the installed host")
    p.add_argument("--plugin-dir", required=True, help="directory with libshardrec_kernel_scalar_example.so")
    p.add_argument("--keep", help="work in this directory and keep it")
    args = p.parse_args()
    d = args.keep or tempfile.mkdtemp(prefix="embed_kernel_compare_")
    try:
        check_case(args, os.path.join(d, "good"), BAGS, "fatal", 0)
        bad = {f: [list(b) for b in bags] for f, bags in BAGS.items()}
        for f, (b, i) in BAD.items():
            bad[f][b].append(i)
        check_case(args, os.path.join(d, "ignore"), bad, "ignore", len(BAD))
        for kernel in ("cpu", "scalar_example"):
            err = embed(args, os.path.join(d, "ignore"), kernel, f"fatal_{kernel}", [], expect_ok=False)
            if "out of range" not in err or os.path.exists(os.path.join(d, "ignore", f"fatal_{kernel}", "values.npy")):
                raise AssertionError(f"[fatal] {kernel}: expected an out-of-range error and no output, got: {err}")
        print("ok: bounds-check fatal: both kernels refuse the batch and write nothing")
    except AssertionError as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    print("embed_kernel_compare: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
