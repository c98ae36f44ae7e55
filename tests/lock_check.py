#!/usr/bin/env python3
"""The lock files hold, and scripts/check-lock.py sees every difference.

  - check-lock.py on made-up environments: identical passes; a changed
    version, an unpinned extra package and a missing one each fail, naming
    the package; --subset allows missing ones; pip/setuptools/wheel are
    compared only where the lock names them; a malformed lock is exit 2;
  - the locks agree with what they lock: every direct requirement of
    scripts/requirements.txt (and of the corpus generator's) is in its lock at
    the same version, and pyproject.toml's build requirements are
    scripts/build-constraints.txt exactly;
  - the interpreter the tests run with (TPF_PYTHON), when it is the project's
    .venv, is scripts/constraints.txt.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ.get("TPF_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "scripts", "check-lock.py")
failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def check(lock, freeze, *extra):
    with tempfile.TemporaryDirectory() as d:
        lp, fp = os.path.join(d, "lock.txt"), os.path.join(d, "freeze.txt")
        with open(lp, "w") as f:
            f.write(lock)
        with open(fp, "w") as f:
            f.write(freeze)
        p = subprocess.run([sys.executable, CHECK, lp, "--freeze", fp] + list(extra),
                           capture_output=True, text=True)
        return p.returncode, p.stderr


def pins(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, ver = line.split("==")
                out[re.sub(r"[-_.]+", "-", name.strip()).lower()] = ver.strip()
    return out


def checker_cases():
    lock = "# a lock\nnumpy==2.4.6\nml_dtypes==0.6.0\nonnx==1.23.2\n"
    rc, err = check(lock, "numpy==2.4.6\nml-dtypes==0.6.0\nonnx==1.23.2\npip==23.2.1\nsetuptools==65.5.0\n")
    expect(rc == 0, "the same environment passes (names compared as pip does; pip, setuptools ignored): " + err)
    rc, err = check(lock, "numpy==2.4.6\nml_dtypes==0.7.0\nonnx==1.23.2\n")
    expect(rc == 1 and "ml_dtypes: installed 0.7.0, the lock has 0.6.0" in err, "a changed version fails naming it")
    rc, err = check(lock, "numpy==2.4.6\nml_dtypes==0.6.0\nonnx==1.23.2\nrequests==2.33.0\n")
    expect(rc == 1 and "requests==2.33.0: installed, not in the lock" in err, "an unpinned package fails naming it")
    rc, err = check(lock, "numpy==2.4.6\nonnx==1.23.2\n")
    expect(rc == 1 and "ml_dtypes==0.6.0: in the lock, not installed" in err, "a missing package fails naming it")
    rc, err = check(lock, "numpy==2.4.6\nonnx==1.23.2\n", "--subset")
    expect(rc == 0, "--subset allows a missing package")
    rc, err = check(lock + "setuptools==84.2.1\n", "numpy==2.4.6\nml_dtypes==0.6.0\nonnx==1.23.2\nsetuptools==65.5.0\n")
    expect(rc == 1 and "setuptools: installed 65.5.0" in err, "a bootstrap package the lock names is compared")
    rc, err = check("numpy>=2\n", "numpy==2.4.6\n")
    expect(rc == 2 and "expected name==version" in err, "a lock line that is not an exact pin is refused")


def locks_agree():
    lock = pins(os.path.join(ROOT, "scripts", "constraints.txt"))
    for name, ver in pins(os.path.join(ROOT, "scripts", "requirements.txt")).items():
        expect(lock.get(name) == ver, "scripts/requirements.txt's %s==%s is in scripts/constraints.txt" % (name, ver))
    corpus = pins(os.path.join(ROOT, "tests", "corpus", "constraints-generate.txt"))
    for name, ver in pins(os.path.join(ROOT, "tests", "corpus", "requirements-generate.txt")).items():
        expect(corpus.get(name) == ver, "the corpus generator's %s==%s is in its lock" % (name, ver))
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    m = re.search(r"^requires\s*=\s*\[(.*?)\]", text, re.S | re.M)
    build = {}
    for req in re.findall(r'"([^"]+)"', m.group(1) if m else ""):
        name, _, ver = req.partition("==")
        build[re.sub(r"[-_.]+", "-", name).lower()] = ver
    expect(build == pins(os.path.join(ROOT, "scripts", "build-constraints.txt")),
           "pyproject.toml's build requirements are scripts/build-constraints.txt exactly: %s" % build)


def test_environment():
    py = os.environ.get("TPF_PYTHON", "")
    venv = os.path.join(ROOT, ".venv")
    if not py or os.path.realpath(os.path.dirname(os.path.dirname(py))) != os.path.realpath(venv):
        print("skip the test interpreter %r is not the project's .venv: its environment is not checked" % py)
        return
    p = subprocess.run([py, CHECK, os.path.join(ROOT, "scripts", "constraints.txt"), "--python", py],
                       capture_output=True, text=True)
    expect(p.returncode == 0, "the tests' interpreter is scripts/constraints.txt " + p.stderr)


def main():
    checker_cases()
    locks_agree()
    test_environment()
    if failures:
        print("%d failed" % len(failures))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
