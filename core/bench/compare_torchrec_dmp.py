#!/usr/bin/env python3
"""shardrec train against TorchRec's DistributedModelParallel, CPU + Gloo,
side by side on the same tables, batch, plan and threads. Run by hand, not
in CI (it installs TorchRec and FBGEMM's CPU build from PyPI).

    python3 core/bench/compare_torchrec_dmp.py --setup            # once: the virtual environment
    python3 core/bench/compare_torchrec_dmp.py --shardrec build/bin/shardrec

--setup makes a virtual environment (default ~/.cache/shardrec/torchrec-venv)
with torch 2.14.1 and fbgemm-gpu-cpu 1.9.0, then torchrec 1.9.2 with --no-deps
(its own pins would pull a CUDA build), and the few pure-Python packages
TorchRec imports. The comparison then alternates runs, each a fresh set of
processes:

  shardrec   shardrec train --comm gloo --world-size P --tables T --batch B
             --steps S --sharder X --optimizer O --plugin-opt kernel.cpu.threads=1
             (the default --pipeline: sparse_dist over gloo)
  TorchRec   P processes (torch.multiprocessing), gloo process group,
             EmbeddingBagCollection of the same tables on the meta device,
             DistributedModelParallel with the same plan (every table
             table-wise, round-robin over the ranks as the balanced plan
             places these tables, or row-wise), FBGEMM's fused optimizer
             (EXACT_SGD or EXACT_ROWWISE_ADAGRAD) through the sharder's
             fused_params, torch.set_num_threads(1) per rank

Both train on uniform ids with bag lengths uniform in [0, 2P] and the same
per-sample gradient shape (dL/dpooled given, as shardrec's synthetic job);
batches are made before the clock starts. Each side reports the slowest
rank's steady-state samples/s (the first --warmup steps excluded); the script
prints every run and the ratio of medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VENV_DEFAULT = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "shardrec",
                            "torchrec-venv")


def setup(venv):
    print(f"creating {venv}")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install"]
    subprocess.run(pip + ["torch==2.14.1", "fbgemm-gpu-cpu==1.9.0"], check=True)
    # torchrec and tensordict without their dependencies (their pins pull
    # other torch builds), then the pure-Python packages they import.
    subprocess.run(pip + ["--no-deps", "torchrec==1.9.2", "tensordict"], check=True)
    subprocess.run(pip + ["iopath", "tabulate", "pyre-extensions", "typing-inspect", "tqdm", "numpy", "pyvers",
                          "cloudpickle"], check=True)
    print(f"done: {os.path.join(venv, 'bin', 'python')}")


# ---------------------------------------------------------------- TorchRec side (runs in the venv)

def torchrec_rank(rank, args, port, result_path):
    import torch
    import torch.distributed as dist
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise, table_wise
    from torchrec.distributed.types import ShardingPlan

    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    tables = parse_tables(args.tables)
    configs = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=dim, num_embeddings=rows, feature_names=[f"f{i}"])
               for i, (rows, dim) in enumerate(tables)]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    optimizer = EmbOptimType.EXACT_SGD if args.optimizer == "sgd" else EmbOptimType.EXACT_ROWWISE_ADAGRAD
    fused = {"optimizer": optimizer, "learning_rate": args.lr}
    if args.optimizer != "sgd":
        fused["eps"] = 1e-8
    sharder = EmbeddingBagCollectionSharder(fused_params=fused)
    # The plan written out, as shardrec's balanced table-wise plan places
    # these tables (table i on rank i mod P), or every table row-wise (the
    # planner offers no row-wise on a CPU topology).
    per_param = {c.name: (row_wise(compute_kernel="fused") if args.sharder == "row_wise"
                          else table_wise(rank=i % args.ranks, compute_kernel="fused"))
                 for i, c in enumerate(configs)}
    plan = ShardingPlan({"": construct_module_sharding_plan(ebc, per_param, sharder=sharder, local_size=args.ranks,
                                                            world_size=args.ranks, device_type="cpu")})
    model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan, sharders=[sharder])
    if rank == 0 and args.show_plan:
        print(plan, file=sys.stderr)

    g = torch.Generator().manual_seed(1000 + rank)
    batches, grads = [], []
    width = sum(dim for _, dim in tables)
    for step in range(args.steps):
        lengths = torch.randint(0, 2 * args.pooling + 1, (len(tables) * args.batch,), generator=g)
        values = torch.cat([torch.randint(0, rows, (int(lengths[i * args.batch:(i + 1) * args.batch].sum()),),
                                          generator=g) for i, (rows, _) in enumerate(tables)])
        batches.append(KeyedJaggedTensor.from_lengths_sync(keys=[f"f{i}" for i in range(len(tables))],
                                                           values=values, lengths=lengths))
        grads.append(torch.randn(args.batch, width, generator=g))
    dist.barrier()
    start = None
    for step in range(args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        out = model(batches[step])
        pooled = out.values() if hasattr(out, "values") else out.wait().values()
        pooled.backward(grads[step])  # the fused optimizer updates the rows in backward
    seconds = time.perf_counter() - start
    timed = args.steps - args.warmup
    slowest = torch.tensor([seconds])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"samples_per_s": args.ranks * args.batch * timed / float(slowest)}, f)
    dist.destroy_process_group()


def torchrec_main(args):
    import tempfile
    import torch.multiprocessing as mp
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        mp.spawn(torchrec_rank, args=(args, port, path), nprocs=args.ranks, join=True)
        with open(path) as f:
            print(json.dumps(json.load(f)))


def parse_tables(spec):
    out = []
    for part in spec.split(","):
        count, rest = (part.split("x", 1) if part.count("x") == 2 else ("1", part))
        rows, dim = rest.split("x")
        out += [(int(rows), int(dim))] * int(count)
    return out


# ---------------------------------------------------------------- the comparison (any python)

def shardrec_run(args):
    cmd = [args.shardrec, "train", "--json", "--comm", "gloo", "--world-size", str(args.ranks), "--tables",
           args.tables, "--batch", str(args.batch), "--steps", str(args.steps), "--sharder", args.sharder,
           "--pooling-factor", str(args.pooling), "--plugin-opt", f"kernel.cpu.threads={args.threads}",
           "--optimizer", ("sgd" if args.optimizer == "sgd" else "rowwise_adagrad") + f",lr={args.lr}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    steady = report["step_samples_per_s"][args.warmup:]
    # The job's rate over the timed steps: samples over the summed step times.
    return args.ranks * args.batch * len(steady) / sum(args.ranks * args.batch / s for s in steady)


def torchrec_run(args):
    cmd = [args.python, os.path.abspath(__file__), "--torchrec-worker", "--ranks", str(args.ranks), "--tables",
           args.tables, "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--sharder", args.sharder, "--pooling", str(args.pooling), "--optimizer", args.optimizer, "--lr",
           str(args.lr), "--threads", str(args.threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", action="store_true", help="create the virtual environment and exit")
    p.add_argument("--venv", default=VENV_DEFAULT)
    p.add_argument("--shardrec", default="build/bin/shardrec")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--tables", default="4x100000x64,2x20000x16")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--pooling", type=int, default=8)
    p.add_argument("--sharder", choices=["table_wise", "row_wise"], default="table_wise")
    p.add_argument("--optimizer", choices=["sgd", "rowwise_adagrad"], default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1, help="threads per rank, both sides")
    p.add_argument("--runs", type=int, default=3, help="alternating runs of each")
    p.add_argument("--show-plan", action="store_true", help="print TorchRec's sharding plan (stderr)")
    p.add_argument("--torchrec-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.setup:
        setup(args.venv)
        return
    if args.torchrec_worker:
        torchrec_main(args)
        return
    args.python = os.path.join(args.venv, "bin", "python")
    if not os.path.exists(args.python):
        sys.exit(f"no TorchRec environment at {args.venv}: run with --setup first")
    ours, theirs = [], []
    for run in range(args.runs):
        ours.append(shardrec_run(args))
        theirs.append(torchrec_run(args))
        print(f"run {run + 1}: shardrec {ours[-1] / 1e3:.1f}k samples/s, TorchRec DMP {theirs[-1] / 1e3:.1f}k "
              f"samples/s", flush=True)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{args.ranks} processes over gloo, {args.tables}, batch {args.batch} per rank, {args.sharder}, "
          f"{args.optimizer} lr {args.lr}, {args.threads} thread(s) per rank: shardrec {a / 1e3:.1f}k, "
          f"TorchRec {b / 1e3:.1f}k samples/s (medians of {args.runs}); shardrec / TorchRec = {a / b:.2f}x")


if __name__ == "__main__":
    main()
