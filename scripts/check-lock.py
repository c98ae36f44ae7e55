#!/usr/bin/env python3
"""Compares a Python environment with a lock file and names every difference.

    check-lock.py LOCK [--python PY | --freeze FILE] [--subset]

LOCK holds one `name==version` a line (comments with #).  The environment is
what `PY -m pip freeze --all` lists (default: this interpreter), or the
`name==version` lines of FILE.  It differs from the lock when

  - a package is installed at another version than the lock's;
  - a package is installed that the lock does not name (an unpinned
    dependency: the next release of it changes the environment unseen);
  - a package the lock names is not installed (not with --subset, which
    checks only what is installed: a venv that holds part of the lock).

pip, setuptools and wheel, which a new venv brings with it, are compared
only where the lock names them.  Names compare as pip does (case, '-', '_'
and '.' alike).

Exit status: 0 when the environment is the lock, 1 when it differs (each
difference on a line of its own on stderr), 2 on bad usage or an unreadable
lock.
"""
import argparse
import re
import subprocess
import sys

BOOTSTRAP = {"pip", "setuptools", "wheel"}


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(lines, what):
    """name==version lines -> {normalized name: (name, version)}."""
    pins = {}
    for no, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if not m:
            raise ValueError("%s:%d: expected name==version, got %r" % (what, no, line))
        key = norm(m.group(1))
        if key in pins:
            raise ValueError("%s:%d: %s is named twice" % (what, no, m.group(1)))
        pins[key] = (m.group(1), m.group(2))
    return pins


def installed(python):
    p = subprocess.run([python, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s -m pip freeze failed: %s" % (python, p.stderr.strip()))
    lines = []
    for line in p.stdout.splitlines():
        # an editable or URL install has no version to compare: it differs
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*(\S+)", line)
        if m:
            lines.append("%s==%s" % (m.group(1), "url:" + m.group(2)))
        elif not line.startswith("-e "):
            lines.append(line)
        else:
            where = re.sub(r"[^A-Za-z0-9._-]+", "-", line[3:].strip().rstrip("/").rsplit("/", 1)[-1])
            lines.append("%s==editable" % (where.strip("-._") or "editable"))
    return parse_pins(lines, "pip freeze of " + python)


def differences(lock, env, subset):
    out = []
    for key, (name, ver) in sorted(env.items()):
        if key in lock:
            if lock[key][1] != ver:
                out.append("%s: installed %s, the lock has %s" % (name, ver, lock[key][1]))
        elif key not in BOOTSTRAP:
            out.append("%s==%s: installed, not in the lock (an unpinned dependency)" % (name, ver))
    if not subset:
        for key, (name, ver) in sorted(lock.items()):
            if key not in env:
                out.append("%s==%s: in the lock, not installed" % (name, ver))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description="compare a Python environment with a lock file")
    ap.add_argument("lock")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--python", default=sys.executable, help="interpreter whose environment to check")
    src.add_argument("--freeze", help="a file of name==version lines instead of an interpreter")
    ap.add_argument("--subset", action="store_true", help="packages of the lock may be missing")
    a = ap.parse_args(argv)
    try:
        with open(a.lock) as f:
            lock = parse_pins(f, a.lock)
        if a.freeze:
            with open(a.freeze) as f:
                env = parse_pins(f, a.freeze)
            where = a.freeze
        else:
            env = installed(a.python)
            where = a.python
    except (OSError, ValueError, RuntimeError) as e:
        print("check-lock: %s" % e, file=sys.stderr)
        return 2
    diff = differences(lock, env, a.subset)
    if diff:
        print("check-lock: the environment of %s differs from %s:" % (where, a.lock), file=sys.stderr)
        for d in diff:
            print("  " + d, file=sys.stderr)
        return 1
    print("check-lock: %s matches %s (%d packages)" % (where, a.lock, len(env)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
