#!/usr/bin/env python3
"""Writes a lock file: the exact versions pip resolves for a set of
requirements, transitive dependencies included.

    lock.py venv     scripts/requirements.txt   -> scripts/constraints.txt
    lock.py build    pyproject.toml's build requirements -> scripts/build-constraints.txt
    lock.py corpus   tests/corpus/requirements-generate.txt -> tests/corpus/constraints-generate.txt

It asks the package index (pip install --dry-run --report in a scratch
virtual environment of this interpreter), so it needs the network.  The
header of the file written is kept; only the name==version lines are
replaced.  Run it after changing a requirement, then scripts/setup.sh (or
the corpus venv's install) and commit the lock with the change.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = {
    "venv": ("scripts/requirements.txt", "scripts/constraints.txt"),
    "build": ("pyproject.toml", "scripts/build-constraints.txt"),
    "corpus": ("tests/corpus/requirements-generate.txt", "tests/corpus/constraints-generate.txt"),
}


def build_requirements(pyproject):
    text = open(pyproject).read()
    m = re.search(r"^\[build-system\].*?^requires\s*=\s*\[(.*?)\]", text, re.S | re.M)
    if not m:
        sys.exit("lock.py: no [build-system] requires in %s" % pyproject)
    return re.findall(r'"([^"]+)"', m.group(1))


def resolve(args, scratch):
    venv = os.path.join(scratch, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    report = os.path.join(scratch, "report.json")
    subprocess.run([py, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--dry-run",
                    "--ignore-installed", "--report", report] + args, check=True)
    with open(report) as f:
        items = json.load(f)["install"]
    return sorted(((i["metadata"]["name"], i["metadata"]["version"]) for i in items),
                  key=lambda t: t[0].lower())


def main(argv):
    if len(argv) != 1 or argv[0] not in TARGETS:
        sys.exit("usage: lock.py venv|build|corpus")
    src, dst = (os.path.join(ROOT, p) for p in TARGETS[argv[0]])
    with tempfile.TemporaryDirectory() as scratch:
        if argv[0] == "build":
            pins = resolve(build_requirements(src), scratch)
        else:
            pins = resolve(["-r", src], scratch)
    header = []
    if os.path.exists(dst):
        with open(dst) as f:
            header = [l for l in f if l.startswith("#")]
    with open(dst, "w") as f:
        f.writelines(header)
        for name, ver in pins:
            f.write("%s==%s\n" % (name, ver))
    print("lock.py: wrote %d pins to %s" % (len(pins), os.path.relpath(dst, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
