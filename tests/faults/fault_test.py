#!/usr/bin/python3
"""Fault injection (issue 16): kill -9 and SIGSTOP of a rank, of the launcher
and of the Redis server, each against a running multi-process job. Every
case asserts the exit code, the rank or store named on stderr, a time bound,
and that no process and no temporary directory is left behind.

Ranks are `shardrec train --comm gloo` processes (long runs, stopped by the
fault), spawned by the host itself or by `shardrec launch`. Each case runs
with its own TMPDIR, and tags its processes with an environment variable so
that survivors can be found in /proc.

usage: fault_test.py SHARDREC CASE
  rank-kill        kill -9 of rank 1 of 3: launcher exits 1 naming it, at once
  rank-stop        SIGSTOP of rank 2 of 3: the others name it within their timeout
  launcher-kill    kill -9 of `shardrec launch`: its ranks die with it; the next
                   run removes the rendezvous directory it left
  launcher-stop    SIGSTOP of the launcher: the ranks finish; SIGCONT, exit 0
  redis-kill       kill -9 of the Redis store mid-run: a later stall names the
                   store as gone and when each peer was last seen
  redis-stop       SIGSTOP of the Redis store: the same, after the store's I/O
                   timeout
Exit 0 on success, 77 when redis-server is missing (CTest: skipped)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

SHARDREC = sys.argv[1]
CASE = sys.argv[2]
TAG = "SHARDREC_FAULT_TEST_TAG"
LONG_TRAIN = ["train", "--comm", "gloo", "--tables", "2x2000x8", "--batch", "64", "--steps", "100000000",
              "--timeout-ms", "4000"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def environment(tmpdir, tag):
    env = dict(os.environ)
    for k in list(env):
        if k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") or \
                k.startswith(("SHARDREC_RDZV", "SHARDREC_RUN_ID", "OMPI_", "PMI_", "SLURM_")):
            del env[k]
    env.update({"TMPDIR": tmpdir, TAG: tag, "SHARDREC_PLUGIN_PATH": ""})
    return env


def tagged_pids(tag):
    """Processes (not zombies) whose environment carries the tag."""
    found = []
    needle = (TAG + "=" + tag).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def env_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def rank_pid(tag, rank):
    for pid in tagged_pids(tag):
        try:
            if env_of(pid).get("RANK") == str(rank) and "WORLD_SIZE" in env_of(pid):
                return pid
        except OSError:
            pass
    return None


class Job:
    """A job whose stdout is read until rank 0 prints its plan (all ranks
    joined and planned: the run is under way)."""

    def __init__(self, cmd, tmpdir, tag):
        self.tag = tag
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=environment(tmpdir, tag), start_new_session=True)
        self.started = time.monotonic()

    def wait_running(self, timeout=60):
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            if line.startswith("shardrec train:"):
                break
            if time.monotonic() > deadline:
                break
        else:
            fail("the job ended before it started training: " + self.proc.stderr.read())
        time.sleep(0.5)  # a few steps in

    def finish(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            fail(f"the job did not end within {timeout} s:\n{err}")
        return self.proc.returncode, out, err


def expect_no_leftovers(tag, tmpdir, allow_rdzv=False):
    deadline = time.monotonic() + 10
    while tagged_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = tagged_pids(tag)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    if alive:
        fail(f"processes outlived the job: {alive}")
    left = [n for n in os.listdir(tmpdir) if not (allow_rdzv and n.startswith("shardrec-rdzv-"))]
    if left:
        fail(f"left in TMPDIR: {left}")


def expect(cond, what, detail=""):
    if not cond:
        fail(what + ("\n" + detail if detail else ""))
    print("ok: " + what)


def signal_a_rank(tmpdir, rank, sig, named, bound):
    """Sends `sig` to rank `rank` of a running 3-rank job, then expects exit
    code 1, `named(pid)` on stderr and the end within `bound` seconds."""
    tag = uuid.uuid4().hex
    job = Job([SHARDREC, *LONG_TRAIN, "--world-size", "3"], tmpdir, tag)
    job.wait_running()
    victim = rank_pid(tag, rank)
    expect(victim is not None, f"rank {rank} found")
    os.kill(victim, sig)
    t = time.monotonic()
    rc, _, err = job.finish(60)
    took = time.monotonic() - t
    expect(rc == 1, f"exit code 1 (got {rc})", err)
    expect(named(victim) in err, f"rank {rank} named", err)
    expect(took < bound, f"ended {took:.1f} s after {signal.Signals(sig).name} (bound {bound} s)")
    expect_no_leftovers(tag, tmpdir)


def case_rank_kill(tmpdir):
    # The launcher sees the death at once and stops the others.
    signal_a_rank(tmpdir, 1, signal.SIGKILL,
                  lambda pid: "rank 1 (local rank 1, pid %d) was killed by signal 9 (SIGKILL)" % pid, 10)


def case_rank_stop(tmpdir):
    # The timeout (4 s) and the heartbeat diagnosis; then the launcher stops
    # the stopped rank at once (SIGTERM, then SIGCONT), not after its grace.
    signal_a_rank(tmpdir, 2, signal.SIGSTOP, lambda pid: "rank 2 stopped responding", 4 + 8)


def case_launcher_kill(tmpdir):
    tag = uuid.uuid4().hex
    job = Job([SHARDREC, "launch", "--nproc-per-node", "2", "--", SHARDREC, *LONG_TRAIN], tmpdir, tag)
    job.wait_running()
    ranks = [rank_pid(tag, r) for r in (0, 1)]
    expect(None not in ranks, "both ranks found")
    os.kill(job.proc.pid, signal.SIGKILL)
    job.proc.communicate()
    t = time.monotonic()
    while any(pid in tagged_pids(tag) for pid in ranks) and time.monotonic() - t < 10:
        time.sleep(0.05)
    took = time.monotonic() - t
    expect(not any(pid in tagged_pids(tag) for pid in ranks), f"the ranks died with the launcher ({took:.1f} s)")
    expect_no_leftovers(tag, tmpdir, allow_rdzv=True)
    stale = [n for n in os.listdir(tmpdir) if n.startswith("shardrec-rdzv-")]
    expect(len(stale) == 1, "the killed launcher left its rendezvous directory (it had no chance)", str(stale))
    # The next job on this machine removes it.
    tag2 = uuid.uuid4().hex
    p = subprocess.run([SHARDREC, "comm", "check", "--comm", "gloo", "--world-size", "2"], capture_output=True,
                       text=True, timeout=120, env=environment(tmpdir, tag2))
    expect(p.returncode == 0, "the next job runs", p.stderr)
    expect_no_leftovers(tag2, tmpdir)


def case_launcher_stop(tmpdir):
    tag = uuid.uuid4().hex
    job = Job([SHARDREC, "launch", "--nproc-per-node", "2", "--", SHARDREC, "train", "--comm", "gloo", "--tables",
               "2x2000x8", "--batch", "64", "--steps", "5000"], tmpdir, tag)
    job.wait_running(timeout=60)
    os.kill(job.proc.pid, signal.SIGSTOP)
    # The ranks do not need their launcher to train; they finish and wait
    # to be reaped.
    deadline = time.monotonic() + 60
    while tagged_pids(tag) != [job.proc.pid] and time.monotonic() < deadline:
        time.sleep(0.1)
    expect(tagged_pids(tag) == [job.proc.pid], "the ranks finished while the launcher was stopped",
           f"{tagged_pids(tag)} (launcher {job.proc.pid})")
    os.kill(job.proc.pid, signal.SIGCONT)
    rc, out, err = job.finish(30)
    expect(rc == 0, f"continued, the launcher exits 0 (got {rc})", err)
    expect("done: 5000 steps" in out, "the job completed", out)
    expect_no_leftovers(tag, tmpdir)


def start_redis(workdir):
    server = shutil.which("redis-server")
    if server is None:
        print("SKIP: redis-server is not installed (apt-get install redis-server)")
        sys.exit(77)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    redis = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                              "no", "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return redis, port
        except OSError:
            if time.monotonic() > deadline:
                fail("redis-server did not start")
            time.sleep(0.05)


def redis_has(port, pattern):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"KEYS " + pattern.encode() + b"\r\n")
        reply = s.recv(65536)
    return not reply.startswith(b"*0")


def redis_case(tmpdir, sig):
    workdir = tempfile.mkdtemp(prefix="shardrec_fault_redis_")
    redis, port = start_redis(workdir)
    tag = uuid.uuid4().hex
    try:
        # Rank 1 stalls at once; rank 0 waits for it in collective #1 for the
        # 4 s timeout, and meanwhile the store dies.
        cmd = [SHARDREC, "launch", "--nproc-per-node", "2", "--rdzv", f"redis:127.0.0.1:{port}", "--",
               SHARDREC, "comm", "check", "--comm", "gloo", "--fault", "stall@1", "--timeout-ms", "4000"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=environment(tmpdir, tag), start_new_session=True)
        deadline = time.monotonic() + 30
        while not (redis_has(port, "*heartbeat/0") and redis_has(port, "*heartbeat/1")):
            if time.monotonic() > deadline or proc.poll() is not None:
                fail("the ranks did not start beating")
            time.sleep(0.05)
        time.sleep(1.5)  # a few beats: rank 0 has seen rank 1 alive
        redis.send_signal(sig)
        t = time.monotonic()
        try:
            _, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            fail("the job did not end")
        took = time.monotonic() - t
        expect(proc.returncode == 1, f"exit code 1 (got {proc.returncode})", err)
        expect("the store is unreachable" in err, "the store is named as gone", err)
        expect("peers last seen alive: rank 1 " in err, "rank 1's last sighting is given", err)
        # SIGSTOP: the store's 10 s I/O timeout comes on top of the job's.
        bound = 4 + 8 + (12 if sig == signal.SIGSTOP else 0)
        expect(took < bound, f"ended {took:.1f} s after the store went (bound {bound} s)")
        expect_no_leftovers(tag, tmpdir)
    finally:
        if sig == signal.SIGSTOP:
            redis.send_signal(signal.SIGCONT)
        redis.kill()
        redis.wait()
        shutil.rmtree(workdir, ignore_errors=True)


CASES = {"rank-kill": case_rank_kill, "rank-stop": case_rank_stop, "launcher-kill": case_launcher_kill,
         "launcher-stop": case_launcher_stop,
         "redis-kill": lambda d: redis_case(d, signal.SIGKILL), "redis-stop": lambda d: redis_case(d, signal.SIGSTOP)}

if __name__ == "__main__":
    if CASE not in CASES:
        fail(f"unknown case {CASE}; one of {', '.join(CASES)}")
    tmp = tempfile.mkdtemp(prefix="shardrec_fault_tmp_")
    try:
        CASES[CASE](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK")
