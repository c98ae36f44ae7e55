#!/usr/bin/env python3
"""ONNX backend node tests on the CPU runtime, held to a committed list.

    run.py --runner RUN-NODE-TESTS --data DIR [--list FILE] [--update]
           [--min-total N] [--min-pass N]

Generates ONNX's node tests into DIR once (gen-node-data.py), runs them
(run-node-tests, which tells pass, fail and unsupported apart), then
compares the passing cases with the list (default: passing.txt next to this
script).  The test fails when
  - a case fails (wrong numbers, an error other than UNSUPPORTED from the
    loader or the planner, a kernel that reports UNSUPPORTED on a plan the
    planner accepted, a test folder without data);
  - a listed case no longer passes or is missing from the data;
  - DIR holds fewer than --min-total cases (the data set is incomplete), or
    the list fewer than --min-pass (a list regenerated from a broken build).
A case that passes but is not listed yet is reported ("newly passing") and
does not fail the test: add it with --update (or TPF_CONFORMANCE_UPDATE=1 in
the environment, e.g. `TPF_CONFORMANCE_UPDATE=1 meson test -C build
onnx-node-tests`), which rewrites the list from this run.

Exit status: 0 passed, 1 failed (also when the onnx package is missing: no
data set can be made).
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# ONNX 1.23 ships 1,884 node tests; the runtime passes 604 of them.
MIN_TOTAL = 1800
MIN_PASS = 600


def read_list(path):
    names = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


def write_list(path, names, onnx_version):
    with open(path, "w") as f:
        f.write("# ONNX backend node tests that pass on the CPU runtime (onnx %s).\n"
                "# tests/conformance/run.py fails when one of them stops passing.\n"
                "# Regenerate: TPF_CONFORMANCE_UPDATE=1 meson test -C BUILD onnx-node-tests\n"
                % onnx_version)
        for n in sorted(names):
            f.write(n + "\n")


def read_results(path):
    res = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t", 2)
            if len(parts) == 3:
                res[parts[0]] = (parts[1], parts[2])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--list", default=os.path.join(HERE, "passing.txt"))
    ap.add_argument("--update", action="store_true",
                    help="rewrite the list with the cases that pass now")
    ap.add_argument("--min-total", type=int, default=MIN_TOTAL)
    ap.add_argument("--min-pass", type=int, default=MIN_PASS)
    a = ap.parse_args()
    update = a.update or os.environ.get("TPF_CONFORMANCE_UPDATE") == "1"
    try:
        import onnx
    except ImportError:
        # no data set can be made: a failure, not a skip (scripts/setup.sh
        # puts onnx into .venv, which the tests use)
        print("conformance: FAIL: %s cannot import onnx, so the node tests cannot be generated"
              % sys.executable)
        return 1
    r = subprocess.run([sys.executable, os.path.join(HERE, "gen-node-data.py"), a.data])
    if r.returncode:
        print("conformance: generating the node tests failed")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        results_path = os.path.join(tmp, "results.tsv")
        r = subprocess.run([a.runner, a.data, "--list-failures", "--results", results_path])
        results = read_results(results_path) if os.path.exists(results_path) else {}
    bad = []
    if r.returncode not in (0, 1):
        bad.append("run-node-tests exited %d" % r.returncode)
    elif r.returncode == 1:
        bad.append("run-node-tests failed (its messages are above)")
    passing = sorted(n for n, (res, _) in results.items() if res == "pass")
    if len(results) < a.min_total:
        bad.append("only %d node tests in %s, expected at least %d: the data set is incomplete"
                   % (len(results), a.data, a.min_total))

    if update:
        if len(passing) < a.min_pass:
            bad.append("only %d cases pass, fewer than --min-pass %d: the list is left as it was"
                       % (len(passing), a.min_pass))
        elif r.returncode in (0, 1):
            write_list(a.list, passing, onnx.__version__)
            print("conformance: wrote %d passing cases to %s" % (len(passing), a.list))
    else:
        if not os.path.exists(a.list):
            bad.append("no list of passing cases at %s (make it with --update)" % a.list)
            expected = []
        else:
            expected = read_list(a.list)
        if expected and len(expected) < a.min_pass:
            bad.append("%s lists %d cases, fewer than --min-pass %d"
                       % (a.list, len(expected), a.min_pass))
        exp_set = set(expected)
        dropped = []
        for n in expected:
            if n not in results:
                dropped.append("%s: missing from the data" % n)
            elif results[n][0] != "pass":
                dropped.append("%s: %s  %s" % (n, results[n][0], results[n][1]))
        for line in dropped:
            print("DROPPED " + line)
        if dropped:
            bad.append("%d listed case(s) no longer pass" % len(dropped))
        new = [n for n in passing if n not in exp_set]
        for n in new:
            print("newly passing: %s (add it to the list: run.py --update)" % n)
        if new:
            print("conformance: %d case(s) newly passing, not in %s yet; regenerate it with "
                  "TPF_CONFORMANCE_UPDATE=1 meson test -C BUILD onnx-node-tests"
                  % (len(new), a.list))
        print("conformance: %d of %d listed cases pass, %d newly passing, %d cases in all"
              % (len(expected) - len(dropped), len(expected), len(new), len(results)))
    for b in bad:
        print("conformance: FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
