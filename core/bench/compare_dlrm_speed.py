#!/usr/bin/python3
"""DLRM training speed, shardrec against the same model in PyTorch, one run.

Runs `shardrec train --model dlrm --json` (2 ranks as threads by default, each
with `--batch` samples per step) and then the same model in Debian's torch on
the same number of threads with the global batch (ranks x batch) per step:
26 nn.EmbeddingBag tables (sum, sparse gradients, torch.optim.Adagrad), the
dense arch, the pairwise interaction and the over arch of TorchRec's DLRM,
BCE-with-logits, torch.optim.Adagrad for the dense parameters. Batches are
uniform ids with bag lengths uniform in [0, 2P], as shardrec's synthetic data.
Prints samples/s of both and the ratio. Used for docs/benchmarks.md:

    /usr/bin/python3 core/bench/compare_dlrm_speed.py --shardrec build/bin/shardrec
"""
import argparse
import json
import subprocess
import sys
import time


def shardrec_run(args):
    cmd = [args.shardrec, "train", "--model", "dlrm", "--json", "--tables", f"26x{args.rows}x{args.dim}",
           "--batch", str(args.batch), "--steps", str(args.steps), "--world-size", str(args.ranks),
           "--pooling-factor", str(args.pooling), "--optimizer", f"adagrad,lr={args.lr}",
           "--dense-optimizer", f"adagrad,lr={args.lr}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def torch_run(args):
    import torch
    from torch import nn
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    f, d = 26, args.dim

    def mlp(sizes, relu_last=True):
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if relu_last or i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    tables = nn.ModuleList(nn.EmbeddingBag(args.rows, d, mode="sum", sparse=True) for _ in range(f))
    dense_arch = mlp([13, 512, 256, d])
    over_in = d + f * (f + 1) // 2
    over_arch = mlp([over_in, 512, 512, 256, 1], relu_last=False)
    rows, cols = torch.triu_indices(f + 1, f + 1, offset=1)
    sparse_opt = torch.optim.Adagrad(tables.parameters(), lr=args.lr)
    dense_opt = torch.optim.Adagrad(list(dense_arch.parameters()) + list(over_arch.parameters()), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    b = args.batch * args.ranks

    def batch():
        lengths = torch.randint(0, 2 * args.pooling + 1, (f, b))
        ids, offsets = [], []
        for t in range(f):
            n = int(lengths[t].sum())
            ids.append(torch.randint(0, args.rows, (n,)))
            offsets.append(torch.cat([torch.zeros(1, dtype=torch.int64), lengths[t].cumsum(0)[:-1]]))
        return ids, offsets, torch.rand(b, 13) * 3, (torch.rand(b) < 0.5).float()

    batches = [batch() for _ in range(4)]

    def step(data):
        ids, offsets, dense, labels = data
        pooled = [tables[t](ids[t], offsets[t]) for t in range(f)]
        x = dense_arch(dense)
        z = torch.stack([x] + pooled, dim=1)
        inter = torch.bmm(z, z.transpose(1, 2))[:, rows, cols]
        logits = over_arch(torch.cat([x, inter], dim=1)).squeeze(1)
        loss = loss_fn(logits, labels)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()

    for i in range(3):
        step(batches[i % len(batches)])
    start = time.perf_counter()
    for i in range(args.steps):
        step(batches[i % len(batches)])
    return b * args.steps / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shardrec", default="build/bin/shardrec")
    p.add_argument("--rows", type=int, default=100000, help="rows of each of the 26 tables")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=512, help="samples per rank per step")
    p.add_argument("--ranks", type=int, default=2, help="shardrec's ranks (threads); torch runs ranks x batch")
    p.add_argument("--threads", type=int, default=2, help="torch's threads (the same cores)")
    p.add_argument("--pooling", type=int, default=8)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args()
    ours = shardrec_run(args)
    theirs = torch_run(args)
    split = ours["time_split_s"]
    dense = split["dense_forward"] + split["dense_backward"] + split["allreduce_exposed"] + split["dense_optimizer"]
    print(f"DLRM, 26 tables of {args.rows} x {args.dim}, global batch {args.batch * args.ranks}, "
          f"{args.steps} steps, {args.threads} threads:")
    print(f"  shardrec ({args.ranks} ranks as threads)  {ours['samples_per_s']:10.0f} samples/s"
          f"   (dense half {100 * dense / split['rank_mean']:.0f}% of the step)")
    print(f"  torch {__import__('torch').__version__:<24} {theirs:10.0f} samples/s")
    print(f"  shardrec / torch            {ours['samples_per_s'] / theirs:10.2f}   (aim >= 2)")


if __name__ == "__main__":
    sys.exit(main())
