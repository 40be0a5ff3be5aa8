#!/usr/bin/python3
"""What a new user and a plugin author tripped over (issue 15), one check each.

Each check failed before its fix:
  - managed collision + a sharder that routes ids itself (row_cyclic) passes --verify
  - --plugin-opt sharder.NAME.KEY=VALUE reaches the sharder in train and embed;
    an unknown key is refused
  - bench abi fails (exit 1, naming the entry) when the measured entry fails
  - train's printed time split adds up (with and without --verify)
  - flag prefixes are not guessed (--sharde is an error)
  - --world-size -2 names --world-size
  - a kernel without the optimizer asked for is refused up front, naming its optimizers
  - help text: floats as people write them, nccl in --comm, no word cut in two,
    the top-level table aligned, "1 rank"
  - plan tables hold long component names
  - embed --out out/ prints out/values.npy
  - plugins check BADPATH says why once
  - the bare `shardrec` runs the main job (train)

usage: newcomer_cli_test.py SHARDREC CYCLIC_SHARDER_SO SCORE_THROWS_SO SCALAR_KERNEL_SO"""
import json
import os
import re
import subprocess
import sys
import tempfile

exe, cyclic, score_throws, scalar_kernel = sys.argv[1:5]
failures = []


def run(*args, timeout=240, env=None):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-2500:]))
    if not cond:
        failures.append(name)


small = ["--tables", "2x2000x8", "--batch", "64"]

# 1. Managed collision with a self-routing sharder: evicted rows are reset at
#    the global rows their local rows stand for.
for world in ("2", "3"):
    r = run("train", "--plugin", cyclic, "--sharder", "row_cyclic", "--world-size", world, *small, "--steps", "6",
            "--managed-collision", "t0:policy=lru,eviction_interval=2", "--verify")
    expect(f"managed collision + row_cyclic, {world} ranks: --verify OK",
           r.returncode == 0 and "OK" in r.stdout and "evictions 0," not in r.stdout, r.stdout + r.stderr)
r = run("train", "--plugin", cyclic, "--sharder", "row_cyclic", "--world-size", "3", *small, "--steps", "3",
        "--verify")
expect("row_cyclic without managed collision: --verify OK", r.returncode == 0 and "OK" in r.stdout,
       r.stdout + r.stderr)

# 2. Component options reach the sharder in train and embed.
r = run("train", "--plugin", cyclic, "--sharder", "row_cyclic", "--world-size", "2", *small, "--steps", "1",
        "--plugin-opt", "sharder.row_cyclic.first_rank=1", "--json")
plan = json.loads(r.stdout.strip().splitlines()[-1])["plan"]["plan"] if r.returncode == 0 else {}
ranks = [s["rank"] for s in plan.get("t0", {}).get("shards", [])]
expect("train: --plugin-opt sharder.row_cyclic.first_rank=1 rotates the ranks", ranks == [1, 0],
       r.stdout + r.stderr)
r = run("train", "--plugin", cyclic, "--sharder", "row_cyclic", "--world-size", "2", *small, "--steps", "1",
        "--plugin-opt", "sharder.row_cyclic.no_such_key=1")
expect("train: an unknown sharder option is refused by name",
       r.returncode != 0 and "no_such_key" in r.stderr, r.stdout + r.stderr)
r = run("train", "--sharder", "row_wise", "--world-size", "2", *small, "--steps", "1",
        "--plugin-opt", "sharder.row_wise.bogus=1")
expect("train: an unknown option of a built-in sharder is refused", r.returncode != 0 and "bogus" in r.stderr,
       r.stdout + r.stderr)

