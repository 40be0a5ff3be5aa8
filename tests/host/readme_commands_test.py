#!/usr/bin/python3
"""Runs the README's "Using it" block as written: every command must exit 0.

The block is read from README.md, so the README cannot drift from what
works. Paths under build/ are mapped to this build tree (the block says
build/ because that is where the README's first command builds).

usage: readme_commands_test.py README.md REPO_ROOT BUILD_DIR"""
import os
import shlex
import subprocess
import sys
import time

readme, repo, build = sys.argv[1:4]
text = open(readme, encoding="utf-8").read()
start = text.index("## Using it")
block = text[text.index("```bash\n", start) + 8:]
block = block[:block.index("```")]


def mapped(word):
    return os.path.join(build, word[len("build/"):]) if word.startswith("build/") else word


commands = []
for line in block.splitlines():
    words = shlex.split(line, comments=True)
    if words:
        commands.append([mapped(w) for w in words])
env = {k: v for k, v in os.environ.items() if k != "SHARDREC_PLUGIN_PATH"}
failures = 0
for words in commands:
    began = time.monotonic()
    try:
        r = subprocess.run(words, cwd=repo, capture_output=True, text=True, timeout=300, env=env)
        ok, detail = r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
    except subprocess.TimeoutExpired:
        ok, detail = False, "timed out after 300 s"
    shown = " ".join(words).replace(build, "build")
    print(f"{'PASS' if ok else 'FAIL'} ({time.monotonic() - began:.1f} s) {shown}" + ("" if ok else "\n" + detail))
    failures += not ok
print(f"readme: {len(commands) - failures} passed, {failures} failed")
sys.exit(1 if failures or not commands else 0)
