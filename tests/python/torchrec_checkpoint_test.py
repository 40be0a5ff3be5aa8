#!/usr/bin/python3
"""scripts/torchrec_checkpoint.py with Debian's torch: tables trained by
shardrec go to an EmbeddingBagCollection state_dict (torch.save) and back.

- export: torch.nn.functional.embedding_bag on the exported weights equals
  `shardrec embed --from-checkpoint` on the same batch (self-routed rows,
  with row_ids files, included);
- import: weights changed in torch, imported, give `shardrec embed` the
  changed lookups; `checkpoint inspect --verify` passes; `train --resume
  --reset-optimizer` continues from them; fp16 and bf16 survive bit for bit;
- export -> import -> export is the identity;
- hostile input: a table name that is not a file name, a pickle that would
  run code, an existing output, a damaged checkpoint: refused, nothing written.

usage: torchrec_checkpoint_test.py SHARDREC_EXE FIXTURE_DIR SCRIPT
Exit 77 (skip) when numpy, torch or xxhash is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import xxhash  # noqa: F401 (the script needs it)
except ImportError as e:
    print(f"SKIP: {e.name} is not importable under {sys.executable}")
    sys.exit(77)

exe, fixtures, script = (os.path.abspath(a) for a in sys.argv[1:4])
CYCLIC = os.path.join(fixtures, "cyclic", "libshardrec_sharder_cyclic.so")
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
failures = []


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)


def sr(*args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, env=ENV)


def tool(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300)


def batch_dir(path, features, rows, B=5, seed=1):
    rng = np.random.default_rng(seed)
    lengths, values = [], []
    for f in features:
        for _ in range(B):
            n = int(rng.integers(0, 4))
            lengths.append(n)
            values.extend(int(x) for x in rng.integers(0, rows[f], n))
    os.makedirs(path)
    open(os.path.join(path, "keys.txt"), "w").write("\n".join(features) + "\n")
    np.save(os.path.join(path, "lengths.npy"), np.array(lengths, dtype=np.int64))
    np.save(os.path.join(path, "values.npy"), np.array(values, dtype=np.int64))
    return lengths, values


def torch_lookup(state, tables, features, lengths, values, B=5):
    """Sum pooling per feature, concatenated: what embed's values.npy holds."""
    out, at = [], 0
    for i, f in enumerate(features):
        w = state[f"embedding_bags.{tables[i]}.weight"].float()
        lens = torch.tensor(lengths[i * B:(i + 1) * B])
        ids = torch.tensor(values[at:at + int(lens.sum())], dtype=torch.long)
        at += int(lens.sum())
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lens, 0)[:-1]])
        out.append(torch.nn.functional.embedding_bag(ids, w, offsets, mode="sum"))
    return torch.cat(out, 1).numpy()


