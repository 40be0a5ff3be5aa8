#!/usr/bin/env python3
"""A small DLRM-style model trained data-parallel on its dense layers and
model-parallel on its embedding tables, whose sparse half is shardrec's or
TorchRec's, one flag apart (docs/python.md).

    torchrun --nproc-per-node 2 examples/python/dlrm_torchrun.py --sparse shardrec
    torchrun --nproc-per-node 2 examples/python/dlrm_torchrun.py --sparse torchrec

`--nproc N` starts N ranks itself, as torchrun does (for a torch whose
torchrun is broken, as Debian's 1.13 under Python 3.11):

    python3 examples/python/dlrm_torchrun.py --nproc 2 --sparse shardrec

The data is a planted click log made on the fly: every id of every table
has a hidden score, and a sample clicks with probability sigmoid(sum of its
ids' scores + a dense part). A model that learns the tables drives the loss
well below the label entropy it starts at. Rank 0 prints the loss as it
falls, then samples/s over all ranks."""
import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time

FEATURES = 4


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sparse", choices=["shardrec", "torchrec"], default="shardrec",
                   help="whose embedding tables (default shardrec)")
    p.add_argument("--sharder", default="row_wise", choices=["table_wise", "row_wise"],
                   help="how the tables are split across ranks (default row_wise)")
    p.add_argument("--rows", type=int, default=20_000, help="rows per table (default 20000)")
    p.add_argument("--dim", type=int, default=32, help="embedding dim (default 32)")
    p.add_argument("--batch", type=int, default=512, help="samples per rank per step (default 512)")
    p.add_argument("--pooling", type=int, default=4, help="ids per sample per feature (default 4)")
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--lr", type=float, default=0.1, help="row-wise Adagrad's learning rate (default 0.1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--json", action="store_true", help="rank 0 prints a JSON summary as its last line")
    p.add_argument("--nproc", type=int, default=0, help="start this many ranks on this host (instead of torchrun)")
    a = p.parse_args()
    for name in ("rows", "dim", "batch", "pooling", "steps", "threads"):
        if getattr(a, name) <= 0:
            p.error("--%s must be positive" % name)
    if a.lr <= 0 or not math.isfinite(a.lr):
        p.error("--lr must be a positive number")
    return a


def launch(args):
    """Starts args.nproc ranks with torchrun's variables; returns their exit status."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a for a in sys.argv[1:] if not a.startswith("--nproc")]
    if "--nproc" in sys.argv:  # "--nproc N" as two words
        i = sys.argv.index("--nproc")
        argv = sys.argv[1:i] + sys.argv[i + 2:]
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


def batch(torch, gen, scores, args):
    """One rank's planted batch: lengths, ids (key-major), dense features, labels."""
    n = args.batch
    lengths = torch.full((FEATURES * n,), args.pooling, dtype=torch.int64)
    # Skewed ids, as click logs have: a few hot rows, a long tail.
    u = torch.rand(FEATURES, n * args.pooling, generator=gen)
    ids = (u.pow(3) * args.rows).long().clamp_(max=args.rows - 1)
    dense = torch.randn(n, 8, generator=gen)
    logit = dense[:, 0] * 0.5
    for f in range(FEATURES):
        logit += scores[f][ids[f]].view(n, args.pooling).sum(1) / math.sqrt(args.pooling)
    labels = torch.bernoulli(torch.sigmoid(logit), generator=gen)
    return lengths, ids.reshape(-1), dense, labels


