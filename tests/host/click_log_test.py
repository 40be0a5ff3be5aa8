#!/usr/bin/python3
"""`shardrec datagen`, `train --data` and `plot` end to end (issue 19):
a planted log is written and read back (plain and gzip give the same run);
the metrics CSV and the plot; a checkpointed run resumed mid-epoch ends
exactly as the straight run; bad data is named, or skipped and counted;
refusals before training starts.

usage: click_log_test.py SHARDREC_EXE"""
import csv
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

exe = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, SHARDREC_PLUGIN_PATH="")
failures = []
MODEL = {"model": "dlrm", "dense_in_features": 13, "dense_arch_layer_sizes": [16, 8], "over_arch_layer_sizes": [16, 1]}


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)[-3000:]))
    if not cond:
        failures.append(name)
    return cond


def run(*args, timeout=300):
    return subprocess.run([exe, *args], capture_output=True, text=True, env=ENV, timeout=timeout)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "clicks")
        r = run("datagen", log, "--train-samples", "30000", "--eval-samples", "6000", "--files", "3")
        if not expect("datagen writes the log", r.returncode == 0 and "planted model on the held-out samples: AUC"
                      in r.stdout, r.stdout + r.stderr):
            return 1
        planted = json.load(open(os.path.join(log, "planted.json")))
        expect("planted.json has the planted AUC", 0.5 < planted["planted_on_eval"]["auc"] < 1)
        expect("three training files", sorted(os.listdir(os.path.join(log, "train"))) ==
               ["day_0.tsv", "day_1.tsv", "day_2.tsv"])
        r = run("datagen", log)
        expect("datagen refuses a non-empty directory", r.returncode != 0 and "exists and is not empty" in r.stderr,
               r.stderr)
        model = os.path.join(tmp, "model.json")
        json.dump(MODEL, open(model, "w"))
        common = ["--model", model, "--tables", "26x5000x8", "--batch", "256", "--eval-data",
                  "criteo:" + os.path.join(log, "eval")]

        # Plain and gzip: the same stream, the same run.
        gz = os.path.join(tmp, "gz")
        os.makedirs(gz)
        for name in os.listdir(os.path.join(log, "train")):
            with open(os.path.join(log, "train", name), "rb") as src, gzip.open(os.path.join(gz, name + ".gz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
        m_plain, m_gz = os.path.join(tmp, "plain.csv"), os.path.join(tmp, "gz.csv")
        png = os.path.join(tmp, "curve.png")
        r1 = run("train", *common, "--data", "criteo:" + os.path.join(log, "train"), "--epochs", "2",
                 "--metrics-out", m_plain, "--plot", png, "--eval-every", "40")
        r2 = run("train", *common, "--data", "criteo:" + gz, "--epochs", "2", "--metrics-out", m_gz, "--eval-every", "40")
        if expect("trains two epochs on the log", r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr):
            a, b = rows(m_plain), rows(m_gz)
            expect("gzip and plain files give the same curve", [x["auc"] for x in a] == [x["auc"] for x in b], (a, b))
            evals = [x for x in a if x["split"] == "eval"]
            steps = 2 * (30000 // 512)  # two epochs of whole global batches (2 ranks x 256)
            expect("held-out passes every 40 steps and at the end", [int(x["step"]) for x in evals] == [40, 80, steps],
                   [x["step"] for x in evals])
            expect("the held-out AUC rises", float(evals[-1]["auc"]) > float(evals[0]["auc"]), evals)
            expect("the report shows the held-out metrics and the data's share of the time",
                   "held-out (" in r1.stdout and "waiting for it" in r1.stdout, r1.stdout)
            expect("the progress line shows the AUC", ", AUC 0." in r1.stderr, r1.stderr[-500:])
            expect("--plot wrote a PNG", os.path.exists(png) and open(png, "rb").read(4) == b"\x89PNG", r1.stdout)
            r = run("plot", m_plain, "-o", os.path.join(tmp, "again.png"), "--reference-auc", "0.8")
            expect("shardrec plot draws the CSV", r.returncode == 0 and os.path.exists(os.path.join(tmp, "again.png")),
                   r.stderr)

        # A checkpoint mid-epoch, resumed: the same run as straight through.
        straight, ckpt = os.path.join(tmp, "straight.csv"), os.path.join(tmp, "ckpt")
        shuffled = ["--data", "criteo:" + os.path.join(log, "train"), "--shuffle-buffer", "3000",
                    "--optimizer", "adagrad,lr=0.05", "--dense-optimizer", "adam,lr=0.005"]
        r1 = run("train", *common, *shuffled, "--steps", "90", "--metrics-out", straight)
        r2 = run("train", *common, *shuffled, "--steps", "50", "--checkpoint-dir", ckpt)
        resumed = os.path.join(tmp, "resumed.csv")
        r3 = run("train", *common, *shuffled, "--steps", "90", "--resume", ckpt, "--metrics-out", resumed)
        if expect("a run resumed mid-epoch finishes", r1.returncode == r2.returncode == r3.returncode == 0,
                  r1.stderr + r2.stderr + r3.stderr):
            manifest = json.load(open(os.path.join(ckpt, "step-00000050", "manifest.json")))
            expect("the manifest keeps the reader's position", manifest["data"]["position"] == 50 * 512 and
                   manifest["data"]["epoch"] == 0, manifest.get("data"))
            a = [x for x in rows(straight) if x["split"] == "eval"][-1]
            b = [x for x in rows(resumed) if x["split"] == "eval"][-1]
            expect("its final held-out metrics equal the straight run's", a["auc"] == b["auc"] and
                   a["log_loss"] == b["log_loss"], (a, b))
            expect("resuming the same stream prints no note about another one", "note: --resume" not in r3.stderr,
                   r3.stderr)
            r4 = run("train", *common, *shuffled[:2], "--shuffle-buffer", "1000", "--optimizer", "adagrad,lr=0.05",
                     "--dense-optimizer", "adam,lr=0.005", "--steps", "60", "--resume", ckpt)
            expect("resuming with another shuffle buffer says the sequence differs", r4.returncode == 0 and
                   "the checkpoint's data had shuffle_buffer 3000, this run 1000" in r4.stderr, r4.stderr)

        # Bad data.
        bad = os.path.join(tmp, "bad.tsv")
        lines = open(os.path.join(log, "train", "day_0.tsv")).read().splitlines()[:3000]
        lines[1234] = lines[1234].replace("\t", "\tx", 1)
        open(bad, "w").write("\n".join(lines) + "\n")
        r = run("train", *common, "--data", "criteo:" + bad, "--steps", "5")
        expect("a malformed line is named by file and line", r.returncode != 0 and
               f"{bad}:1235: field 2 (int_0)" in r.stderr, r.stderr)
        r = run("train", *common, "--data", "criteo:" + bad, "--steps", "5", "--skip-bad-lines")
        expect("--skip-bad-lines skips and counts it", r.returncode == 0 and "1 bad line(s) skipped" in r.stdout,
               r.stdout + r.stderr)
        r = run("train", *common, "--data", "criteo:" + os.path.join(tmp, "missing.tsv"), "--steps", "5")
        expect("a missing file is refused before training", r.returncode != 0 and "does not exist" in r.stderr and
               "sharding plan" not in r.stdout, r.stderr)
        r = run("train", "--data", "criteo:" + bad, "--steps", "5")
        expect("--data needs --model", r.returncode != 0 and "need --model" in r.stderr, r.stderr)
        r = run("train", "--model", model, "--tables", "25x100x8", "--data", "criteo:" + bad, "--steps", "5")
        expect("tables that do not serve 26 features are refused", r.returncode != 0 and
               "26 categorical columns, the tables serve 25" in r.stderr, r.stderr)
        r = run("train", *common, "--data", "criteo:" + bad, "--epochs", "1", "--steps", "3")
        expect("--epochs with --steps is refused", r.returncode != 0 and "not both" in r.stderr, r.stderr)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
