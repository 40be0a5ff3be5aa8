#!/usr/bin/env python3
"""PyTorch's own EmbeddingBag on the GPU, as a peer for `shardrec bench kernel
--kernel cuda`: the same table shape, batch, pooling and uniform ids, timed with
CUDA events in the same session. Prints one JSON line: forward lookups/s and
forward + backward + SGD step lookups/s (sparse gradients, the cheapest update
PyTorch offers without FBGEMM).

usage: torch_embedding_bag_peer.py [--rows N] [--dim D] [--batch B] [--pooling P] [--reps R]"""
import argparse
import json
import sys

import torch

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--rows", type=int, default=1_000_000)
p.add_argument("--dim", type=int, default=128)
p.add_argument("--batch", type=int, default=16384)
p.add_argument("--pooling", type=int, default=20)
p.add_argument("--reps", type=int, default=50)
a = p.parse_args()
if min(a.rows, a.dim, a.batch, a.pooling, a.reps) <= 0:
    sys.exit("torch_embedding_bag_peer.py: every size must be positive")
if not torch.cuda.is_available():
    sys.exit("torch_embedding_bag_peer.py: needs a CUDA GPU; torch sees none")

dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(1)
bag = torch.nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True).to(dev)
opt = torch.optim.SGD(bag.parameters(), lr=0.01)
ids = torch.randint(0, a.rows, (a.batch * a.pooling,), device=dev, generator=g)
offsets = torch.arange(0, a.batch * a.pooling, a.pooling, device=dev)


def timed(step):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.reps):
        step()
    stop.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(stop) / 1000 / a.reps
    return a.batch * a.pooling / seconds


def forward():
    with torch.no_grad():
        bag(ids, offsets)


def train():
    opt.zero_grad(set_to_none=True)
    bag(ids, offsets).sum().backward()
    opt.step()


print(json.dumps({"peer": "torch.nn.EmbeddingBag " + torch.__version__ + " on " + torch.cuda.get_device_name(),
                  "rows": a.rows, "dim": a.dim, "batch": a.batch, "pooling": a.pooling,
                  "forward_lookups_per_s": timed(forward), "train_sgd_lookups_per_s": timed(train)}))
