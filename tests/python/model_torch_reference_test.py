#!/usr/bin/python3
"""`shardrec train --model` against the same model written in PyTorch.

For DLRM, DCN, DeepFM and DLRM with position weights, on 1 rank and over 2 and 3 gloo processes
(table-wise and row-wise), shardrec trains 5 steps with --dump-dir; this
script builds the same model in torch from the dumped initial parameters,
replays the dumped batches with TorchRec DistributedModelParallel's gradient
semantics (each rank's loss the mean over its samples; dense gradients
averaged over the ranks, embedding gradients summed), and compares every
step's loss, then the final dense parameters and tables: within 1e-5
relative (to max(|value|, 1e-2)).

Both optimizers are SGD (momentum 0.9 for the dense half): Adagrad and Adam
turn rounding-level gradient noise into full-size steps (docs/dense.md), so
an element-wise comparison across summation orders would test rounding.

usage: model_torch_reference_test.py SHARDREC_EXE
Exit 77 (skip) when numpy or torch is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP: {e.name} is not importable under {sys.executable}")
    sys.exit(77)

exe = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
failures = []
STEPS, BATCH, LR, DENSE_LR, MOMENTUM = 5, 16, 0.1, 0.05, 0.9


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)
    return cond


MODELS = {
    "dlrm": ({"model": "dlrm", "dense_in_features": 5, "dense_arch_layer_sizes": [12, 8],
              "over_arch_layer_sizes": [16, 6, 1]}, "4x60x8"),
    "dcn": ({"model": "dcn", "dense_in_features": 5, "dense_arch_layer_sizes": [12, 8],
             "over_arch_layer_sizes": [16, 1], "dcn_num_layers": 2, "dcn_low_rank_dim": 3}, "4x60x8"),
    "deepfm": ({"model": "deepfm", "dense_in_features": 5, "deepfm_hidden_layer_size": 7,
                "deep_fm_dimension": 6}, "4x60x4"),
    # DLRM with TorchRec's PositionWeightedModule on f0 (max 6 ids) and f2 (8).
    "dlrm_position_weighted": ({"model": "dlrm", "dense_in_features": 5, "dense_arch_layer_sizes": [12, 8],
                                "over_arch_layer_sizes": [16, 6, 1], "position_weighted": {"f0": 6, "f2": 8}},
                               "4x60x8"),
}


def load(d):
    return {os.path.basename(p)[:-4]: torch.from_numpy(np.load(os.path.join(d, p))).double()
            for p in os.listdir(d)}


def linear(p, prefix, x):
    return F.linear(x, p[prefix + "weight"], p[prefix + "bias"])


def mlp(p, prefix, x, layers):
    for i in range(layers):
        x = torch.relu(linear(p, f"{prefix}_mlp.{i}._linear.", x))
    return x


def forward(cfg, p, dense, pooled):
    kind = cfg["model"]
    if kind == "deepfm":
        d = torch.relu(linear(p, "dense_arch.model.2.", torch.relu(linear(p, "dense_arch.model.0.", dense))))
        flat = torch.cat([d] + pooled, dim=1)
        deep = torch.relu(linear(p, "inter_arch.deep_fm.dense_module.0.", flat))
        fm = 0.5 * (flat.sum(1, keepdim=True) ** 2 - (flat ** 2).sum(1, keepdim=True))
        return linear(p, "over_arch.model.0.", torch.cat([d, deep, fm], dim=1)).squeeze(1)
    d = mlp(p, "dense_arch.model.", dense, len(cfg["dense_arch_layer_sizes"]))
    if kind == "dlrm":
        z = torch.stack([d] + pooled, dim=1)
        n = z.shape[1]
        rows, cols = torch.triu_indices(n, n, offset=1)
        inter = torch.cat([d, torch.bmm(z, z.transpose(1, 2))[:, rows, cols]], dim=1)
    else:
        x0 = x = torch.cat([d] + pooled, dim=1)
        for l in range(cfg["dcn_num_layers"]):
            xv = F.linear(x, p[f"inter_arch.crossnet.V_kernels.{l}"])
            xw = F.linear(xv, p[f"inter_arch.crossnet.W_kernels.{l}"])
            x = x0 * (xw + p[f"inter_arch.crossnet.bias.{l}"]) + x
        inter = x
    h = mlp(p, "over_arch.model.0.", inter, len(cfg["over_arch_layer_sizes"]) - 1)
    return linear(p, "over_arch.model.1.", h).squeeze(1)


def replay(dump, world):
    run = json.load(open(os.path.join(dump, "run.json")))
    cfg = run["model"]
    dense_p = {k: v.requires_grad_() for k, v in load(os.path.join(dump, "init", "dense")).items()}
    tables = {k: v.requires_grad_() for k, v in load(os.path.join(dump, "init", "tables")).items()}
    momentum = {}
    losses = []
    for step in range(STEPS):
        sd = os.path.join(dump, "steps", str(step))
        dense = torch.from_numpy(np.load(os.path.join(sd, "dense.npy"))).double()
        labels = torch.from_numpy(np.load(os.path.join(sd, "labels.npy"))).double()
        pooled = []
        for t in run["tables"]:
            for feat in t["features"]:
                ids = torch.from_numpy(np.load(os.path.join(sd, feat + ".ids.npy")))
                lengths = torch.from_numpy(np.load(os.path.join(sd, feat + ".lengths.npy")))
                offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
                weights = None
                if "position_weights." + feat in dense_p:  # P_f[position of the id in its bag]
                    position = torch.arange(len(ids)) - torch.repeat_interleave(offsets, lengths)
                    weights = dense_p["position_weights." + feat][position]
                pooled.append(F.embedding_bag(ids, tables[t["name"]], offsets, mode=t["pooling"],
                                              per_sample_weights=weights))
        total = 0
        for r in range(world):  # each rank's loss: the mean over its samples
            s = slice(r * BATCH, (r + 1) * BATCH)
            logits = forward(cfg, dense_p, dense[s], [x[s] for x in pooled])
            total = total + F.binary_cross_entropy_with_logits(logits, labels[s])
        losses.append(float(total) / world)
        for v in list(dense_p.values()) + list(tables.values()):
            v.grad = None
        total.backward()
        with torch.no_grad():
            for name, v in dense_p.items():  # DDP: averaged; torch.optim.SGD with momentum
                g = v.grad / world
                buf = momentum.get(name)
                buf = g.clone() if buf is None else buf * MOMENTUM + g
                momentum[name] = buf
                v -= DENSE_LR * buf
            for v in tables.values():  # summed over ranks; plain SGD
                v -= LR * v.grad
    return losses, dense_p, tables


def close(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= 1e-5 * np.maximum(np.abs(b), 1e-2)))


def case(model, world, sharder, tmp):
    cfg, tables = MODELS[model]
    name = f"{model} on {world} rank(s), {sharder}"
    cfg_path = os.path.join(tmp, f"{model}.json")
    json.dump(cfg, open(cfg_path, "w"))
    dump = os.path.join(tmp, f"dump-{model}-{world}-{sharder}")
    cmd = [exe, "train", "--model", cfg_path, "--tables", tables, "--steps", str(STEPS), "--batch", str(BATCH),
           "--world-size", str(world), "--sharder", sharder, "--pooling-factor", "3",
           "--optimizer", f"sgd,lr={LR}", "--dense-optimizer", f"sgd,lr={DENSE_LR},momentum={MOMENTUM}",
           "--dump-dir", dump, "--seed", "7"]
    if world > 1:
        cmd += ["--comm", "gloo"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=240)
    if not expect(f"{name}: trains", r.returncode == 0, r.stderr):
        return
    losses, dense_p, tables_t = replay(dump, world)
    ours = np.load(os.path.join(dump, "losses.npy"))
    expect(f"{name}: the loss of every step equals torch's", close(ours, losses), f"{ours} vs {losses}")
    final_dense = load(os.path.join(dump, "final", "dense"))
    bad = [k for k, v in dense_p.items() if not close(final_dense[k].numpy(), v.detach().numpy())]
    expect(f"{name}: dense parameters after {STEPS} steps equal torch's", not bad, bad)
    final_tables = load(os.path.join(dump, "final", "tables"))
    bad = [k for k, v in tables_t.items() if not close(final_tables[k].numpy(), v.detach().numpy())]
    expect(f"{name}: tables after {STEPS} steps equal torch's", not bad, bad)
    init_dense = load(os.path.join(dump, "init", "dense"))
    moved = [k for k in final_dense if not np.array_equal(final_dense[k].numpy(), init_dense[k].numpy())]
    expect(f"{name}: the dense parameters moved", moved)
    if "position_weighted" in cfg:
        expect(f"{name}: the position weights moved", any(k.startswith("position_weights.") for k in moved), moved)
        # They move little in 5 steps (1e-5 .. 6e-5): compare the change itself, relative to its size, give or
        # take the float32 spacing of values near 1.0 (1.2e-7) over 5 steps.
        bad = []
        for k in (k for k in dense_p if k.startswith("position_weights.")):
            ours_d = final_dense[k].numpy() - init_dense[k].numpy()
            torch_d = dense_p[k].detach().numpy() - init_dense[k].numpy()
            if not np.all(np.abs(ours_d - torch_d) <= 1e-3 * np.abs(torch_d).max() + 3e-7):
                bad.append(f"{k}: {ours_d} vs {torch_d}")
        expect(f"{name}: the position weights' change equals torch's", not bad, bad)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            case(model, 1, "table_wise", tmp)
            for world in (2, 3):
                for sharder in ("table_wise", "row_wise"):
                    case(model, world, sharder, tmp)
        # Position weights' gradient adds column blocks' parts, and data-parallel replicas compute it locally.
        case("dlrm_position_weighted", 2, "column_wise", tmp)
        case("dlrm_position_weighted", 2, "data_parallel", tmp)
        # Refusals: an existing non-empty --dump-dir, and --dump-dir without --model.
        busy = os.path.join(tmp, "busy")
        os.makedirs(busy)
        open(os.path.join(busy, "x"), "w").close()
        r = subprocess.run([exe, "train", "--model", "dlrm", "--tables", "26x100x64", "--steps", "1", "--dump-dir", busy],
                           capture_output=True, text=True, env=ENV, timeout=120)
        expect("a non-empty --dump-dir is refused", r.returncode != 0 and "exists and is not empty" in r.stderr,
               r.stderr)
        r = subprocess.run([exe, "train", "--steps", "1", "--dump-dir", os.path.join(tmp, "new")],
                           capture_output=True, text=True, env=ENV, timeout=120)
        expect("--dump-dir without --model is refused", r.returncode != 0 and "--dump-dir needs --model" in r.stderr,
               r.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
