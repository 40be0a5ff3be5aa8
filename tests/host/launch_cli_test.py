#!/usr/bin/python3
"""`shardrec launch` as a user runs it: usage errors exit 2 and say why; ranks
get the torchrun variables; a failing rank makes the launcher exit 1 naming
it; Ctrl-C (SIGINT) reaches the ranks; two "nodes" on one host meet under
one run id; a command given a world size re-runs itself as that many ranks
(standalone.h, through tests/host/standalone_probe.cc).

usage: launch_cli_test.py SHARDREC_EXE STANDALONE_PROBE"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

exe = sys.argv[1]
probe = sys.argv[2]
failures = []


def run(*args, env=None, timeout=60):
    return subprocess.run([exe, "launch", *args], capture_output=True, text=True, env=env, timeout=timeout)


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + detail))
    if not cond:
        failures.append(name)


def read_env(path):
    with open(path) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def wait_for(paths, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.02)
    return False


with tempfile.TemporaryDirectory() as d:
    # The launcher's own temp rendezvous goes here, so the test sees it go.
    env = dict(os.environ, TMPDIR=d)

    # Usage errors: exit 2 with the reason.
    for name, args, says in [
        ("zero ranks", ["--nproc-per-node", "0", "--", "true"], "--nproc-per-node must be at least 1"),
        ("node rank past nnodes", ["--nnodes", "2", "--node-rank", "2", "--rdzv", "file:" + d, "--run-id", "x",
                                   "--", "true"], "--node-rank 2 is not in 0..1"),
        ("several nodes need a rendezvous and run id", ["--nnodes", "2", "--", "true"], "one run id"),
        ("several nodes need a run id", ["--nnodes", "2", "--rdzv", "redis:h:6379", "--", "true"], "--run-id"),
        ("bad rendezvous kind", ["--rdzv", "tcp://h:1", "--", "true"], "neither file:DIR nor redis:HOST:PORT"),
        ("redis port must be a number", ["--rdzv", "redis:h:port", "--", "true"], "port 'port'"),
        ("no command", ["--nproc-per-node", "2"], "after '--'"),
        ("command without --", ["--nproc-per-node", "2", "true"], "unexpected argument 'true' (the command the ranks run goes after '--')"),
        ("unknown flag", ["--nprocs-per-node", "2", "--", "true"], "--nprocs-per-node"),
    ]:
        r = run(*args, env=env)
        expect("usage error exits 2: " + name, r.returncode == 2, f"rc={r.returncode} {r.stderr}")
        expect("usage error says why: " + name, says in r.stderr, r.stderr)

    r = run("--help", env=env)
    expect("help teaches the variables and a two-host example",
           r.returncode == 0 and "LOCAL_WORLD_SIZE" in r.stdout and "--rdzv redis:" in r.stdout, r.stdout)

    # Three ranks on one host: the variables, a made-up rendezvous and run id.
    out = os.path.join(d, "vars")
    os.mkdir(out)
    r = run("--nproc-per-node", "3", "--json", "--", "sh", "-c", 'env > "$0/env.$LOCAL_RANK"', out, env=env)
    expect("three good ranks exit 0", r.returncode == 0, r.stderr)
    envs = [read_env(os.path.join(out, f"env.{i}")) for i in range(3)]
    expect("RANK, LOCAL_RANK, WORLD_SIZE per rank",
           [(e.get("RANK"), e.get("LOCAL_RANK"), e.get("WORLD_SIZE"), e.get("LOCAL_WORLD_SIZE")) for e in envs] ==
           [(str(i), str(i), "3", "3") for i in range(3)], str(envs))
    rdzv = envs[0].get("SHARDREC_RDZV", "")
    expect("one host gets a file rendezvous in TMPDIR", rdzv.startswith("file:" + d + "/shardrec-rdzv-"), rdzv)
    expect("the temp rendezvous is removed afterwards", rdzv and not os.path.exists(rdzv[5:]), rdzv)
    expect("a run id is made up, the same for every rank",
           envs[0].get("SHARDREC_RUN_ID", "").startswith("run-") and
           len({e.get("SHARDREC_RUN_ID") for e in envs}) == 1 and
           envs[0].get("TORCHELASTIC_RUN_ID") == envs[0].get("SHARDREC_RUN_ID"), str(envs))
    expect("MASTER_ADDR and a free MASTER_PORT",
           envs[0].get("MASTER_ADDR") == "127.0.0.1" and int(envs[0].get("MASTER_PORT", "0")) > 0, str(envs[0]))
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    try:
        res = json.loads(last)
        expect("--json: result on the last line", res["exit_code"] == 0 and res["failed_rank"] is None and
               res["world_size"] == 3 and res["run_id"] == envs[0].get("SHARDREC_RUN_ID"), last)
    except ValueError:
        expect("--json: result on the last line", False, r.stdout)

    # A rank that fails: exit 1, named, the others stopped long before their sleep ends.
    start = time.monotonic()
    r = run("--nproc-per-node", "3", "--", "sh", "-c", 'if [ "$RANK" = 1 ]; then exit 5; fi; sleep 30', env=env)
    took = time.monotonic() - start
    expect("a failing rank makes the launcher exit 1", r.returncode == 1, f"rc={r.returncode} {r.stderr}")
    expect("stderr names the failed rank and its code", "rank 1 (local rank 1" in r.stderr and
           "exited with code 5" in r.stderr, r.stderr)
    expect("the other ranks are stopped quickly", took < 15, f"{took:.1f} s")

    r = run("--nproc-per-node", "2", "--", "shardrec-no-such-program", env=env)
    expect("a missing program is a failed rank", r.returncode == 1 and
           "cannot run 'shardrec-no-such-program': No such file or directory" in r.stderr, r.stderr)

    # An explicit file rendezvous is created and kept.
    keep = os.path.join(d, "rdzv", "job")
    r = run("--rdzv", "file:" + keep, "--", "true", env=env)
    expect("--rdzv file:DIR creates DIR and keeps it", r.returncode == 0 and os.path.isdir(keep), r.stderr)
    blocker = os.path.join(d, "a-file")
    open(blocker, "w").close()
    r = run("--rdzv", "file:" + blocker + "/sub", "--", "true", env=env)
    expect("--rdzv file:DIR that cannot be made fails", r.returncode == 1 and "cannot create directory" in r.stderr,
           r.stderr)

    # Two "nodes" on this host, 2 ranks each, one rendezvous and run id.
    two = os.path.join(d, "two")
    os.mkdir(two)
    nodes = [subprocess.Popen([exe, "launch", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", str(k),
                               "--rdzv", "file:" + os.path.join(d, "shared"), "--run-id", "job42", "--",
                               "sh", "-c", 'echo "$LOCAL_RANK $GROUP_RANK $WORLD_SIZE $SHARDREC_RUN_ID" > "$0/r$RANK"',
                               two], env=env, stderr=subprocess.PIPE, text=True) for k in range(2)]
    codes = [p.wait(timeout=60) for p in nodes]
    got = {}
    for i in range(4):
        path = os.path.join(two, f"r{i}")
        got[i] = open(path).read().strip() if os.path.exists(path) else None
    expect("two nodes: ranks 0..3, host-major", codes == [0, 0] and got == {
        0: "0 0 4 job42", 1: "1 0 4 job42", 2: "0 1 4 job42", 3: "1 1 4 job42"}, f"{codes} {got}")

    # Ctrl-C: SIGINT to the launcher reaches every rank; the launcher exits 128 + 2.
    sig = os.path.join(d, "sig")
    os.mkdir(sig)
    # (A non-interactive shell's background job ignores SIGINT, so the trap ends the sleep itself.)
    script = 'trap \'echo INT > "$0/int.$RANK"; kill $!; exit 0\' INT; touch "$0/up.$RANK"; sleep 30 & wait'
    # As from a terminal: SIGINT not ignored, whatever ctest was started under.
    p = subprocess.Popen([exe, "launch", "--nproc-per-node", "2", "--", "sh", "-c", script, sig], env=env,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    up = wait_for([os.path.join(sig, f"up.{i}") for i in range(2)], 20)
    p.send_signal(signal.SIGINT)
    try:
        code = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        code = None
    err = p.stderr.read()
    expect("ranks started", up, err)
    expect("SIGINT: launcher exits 130", code == 130, f"rc={code} {err}")
    expect("SIGINT is passed to every rank", all(
        os.path.exists(os.path.join(sig, f"int.{i}")) for i in range(2)), err)
    expect("SIGINT is reported", "got SIGINT" in err, err)

    # Standalone: N ranks of the command itself, a temp file rendezvous, one run id.
    sa = os.path.join(d, "standalone")
    os.mkdir(sa)
    r = subprocess.run([probe, "probe", sa, "3"], env=env, capture_output=True, text=True, timeout=60)
    rows = sorted(open(os.path.join(sa, f)).read().split() for f in os.listdir(sa))
    expect("standalone: 3 ranks re-run through the launcher", r.returncode == 0 and
           [row[:3] for row in rows] == [[str(i), "3", "torchrun"] for i in range(3)], f"{r.stderr} {rows}")
    expect("standalone: one temp file rendezvous and run id", len(rows) == 3 and
           len({(row[3], row[4]) for row in rows}) == 1 and rows[0][3].startswith("file:" + d + "/") and
           rows[0][4].startswith("run-"), str(rows))
    expect("standalone: the temp rendezvous is removed", rows and not os.path.exists(rows[0][3][5:]), str(rows))
    for f in os.listdir(sa):
        os.remove(os.path.join(sa, f))
    r = subprocess.run([probe, "probe", sa, "3"], env=dict(env, PROBE_FAIL_RANK="2"), capture_output=True,
                       text=True, timeout=60)
    expect("standalone: a failing rank fails the command, named", r.returncode == 1 and
           "shardrec probe: rank 2" in r.stderr and "exited with code 4" in r.stderr, r.stderr)
    for f in os.listdir(sa):
        os.remove(os.path.join(sa, f))
    r = subprocess.run([probe, "probe", sa, "3"], env=dict(env, RANK="1", WORLD_SIZE="3"), capture_output=True,
                       text=True, timeout=60)
    expect("standalone: inside a launcher it runs in-process", r.returncode == 0 and
           os.listdir(sa) == ["rank.1"], f"{r.stderr} {os.listdir(sa)}")
    os.remove(os.path.join(sa, "rank.1"))
    r = subprocess.run([probe, "probe", sa, "1"], env=env, capture_output=True, text=True, timeout=60)
    expect("standalone: world size 1 runs in-process", r.returncode == 0 and
           open(os.path.join(sa, "rank.0")).read().split()[:3] == ["0", "1", "none"], r.stderr)
    r = subprocess.run([probe, "probe", sa, "3"], env=dict(env, RANK="x", WORLD_SIZE="3"), capture_output=True,
                       text=True, timeout=60)
    expect("standalone: a malformed launcher environment is a usage error", r.returncode == 2 and
           "RANK='x'" in r.stderr, r.stderr)

if failures:
    print(f"{len(failures)} check(s) failed: " + ", ".join(failures))
    sys.exit(1)
print("all checks passed")
