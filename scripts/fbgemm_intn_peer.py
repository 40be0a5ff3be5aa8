#!/usr/bin/env python3
"""FBGEMM's CPU inference TBE (IntNBitTableBatchedEmbeddingBagsCodegen), as a
peer for `shardrec bench kernel --optimizer none --quantized int8,int4,int2`:
one table of the same shape, the same batch, pooling, uniform id distribution
and thread count, pooled sum, timed in the same session. Prints one JSON line:
forward lookups/s per weight type (FP32 and the IntN types asked for), best of
--reps timings of at least --min-time seconds each.

Runs where fbgemm-gpu-cpu is installed, e.g. the venv of
`python3 core/bench/compare_torchrec_dmp.py --setup`:
  ~/.cache/shardrec/torchrec-venv/bin/python scripts/fbgemm_intn_peer.py --threads 2

usage: fbgemm_intn_peer.py [--rows N] [--dim D] [--batch B] [--pooling P]
                           [--types fp32,int8,int4,int2] [--threads T] [--reps R] [--min-time S]"""
import argparse
import json
import sys
import time

try:
    import torch
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
except ImportError as e:
    sys.exit("fbgemm_intn_peer.py: needs torch and fbgemm-gpu-cpu (%s)" % e)

TYPES = {"fp32": SparseType.FP32, "fp16": SparseType.FP16, "int8": SparseType.INT8, "int4": SparseType.INT4,
         "int2": SparseType.INT2}

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--rows", type=int, default=1_000_000)
p.add_argument("--dim", type=int, default=128)
p.add_argument("--batch", type=int, default=4096)
p.add_argument("--pooling", type=int, default=20)
p.add_argument("--types", default="fp32,int8,int4,int2")
p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
p.add_argument("--reps", type=int, default=5)
p.add_argument("--min-time", type=float, default=0.5)
a = p.parse_args()
if min(a.rows, a.dim, a.batch, a.pooling, a.reps) <= 0 or a.min_time <= 0:
    sys.exit("fbgemm_intn_peer.py: every size must be positive")
names = [t for t in a.types.split(",") if t]
for t in names:
    if t not in TYPES:
        sys.exit("fbgemm_intn_peer.py: unknown type '%s' (expected %s)" % (t, ", ".join(TYPES)))
if a.threads > 0:
    torch.set_num_threads(a.threads)

g = torch.Generator().manual_seed(1)
batches = [torch.randint(0, a.rows, (a.batch * a.pooling,), generator=g, dtype=torch.int32) for _ in range(16)]
offsets = torch.arange(0, a.batch * a.pooling + 1, a.pooling, dtype=torch.int32)


def rate(op):
    for ids in batches:  # warm-up: fault the table's pages in
        op(ids, offsets)
    best = 0.0
    for _ in range(a.reps):
        n, start = 0, time.perf_counter()
        while True:
            for ids in batches:
                op(ids, offsets)
            n += len(batches)
            elapsed = time.perf_counter() - start
            if elapsed >= a.min_time:
                break
        best = max(best, n * a.batch * a.pooling / elapsed)
    return best


result = {"peer": "fbgemm_gpu IntNBitTableBatchedEmbeddingBagsCodegen (CPU), torch " + torch.__version__,
          "rows": a.rows, "dim": a.dim, "batch": a.batch, "pooling": a.pooling,
          "threads": torch.get_num_threads(), "forward_mlookups_per_s": {}}
for t in names:
    op = IntNBitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[("t", a.rows, a.dim, TYPES[t], EmbeddingLocation.HOST)], device="cpu",
        pooling_mode=PoolingMode.SUM, output_dtype=SparseType.FP32)  # float32 out, as shardrec's
    op.fill_random_weights()
    with torch.no_grad():
        result["forward_mlookups_per_s"][t] = rate(lambda ids, off: op(ids, off)) / 1e6
    del op
print(json.dumps(result))
