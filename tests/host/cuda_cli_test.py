#!/usr/bin/python3
"""`--kernel cuda` and `--comm nccl` from the command line.

Without a GPU (CI): the cuda kernel is listed and passes the conformance
kit's checks that need no device (creation is a SKIP with the driver's
reason); `train`, `embed` and `bench kernel --kernel cuda` stop with a
message naming the missing device; `train --comm nccl` is refused before
any work (exit 2). With a GPU: `train --kernel cuda --verify` agrees with the
unsharded module (over NCCL too, a world of one), `embed --kernel cuda` writes what `--kernel cpu` writes,
and `bench kernel --kernel cuda` reports the ratio to a device-to-device
copy.

usage: cuda_cli_test.py SHARDREC_EXE CUDA_KERNEL_SO"""
import json
import os
import subprocess
import sys
import tempfile

exe, cuda_so = sys.argv[1:3]
failures = []


def run(*args, timeout=300):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail[-2000:]))
    if not cond:
        failures.append(name)


def embed_matches(run):
    """`embed --grad` on the GPU writes what it writes on the CPU: pooled
    outputs, then the tables and optimizer state after one rowwise Adagrad
    step, over a sum and a mean table with a hot id."""
    import numpy as np
    with tempfile.TemporaryDirectory() as d:
        tables = os.path.join(d, "t.json")
        with open(tables, "w") as f:
            json.dump({"tables": [
                {"name": "a", "num_embeddings": 1000, "embedding_dim": 48, "feature_names": ["fa"], "pooling": "sum"},
                {"name": "b", "num_embeddings": 50, "embedding_dim": 8, "feature_names": ["fb"], "pooling": "mean"}]},
                f)
        batch = os.path.join(d, "batch")
        os.mkdir(batch)
        rng = np.random.default_rng(5)
        lengths = rng.integers(0, 30, size=2 * 64).astype(np.int64)
        values = np.concatenate([rng.integers(0, 1000, size=lengths[:64].sum()),
                                 rng.integers(0, 50, size=lengths[64:].sum())]).astype(np.int64)
        values[:20] = 7  # a hot row: many gradients summed into one
        with open(os.path.join(batch, "keys.txt"), "w") as f:
            f.write("fa\nfb\n")
        np.save(os.path.join(batch, "lengths.npy"), lengths)
        np.save(os.path.join(batch, "values.npy"), values)
        grad = os.path.join(d, "grad.npy")
        np.save(grad, rng.uniform(-1, 1, size=(64, 56)).astype(np.float32))
        outs = {}
        for kernel in ["cpu", "cuda"]:
            outs[kernel] = os.path.join(d, kernel)
            r = run("embed", "--tables", tables, "--batch", batch, "--grad", grad, "--optimizer",
                    "rowwise_adagrad,lr=0.05", "--init-seed", "4", "--kernel", kernel, "--out", outs[kernel])
            expect("embed --grad --kernel " + kernel + " runs", r.returncode == 0, r.stdout + r.stderr)
            if r.returncode != 0:
                return
        for name in ["values.npy", "tables/a.npy", "tables/b.npy", "tables/a.state.npy", "tables/b.state.npy"]:
            cpu, gpu = (np.load(os.path.join(outs[k], name)) for k in ["cpu", "cuda"])
            expect("embed --kernel cuda writes the CPU's " + name, cpu.shape == gpu.shape and
                   np.allclose(gpu, cpu, rtol=1e-5, atol=1e-6),
                   "max difference %g" % (np.abs(gpu - cpu).max() if cpu.shape == gpu.shape else -1))


check = run("plugins", "check", cuda_so)
expect("plugins check passes the cuda kernel", check.returncode == 0, check.stdout + check.stderr)
has_gpu = "no NVIDIA GPU" not in check.stdout and "has no CUDA" not in check.stdout
print("GPU visible:", has_gpu)
listed = run("plugins", "list")
expect("plugins list shows kernel cuda", "cuda" in listed.stdout, listed.stdout)

if not has_gpu:
    expect("the kit skips creation with the reason", "SKIP  kernel cuda: create" in check.stdout, check.stdout)
    train = run("train", "--kernel", "cuda", "--steps", "1", "--world-size", "1")
    expect("train --kernel cuda is refused before ranks start, once, naming the missing device",
           train.returncode == 2 and "no NVIDIA GPU" in train.stderr and train.stderr.count("no NVIDIA GPU") == 1
           and "rank" not in train.stderr and "insufficient" not in train.stderr, train.stderr)
    bench = run("bench", "kernel", "--kernel", "cuda", "--rows", "1000", "--min-time", "0.01", "--reps", "1")
    expect("bench kernel --kernel cuda fails naming the missing device",
           bench.returncode != 0 and "no NVIDIA GPU" in bench.stderr, bench.stderr)
    nccl = run("train", "--comm", "nccl", "--world-size", "2", "--steps", "1")
    expect("train --comm nccl is refused before any work (exit 2)",
           nccl.returncode == 2 and "has none" in nccl.stderr, nccl.stderr)
    check_nccl = run("comm", "check", "--comm", "nccl")
    expect("comm check --comm nccl is refused (host buffers)",
           check_nccl.returncode == 2 and "host (CPU) buffers" in check_nccl.stderr, check_nccl.stderr)
else:
    for sharder in ["table_wise", "row_wise", "column_wise"]:
        train = run("train", "--kernel", "cuda", "--sharder", sharder, "--world-size", "2", "--steps", "3",
                    "--verify")
        expect("train --kernel cuda --verify (" + sharder + ")", train.returncode == 0,
               train.stdout + train.stderr)
    embed_matches(run)
    # NCCL runs one rank per GPU: a world of one on a one-GPU machine.
    nccl = run("train", "--kernel", "cuda", "--comm", "nccl", "--world-size", "1", "--steps", "3", "--verify")
    expect("train --kernel cuda --comm nccl --verify (world of one)", nccl.returncode == 0,
           nccl.stdout + nccl.stderr)
    bench = run("bench", "kernel", "--kernel", "cuda", "--rows", "1000000", "--dim", "128", "--batch", "16384",
                "--pooling", "20", "--json")
    ok = bench.returncode == 0
    j = json.loads(bench.stdout) if ok else {}
    expect("bench kernel --kernel cuda reports the ratio to a device-to-device copy",
           ok and "device-to-device" in j.get("probe", "") and j.get("forward_over_probe", 0) > 0,
           bench.stdout + bench.stderr)
    print("bench:", bench.stdout.strip())

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
