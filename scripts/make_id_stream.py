#!/usr/bin/python3
"""Writes a synthetic id stream for `shardrec replay-evictions`: a 1-D .npy of
ids in lookup order, drawn from a bounded Zipf law over DISTINCT ids (the id
of popularity rank k is drawn with probability ~ 1/(k+1)^ALPHA). Ids are
scattered over [0, 2^63) so hot ids are not the small ones. With --drift F
the popularity ranking rotates by F x DISTINCT ranks over the stream, so the
hot set moves, as it does in real traffic (recency then beats frequency).

usage: make_id_stream.py OUT.npy [--ids N] [--distinct D] [--alpha A]
                         [--drift F] [--seed S] [--dtype int64|int32|uint64]
"""
import argparse
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(f"make_id_stream.py: numpy is not importable under {sys.executable} (apt-get install python3-numpy)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the .npy file to write")
    p.add_argument("--ids", type=int, default=1_000_000, help="length of the stream")
    p.add_argument("--distinct", type=int, default=100_000, help="ids the stream draws from")
    p.add_argument("--alpha", type=float, default=1.05, help="Zipf exponent (0: uniform)")
    p.add_argument("--drift", type=float, default=0.0, help="rotation of the ranking over the stream, in DISTINCTs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="int64", choices=["int64", "int32", "uint64"])
    a = p.parse_args()
    if a.ids <= 0 or a.distinct <= 0 or a.alpha < 0:
        sys.exit("make_id_stream.py: --ids and --distinct must be positive, --alpha >= 0")
    rng = np.random.default_rng(a.seed)
    weights = 1.0 / np.arange(1, a.distinct + 1, dtype=np.float64) ** a.alpha
    ranks = rng.choice(a.distinct, size=a.ids, p=weights / weights.sum())
    shift = np.floor(a.drift * a.distinct * np.arange(a.ids) / a.ids).astype(np.int64)
    ranks = (ranks + shift) % a.distinct
    if a.dtype == "int32":
        ids = ranks.astype(np.int32)  # small ids: int32 streams are usually dense
    else:
        # An odd multiplier is a bijection modulo 2^63: distinct ranks, distinct ids.
        ids = (ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) & np.uint64(2**63 - 1)
        ids = ids.astype(a.dtype)
    np.save(a.out, ids)
    print(f"{a.out}: {a.ids} ids, {len(np.unique(ids))} distinct, zipf alpha {a.alpha}, drift {a.drift}, {a.dtype}")


if __name__ == "__main__":
    main()
