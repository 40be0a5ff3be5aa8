#!/usr/bin/env python3
"""Writes the small input files the README's examples use, with the Python
standard library alone (the main job's install has no NumPy):

  DIR/tables.json     two tables: t0 (pooled sum, 1000 x 16), t1 (mean, 50 x 8)
  DIR/batch/          a KeyedJaggedTensor of 8 samples: keys.txt, lengths.npy, values.npy
  DIR/grad.npy        float32 [8, 24]: a gradient of the pooled output
  DIR/ids.npy         int64 [200000]: a skewed id stream for replay-evictions

usage: make_example_data.py [DIR]   (default: build/example)
Same seed, same files: rerunning it rewrites identical data."""
import json
import os
import random
import struct
import sys


def write_npy(path, descr, fmt, shape, values):
    """A NumPy 1.0 .npy file: magic, header length, header dict padded to 64 bytes, C-order data."""
    shape_text = "(%s)" % ", ".join(str(n) for n in shape) if len(shape) > 1 else f"({shape[0]},)"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
    os.replace(tmp, path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "example")
    if len(sys.argv) > 2 or out in ("-h", "--help"):
        sys.exit(__doc__)
    rng = random.Random(0)
    os.makedirs(os.path.join(out, "batch"), exist_ok=True)
    tables = {"tables": [
        {"name": "t0", "num_embeddings": 1000, "embedding_dim": 16, "feature_names": ["f0"], "pooling": "sum"},
        {"name": "t1", "num_embeddings": 50, "embedding_dim": 8, "feature_names": ["f1"], "pooling": "mean"},
    ]}
    with open(os.path.join(out, "tables.json"), "w") as f:
        json.dump(tables, f, indent=2)
        f.write("\n")

    batch = 8
    lengths, values = [], []
    for rows in (1000, 50):
        for _ in range(batch):
            n = rng.randint(0, 4)
            lengths.append(n)
            values.extend(rng.randrange(rows) for _ in range(n))
    with open(os.path.join(out, "batch", "keys.txt"), "w") as f:
        f.write("f0\nf1\n")
    write_npy(os.path.join(out, "batch", "lengths.npy"), "<i8", "q", [len(lengths)], lengths)
    write_npy(os.path.join(out, "batch", "values.npy"), "<i8", "q", [len(values)], values)
    width = 16 + 8
    grad = [round(rng.uniform(-1, 1), 4) for _ in range(batch * width)]
    write_npy(os.path.join(out, "grad.npy"), "<f4", "f", [batch, width], grad)

    # Zipf-like stream: id of popularity rank k drawn with weight 1/(k+1)^1.05.
    distinct = 20000
    weights = [1.0 / (k + 1) ** 1.05 for k in range(distinct)]
    ids = [k * 7919 + 13 for k in rng.choices(range(distinct), weights=weights, k=200000)]
    write_npy(os.path.join(out, "ids.npy"), "<i8", "q", [len(ids)], ids)
    print(f"make_example_data: wrote {out}/tables.json, batch/, grad.npy, ids.npy")


if __name__ == "__main__":
    main()
