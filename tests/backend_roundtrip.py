#!/usr/bin/env python3
"""ONNX's own backend test models: every one imports, verifies and re-exports
to a semantically equal model that onnx.checker still accepts.

The models are the ones shipped in the installed onnx package
(onnx/backend/test/data/**) plus the node test models, which recent onnx
wheels no longer ship as files: they are generated here from the package's
own test-case definitions (onnx.backend.test.case.node), as ONNX's
`backend-test-tools generate-data` does.

Prints one line per failure and "backend models: P/T passed".
Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import warnings

import needs_onnx  # noqa: F401 (first: exits 77, skipped, without onnx)

import onnx  # noqa: E402
import onnx_compare  # noqa: E402


def shipped_models():
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    paths = sorted(glob.glob(os.path.join(data, "**", "*.onnx"), recursive=True))
    return [(os.path.relpath(p, data), p) for p in paths]


def node_models(work):
    """Writes the node test models into work/node (cached per onnx version)."""
    folder = os.path.join(work, "node")
    stamp = os.path.join(folder, ".onnx-version")
    if not (os.path.isfile(stamp) and open(stamp).read() == onnx.__version__):
        from onnx.backend.test.case.node import collect_testcases
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = collect_testcases()
        os.makedirs(folder, exist_ok=True)
        for case in cases:
            d = os.path.join(folder, case.name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "model.onnx"), "wb") as f:
                f.write(case.model.SerializeToString())
        with open(stamp, "w") as f:
            f.write(onnx.__version__)
    paths = sorted(glob.glob(os.path.join(folder, "*", "model.onnx")))
    return [("node/" + os.path.basename(os.path.dirname(p)), p) for p in paths]


def run_batch(tool, pairs):
    """Runs tpf-roundtrip --batch; returns {src: None or problem}.  A crash is
    charged to the model being processed, and the rest run in a new batch."""
    results = {}
    todo = list(pairs)
    while todo:
        feed = "".join(f"{s}\t{d}\n" for s, d in todo)
        p = subprocess.run([tool, "--batch"], input=feed, capture_output=True, text=True,
                           timeout=1800)
        for line in p.stdout.splitlines():
            if line.startswith("ok "):
                results[line[3:]] = None
            elif line.startswith("fail "):
                src, _, why = line[5:].partition(": ")
                results[src] = why
        rest = [(s, d) for s, d in todo if s not in results]
        if rest and p.returncode < 0:
            results[rest[0][0]] = f"tpf-roundtrip died with signal {-p.returncode}"
            rest = rest[1:]
        elif rest:
            for s, _ in rest:
                results[s] = f"no result (tpf-roundtrip exit {p.returncode})"
            rest = []
        todo = rest
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--limit", type=int, default=0, help="only the first N models (debugging)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)

    models = shipped_models() + node_models(a.work)
    if a.limit:
        models = models[: a.limit]
    out_root = os.path.join(a.work, "out")
    pairs, dst_of = [], {}
    for label, src in models:
        dst = os.path.join(out_root, label.replace(os.sep, "/").replace(".onnx", "") + ".out.onnx")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.exists(dst):
            os.remove(dst)
        pairs.append((src, dst))
        dst_of[src] = dst

    results = run_batch(a.tool, pairs)
    failures = {"load": [], "verify": [], "save": [], "other": [], "checker": [], "compare": []}
    passed = 0
    for label, src in models:
        problem = results.get(src, "no result")
        kind = "other"
        if problem:
            stage = problem.split(":", 1)[0]
            kind = stage if stage in failures else "other"
        else:
            dst = dst_of[src]
            if onnx_compare.check(src) is None:
                why = onnx_compare.check(dst)
                if why:
                    problem, kind = "onnx.checker rejects the output: " + why, "checker"
            if not problem:
                try:
                    why = onnx_compare.compare_files(src, dst)
                except Exception as exc:
                    why = f"cannot compare: {type(exc).__name__}: {exc}"
                if why:
                    problem, kind = why, "compare"
        if problem:
            failures[kind].append(f"{label}: {problem}")
        else:
            passed += 1

    total = len(models)
    for kind, items in failures.items():
        if not items:
            continue
        print(f"\n{len(items)} failed at {kind}:")
        for item in items[:60]:
            print("  " + item)
        if len(items) > 60:
            print(f"  ... and {len(items) - 60} more")
    counts = ", ".join(f"{k} {len(v)}" for k, v in failures.items() if v)
    print(f"\nbackend models: {passed}/{total} passed" + (f" (failed: {counts})" if counts else ""))
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
