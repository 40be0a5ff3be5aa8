#!/usr/bin/python3
"""Carry trained tables between shardrec and TorchRec.

  torchrec_checkpoint.py export CKPT OUT.pt
      A shardrec checkpoint (CKPT/manifest.json, or a run's --checkpoint-dir:
      its newest) -> a PyTorch state_dict of an EmbeddingBagCollection,
      {"embedding_bags.<table>.weight": tensor [rows, dim]}, saved with
      torch.save. Load it with `ebc.load_state_dict(torch.load(OUT.pt))`.

  torchrec_checkpoint.py import IN.pt OUT_CKPT [--tables TABLES.json]
      Such a state_dict (keys may carry a prefix: "model.sparse.ebc.
      embedding_bags.t0.weight") -> a new shardrec checkpoint at OUT_CKPT,
      weights only, step 0, loadable by `shardrec embed --from-checkpoint` and
      `shardrec train --resume OUT_CKPT --reset-optimizer` under any plan.
      Tables come from --tables (a shardrec tables file: feature names,
      pooling, init range) or, without it, from the tensors (one feature
      named like its table, sum pooling).

Only weights travel: TorchRec keeps a fused optimizer's state outside the
module's state_dict. Both directions check what they read: export verifies
each weights file's size, header and XXH3 checksum against the manifest;
import loads with torch.load(weights_only=True) (no pickled code runs),
refuses table names that could not be file names, and writes the checkpoint
beside OUT_CKPT first, renaming it into place only when complete.

Needs numpy, torch and xxhash (Debian: python3-numpy python3-torch
python3-xxhash). The format: docs/checkpoints.md.
"""
import argparse
import json
import os
import re
import shutil
import sys

import numpy as np

try:
    import torch
    import xxhash
except ImportError as e:  # a clear message, not a traceback
    sys.exit(f"torchrec_checkpoint.py: {e.name} is not importable under {sys.executable} "
             "(Debian: apt-get install python3-torch python3-xxhash)")

FORMAT = "shardrec-checkpoint"
FORMAT_VERSION = 1
NAME = re.compile(r"^[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,127}$")  # core/io/names.h
KEY = re.compile(r"^(?:.*\.)?embedding_bags\.([^.]+)\.weight$")
DTYPES = {"fp32": ("<f4", np.float32), "fp16": ("<f2", np.float16), "bf16": ("<u2", np.uint16)}


class Refused(Exception):
    pass


def xxh3_of(path):
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def resolve(ckpt):
    """CKPT itself, or the newest published step-N in it."""
    if os.path.isfile(os.path.join(ckpt, "manifest.json")):
        return ckpt
    if not os.path.isdir(ckpt):
        raise Refused(f"{ckpt}: no such directory")
    steps = sorted((int(n[5:]), n) for n in os.listdir(ckpt)
                   if re.fullmatch(r"step-[0-9]+", n) and os.path.isfile(os.path.join(ckpt, n, "manifest.json")))
    if not steps:
        raise Refused(f"{ckpt}: neither a checkpoint (no manifest.json) nor a directory of published checkpoints")
    return os.path.join(ckpt, steps[-1][1])


def safe_path(root, rel):
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") or p.startswith(".") or not re.fullmatch(r"[A-Za-z0-9_.@-]+", p)
                      for p in parts):
        raise Refused(f"{root}/manifest.json: path '{rel}' is not a plain relative path inside the checkpoint")
    return os.path.join(root, *parts)


def checked_npy(root, rel, descr, shape, nbytes, digest):
    path = safe_path(root, rel)
    if not os.path.isfile(path):
        raise Refused(f"{path}: missing")
    if os.path.getsize(path) != nbytes:
        raise Refused(f"{path}: {os.path.getsize(path)} bytes, the manifest says {nbytes} (truncated or rewritten)")
    if xxh3_of(path) != digest:
        raise Refused(f"{path}: checksum mismatch: the file changed after it was saved")
    a = np.load(path, mmap_mode="r", allow_pickle=False)
    if a.dtype.str != descr or list(a.shape) != list(shape):
        raise Refused(f"{path}: holds {a.dtype.str} {list(a.shape)}, the manifest says {descr} {list(shape)}")
    return a


