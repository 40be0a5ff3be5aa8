#!/usr/bin/python3
"""`--kernel cuda` and `--comm nccl` from the command line.

Without a GPU (CI): the cuda kernel is listed and passes the conformance
kit's checks that need no device (creation is a SKIP with the driver's
reason); `train`, `embed` and `bench kernel --kernel cuda` stop with a
message naming the missing device; `train --comm nccl` is refused before
any work (exit 2). With a GPU: `train --kernel cuda --verify` agrees with the
unsharded module, `embed --kernel cuda` writes what `--kernel cpu` writes,
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