def main(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    names = ["f%d" % f for f in range(FEATURES)]
    tables = [{"name": "t%d" % f, "num_embeddings": args.rows, "embedding_dim": args.dim, "feature_names": [n]}
              for f, n in enumerate(names)]

    class Dense(torch.nn.Module):
        """Bottom MLP on the dense features, top MLP over it and the pooled embeddings."""

        def __init__(self):
            super().__init__()
            self.bottom = torch.nn.Sequential(torch.nn.Linear(8, args.dim), torch.nn.ReLU())
            self.top = torch.nn.Sequential(torch.nn.Linear(args.dim * (FEATURES + 1), 64), torch.nn.ReLU(),
                                           torch.nn.Linear(64, 1))

        def forward(self, dense, pooled):
            return self.top(torch.cat([self.bottom(dense), pooled], dim=1)).squeeze(1)

    torch.manual_seed(0)  # the same dense initialisation on every rank
    dense_model = torch.nn.parallel.DistributedDataParallel(Dense())
    opt = torch.optim.Adam(dense_model.parameters(), lr=1e-3)

    if args.sparse == "shardrec":
        import shardrec
        import shardrec.torch as srt
        sparse = srt.ShardedEmbeddingBagCollection(tables, sharder=args.sharder,
                                                   optimizer="rowwise_adagrad,lr=%g,eps=1e-8" % args.lr, init_seed=1)
        make_kjt = lambda lengths, ids: shardrec.KeyedJaggedTensor(names, ids, lengths=lengths)  # noqa: E731
    else:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
        from torchrec.distributed import DistributedModelParallel
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise, table_wise
        from torchrec.distributed.types import ShardingPlan
        configs = [EmbeddingBagConfig(name=t["name"], num_embeddings=args.rows, embedding_dim=args.dim,
                                      feature_names=t["feature_names"]) for t in tables]
        ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        # The same fused row-wise Adagrad as shardrec's (TorchRec's CPU
        # default kernel would leave the tables to a torch.optim optimizer).
        sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                                                              "learning_rate": args.lr, "eps": 1e-8})
        per_table = {t["name"]: (row_wise(compute_kernel="fused") if args.sharder == "row_wise"
                                 else table_wise(rank=i % world, compute_kernel="fused"))
                     for i, t in enumerate(tables)}
        plan = ShardingPlan({"": construct_module_sharding_plan(ebc, per_table, sharder=sharder, local_size=world,
                                                                world_size=world, device_type="cpu")})
        sparse = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan, sharders=[sharder])
        make_kjt = lambda lengths, ids: KeyedJaggedTensor(keys=names, values=ids, lengths=lengths)  # noqa: E731

    # The planted scores are the same on every rank; each rank's batches differ.
    scores = torch.randn(FEATURES, args.rows, generator=torch.Generator().manual_seed(42)) * 0.7
    gen = torch.Generator().manual_seed(1000 + rank)
    first, losses, start = None, [], None
    for step in range(args.steps):
        if step == 10:
            start = time.perf_counter()  # after warm-up
        lengths, ids, dense, labels = batch(torch, gen, scores, args)
        pooled = sparse(make_kjt(lengths, ids))
        pooled = pooled.values() if hasattr(pooled, "values") and callable(pooled.values) else pooled
        loss = torch.nn.functional.binary_cross_entropy_with_logits(dense_model(dense, pooled), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if first is None:
            first = loss.item()
        if rank == 0 and (step + 1) % max(1, args.steps // 10) == 0:
            print("step %5d  loss %.4f (mean of the last %d)" % (step + 1, sum(losses[-20:]) / len(losses[-20:]),
                                                                  len(losses[-20:])), flush=True)
    seconds = time.perf_counter() - start if start is not None else float("nan")
    timed = max(0, args.steps - 10)
    rate = timed * args.batch * world / seconds if timed else float("nan")
    last = sum(losses[-20:]) / len(losses[-20:])
    if rank == 0:
        print("%s: loss %.4f -> %.4f over %d steps; %.0f samples/s over %d ranks" % (args.sparse, first, last,
                                                                                     args.steps, rate, world))
        if args.json:
            print(json.dumps({"sparse": args.sparse, "sharder": args.sharder, "ranks": world, "first_loss": first,
                              "last_loss": last, "samples_per_s": rate, "steps": args.steps, "batch": args.batch}))
    if args.sparse == "shardrec":
        sparse.close()
        sparse.group.close()  # stops its heartbeats while torch's store still answers
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.nproc > 0:
        sys.exit(launch(arguments))
    main(arguments)
