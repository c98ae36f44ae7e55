#!/usr/bin/env python3
"""Round trip of the fixtures from tests/fixtures/make_fixtures.py.

For each fixture: tpf-roundtrip loads, verifies and saves it; the output must
pass onnx.checker and be semantically equal to the input (onnx_compare.py).
Each fixture is also saved once more with a small external-data threshold:
the output must then keep its weights in external files inside its folder,
and still compare equal.  Finally the output is round-tripped a second time.

Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from needs_onnx import HERE  # first: exits 77 (skipped) without onnx

sys.path.insert(0, os.path.join(HERE, "fixtures"))

import make_fixtures  # noqa: E402
import onnx  # noqa: E402
import onnx_compare  # noqa: E402


def run_tool(tool, src, dst, extra=()):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    p = subprocess.run([tool, *extra, src, dst], capture_output=True, text=True, timeout=300)
    if p.returncode < 0:
        return f"tpf-roundtrip died with signal {-p.returncode}\n{p.stderr[-2000:]}"
    if p.returncode != 0:
        return (p.stdout.strip() or "tpf-roundtrip failed") + "\n" + p.stderr[-2000:]
    return None


def external_problems(path):
    """Checks that the saved model keeps some tensors external, inside its folder."""
    m = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    tensors = list(onnx.external_data_helper._get_all_tensors(m))
    ext = [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    if not ext:
        return "no tensor was written to external data"
    for t in ext:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc or os.path.isabs(loc) or ".." in loc.replace("\\", "/").split("/"):
            return f"tensor {t.name}: external location {loc!r} is not a plain relative path"
        full = os.path.join(folder, loc)
        if not os.path.isfile(full):
            return f"tensor {t.name}: external file {loc} was not written"
        off, length = int(info.get("offset", "0")), int(info.get("length", "-1"))
        if length >= 0 and off + length > os.path.getsize(full):
            return f"tensor {t.name}: offset {off} + length {length} beyond {loc}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("only", nargs="*", help="fixture names (default: all)")
    a = ap.parse_args()

    if os.path.isdir(a.work):
        shutil.rmtree(a.work)
    inputs = make_fixtures.write_all(os.path.join(a.work, "in"), a.only or None)

    failures = []
    checks = 0
    for src in inputs:
        name = os.path.splitext(os.path.basename(src))[0]
        input_check = onnx_compare.check(src)
        if input_check:
            failures.append(f"{name}: the fixture itself fails onnx.checker: {input_check}")
            continue
        variants = [
            ("default", os.path.join(a.work, "out", name, name + ".onnx"), ()),
            ("external", os.path.join(a.work, "out-ext", name, name + ".onnx"),
             ("--external-threshold", "64")),
        ]
        for label, dst, extra in variants:
            checks += 1
            problem = run_tool(a.tool, src, dst, extra)
            if not problem and label == "external":
                # Only fixtures with a tensor of 64 bytes or more must go external.
                big = any(len(t.raw_data) >= 64 or
                          t.data_location == onnx.TensorProto.EXTERNAL
                          for t in onnx.load(src).graph.initializer)
                if big:
                    problem = external_problems(dst)
            if not problem:
                problem = onnx_compare.check(dst)
                if problem:
                    problem = "onnx.checker rejects the output: " + problem
            if not problem:
                problem = onnx_compare.compare_files(src, dst)
            if not problem and label == "default":
                # A second round trip of the output is still the same model.
                again = os.path.join(a.work, "out2", name, name + ".onnx")
                problem = run_tool(a.tool, dst, again) or onnx_compare.compare_files(src, again)
                if problem:
                    problem = "second round trip: " + problem
            status = "ok  " if not problem else "FAIL"
            print(f"{status} {name} [{label}]" + (f": {problem}" if problem else ""), flush=True)
            if problem:
                failures.append(f"{name} [{label}]: {problem}")

    passed = checks - len(failures)
    print(f"\nfixture round trips: {passed}/{checks} passed")
    if failures:
        print("failures:")
        for f in failures:
            print("  " + f.replace("\n", "\n    "))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
