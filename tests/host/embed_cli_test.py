#!/usr/bin/python3
"""`shardrec embed` and `shardrec bench kernel` as a user runs them: bad input
gets a clear error and writes nothing; a good run writes the documented files.

usage: embed_cli_test.py SHARDREC_EXE
Exit 77 (skip) when numpy is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable under", sys.executable)
    sys.exit(77)

exe = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([exe, *args], capture_output=True, text=True)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail))
    if not cond:
        failures.append(name)


with tempfile.TemporaryDirectory() as d:
    tables = os.path.join(d, "t.json")
    with open(tables, "w") as f:
        json.dump({"tables": [{"name": "t0", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f0"],
                               "pooling": "mean"}]}, f)
    batch = os.path.join(d, "batch")
    os.mkdir(batch)
    with open(os.path.join(batch, "keys.txt"), "w") as f:
        f.write("f0\n")
    np.save(os.path.join(batch, "lengths.npy"), np.array([2, 0, 1], dtype=np.int64))
    np.save(os.path.join(batch, "values.npy"), np.array([1, 2, 9], dtype=np.int64))
    out = os.path.join(d, "out")

    r = run("embed", "--tables", tables, "--batch", batch, "--out", out, "--init-seed", "3", "--json")
    ok = r.returncode == 0
    expect("good run exits 0", ok, r.stderr)
    if ok:
        res = json.loads(r.stdout.strip().splitlines()[-1])
        v = np.load(os.path.join(out, "values.npy"))
        expect("pooled output shape [3, 4]", v.shape == (3, 4) and res["pooled_shape"] == [3, 4], str(v.shape))
        expect("empty bag is zero under mean", np.all(v[1] == 0))
        expect("offset_per_key [0, 4]", list(np.load(os.path.join(out, "offset_per_key.npy"))) == [0, 4])

    # An id past the table: FATAL names feature and id, and writes nothing.
    np.save(os.path.join(batch, "values.npy"), np.array([1, 2, 10], dtype=np.int64))
    out2 = os.path.join(d, "out2")
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out2)
    expect("out-of-range id fails", r.returncode == 1, r.stderr)
    expect("out-of-range id is named", "10" in r.stderr and "t0" in r.stderr, r.stderr)
    expect("nothing written on error", not os.path.exists(out2))
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out2, "--bounds-check", "warning", "--json")
    expect("warning mode counts the bad id", r.returncode == 0 and
           json.loads(r.stdout.strip().splitlines()[-1])["invalid_ids"] == 1, r.stdout + r.stderr)

    # Truncated .npy.
    path = os.path.join(batch, "values.npy")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-5])
    out3 = os.path.join(d, "out3")
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out3)
    expect("truncated values.npy is refused", r.returncode == 1 and "truncated" in r.stderr, r.stderr)
    expect("nothing written for a truncated file", not os.path.exists(out3))

    # Wrong dtype.
    np.save(path, np.array([1.0, 2.0, 3.0], dtype=np.float32))
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out3)
    expect("float ids are refused by name", r.returncode == 1 and "values.npy" in r.stderr and "float32" in r.stderr,
           r.stderr)

    # Lengths that do not sum to the values.
    np.save(path, np.array([1, 2], dtype=np.int64))
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out3)
    expect("lengths/values mismatch is refused", r.returncode == 1 and "lengths sum to 3 but there are 2 values"
           in r.stderr, r.stderr)

    # A typo in the tables file names the key.
    with open(tables, "w") as f:
        json.dump({"tables": [{"name": "t0", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f0"],
                               "pooling": "mean", "embeding_dim": 3}]}, f)
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out3)
    expect("unknown table key is named", r.returncode == 1 and "unknown key 'embeding_dim'" in r.stderr, r.stderr)

    r = run("embed", "--help")
    expect("embed --help teaches the flags", r.returncode == 0 and "--bounds-check" in r.stdout and
           "file-formats.md" in r.stdout, r.stdout)

    # bench kernel runs end to end and reports ratios.
    r = run("bench", "kernel", "--rows", "4096", "--dim", "16", "--batch", "64", "--pooling", "4",
            "--min-time", "0.01", "--reps", "1", "--optimizer", "sgd", "--json")
    ok = r.returncode == 0
    expect("bench kernel runs", ok, r.stderr)
    if ok:
        res = json.loads(r.stdout.strip().splitlines()[-1])
        expect("bench kernel reports forward and backward ratios",
               res["forward_over_probe"] > 0 and res["backward_over_probe"] > 0, r.stdout)
    r = run("bench", "kernel", "--ids", "zipf:-1")
    expect("bench kernel refuses a bad distribution", r.returncode != 0 and "zipf:ALPHA" in r.stderr, r.stderr)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
