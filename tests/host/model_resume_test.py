#!/usr/bin/python3
"""`train --model` with checkpoints (issue 18): the dense parameters and their
optimizer state are saved with the tables, and a resumed model run is exact.

- 6 steps straight vs 3 steps, save, a new process, resume, 3 more: every
  dense parameter and table bit-identical, and the resumed steps' losses the
  same (Adam for the dense half, Adagrad for the tables: state that matters);
- resumed under another sharder and world size (row-wise, 3 ranks; SGD for
  both, see docs/dense.md): within 1e-5;
- refused before anything changes: another --dense-optimizer (unless
  --reset-optimizer), a checkpoint without dense parameters, a damaged dense
  file (named).

usage: model_resume_test.py SHARDREC_EXE
Exit 77 (skip) without numpy."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print(f"SKIP: numpy is not importable under {sys.executable}")
    sys.exit(77)

exe = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
failures = []


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)
    return cond


def run(*args):
    return subprocess.run([exe, "train", *args], capture_output=True, text=True, env=ENV, timeout=300)


def arrays(d):
    out = {}
    for sub in ("dense", "tables"):
        for f in os.listdir(os.path.join(d, "final", sub)):
            out[f"{sub}/{f}"] = np.load(os.path.join(d, "final", sub, f))
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m.json")
        # Position weights on f1 (the default pooling factor 8 gives up to 16 ids): trained dense state too.
        json.dump({"model": "dlrm", "dense_in_features": 5, "dense_arch_layer_sizes": [12, 8],
                   "over_arch_layer_sizes": [16, 1], "position_weighted": {"f1": 16}}, open(model, "w"))
        common = ["--model", model, "--tables", "4x200x8", "--batch", "16", "--seed", "3"]
        stateful = ["--optimizer", "adagrad,lr=0.05", "--dense-optimizer", "adam,lr=0.01"]
        straight = os.path.join(tmp, "straight")
        r = run(*common, *stateful, "--steps", "6", "--dump-dir", straight)
        expect("6 steps straight", r.returncode == 0, r.stderr)
        ckpt = os.path.join(tmp, "ckpt")
        r = run(*common, *stateful, "--steps", "3", "--checkpoint-dir", ckpt)
        expect("3 steps, saved", r.returncode == 0, r.stderr)
        manifest = json.load(open(os.path.join(ckpt, "step-00000003", "manifest.json")))
        kinds = {f["kind"] for f in manifest.get("dense", {}).get("files", [])}
        expect("the manifest lists the dense values and Adam's state", kinds == {"value", "exp_avg", "exp_avg_sq"},
               manifest.get("dense"))
        resumed = os.path.join(tmp, "resumed")
        r = run(*common, *stateful, "--steps", "6", "--resume", ckpt, "--dump-dir", resumed)
        if expect("resumed to step 6", r.returncode == 0, r.stderr):
            a, b = arrays(straight), arrays(resumed)
            same = sorted(k for k in a if k in b and np.array_equal(a[k], b[k]))
            expect("every dense parameter and table bit-identical to the straight run", same == sorted(a) and
                   len(a) == len(b), sorted(set(a) - set(same)))
            expect("the position weights are among them, and trained",
                   "dense/position_weights.f1.npy" in a and not np.all(a["dense/position_weights.f1.npy"] == 1.0))
            la, lb = np.load(os.path.join(straight, "losses.npy")), np.load(os.path.join(resumed, "losses.npy"))
            expect("the resumed steps' losses are the straight run's", np.array_equal(la[3:], lb), f"{la} {lb}")

        # Another plan and world size, SGD for both.
        sgd = ["--optimizer", "sgd,lr=0.05", "--dense-optimizer", "sgd,lr=0.05,momentum=0.9"]
        s_straight, s_ckpt, s_resumed = (os.path.join(tmp, n) for n in ("s_straight", "s_ckpt", "s_resumed"))
        r1 = run(*common, *sgd, "--steps", "6", "--dump-dir", s_straight)
        r2 = run(*common, *sgd, "--steps", "3", "--checkpoint-dir", s_ckpt)
        r3 = run(*common, *sgd, "--steps", "6", "--resume", s_ckpt, "--dump-dir", s_resumed, "--sharder", "row_wise",
                 "--world-size", "2")
        if expect("resumed row-wise on 2 ranks", r1.returncode == r2.returncode == r3.returncode == 0,
                  r1.stderr + r2.stderr + r3.stderr):
            a, b = arrays(s_straight), arrays(s_resumed)
            bad = [k for k in a if k not in b or not np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6)]
            expect("resharded resume within 1e-5", not bad, bad)

        # Refusals, before anything changes.
        r = run(*common, "--optimizer", "adagrad,lr=0.05", "--dense-optimizer", "sgd,lr=0.01", "--steps", "6",
                "--resume", ckpt)
        expect("another --dense-optimizer is refused", r.returncode != 0 and
               "the checkpoint's dense optimizer is adam, this run's is sgd" in r.stderr, r.stderr)
        r = run(*common, "--optimizer", "adagrad,lr=0.05", "--dense-optimizer", "sgd,lr=0.01", "--steps", "6",
                "--resume", ckpt, "--reset-optimizer")
        expect("... unless --reset-optimizer", r.returncode == 0, r.stderr)
        plain = os.path.join(tmp, "plain")
        r = run("--tables", "4x200x8", "--steps", "2", "--checkpoint-dir", plain)
        r = run(*common, "--steps", "4", "--resume", plain)
        expect("a checkpoint without dense parameters is refused", r.returncode != 0 and
               "holds no dense parameters" in r.stderr, r.stderr)
        victim = os.path.join(ckpt, "step-00000003", "dense", "0.value.npy")
        data = bytearray(open(victim, "rb").read())
        data[-1] ^= 0x10
        open(victim, "wb").write(bytes(data))
        r = run(*common, *stateful, "--steps", "6", "--resume", ckpt)
        expect("a damaged dense file is refused, named", r.returncode != 0 and "dense/0.value.npy: checksum mismatch"
               in r.stderr, r.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