with tempfile.TemporaryDirectory() as d:
    tables = os.path.join(d, "t.json")
    with open(tables, "w") as f:
        json.dump({"tables": [{"name": "t0", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f0"]}]},
                  f)
    batch = os.path.join(d, "batch")
    os.makedirs(batch)
    # keys.txt, lengths.npy, values.npy written by hand (no numpy needed).
    with open(os.path.join(batch, "keys.txt"), "w") as f:
        f.write("f0\n")

    def npy(path, dtype, values):
        header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (dtype, len(values))
        header += " " * (63 - (len(header) + 10) % 64) + "\n"
        import struct
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
            f.write(struct.pack("<%dq" % len(values), *values))

    npy(os.path.join(batch, "lengths.npy"), "<i8", [2, 1, 0, 3])
    npy(os.path.join(batch, "values.npy"), "<i8", [1, 2, 3, 4, 5, 9])
    out = os.path.join(d, "out") + "/"
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out, "--plugin", cyclic, "--sharder",
            "row_cyclic", "--world-size", "2", "--plugin-opt", "sharder.row_cyclic.nope=3")
    expect("embed: an unknown sharder option is refused by name", r.returncode != 0 and "nope" in r.stderr,
           r.stdout + r.stderr)
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out, "--plugin", cyclic, "--sharder",
            "row_cyclic", "--world-size", "2", "--plugin-opt", "sharder.row_cyclic.first_rank=1")
    expect("embed: sharder options reach the sharder", r.returncode == 0, r.stdout + r.stderr)
    # --out out/ prints out/values.npy, not out//values.npy.
    expect("embed --out DIR/ prints one slash", "//" not in r.stdout and "out/values.npy" in r.stdout, r.stdout)
    # 7. A kernel without the optimizer: refused before any work, naming what it has.
    r = run("embed", "--tables", tables, "--batch", batch, "--out", out, "--plugin", scalar_kernel, "--kernel",
            "scalar_example", "--grad", os.path.join(d, "missing.npy"), "--optimizer", "adagrad")
    expect("embed: a kernel without the optimizer is refused naming its optimizers",
           r.returncode != 0 and "has no optimizer 'adagrad'" in r.stderr and "sgd" in r.stderr, r.stderr)

r = run("train", "--plugin", scalar_kernel, "--kernel", "scalar_example", *small, "--steps", "1")
expect("train: a kernel without the default optimizer is refused up front",
       r.returncode == 2 and "kernel 'scalar_example' has no optimizer 'adagrad' (it has: none, sgd)" in r.stderr
       and "shardrec train:" in r.stderr and "rank" not in r.stderr, r.stdout + r.stderr)
r = run("train", "--plugin", scalar_kernel, "--kernel", "scalar_example", *small, "--steps", "1", "--optimizer",
        "sgd,lr=0.1")
expect("train: the same kernel with an optimizer it has runs", r.returncode == 0, r.stdout + r.stderr)

# 3. bench abi: a failing entry is an error, never "0.00 ns".
r = run("bench", "abi", "--plugin", score_throws, "--policy", "raw_policy", "--min-time", "0.01")
expect("bench abi: a failing entry exits 1 naming it",
       r.returncode == 1 and "eviction_score_empty" in r.stderr and "0.00 ns" not in r.stdout, r.stdout + r.stderr)
r = run("bench", "abi", "--min-time", "0.01")
expect("bench abi: no DEBUG banner, no colour codes into a pipe, target met or NOT met",
       r.returncode == 0 and "DEBUG" not in r.stdout + r.stderr and "\x1b[" not in r.stdout
       and re.search(r"target: < 20 ns: (met|NOT met)", r.stdout), r.stdout + r.stderr)

# 4. train's time split adds up: the phases and "other" sum to the ranks' mean
#    seconds, which no rank exceeds the job's time with.
pct = re.compile(r"(input dist|lookup|output dist|backward|other) ([0-9.]+)% \(([0-9.]+) s\)")
for extra in ([], ["--verify"]):
    r = run("train", "--world-size", "3", *small, "--steps", "5", *extra)
    done = re.search(r"done: 5 steps in ([0-9.]+) s", r.stdout)
    split = re.search(r"time split \(mean over ranks, ([0-9.]+) s\)", r.stdout)
    parts = pct.findall(r.stdout)
    ok = r.returncode == 0 and done and split and len(parts) == 5
    if ok:
        total, mean = float(done.group(1)), float(split.group(1))
        share = sum(float(p[1]) for p in parts)
        secs = sum(float(p[2]) for p in parts)
        ok = abs(share - 100) < 0.6 and abs(secs - mean) < 0.01 + 0.01 * mean and mean <= total + 1e-3
    expect("train " + " ".join(extra) + ": the time split adds up to the time", ok, r.stdout)
r = run("train", "--world-size", "2", *small, "--steps", "3", "--json")
j = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
split = j.get("time_split_s", {})
parts = sum(split.get(k, 0) for k in ("input_dist", "lookup", "output_dist", "backward", "other"))
expect("train --json: the split sums to rank_mean <= seconds",
       r.returncode == 0 and abs(parts - split.get("rank_mean", -1)) < 1e-6 + 1e-3 * parts
       and split["rank_mean"] <= j["seconds"] + 1e-9 and len(j["seconds_per_rank"]) == 2, r.stdout + r.stderr)
per = j.get("time_split_s_per_rank", [])
expect("train --json: each rank's split, its own work = lookup + backward - the gradient's dist",
       len(per) == 2 and all(0 <= p["backward_dist"] <= p["backward"] + 1e-9
                             and abs(p["own_work"] - (p["lookup"] + p["backward"] - p["backward_dist"])) < 1e-9
                             and p["seconds"] == s for p, s in zip(per, j.get("seconds_per_rank", [])))
       and abs(sum(p["lookup"] for p in per) / 2 - split.get("lookup", -1)) < 1e-6, r.stdout + r.stderr)
# The ranks on one host share its cores: each rank's kernel gets its share
# (at least one thread) unless the user sizes it; the header and --json say so.
cores = len(os.sched_getaffinity(0)) or 1
for ranks, comm in ((2, "local"), (3, "local"), (2, "gloo")):
    r = run("train", "--world-size", str(ranks), "--comm", comm, *small, "--steps", "2", "--json")
    j = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    expect(f"train --comm {comm} --world-size {ranks}: the kernel runs cores / ranks threads a rank",
           j.get("kernel_threads") == max(1, cores // ranks), r.stdout + r.stderr)
r = run("train", "--world-size", "2", *small, "--steps", "2", "--plugin-opt", "kernel.cpu.threads=3")
expect("train: a kernel's threads set by the user are kept and shown",
       r.returncode == 0 and "kernel cpu (3 threads a rank)" in r.stdout, r.stdout + r.stderr)
r = run("train", "--world-size", "2", *small, "--steps", "2", "--plugin-opt", "kernel.cpu.threads=0", "--json")
j = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
expect("train --json: a kernel's threads=0 (all cores) is the number 0", j.get("kernel_threads") == 0, r.stdout + r.stderr)
r = run("train", "--world-size", "2", *small, "--steps", "2", "--plugin-opt", "kernel.cpu.threads=0")
expect("train: threads=0 reads as all cores", r.returncode == 0 and "kernel cpu (all cores a rank)" in r.stdout,
       r.stdout + r.stderr)
# Under a one-core affinity mask (taskset) the share counts that core only.
if hasattr(os, "sched_setaffinity") and cores > 1:
    one = sorted(os.sched_getaffinity(0))[:1]
    r = subprocess.run([exe, "train", "--world-size", "1", *small, "--steps", "2", "--json"], capture_output=True,
                       text=True, timeout=240, preexec_fn=lambda: os.sched_setaffinity(0, one))
    j = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    expect("train under a one-core mask: 1 thread", j.get("kernel_threads") == 1, r.stdout + r.stderr)
r = run("train", "--world-size", "2", *small, "--steps", "3")
expect("train: a line gives each rank's own work", r.returncode == 0
       and re.search(r"each rank's own work \(lookup \+ backward, less the gradient's dist\): \[0\] [0-9.]+ s \[1\] [0-9.]+ s; "
                     r"the least is [0-9]+% of the most", r.stdout) is not None, r.stdout + r.stderr)

# 5. No prefix guessing; 6. each message names the flag that was wrong.
r = run("train", "--sharde", "row_wise", "--steps", "1")
expect("--sharde is an unknown option, not --sharder", r.returncode == 2 and "sharde" in r.stderr, r.stderr)
r = run("comm", "check", "--world-siz", "2")
expect("prefixes are not guessed in any command", r.returncode == 2, r.stderr)
r = run("train", "--world-size", "-2")
expect("--world-size -2 names --world-size", r.returncode == 2 and "--world-size" in r.stderr
       and "--timeout-ms" not in r.stderr, r.stderr)
r = run("train", "--timeout-ms", "0")
expect("--timeout-ms 0 names --timeout-ms", r.returncode == 2 and "--timeout-ms" in r.stderr
       and "--world-size" not in r.stderr, r.stderr)

# Help text.
r = run("train", "--help")
expect("train --help: floats as people write them", "1e-05" in r.stdout and "0000000" not in r.stdout, r.stdout)
comm_help = r.stdout[r.stdout.find("  --comm arg"):]
comm_help = comm_help[:comm_help.find("\n  --")]
expect("train --help: --comm names nccl", "nccl" in comm_help, r.stdout)
expect("train --help: no path cut in two", "docs/managed_collision.md" in r.stdout, r.stdout)
for cmd in (["embed"], ["bench", "kernel"], ["bench", "abi"], ["bench", "comm"], ["launch"], ["replay-evictions"],
            ["bench", "mc"], ["comm", "check"], ["plugins"]):
    h = run(*cmd, "--help")
    long_floats = re.findall(r"[0-9]\.[0-9]{9,}", h.stdout)
    expect(" ".join(cmd) + " --help: exit 0, no raw floats", h.returncode == 0 and not long_floats,
           h.stdout + h.stderr)
r = run("--help")
rows = [l for l in r.stdout.splitlines() if l.startswith("  ") and "  " in l.strip()]
starts = {len(l) - len(l[2:].split("  ", 1)[1].lstrip()) for l in rows}
# The longest command ("checkpoint inspect") is followed by exactly two spaces.
expect("top-level help: every summary starts in one column, apart from its command",
       len(starts) == 1 and "checkpoint inspect  what" in r.stdout, r.stdout)
expect("top-level help: the bare command runs train", "runs its main job" in r.stdout, r.stdout)
r = run("train", "--world-size", "1", *small, "--steps", "1")
expect("'1 rank', '1 step', never '1 ranks'", r.returncode == 0 and "1 ranks" not in r.stdout
       and "1 rank " in r.stdout and "1 steps" not in r.stdout, r.stdout)

# Long component names keep the plan table's columns.
r = run("train", "--world-size", "2", "--plugin", cyclic, "--sharder", "row_cyclic", "--tables", "1x100x8",
        "--steps", "1")
lines = [l for l in r.stdout.splitlines() if l.startswith("  t0 ") or l.startswith("  table ")]
expect("plan table: a sharder name past 10 characters keeps the columns",
       len(lines) == 2 and lines[0].index("kernel") == lines[1].index("cpu"), r.stdout)

# The plugin table: a 16-character name (the good fixture bundle's
# fixture_one_rank) once ran into its version.
good = os.path.join(os.path.dirname(cyclic), "..", "good", "libshardrec_bundle_fixture.so")
r = run("plugins", "list", "--plugin", good)
header = next((l for l in r.stdout.splitlines() if l.startswith("KIND")), "")
rows = [l for l in r.stdout.splitlines() if re.match(r"(sharder|kernel|comm|eviction) ", l)]
aligned = header and rows and all(l[header.index("VERSION"):].split()[0][0].isdigit()
                                  and l[header.index("VERSION") - 2:header.index("VERSION")] == "  " for l in rows)
expect("plugins list: long component names keep the columns", r.returncode == 0 and aligned
       and any("fixture_one_rank" in l for l in rows), r.stdout)

# plugins check BADPATH: the reason once.
r = run("plugins", "check", "/nonexistent/libshardrec_eviction_x.so")
both = r.stdout + r.stderr
expect("plugins check BADPATH says why once", r.returncode == 1 and both.count("/nonexistent/") == 1, both)

# The bare command is the main job.
r = run("--world-size", "1", "--steps", "2", "--tables", "1x100x8")
expect("bare shardrec runs train", r.returncode == 0 and "shardrec train:" in r.stdout and "done:" in r.stdout,
       r.stdout + r.stderr)
r = run("plugins")
expect("shardrec plugins lists and checks", r.returncode == 0 and "conformance:" in r.stdout, r.stdout + r.stderr)

print(f"newcomer: {len(failures)} failed" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
