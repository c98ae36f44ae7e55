#!/usr/bin/env python3
"""ONNX backend node tests on the CPU runtime, held to a committed list.

    run.py --runner RUN-NODE-TESTS --data DIR [--list FILE]
           [--update [--drop CASE ...]] [--min-total N] [--min-pass N]

Generates ONNX's node tests into DIR (gen-node-data.py; anew when the
packages that compute them changed), runs them (run-node-tests, which tells
pass, fail and unsupported apart), then compares the passing cases with the
list (default: passing.txt next to this script).  The list holds, for every
case, a digest of its model and data, and in its header the versions of the
packages that computed them.  The test fails when
  - a case fails (wrong numbers, an error other than UNSUPPORTED from the
    loader or the planner, a kernel that reports UNSUPPORTED on a plan the
    planner accepted, a test folder without data);
  - a listed case no longer passes or is missing from the data: reported as
    a tpfuse failure when its data is the listed digest, and as a changed
    reference ("REFERENCE CHANGED", naming the case and both sets of package
    versions) when the data differs: then the expected outputs moved, not
    tpfuse;
  - DIR holds fewer than --min-total cases (the data set is incomplete), or
    the list fewer than --min-pass (a list regenerated from a broken build).
A case that passes but is not listed yet is reported ("newly passing") and
does not fail the test.  --update (or TPF_CONFORMANCE_UPDATE=1 in the
environment, e.g. `TPF_CONFORMANCE_UPDATE=1 meson test -C build
onnx-node-tests`) adds the newly passing cases and records this run's
digests and versions; it refuses, and leaves the list as it was, while a
listed case does not pass, unless that case is named with --drop (or in
TPF_CONFORMANCE_DROP, comma-separated).

Exit status: 0 passed, 1 failed (also when the onnx package is missing: no
data set can be made).
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# ONNX 1.23 ships 1,884 node tests; the runtime passes 604 of them.
MIN_TOTAL = 1800
MIN_PASS = 600


REFERENCE = "# reference: "


def read_list(path):
    """-> ({case: digest or None}, the reference versions or None)"""
    cases, versions = {}, None
    with open(path) as f:
        for line in f:
            if line.startswith(REFERENCE):
                versions = line[len(REFERENCE):].strip()
            fields = line.split("#", 1)[0].split()
            if fields:
                cases[fields[0]] = fields[1] if len(fields) > 1 else None
    return cases, versions


def write_list(path, cases, versions):
    with open(path, "w") as f:
        f.write("# ONNX backend node tests that pass on the CPU runtime, each with a digest of\n"
                "# its model and data.  tests/conformance/run.py fails when one of them stops\n"
                "# passing.  Regenerate: TPF_CONFORMANCE_UPDATE=1 meson test -C BUILD onnx-node-tests\n"
                "# (it refuses to drop a case that fails unless TPF_CONFORMANCE_DROP names it)\n")
        f.write(REFERENCE + versions + "\n")
        for n in sorted(cases):
            f.write("%s %s\n" % (n, cases[n]))


def case_digest(folder):
    """sha256 (first 16 hex digits) of a case's model and data files: the
    expected outputs change with the packages that compute them."""
    h = hashlib.sha256()
    for dirpath, dirnames, files in os.walk(folder):
        dirnames.sort()
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, folder).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
            h.update(b"\0")
    return h.hexdigest()[:16]


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
                    help="add the cases that pass now and record this run's digests")
    ap.add_argument("--drop", action="append", default=[],
                    help="with --update: a listed case that no longer passes, to remove")
    ap.add_argument("--min-total", type=int, default=MIN_TOTAL)
    ap.add_argument("--min-pass", type=int, default=MIN_PASS)
    a = ap.parse_args()
    update = a.update or os.environ.get("TPF_CONFORMANCE_UPDATE") == "1"
    drop = set(a.drop) | {c for c in os.environ.get("TPF_CONFORMANCE_DROP", "").split(",") if c.strip()}
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

    import importlib.util
    spec = importlib.util.spec_from_file_location("gen_node_data", os.path.join(HERE, "gen-node-data.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    versions = gen.reference_versions()
    digests = {n: case_digest(os.path.join(a.data, n)) for n in results
               if os.path.isdir(os.path.join(a.data, n))}

    if os.path.exists(a.list):
        expected, listed_versions = read_list(a.list)
    else:
        expected, listed_versions = {}, None
        if not update:
            bad.append("no list of passing cases at %s (make it with --update)" % a.list)
    if expected and len(expected) < a.min_pass:
        bad.append("%s lists %d cases, fewer than --min-pass %d" % (a.list, len(expected), a.min_pass))

    def changed(n):
        return expected.get(n) is not None and digests.get(n) != expected[n]

    dropped, moved = [], []
    for n in sorted(expected):
        if n in results and results[n][0] == "pass":
            continue
        why = ("missing from the data" if n not in results
               else "%s  %s" % results[n])
        (moved if changed(n) else dropped).append((n, why))
    still = [n for n in passing if changed(n)]
    new = [n for n in passing if n not in expected]

    if update:
        unasked = [n for n, _ in dropped + moved if n not in drop]
        unknown = sorted(drop - {n for n, _ in dropped + moved})
        for n in unasked:
            print("NOT DROPPED %s: listed, does not pass (name it in TPF_CONFORMANCE_DROP to drop it)" % n)
        if unknown:
            bad.append("--drop names case(s) that are not listed failures: %s" % ", ".join(unknown))
        if unasked:
            bad.append("%d listed case(s) do not pass and were not named to drop: the list is left as it was"
                       % len(unasked))
        if len(passing) < a.min_pass:
            bad.append("only %d cases pass, fewer than --min-pass %d: the list is left as it was"
                       % (len(passing), a.min_pass))
        # a failing case that was never listed does not stop the update (it
        # still fails the run)
        refused = [b for b in bad if not b.startswith("run-node-tests failed")]
        if not refused and r.returncode in (0, 1):
            keep = {n: digests[n] for n in passing}
            write_list(a.list, keep, versions)
            print("conformance: wrote %d passing cases to %s (%d added, %d dropped by name)"
                  % (len(keep), a.list, len(new), len(drop)))
    else:
        for n, why in dropped:
            print("DROPPED %s: %s" % (n, why))
        for n, why in moved:
            print("REFERENCE CHANGED %s: %s; its model or data differ from the listed ones "
                  "(listed: %s; now: %s)" % (n, why, listed_versions or "unknown versions", versions))
        for n in still:
            print("reference changed, still passes: %s" % n)
        if dropped:
            bad.append("%d listed case(s) no longer pass" % len(dropped))
        if moved:
            bad.append("%d listed case(s) fail on data that differs from the listed: the reference "
                       "changed under the test (%s; the list was made with %s), not tpfuse: "
                       "install the lock (scripts/setup.sh) or regenerate the list"
                       % (len(moved), versions, listed_versions or "unknown versions"))
        for n in new:
            print("newly passing: %s (add it to the list: run.py --update)" % n)
        if new:
            print("conformance: %d case(s) newly passing, not in %s yet; regenerate it with "
                  "TPF_CONFORMANCE_UPDATE=1 meson test -C BUILD onnx-node-tests"
                  % (len(new), a.list))
        print("conformance: %d of %d listed cases pass, %d newly passing, %d cases in all"
              % (len(expected) - len(dropped) - len(moved), len(expected), len(new), len(results)))
    for b in bad:
        print("conformance: FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
