#!/usr/bin/python3
"""Issue 16, as a user meets it: hostile plugins, unsafe plugin paths, an
output set that must be replaced whole, and a job too big for the machine.

Each check asserts the opposite of what the issue reported, so each fails
against the code before its fix.

usage: hardening_cli_test.py SHARDREC_EXE FIXTURE_DIR
Exit 77 (skip) when numpy is missing."""
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable under", sys.executable)
    sys.exit(77)

exe, fixtures = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
failures = []
CRASHES = os.path.join(fixtures, "init_crashes", "libshardrec_eviction_initcrashes.so")
EXITS = os.path.join(fixtures, "init_exits", "libshardrec_eviction_initexits.so")
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")


def run(*args, cwd=None, env=None, preexec=None, timeout=120):
    """The finished process; one that outlives `timeout` (a hang is a
    defect here too) comes back with returncode None."""
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=env or ENV, preexec_fn=preexec)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, None, e.stdout or "", (e.stderr or "") + "(timed out)")


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-2000:]))
    if not cond:
        failures.append(name)


def snapshot(root):
    """Every file under root with its bytes: what a reader would see."""
    out = {}
    for base, _, names in os.walk(root):
        for n in names:
            p = os.path.join(base, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def write_batch(d, rows, n=6, bad_id=None):
    batch = os.path.join(d, "batch")
    os.makedirs(batch, exist_ok=True)
    rng = np.random.default_rng(1)
    values = rng.integers(0, rows, size=n).astype(np.int64)
    if bad_id is not None:
        values[1] = bad_id
    with open(os.path.join(batch, "keys.txt"), "w") as f:
        f.write("f\n")
    np.save(os.path.join(batch, "lengths.npy"), np.full(n // 2, 2, dtype=np.int64))
    np.save(os.path.join(batch, "values.npy"), values)
    np.save(os.path.join(batch, "stride_per_key.npy"), np.array([n // 2], dtype=np.int64))
    return batch


def write_tables(d, rows, dim=8, name="t.json"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump({"tables": [{"name": "t", "num_embeddings": rows, "embedding_dim": dim, "feature_names": ["f"]}]}, f)
    return path


with tempfile.TemporaryDirectory() as d:
    tables = write_tables(d, 50)
    batch = write_batch(d, 50)
    grad = os.path.join(d, "grad.npy")
    np.save(grad, np.ones((3, 8), dtype=np.float32))

    # --- Defect 9: one crashing plugin must not break unrelated commands.
    crash_dir = os.path.join(d, "crashing")
    os.mkdir(crash_dir)
    shutil.copy(CRASHES, crash_dir)
    out = os.path.join(d, "o9")
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out, "--plugin-dir", crash_dir)
    expect("embed --kernel cpu runs beside an eviction plugin that crashes in initialize()", r.returncode == 0,
           r.stderr)
    r = run("plugins", "list", "--plugin-dir", crash_dir)
    # Plainly the signal kills it (139); under ASan its own SEGV report ends the process instead.
    expect("a command that loads the crashing plugin dies of it", r.returncode != 0, (r.returncode, r.stderr))
    expect("... and names the library and the signal first",
           "crashed (SIGSEGV) while loading plugin library " + os.path.join(crash_dir, os.path.basename(CRASHES))
           in r.stderr, r.stderr)
    r = run("plugins", "list", "--plugin", EXITS)
    expect("a plugin calling exit(0) in initialize() is not a success", r.returncode == 1, (r.returncode, r.stderr))
    expect("... and the library is named",
           "exit() was called while loading plugin library " + EXITS in r.stderr, r.stderr)

    # --- Defect 10: the plugin search path is a security boundary.
    good_dir = os.path.join(d, "good")
    os.mkdir(good_dir)
    shutil.copy(os.path.join(fixtures, "good", "libshardrec_bundle_fixture.so"), good_dir)
    r = run("plugins", "list", "--plugin-dir", ".", cwd=good_dir)
    expect("--plugin-dir . is refused", "fixture_one_rank" not in r.stdout and
           "plugin directory '.' is the current directory" in r.stdout + r.stderr, r.stdout + r.stderr)
    r = run("plugins", "list", "--plugin-dir", "./", cwd=good_dir)
    expect("--plugin-dir ./ is refused too", "fixture_one_rank" not in r.stdout, r.stdout)
    r = run("plugins", "list", cwd=d, env=dict(ENV, SHARDREC_PLUGIN_PATH="good"))
    expect("a relative SHARDREC_PLUGIN_PATH entry is refused",
           "fixture_one_rank" not in r.stdout and "is relative" in r.stderr, r.stdout + r.stderr)
    cfg = os.path.join(good_dir, "dot.cfg")
    with open(cfg, "w") as f:
        f.write("plugin-dir = .\n")
    r = run("plugins", "list", "--config", cfg, cwd=good_dir)
    expect("plugin-dir = . in a --config file is refused", "fixture_one_rank" not in r.stdout, r.stdout)
    r = run("plugins", "list", "--plugin-dir", good_dir)
    expect("the same directory by its path loads", "fixture_one_rank" in r.stdout, r.stdout + r.stderr)
    os.chmod(good_dir, 0o777)
    r = run("plugins", "list", "--plugin-dir", good_dir)
    expect("a world-writable plugin directory is refused",
           "fixture_one_rank" not in r.stdout and "is world-writable: another user could put code there"
           in r.stdout, r.stdout)
    os.chmod(good_dir, 0o755)
    lib = os.path.join(good_dir, "libshardrec_bundle_fixture.so")
    os.chmod(lib, 0o777)
    r = run("plugins", "list", "--plugin", lib)
    expect("a world-writable library is refused, even by --plugin",
           "fixture_one_rank" not in r.stdout and lib + " is world-writable" in r.stdout, r.stdout)
    r = run("plugins", "list", "--plugin", lib, "--allow-unsafe-plugins")
    expect("--allow-unsafe-plugins loads it, with a warning",
           "fixture_one_rank" in r.stdout and "unsafe place" in r.stderr, r.stdout + r.stderr)
    os.chmod(lib, 0o755)

    # --- Defect 4: --out is replaced as a whole, or not at all.
    out = os.path.join(d, "out")
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out, "--grad", grad)
    expect("embed writes a full output set", r.returncode == 0 and os.path.exists(os.path.join(out, "tables", "t.npy")),
           r.stderr)
    before = snapshot(out)
    # A bigger table, so its weights do not fit under a file-size limit that
    # the pooled output does fit under: the failure comes while writing.
    big = write_tables(d, 4000, dim=64, name="big.json")
    big_batch = write_batch(os.path.join(d, "b2"), 4000)
    np.save(os.path.join(d, "grad64.npy"), np.ones((3, 64), dtype=np.float32))

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    r = run("embed", "--tables", big, "--batch", big_batch, "--out", out, "--grad", os.path.join(d, "grad64.npy"),
            preexec=small_files)
    expect("a write that fails midway is an error", r.returncode != 0, r.stdout + r.stderr)
    expect("... naming the file", "t.npy" in r.stderr or "tables" in r.stderr, r.stderr)
    expect("... and --out is exactly as it was (no mix of old and new files)", snapshot(out) == before,
           sorted(snapshot(out)))
    leftovers = [n for n in os.listdir(d) if n.startswith(".out.")]
    expect("... and no staging directory is left behind", not leftovers, leftovers)
    r = run("embed", "--tables", big, "--batch", big_batch, "--out", out)
    expect("a later run replaces the set: the old table files are gone with it",
           r.returncode == 0 and not os.path.exists(os.path.join(out, "tables")), (r.stderr, sorted(snapshot(out))))
    with open(os.path.join(out, "notes.txt"), "w") as f:
        f.write("mine\n")
    kept = snapshot(out)
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out)
    expect("an --out holding files embed does not write is refused, not wiped",
           r.returncode != 0 and "notes.txt" in r.stderr and snapshot(out) == kept, r.stderr)
    os.remove(os.path.join(out, "notes.txt"))
    # A staging directory of a writer killed with SIGKILL is removed by the next run.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = os.path.join(d, ".out.new.%d" % dead.pid)
    os.makedirs(os.path.join(stale, "tables"))
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out)
    expect("a dead writer's staging directory is removed by the next run",
           r.returncode == 0 and not os.path.exists(stale), r.stderr)
    blocker = os.path.join(d, "afile")
    with open(blocker, "w") as f:
        f.write("x")
    r = run("embed", "--tables", tables, "--batch", batch, "--out", blocker)
    expect("--out naming an existing file is refused and the file kept",
           r.returncode != 0 and "exists and is not a directory" in r.stderr and open(blocker).read() == "x", r.stderr)

    # --- Defect 12: a job bigger than the machine is refused before allocating.
    huge = write_tables(d, 2 ** 31, dim=4, name="huge.json")
    r = run("embed", "--tables", huge, "--batch", batch, "--out", os.path.join(d, "o12"), timeout=30)
    expect("a 2^31-row table is refused at once, with the figure",
           r.returncode == 1 and "need 32.00 GiB (34359738368 bytes)" in r.stderr and "available here" in r.stderr,
           r.stderr)
    r = run("embed", "--tables", tables, "--batch", batch, "--out", os.path.join(d, "o12"), "--grad", grad,
            "--optimizer", "adam", "--max-memory", "2KiB")
    expect("--max-memory sets the limit (weights + Adam's two states: 50 x 8 x 12 bytes)",
           r.returncode == 1 and "need 4.7 KiB (4800 bytes), more than --max-memory 2.0 KiB" in r.stderr, r.stderr)
    r = run("train", "--tables", "1x2147483648x4", "--steps", "1", timeout=30)
    expect("train refuses it too, before allocating",
           r.returncode == 1 and "on this machine need" in r.stderr, r.stderr)
    r = run("embed", "--tables", huge, "--batch", batch, "--out", os.path.join(d, "o12"), "--max-memory", "1e30GiB")
    expect("a --max-memory past 8 EiB is refused as a size", r.returncode != 0 and "is not a size" in r.stderr,
           r.stderr)

    # --- Defect 7: --bounds-check none agrees between unsharded and sharded.
    bad = write_batch(os.path.join(d, "b7"), 50, bad_id=2 ** 62)
    outs = {}
    for how, extra in (("unsharded", []), ("sharded", ["--world-size", "2", "--sharder", "row_wise"])):
        o = os.path.join(d, "o7_" + how)
        r = run("embed", "--tables", tables, "--batch", bad, "--out", o, "--bounds-check", "none", *extra)
        expect("--bounds-check none, " + how + ": an id of 2^62 is dropped and counted",
               r.returncode == 0 and "1 id(s) outside their table" in r.stdout, r.stdout + r.stderr)
        outs[how] = np.load(os.path.join(o, "values.npy")) if r.returncode == 0 else None
    expect("... and both give the same output", outs["unsharded"] is not None and outs["sharded"] is not None and
           np.allclose(outs["unsharded"], outs["sharded"], atol=1e-6))

# --- The config fuzz target's find: Boost's messages loop forever on a
# value holding their own placeholder; such text is refused up front.
with tempfile.TemporaryDirectory() as d:
    r = run("train", "--seed", "%value%", timeout=20)
    expect("--seed %value% is refused at once (it hung)", r.returncode == 2 and "contains '%value%'" in r.stderr,
           r.stderr)
    cfg = os.path.join(d, "c.cfg")
    with open(cfg, "w") as f:
        f.write("seed = %value%\n")
    r = run("train", "--config", cfg, timeout=20)
    expect("... in a config file too", r.returncode == 2 and "contains '%value%'" in r.stderr, r.stderr)
    r = run("train", "--config", "/dev/zero", timeout=20)
    expect("--config /dev/zero is refused, not read forever", r.returncode == 2 and "larger than 1 MiB" in r.stderr,
           r.stderr)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
