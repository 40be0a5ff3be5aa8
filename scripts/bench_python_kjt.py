#!/usr/bin/python3
"""Building shardrec's KeyedJaggedTensor from torch tensors (docs/python.md,
"How tensors cross"): int64 ids, which the C++ KJT borrows, against int32
ids, which are converted (one copy). Per KJT, Python object included, best
of 5 repeats.

usage: PYTHONPATH=build/python scripts/bench_python_kjt.py"""
import time

import torch

import shardrec

KEYS = ["f0", "f1", "f2", "f3"]


def per_kjt_us(values, lengths, n):
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            shardrec.KeyedJaggedTensor(KEYS, values, lengths=lengths).impl()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main():
    g = torch.Generator().manual_seed(0)
    for ids in (8192, 1 << 20):
        lengths = torch.full((2048,), ids // 2048, dtype=torch.int64)
        values = torch.randint(0, 100000, (ids,), generator=g)
        kjt = shardrec.KeyedJaggedTensor(KEYS, values, lengths=lengths)
        assert kjt.impl().values_address == values.data_ptr(), "int64 ids were copied"
        n = 2000 if ids < 100000 else 50
        borrowed, copied = per_kjt_us(values, lengths, n), per_kjt_us(values.to(torch.int32), lengths, n)
        print("%8d ids in 2048 bags: borrowed %.1f us, converted %.1f us (%.1fx)" %
              (ids, borrowed, copied, copied / borrowed))


if __name__ == "__main__":
    main()
