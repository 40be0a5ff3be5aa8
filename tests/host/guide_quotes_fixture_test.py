#!/usr/bin/python3
"""docs/plugin-guide.md's sharder recipe quotes tests/fixtures/cyclic_sharder.cc
(the tested row_cyclic sharder) from its first #include on: the quote must
stay the file, so the guide shows code that builds and passes the suites.

usage: guide_quotes_fixture_test.py PLUGIN_GUIDE.md CYCLIC_SHARDER.cc"""
import re
import sys

guide, fixture = (open(p, encoding="utf-8").read() for p in sys.argv[1:3])
section = guide[guide.index("## Recipe: a sharder"):]
section = section[:section.index("\n## ", 4)]
quoted = re.findall(r"```cpp\n(.*?)```", section, re.S)
body = fixture[fixture.index("#include"):]
ok = any(q.strip() == body.strip() for q in quoted)
print(("PASS" if ok else "FAIL") + " the sharder recipe quotes tests/fixtures/cyclic_sharder.cc as it is")
print(f"guide quote: {int(ok)} passed, {int(not ok)} failed")
sys.exit(0 if ok else 1)
