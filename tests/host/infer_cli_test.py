#!/usr/bin/python3
"""`shardrec export` and `shardrec infer` (issue 25): a DLRM trained on a
planted click log, exported at fp32, int8, int4, int2 and per table, served.

- the fp32 export serves the trained model exactly: infer's held-out AUC is
  train's own to the printed digits;
- int8 within 0.002 AUC of fp32, int4 within 0.01; the model shrinks (the
  tables to 0.31x and 0.19x at dim 16), the errors grow int8 < int4 < int2;
- sharded inference (rank 0 holds the batch, every rank looks up its
  shards) scores bit-identically to one rank: table_wise, row_wise,
  table_row_wise, data_parallel on threads, row_wise on 2 Gloo processes;
- the exported files are FBGEMM's row layout: a table's int4 rows,
  dequantized with numpy, are the trained table within the reported error;
- refused, naming what is wrong: an unknown --per-table table, an unknown
  type, an existing -o directory, a checkpoint whose dense half has no
  model config, a missing model, a manifest splitting quantized rows; a
  log missing on rank 0 of 2 (threads, Gloo processes) stops every rank at
  once.

usage: infer_cli_test.py SHARDREC_EXE
Exit 77 (skip) without numpy."""
import json
import os
import re
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
MODEL = {"model": "dlrm", "dense_in_features": 13, "dense_arch_layer_sizes": [32, 16],
         "over_arch_layer_sizes": [32, 1]}


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)
    return cond


def sr(*args, timeout=300):
    return subprocess.run([exe, *args], capture_output=True, text=True, env=ENV, timeout=timeout)


