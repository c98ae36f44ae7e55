#!/usr/bin/env python3
"""Counts the results in a meson test log (testlog.json, one JSON object a
line) and prints "P passed, F failed, S skipped".  With a second argument,
each failure is first printed as that text followed by "NAME (RESULT)".

Used by scripts/test.sh and scripts/test-sanitizers.sh; a missing log counts
nothing."""

import json
import sys

passed = failed = skipped = 0
names = []
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    r = json.loads(line)
    res = r.get("result", "")
    if res in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif res == "SKIP":
        skipped += 1
    else:
        failed += 1
        names.append("%s (%s)" % (r.get("name", "?"), res))
if len(sys.argv) > 2:
    for n in names:
        print(sys.argv[2] + n)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