with tempfile.TemporaryDirectory(prefix="shardrec-torchrec-test-") as tmp:
    def d(n):
        return os.path.join(tmp, n)

    # Trained by shardrec on 3 ranks with the self-routing row_cyclic sharder (row_ids files).
    p = sr("train", "--tables", "2x300x8,1x50x12", "--steps", "3", "--world-size", "3", "--plugin", CYCLIC,
           "--sharder", "row_cyclic", "--checkpoint-dir", d("ck"))
    expect("shardrec trains and saves", p.returncode == 0, p.stderr)
    features, tables, rows = ["f0", "f1", "f2"], ["t0", "t1", "t2"], {"f0": 300, "f1": 300, "f2": 50}
    lengths, values = batch_dir(d("batch"), features, rows)

    p = tool("export", d("ck"), d("sd.pt"))
    expect("export", p.returncode == 0, p.stderr)
    state = torch.load(d("sd.pt"), weights_only=True)
    expect("export: EmbeddingBagCollection keys and shapes",
           sorted(state) == [f"embedding_bags.{t}.weight" for t in tables] and
           tuple(state["embedding_bags.t2.weight"].shape) == (50, 12), sorted(state))
    p = sr("embed", "--from-checkpoint", d("ck"), "--batch", d("batch"), "--out", d("out1"))
    got = np.load(os.path.join(d("out1"), "values.npy")) if p.returncode == 0 else None
    want = torch_lookup(state, tables, features, lengths, values)
    expect("export: torch's embedding_bag on the exported weights == shardrec embed on the checkpoint",
           got is not None and np.allclose(got, want, atol=1e-6), p.stderr)

    # Change the weights in torch, import, look up with shardrec.
    changed = {k: v * 2 + 0.25 for k, v in state.items()}
    torch.save(changed, d("changed.pt"))
    with open(d("tables.json"), "w") as f:  # the features the batch uses
        json.dump({"tables": [{"name": t, "feature_names": [f]} for t, f in zip(tables, features)]}, f)
    p = tool("import", d("changed.pt"), d("imported"), "--tables", d("tables.json"))
    expect("import", p.returncode == 0, p.stderr)
    p = sr("checkpoint", "inspect", d("imported"), "--verify")
    expect("import: inspect --verify passes", p.returncode == 0, p.stdout + p.stderr)
    p = sr("embed", "--from-checkpoint", d("imported"), "--batch", d("batch"), "--out", d("out2"), "--sharder",
           "row_wise", "--world-size", "2")
    got = np.load(os.path.join(d("out2"), "values.npy")) if p.returncode == 0 else None
    expect("import: shardrec embed (sharded) sees the weights changed in torch",
           got is not None and np.allclose(got, torch_lookup(changed, tables, features, lengths, values), atol=1e-5),
           p.stderr)
    p = sr("train", "--tables", "2x300x8,1x50x12", "--steps", "2", "--resume", d("imported"), "--reset-optimizer",
           "--checkpoint-dir", d("ck2"))
    expect("import: train resumes from it with --reset-optimizer", p.returncode == 0 and "weights only" in p.stdout,
           p.stdout + p.stderr)
    p = tool("export", d("imported"), d("again.pt"))
    again = torch.load(d("again.pt"), weights_only=True) if p.returncode == 0 else {}
    expect("export -> import -> export is the identity",
           sorted(again) == sorted(changed) and all(torch.equal(again[k], changed[k]) for k in changed), p.stderr)

    # fp16 and bf16 tables, with a prefix on the keys (a model holding the EBC).
    for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        w = torch.randn(40, 6).to(dtype)
        torch.save({"model.sparse.ebc.embedding_bags.h.weight": w}, d(f"{name}.pt"))
        p1 = tool("import", d(f"{name}.pt"), d(f"{name}-ck"))
        p2 = tool("export", d(f"{name}-ck"), d(f"{name}-back.pt"))
        back = torch.load(d(f"{name}-back.pt"), weights_only=True) if p2.returncode == 0 else {}
        expect(f"{name}: import and export keep every bit",
               back.get("embedding_bags.h.weight") is not None and back["embedding_bags.h.weight"].dtype == dtype and
               torch.equal(back["embedding_bags.h.weight"].view(torch.int16), w.view(torch.int16)), p1.stderr + p2.stderr)
        m = json.load(open(os.path.join(d(f"{name}-ck"), "manifest.json"))) if p1.returncode == 0 else {}
        expect(f"{name}: the table's dtype is {name}", m.get("tables", [{}])[0].get("data_type") == name, m)

    # Hostile input: refused, nothing written.
    torch.save({"embedding_bags.a/b.weight": torch.zeros(3, 2)}, d("badname.pt"))
    p = tool("import", d("badname.pt"), d("badname-ck"))
    expect("a table name that is not a file name is refused, nothing written",
           p.returncode != 0 and "a/b" in p.stderr and not os.path.exists(d("badname-ck")) and
           not any(n.startswith(".partial.") for n in os.listdir(tmp)), p.stderr)

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + d("pwned"),))
    torch.save({"embedding_bags.t.weight": torch.zeros(2, 2), "x": Evil()}, d("evil.pt"))
    p = tool("import", d("evil.pt"), d("evil-ck"))
    expect("a pickle that would run code is refused (weights_only) and runs nothing",
           p.returncode != 0 and not os.path.exists(d("pwned")) and not os.path.exists(d("evil-ck")), p.stderr)
    p = tool("import", d("changed.pt"), d("imported"))
    expect("an existing output is refused", p.returncode != 0 and "exists" in p.stderr, p.stderr)
    m = json.load(open(os.path.join(d("imported"), "manifest.json")))
    victim = os.path.join(d("imported"), m["files"][0]["path"])
    with open(victim, "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 4]))
    p = tool("export", d("imported"), d("damaged.pt"))
    expect("export refuses a damaged checkpoint naming the file",
           p.returncode != 0 and "checksum mismatch" in p.stderr and m["files"][0]["path"].split("/")[-1] in p.stderr and
           not os.path.exists(d("damaged.pt")), p.stderr)

print(f"{len(failures)} failure(s)" if failures else "all passed")
sys.exit(1 if failures else 0)