def export(ckpt, out):
    ckpt = resolve(ckpt)
    m = json.load(open(os.path.join(ckpt, "manifest.json")))
    if m.get("format") != FORMAT:
        raise Refused(f"{ckpt}/manifest.json: not a shardrec checkpoint manifest")
    if int(m.get("format_version", 0)) > FORMAT_VERSION:
        raise Refused(f"{ckpt}/manifest.json: format version {m['format_version']} is newer than this script reads "
                      f"({FORMAT_VERSION})")
    state = {}
    for t in m["tables"]:
        rows, dim = t["num_embeddings"], t["embedding_dim"]
        if t.get("data_type", "fp32") not in DTYPES:
            raise Refused(f"{ckpt}: table '{t['name']}' is {t['data_type']}: a model exported for serving "
                          f"(`shardrec export`), not a training checkpoint; convert the checkpoint it came from")
        descr, np_type = DTYPES[t.get("data_type", "fp32")]
        full = np.empty((rows, dim), dtype=np_type)
        covered = np.zeros((rows, dim), dtype=np.uint8)
        for f in m["files"]:
            if f["table"] != t["name"] or f["kind"] != "weights":
                continue
            a = checked_npy(ckpt, f["path"], f["dtype"], f["shape"], f["bytes"], f["xxh3_64"])
            (r0, r1), (c0, c1) = f["rows"], f["cols"]
            if "row_ids" in f:
                ids = checked_npy(ckpt, f["row_ids"]["path"], "<i8", [f["shape"][0]], f["row_ids"]["bytes"],
                                  f["row_ids"]["xxh3_64"])
                full[ids, c0:c1] = a
                covered[ids, c0:c1] += 1
            else:
                full[r0:r1, c0:c1] = a
                covered[r0:r1, c0:c1] += 1
        if not (covered == 1).all():
            raise Refused(f"{ckpt}: the weights files of table '{t['name']}' do not cover every value exactly once")
        if descr == "<u2":  # bfloat16's bits (torch has no uint16: through int16)
            tensor = torch.from_numpy(full.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(full)
        state[f"embedding_bags.{t['name']}.weight"] = tensor
    tmp = f"{out}.tmp.{os.getpid()}"
    try:
        torch.save(state, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(f"exported {len(state)} table(s) from {ckpt} (step {m['step']}) to {out}")


def tables_for(state, tables_file):
    found = {}
    for key, value in state.items():
        match = KEY.match(key)
        if not match:
            continue
        name = match.group(1)
        if not NAME.match(name):
            raise Refused(f"state_dict key '{key}': table name '{name}' is not 1-128 characters of [A-Za-z0-9_.@-] "
                          "not starting with '.'")
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[0] < 1 or value.shape[1] < 1:
            raise Refused(f"state_dict key '{key}': expected a [rows, dim] tensor")
        if name in found:
            raise Refused(f"state_dict: table '{name}' appears twice")
        found[name] = value
    if not found:
        raise Refused("the state_dict has no 'embedding_bags.<table>.weight' keys")
    types = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    if tables_file:
        configs = json.load(open(tables_file))["tables"]
        names = {c["name"] for c in configs}
        if names != set(found):
            raise Refused(f"{tables_file}: tables {sorted(names)}, the state_dict holds {sorted(found)}")
    else:
        configs = [{"name": n, "feature_names": [n], "pooling": "sum"} for n in found]
    for c in configs:
        w = found[c["name"]]
        if w.dtype not in types:
            raise Refused(f"table '{c['name']}': dtype {w.dtype} (fp32, fp16 or bf16 expected)")
        c.setdefault("num_embeddings", int(w.shape[0]))
        c.setdefault("embedding_dim", int(w.shape[1]))
        c.setdefault("data_type", types[w.dtype])
        if (c["num_embeddings"], c["embedding_dim"], c["data_type"]) != (w.shape[0], w.shape[1], types[w.dtype]):
            raise Refused(f"table '{c['name']}': the tables file says {c['num_embeddings']} x {c['embedding_dim']} "
                          f"{c['data_type']}, the tensor is {w.shape[0]} x {w.shape[1]} {types[w.dtype]}")
    return configs, found


def import_(src, out, tables_file):
    if os.path.exists(out):
        raise Refused(f"{out} exists: choose a new directory")
    state = torch.load(src, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise Refused(f"{src}: not a state_dict")
    configs, found = tables_for(state, tables_file)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".partial.{os.getpid()}-{os.path.basename(os.path.abspath(out))}")
    files = []
    try:
        for c in configs:
            w = found[c["name"]].contiguous()
            array = (w.view(torch.int16).numpy().view(np.uint16) if w.dtype == torch.bfloat16 else w.numpy())
            rows, dim = array.shape
            rel = f"tables/{c['name']}/weights.r0-{rows}.c0-{dim}.npy"
            path = os.path.join(staging, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                np.save(f, np.ascontiguousarray(array), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            files.append({"path": rel, "table": c["name"], "kind": "weights", "rows": [0, rows], "cols": [0, dim],
                          "dtype": DTYPES[c["data_type"]][0], "shape": [rows, dim], "bytes": os.path.getsize(path),
                          "xxh3_64": xxh3_of(path)})
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                    "shardrec_version": "unknown (imported by scripts/torchrec_checkpoint.py)", "step": 0,
                    "tables": configs, "optimizer": {"spec": "none", "iteration": 0}, "plan": {},
                    "files": files, "imported_from": {"torch_state_dict": os.path.basename(src)}}
        with open(os.path.join(staging, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.rename(staging, out)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)
    print(f"imported {len(files)} table(s) from {src} to {out} (weights only; resume with --reset-optimizer)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="shardrec checkpoint -> torch.save'd EmbeddingBagCollection state_dict")
    e.add_argument("checkpoint")
    e.add_argument("out")
    i = sub.add_parser("import", help="torch.save'd EmbeddingBagCollection state_dict -> new shardrec checkpoint")
    i.add_argument("state_dict")
    i.add_argument("out")
    i.add_argument("--tables", help="a shardrec tables file with the tables' configs")
    a = p.parse_args()
    try:
        if a.command == "export":
            export(a.checkpoint, a.out)
        else:
            import_(a.state_dict, a.out, a.tables)
    except (Refused, OSError, KeyError, ValueError, json.JSONDecodeError, RuntimeError, pickle_error()) as err:
        sys.exit(f"torchrec_checkpoint.py {a.command}: {err}")


def pickle_error():
    import pickle
    return pickle.UnpicklingError


if __name__ == "__main__":
    main()
