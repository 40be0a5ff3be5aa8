#!/usr/bin/python3
"""Side-by-side speed of shardrec's kernel and PyTorch's EmbeddingBag, one run.

Runs `shardrec bench kernel --json` (forward, and backward fused with SGD,
Adagrad and row-wise Adagrad) and the same shapes through Debian's
torch.nn.EmbeddingBag (sparse gradients + torch.optim.SGD / Adagrad), with the
same thread count, and prints one table in lookups/s. Used for the figures in
docs/benchmarks.md:

    /usr/bin/python3 core/bench/compare_torch_speed.py --shardrec build/bin/shardrec

Torch's backward is timed without its forward (out = emb(...) happens before
the clock starts), like ours.
"""
import argparse
import json
import subprocess
import sys
import time


def shardrec_bench(exe, args, optimizer):
    cmd = [exe, "bench", "kernel", "--json", "--rows", str(args.rows), "--dim", str(args.dim),
           "--batch", str(args.batch), "--pooling", str(args.pooling), "--ids", args.ids,
           "--threads", str(args.threads), "--optimizer", optimizer,
           "--min-time", str(args.min_time), "--reps", str(args.reps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def torch_bench(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n = args.batch * args.pooling
    batches = []
    for _ in range(8):
        if args.ids == "uniform":
            ids = torch.randint(0, args.rows, (n,), dtype=torch.int64)
        else:
            alpha = float(args.ids.split(":")[1])
            ranks = torch.arange(1, args.rows + 1, dtype=torch.float64)
            probs = ranks.pow(-alpha)
            ids = torch.multinomial(probs / probs.sum(), n, replacement=True)
            ids = (ids * 2654435761) % args.rows  # scatter hot rows
        batches.append(ids)
    offsets = torch.arange(0, n, args.pooling, dtype=torch.int64)
    grad = torch.randn(args.batch, args.dim) * 1e-3
    results = {}

    def measure(step):
        rates = []
        k = 0
        for _ in range(args.reps):
            busy, lookups = 0.0, 0
            while busy < args.min_time:
                busy += step(batches[k % len(batches)])
                lookups += n
                k += 1
            rates.append(lookups / busy)
        rates.sort()
        return rates[-1] / 1e6, rates[len(rates) // 2] / 1e6

    emb = torch.nn.EmbeddingBag(args.rows, args.dim, mode="sum", sparse=True)

    def fwd(ids):
        with torch.no_grad():
            t = time.perf_counter()
            emb(ids, offsets)
            return time.perf_counter() - t
    results["forward"] = measure(fwd)

    for name, make in (("sgd", lambda p: torch.optim.SGD(p, lr=0.01)),
                       ("adagrad", lambda p: torch.optim.Adagrad(p, lr=0.01))):
        opt = make(emb.parameters())

        def train(ids):
            out = emb(ids, offsets)
            t = time.perf_counter()
            out.backward(grad)
            opt.step()
            opt.zero_grad()
            return time.perf_counter() - t
        results[name] = measure(train)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shardrec", required=True)
    p.add_argument("--rows", type=int, default=1 << 20)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--pooling", type=int, default=20)
    p.add_argument("--ids", default="uniform")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    rows = []
    ours = {}
    for opt in ("sgd", "adagrad", "rowwise_adagrad"):
        print(f"shardrec bench kernel --optimizer {opt} ...", file=sys.stderr)
        ours[opt] = shardrec_bench(args.shardrec, args, opt)
    probe = ours["sgd"]["probe_mlookups_per_s"]["best"]
    print("torch.nn.EmbeddingBag ...", file=sys.stderr)
    theirs = torch_bench(args)

    fwd = ours["sgd"]["forward_mlookups_per_s"]
    rows.append(("forward (sum)", fwd["best"], fwd["median"], theirs["forward"][0], theirs["forward"][1]))
    for opt, torch_key in (("sgd", "sgd"), ("adagrad", "adagrad"), ("rowwise_adagrad", None)):
        b = ours[opt]["backward_mlookups_per_s"]
        t = theirs[torch_key] if torch_key else (float("nan"), float("nan"))
        rows.append((f"backward + {opt}", b["best"], b["median"], t[0], t[1]))

    print(f"{args.rows} x {args.dim} fp32, batch {args.batch} x {args.pooling} ids ({args.ids}), "
          f"{args.threads} threads; probe (random-row gather) {probe:.1f} M lookups/s")
    print(f"{'':26} {'shardrec best/median':>22} {'torch best/median':>20} {'ratio':>7} {'/ probe':>8}")
    for name, ob, om, tb, tm in rows:
        ratio = ob / tb if tb == tb else float("nan")
        print(f"{name:26} {ob:10.2f} / {om:8.2f} {tb:9.2f} / {tm:7.2f} {ratio:7.1f}x {ob / probe:8.2f}")


if __name__ == "__main__":
    main()
