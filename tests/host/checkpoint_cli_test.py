#!/usr/bin/python3
"""Issue 17, as a user meets it: `shardrec train` saves checkpoints, a new
process resumes from one exactly (same plan: bit for bit; another sharder and
world size over gloo processes: within 1e-6), a rank killed mid-save leaves
the previous checkpoint loadable and the partial one ignored (and `checkpoint
inspect` says why), a damaged checkpoint is refused naming the file, and
managed-collision tables with evictions resume exactly.
Tables are assembled from the checkpoint's files with numpy.load(mmap_mode="r"),
as docs/checkpoints.md promises another tool can.

usage: checkpoint_cli_test.py SHARDREC_EXE FIXTURE_DIR
Exit 77 (skip) when numpy is missing."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable under", sys.executable)
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_tables import largest_difference, last, tables_of  # noqa: E402

exe, fixtures = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CYCLIC = os.path.join(fixtures, "cyclic", "libshardrec_sharder_cyclic.so")
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
failures = []
TABLES = "2x300x8,1x50x12"
GLOBAL_BATCH = 24  # divisible by every world size below
MC_TABLES = "2x300x8"


def run(*args, timeout=180):
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, None, e.stdout or "", (e.stderr or "") + "(timed out)")


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)


def train(steps, world, sharder_args, optimizer, extra, comm="gloo", tables=TABLES):
    args = ["train", "--tables", tables, "--steps", str(steps), "--world-size", str(world), "--comm", comm,
            "--batch", str(GLOBAL_BATCH // world), "--optimizer", optimizer, "--seed", "5", *sharder_args, *extra]
    return run(*args)


def compare(name, got_dir, want_dir, exact):
    ok, worst, detail = largest_difference(got_dir, want_dir)
    ok &= worst == 0 if exact else worst <= 1e-6
    expect(name, ok, f"largest scaled difference {worst:.3g}; {detail}")


with tempfile.TemporaryDirectory(prefix="shardrec-ckpt-test-") as tmp:
    def d(name):
        return os.path.join(tmp, name)

    # 1. Same plan: N steps straight == k steps, a new process, N - k more; bit for bit.
    for comm, world in (("local", 2), ("gloo", 2)):
        for opt in ("adam", "rowwise_adagrad"):
            tag = f"{comm}-{opt}"
            sh = ["--sharder", "row_wise"]
            a = train(6, world, sh, opt, ["--checkpoint-dir", d("straight-" + tag)], comm)
            b = train(3, world, sh, opt, ["--checkpoint-dir", d("resumed-" + tag)], comm)
            c = train(6, world, sh, opt, ["--resume", d("resumed-" + tag), "--checkpoint-dir", d("resumed-" + tag)], comm)
            good = all(p.returncode == 0 for p in (a, b, c))
            expect(f"exact resume, same plan ({tag}): runs succeed", good, a.stderr + b.stderr + c.stderr)
            expect(f"exact resume, same plan ({tag}): resumed at step 3",
                   "resumed from" in c.stdout and "(step 3, with the optimizer state)" in c.stdout, c.stdout)
            if good:
                compare(f"exact resume, same plan ({tag}): every row and optimizer state bit-identical",
                        last(d("resumed-" + tag)), last(d("straight-" + tag)), exact=True)

    # 2. Another sharder and world size at every resume, over gloo processes:
    #    1 rank table-wise -> 4 row-wise -> 2 column-wise -> 3 self-routing
    #    (the row_cyclic plugin) -> 2 table-wise; against 10 steps straight.
    cw_plan = d("column_wise.json")
    with open(cw_plan, "w") as f:
        json.dump({"plan": {"t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "3"}},
                            "t1": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "4"}},
                            "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "5"}}}}, f)
    chain = [(1, ["--sharder", "table_wise"]), (4, ["--sharder", "row_wise"]), (2, ["--plan", cw_plan]),
             (3, ["--plugin", CYCLIC, "--sharder", "row_cyclic"]), (2, ["--sharder", "table_wise"])]
    for opt in ("adagrad", "adam"):
        ref = train(10, 1, ["--sharder", "table_wise"], opt, ["--checkpoint-dir", d("chain-ref-" + opt)])
        expect(f"resharding chain ({opt}): the straight run", ref.returncode == 0, ref.stderr)
        root = d("chain-" + opt)
        ok = True
        for i, (world, sharder) in enumerate(chain):
            extra = ["--checkpoint-dir", root] + (["--resume", root] if i > 0 else [])
            p = train(2 * (i + 1), world, sharder, opt, extra)
            ok &= p.returncode == 0
            expect(f"resharding chain ({opt}): stage {i + 1} ({world} ranks, {' '.join(sharder[-1:])})",
                   p.returncode == 0 and "note:" not in p.stderr, p.stdout[-1500:] + p.stderr)
        if ok and ref.returncode == 0:
            compare(f"resharding chain ({opt}): within 1e-6 of the straight run", last(root),
                    last(d("chain-ref-" + opt)), exact=False)

    # 3. --keep-last, and a directory with checkpoints is not reused silently.
    p = train(6, 2, [], "sgd", ["--checkpoint-dir", d("keep"), "--save-every", "2", "--keep-last", "2"], "local")
    expect("--keep-last 2 keeps the newest two", p.returncode == 0 and
           sorted(os.listdir(d("keep"))) == ["step-00000004", "step-00000006"], (p.stderr, os.listdir(d("keep"))))
    p = train(6, 2, [], "sgd", ["--checkpoint-dir", d("keep")], "local")
    expect("a --checkpoint-dir with checkpoints needs --resume", p.returncode == 2 and "--resume" in p.stderr, p.stderr)

    # 4. Damaged checkpoints are refused naming the file, before training.
    bad = d("resumed-gloo-adam")
    m = json.load(open(os.path.join(last(bad), "manifest.json")))
    victim = os.path.join(last(bad), m["files"][1]["path"])
    with open(victim, "r+b") as f:
        f.seek(-5, 2)
        byte = f.read(1)
        f.seek(-5, 2)
        f.write(bytes([byte[0] ^ 0x01]))
    p = train(8, 2, ["--sharder", "row_wise"], "adam", ["--resume", bad])
    expect("a flipped byte: resume refused naming the file", p.returncode == 1 and
           "checksum mismatch" in p.stderr and m["files"][1]["path"] in p.stderr, p.stderr)
    p = run("checkpoint", "inspect", last(bad), "--verify")
    expect("a flipped byte: inspect --verify names it and exits 1",
           p.returncode == 1 and m["files"][1]["path"] in p.stdout, p.stdout + p.stderr)
    p = train(8, 2, ["--sharder", "row_wise"], "adagrad", ["--resume", d("straight-gloo-adam")])
    expect("another optimizer: refused, pointing at --reset-optimizer",
           p.returncode == 1 and "--reset-optimizer" in p.stderr, p.stderr)
    p = train(8, 2, ["--sharder", "row_wise"], "adagrad", ["--resume", d("straight-gloo-adam"), "--reset-optimizer"])
    expect("another optimizer with --reset-optimizer: weights only", p.returncode == 0 and "weights only" in p.stdout,
           p.stdout + p.stderr)
    p = run("train", "--tables", "2x300x8,1x50x16", "--steps", "8", "--resume", d("straight-gloo-adam"), "--optimizer", "adam")
    expect("other tables: refused naming the table", p.returncode == 1 and "table 't2': dim 16" in p.stderr, p.stderr)

    # 5. A rank killed with SIGKILL in the middle of a save.
    root = d("killed")
    killed_mid_save = False
    for attempt in range(3):
        job = subprocess.Popen([exe, "train", "--tables", "2x400000x32", "--steps", "10000", "--save-every", "3",
                                "--comm", "gloo", "--world-size", "2", "--batch", "64", "--checkpoint-dir", root,
                                *(["--resume", root] if os.path.isdir(root) and any(
                                    n.startswith("step-") for n in os.listdir(root)) else [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
        deadline = time.time() + 120
        target = None
        while time.time() < deadline and job.poll() is None:
            names = os.listdir(root) if os.path.isdir(root) else []
            if any(n.startswith("step-") for n in names) and any(n.startswith(".partial.") for n in names):
                try:
                    with open(f"/proc/{job.pid}/task/{job.pid}/children") as f:
                        kids = [int(x) for x in f.read().split()]
                except OSError:
                    kids = []
                target = kids[-1] if kids else job.pid
                os.kill(target, signal.SIGKILL)
                break
            time.sleep(0.002)
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        names = os.listdir(root) if os.path.isdir(root) else []
        if target and any(n.startswith(".partial.") for n in names):
            killed_mid_save = True
            break
    expect("a rank was killed while a save was under way", killed_mid_save, os.listdir(root) if os.path.isdir(root) else "")
    if killed_mid_save:
        expect("the killed job failed", job.returncode != 0, job.returncode)
        p = run("checkpoint", "inspect", root)
        expect("inspect lists the partial save and says why it is not a checkpoint",
               p.returncode == 0 and "not a checkpoint: a save that never finished" in p.stdout, p.stdout + p.stderr)
        p = run("checkpoint", "inspect", root, "--verify", "--json")
        newest = json.loads(p.stdout)["checkpoint"] if p.returncode == 0 else {}
        expect("the previous checkpoint is the newest, and intact", newest.get("verify", {}).get("ok") is True,
               p.stdout + p.stderr)
        step = newest.get("step", 0)
        p = run("train", "--tables", "2x400000x32", "--steps", str(step + 1), "--comm", "gloo", "--world-size", "2",
                "--batch", "64", "--resume", root, "--checkpoint-dir", root)
        expect("a new run resumes from it", p.returncode == 0 and f"(step {step}," in p.stdout, p.stdout + p.stderr)
        expect("and its save removed the partial one",
               not any(n.startswith(".partial.") for n in os.listdir(root)), os.listdir(root))

    # 6. embed --from-checkpoint, unsharded and sharded: the checkpoint's
    #    tables (no --tables needed) and weights, pooled by sum.
    src = last(d("straight-local-adam"))
    _, tabs = tables_of(src)
    batch = d("batch")
    os.makedirs(batch)
    rng = np.random.default_rng(3)
    keys, lengths, values = ["f0", "f1", "f2"], [], []
    rows = {"f0": 300, "f1": 300, "f2": 50}
    B = 4
    for k in keys:
        for b in range(B):
            n = int(rng.integers(0, 4))
            lengths.append(n)
            values.extend(int(x) for x in rng.integers(0, rows[k], n))
    open(os.path.join(batch, "keys.txt"), "w").write("\n".join(keys) + "\n")
    np.save(os.path.join(batch, "lengths.npy"), np.array(lengths, dtype=np.int64))
    np.save(os.path.join(batch, "values.npy"), np.array(values, dtype=np.int64))
    want, at = [], 0
    for i, k in enumerate(keys):
        w = tabs[(f"t{i}", "weights")]
        cols = np.zeros((B, w.shape[1]))
        for b in range(B):
            n = lengths[i * B + b]
            cols[b] = w[values[at:at + n]].sum(axis=0)
            at += n
        want.append(cols)
    want = np.concatenate(want, axis=1)
    for label, extra in (("unsharded", []), ("sharded", ["--sharder", "row_wise", "--world-size", "2"])):
        out = d("embed-" + label)
        p = run("embed", "--from-checkpoint", d("straight-local-adam"), "--batch", batch, "--out", out, *extra)
        got = np.load(os.path.join(out, "values.npy")) if p.returncode == 0 else None
        expect(f"embed --from-checkpoint ({label}) looks up the checkpoint's weights",
               got is not None and got.shape == want.shape and np.allclose(got, want, atol=1e-6), p.stderr)

    # 7. Managed collision with evictions: the slot maps, eviction metadata,
    #    window and counters resume exactly, under the same world size and
    #    under another (buckets move between ranks). Saved mid-window.
    mc = ["--managed-collision", "t0:zch_size=300,eviction_interval=2,buckets=4,policy=lfu", "--raw-id-space", "3000",
          "--sharder", "row_wise"]

    def mc_state(ckpt):
        m = json.load(open(os.path.join(ckpt, "manifest.json")))
        slots = {}
        for f in m["files"]:
            if f["kind"] == "mc.slots":
                slots[tuple(f["rows"])] = np.load(os.path.join(ckpt, f["path"]))
        rows = np.concatenate([slots[k] for k in sorted(slots)])
        window = sorted(tuple(r) for f in m["files"] if f["kind"] == "mc.window"
                        for r in np.load(os.path.join(ckpt, f["path"])).tolist())
        return m["managed_collision"], rows, window

    straight = train(7, 2, mc, "adagrad", ["--checkpoint-dir", d("mc-straight")], tables=MC_TABLES)
    expect("managed collision: the straight run", straight.returncode == 0 and "evictions" in straight.stdout,
           straight.stderr)
    for world in (2, 4):
        root = d(f"mc-{world}")
        a = train(3, 2, mc, "adagrad", ["--checkpoint-dir", root], tables=MC_TABLES)
        b = train(7, world, mc, "adagrad", ["--resume", root, "--checkpoint-dir", root, "--verify"], tables=MC_TABLES)
        ok = a.returncode == 0 and b.returncode == 0
        expect(f"managed collision, resumed at step 3 on {world} ranks: runs succeed (--verify OK)", ok,
               a.stderr + b.stdout[-800:] + b.stderr)
        if not ok or straight.returncode != 0:
            continue
        compare(f"managed collision, resumed on {world} ranks: tables " + ("bit-identical" if world == 2 else
                "within 1e-6"), last(root), last(d("mc-straight")), exact=world == 2)
        got, want = mc_state(last(root)), mc_state(last(d("mc-straight")))
        expect(f"managed collision, resumed on {world} ranks: slot maps, metadata, window and counters identical",
               got[0] == want[0] and np.array_equal(got[1], want[1]) and got[2] == want[2],
               (got[0], want[0]))
        expect(f"managed collision, resumed on {world} ranks: evictions happened", want[0]["t0"]["counters"]["evictions"] > 0,
               want[0])
    # Saved where one rank managed every bucket (table_wise: fused, the
    # other rank's modules empty), resumed with the buckets spread.
    root = d("mc-from-table-wise")
    a = train(3, 2, mc[:-1] + ["table_wise"], "adagrad", ["--checkpoint-dir", root], tables=MC_TABLES)
    b = train(7, 4, mc, "adagrad", ["--resume", root, "--checkpoint-dir", root, "--verify"], tables=MC_TABLES)
    ok = a.returncode == 0 and b.returncode == 0 and straight.returncode == 0
    expect("managed collision, saved table_wise on 2 ranks, resumed row_wise on 4 (--verify OK)", ok,
           a.stderr + b.stdout[-800:] + b.stderr)
    if ok:
        got, want = mc_state(last(root)), mc_state(last(d("mc-straight")))
        expect("managed collision, saved table_wise, resumed row_wise: state identical to the straight run's",
               got[0] == want[0] and np.array_equal(got[1], want[1]) and got[2] == want[2], (got[0], want[0]))

    # A consistent but hostile slot map (an id in two slots, checksum fixed up): refused by name.
    try:
        import xxhash
    except ImportError:
        xxhash = None
    if xxhash is not None and straight.returncode == 0:
        ckpt = last(d("mc-straight"))
        m = json.load(open(os.path.join(ckpt, "manifest.json")))
        f = next(f for f in m["files"] if f["kind"] == "mc.slots")
        path = os.path.join(ckpt, f["path"])
        a = np.load(path)
        held = np.flatnonzero(a[:, 0] == 1)
        a[held[1], 1] = a[held[0], 1]
        np.save(path, a)
        f["bytes"] = os.path.getsize(path)
        f["xxh3_64"] = xxhash.xxh3_64_hexdigest(open(path, "rb").read())
        json.dump(m, open(os.path.join(ckpt, "manifest.json"), "w"))
        p = train(9, 2, mc, "adagrad", ["--resume", ckpt], tables=MC_TABLES)
        expect("managed collision: an id holding two slots is refused, naming it",
               p.returncode == 1 and "holds two slots" in p.stderr, p.stderr)

print(f"{len(failures)} failure(s)" if failures else "all passed")
sys.exit(1 if failures else 0)