def dequantize(rows, dim, bits):
    """FBGEMM's fused rows: [scale fp16][bias fp16][packed values]."""
    scale = rows[:, 0:2].copy().view(np.float16).astype(np.float32)
    bias = rows[:, 2:4].copy().view(np.float16).astype(np.float32)
    per_byte = 8 // bits
    packed = rows[:, 4:4 + (dim * bits + 7) // 8]
    q = np.zeros((rows.shape[0], dim), dtype=np.float32)
    for i in range(dim):
        q[:, i] = (packed[:, i // per_byte] >> ((i % per_byte) * bits)) & ((1 << bits) - 1)
    return scale * q + bias


def table_file(model_dir, table):
    step = sorted(d for d in os.listdir(model_dir) if d.startswith("step-"))[-1]
    manifest = json.load(open(os.path.join(model_dir, step, "manifest.json")))
    files = [f for f in manifest["files"] if f["table"] == table and f["kind"] == "weights"]
    return manifest, [np.load(os.path.join(model_dir, step, f["path"])) for f in files]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "clicks")
        r = sr("datagen", log, "--train-samples", "120000", "--eval-samples", "30000")
        if not expect("datagen", r.returncode == 0, r.stderr):
            return 1
        model = os.path.join(tmp, "model.json")
        json.dump(MODEL, open(model, "w"))
        ckpt = os.path.join(tmp, "ckpt")
        data = ["--data", "criteo:" + os.path.join(log, "train"), "--eval-data", "criteo:" + os.path.join(log, "eval")]
        r = sr("train", "--model", model, "--tables", "26x2000x16", *data, "--epochs", "1", "--batch", "512",
               "--world-size", "2", "--checkpoint-dir", ckpt, timeout=600)
        if not expect("train --model --checkpoint-dir", r.returncode == 0, r.stderr):
            return 1
        trained_auc = float(re.search(r"held-out \(\d+ samples\): AUC ([0-9.]+)", r.stdout).group(1))
        print(f"trained: held-out AUC {trained_auc:.4f}")

        exports = {}
        for q in ("fp32", "int8", "int4", "int2"):
            out = os.path.join(tmp, "m-" + q)
            r = sr("export", "--from-checkpoint", ckpt, "--quantize", q, "-o", out, "--json")
            if expect(f"export --quantize {q}", r.returncode == 0, r.stderr):
                exports[q] = json.loads(r.stdout)
        if len(exports) != 4:
            return 1
        err = {q: max(t["max_abs_error"] for t in exports[q]["tables"]) for q in exports}
        expect("fp32 export: no error", err["fp32"] == 0, err)
        expect("errors grow int8 < int4 < int2", 0 < err["int8"] < err["int4"] < err["int2"], err)
        ratio = {q: exports[q]["size_ratio"] for q in exports}
        # dim 16: fp32 rows 64 B; int8 4 + 16 = 20 B, int4 4 + 8 = 12 B, int2 4 + 4 = 8 B.
        expect("size ratios 20/64, 12/64, 8/64", abs(ratio["int8"] - 20 / 64) < 1e-9 and
               abs(ratio["int4"] - 12 / 64) < 1e-9 and abs(ratio["int2"] - 8 / 64) < 1e-9, ratio)

        # The files: FBGEMM's rows, dequantized by numpy, are the trained table within the reported error.
        fp32_manifest, fp32_files = table_file(os.path.join(tmp, "m-fp32"), "t3")
        manifest, files = table_file(os.path.join(tmp, "m-int4"), "t3")
        if expect("t3 is one file each", len(files) == 1 and len(fp32_files) == 1, (len(files), len(fp32_files))):
            f = [e for e in manifest["files"] if e["table"] == "t3" and e["kind"] == "weights"][0]
            expect("int4 rows: |u1 [2000, 12], columns [0, 16)", f["dtype"] == "|u1" and f["shape"] == [2000, 12]
                   and f["cols"] == [0, 16], f)
            deq = dequantize(files[0], 16, 4)
            reported = [t for t in exports["int4"]["tables"] if t["name"] == "t3"][0]
            diff = np.abs(deq - fp32_files[0])
            expect("numpy's dequantization gives the reported errors", abs(diff.max() - reported["max_abs_error"]) < 1e-7
                   and abs(diff.mean() - reported["mean_abs_error"]) < 1e-7, (diff.max(), diff.mean(), reported))
        r = sr("export", "--from-checkpoint", ckpt, "--quantize", "int4", "--per-table", "t0=int8,t1=fp16",
               "-o", os.path.join(tmp, "m-mixed"), "--json")
        if expect("export --per-table", r.returncode == 0, r.stderr):
            types = {t["name"]: t["type"] for t in json.loads(r.stdout)["tables"]}
            expect("per-table types", types["t0"] == "int8" and types["t1"] == "fp16" and types["t2"] == "int4", types)

        eval_data = "criteo:" + os.path.join(log, "eval")
        auc, scores = {}, {}
        for q in ("fp32", "int8", "int4", "mixed"):
            out = os.path.join(tmp, f"s-{q}.npy")
            r = sr("infer", "--model", os.path.join(tmp, "m-" + q), "--data", eval_data, "-o", out, "--batch", "512",
                   "--json")
            if expect(f"infer {q}", r.returncode == 0, r.stderr):
                j = json.loads(r.stdout)
                auc[q] = j["metrics"]["auc"]
                scores[q] = np.load(out)
                expect(f"infer {q}: latency and throughput", j["latency_p50_ms"] > 0 and
                       j["latency_p99_ms"] >= j["latency_p50_ms"] and j["samples_per_s"] > 0, j)
        print("AUC:", {q: round(a, 5) for q, a in auc.items()})
        if "fp32" in auc:
            expect("fp32 serves the trained model: train's held-out AUC", round(auc["fp32"], 4) == trained_auc,
                   (auc["fp32"], trained_auc))
            expect("probabilities, one per sample", scores["fp32"].shape == (29696,) and
                   float(scores["fp32"].min()) > 0 and float(scores["fp32"].max()) < 1, scores["fp32"].shape)
            if "int8" in auc:
                expect("int8 within 0.002 AUC of fp32", abs(auc["int8"] - auc["fp32"]) <= 0.002, auc)
            if "int4" in auc:
                expect("int4 within 0.01 AUC of fp32", abs(auc["int4"] - auc["fp32"]) <= 0.01, auc)

        # Sharded inference: the same bits as one rank.
        for sharder, extra in (("table_wise", []), ("row_wise", []), ("table_row_wise", []), ("data_parallel", []),
                               ("row_wise", ["--comm", "gloo"])):
            out = os.path.join(tmp, "s-sharded.npy")
            r = sr("infer", "--model", os.path.join(tmp, "m-int4"), "--data", eval_data, "-o", out, "--batch", "512",
                   "--world-size", "2", "--sharder", sharder, *extra)
            name = f"infer int4, 2 {'Gloo processes' if extra else 'threads'}, {sharder}"
            if expect(name, r.returncode == 0, r.stderr) and "int4" in scores:
                expect(name + ": bit-identical to one rank", np.array_equal(np.load(out), scores["int4"]))

        # Tables alone (no dense half): the pooled embeddings.
        tables_ckpt = os.path.join(tmp, "tables-ckpt")
        r = sr("train", "--tables", "26x300x8", "--steps", "2", "--checkpoint-dir", tables_ckpt)
        if expect("train tables only", r.returncode == 0, r.stderr):
            r = sr("export", "--from-checkpoint", tables_ckpt, "--quantize", "int8", "-o", os.path.join(tmp, "m-t"))
            expect("export tables only", r.returncode == 0 and "tables only" in r.stdout, r.stdout + r.stderr)
            out = os.path.join(tmp, "pooled.npy")
            r = sr("infer", "--model", os.path.join(tmp, "m-t"), "--data", eval_data, "-o", out, "--max-batches", "3",
                   "--batch", "100")
            expect("infer tables only: pooled [300, 26 x 8]", r.returncode == 0 and np.load(out).shape == (300, 208),
                   r.stderr)

        # Refusals.
        def refused(name, args, pattern, code=None):
            r = sr(*args)
            ok = r.returncode != 0 and re.search(pattern, r.stderr) is not None and (code is None or r.returncode == code)
            expect("refused: " + name, ok, f"rc {r.returncode}: {r.stderr}")

        refused("an unknown --per-table table", ["export", "--from-checkpoint", ckpt, "--quantize", "int8",
                                                  "--per-table", "nope=int4", "-o", os.path.join(tmp, "x")],
                r"no table 'nope' \(tables: t0, t1")
        refused("an unknown type", ["export", "--from-checkpoint", ckpt, "--quantize", "int3", "-o",
                                    os.path.join(tmp, "x")], r"unknown data_type 'int3'")
        refused("an existing -o", ["export", "--from-checkpoint", ckpt, "--quantize", "int8", "-o",
                                   os.path.join(tmp, "m-int8")], r"exists and is not an empty directory")
        refused("a missing model", ["infer", "--model", os.path.join(tmp, "nothing"), "--data", eval_data, "-o",
                                    os.path.join(tmp, "x.npy")], r"nothing: no such directory")
        # Rank 0 fails alone (its log is missing): every rank stops at once, none waits in a collective.
        for extra in ([], ["--comm", "gloo"]):
            name = "a missing log on 2 " + ("Gloo processes" if extra else "threads")
            try:
                r = sr("infer", "--model", os.path.join(tmp, "m-int8"), "--data", "criteo:" + os.path.join(tmp, "no-log"),
                       "-o", os.path.join(tmp, "x.npy"), "--world-size", "2", "--sharder", "row_wise", *extra,
                       timeout=45)
                expect("refused: " + name, r.returncode != 0 and "no-log" in r.stderr and "timed out" not in r.stderr,
                       r.stderr)
            except subprocess.TimeoutExpired:
                expect("refused: " + name, False, "hung: the other rank waited in a collective")
        # A model whose manifest splits a quantized table's rows by column.
        mdir = os.path.join(tmp, "m-int8")
        mstep = sorted(d for d in os.listdir(mdir) if d.startswith("step-"))[-1]
        mpath = os.path.join(mdir, mstep, "manifest.json")
        mm = json.load(open(mpath))
        for f in mm["files"]:
            if f["table"] == "t2" and f["kind"] == "weights":
                f["cols"] = [0, 8]
        json.dump(mm, open(mpath, "w"))
        refused("a quantized table's file covering columns [0, 8)", ["infer", "--model", mdir, "--data", eval_data,
                                                                     "-o", os.path.join(tmp, "x.npy")],
                r"columns \[0, 8\) of an int8 table: its quantized rows are saved whole")
        # A dense half without its config (a checkpoint of an older train).
        step = sorted(d for d in os.listdir(ckpt) if d.startswith("step-"))[-1]
        path = os.path.join(ckpt, step, "manifest.json")
        m = json.load(open(path))
        del m["model"]
        json.dump(m, open(path, "w"))
        refused("a dense half without its model config", ["export", "--from-checkpoint", ckpt, "--quantize", "int8",
                                                          "-o", os.path.join(tmp, "y")], r"not its config")
    print("FAILED: " + ", ".join(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
