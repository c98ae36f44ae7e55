#!/usr/bin/env python3
"""Writes ONNX's backend node tests (model.onnx + test_data_set_N/) from the
test cases shipped in the installed onnx package, for packages whose wheel
does not carry the generated data.

Usage: gen-node-data.py OUTDIR [OP_TYPE ...]
Writes OUTDIR/test_*/; OUTDIR/.complete marks a finished run and holds the
versions of the packages that computed the data (reference_versions()): a
folder made with other versions is written anew.
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node as node_cases


def write_tensor(path, value, name):
    if isinstance(value, onnx.TensorProto):
        data = value.SerializeToString()
    elif isinstance(value, np.ndarray) or np.isscalar(value):
        data = numpy_helper.from_array(np.asarray(value), name).SerializeToString()
    else:
        return False  # sequences, maps, optionals: not tensors
    with open(path, "wb") as f:
        f.write(data)
    return True


def reference_versions():
    """The packages that compute the expected outputs: onnx's test cases, with
    numpy and ml_dtypes (sub-byte and float8 types), serialized by protobuf."""
    from importlib import metadata

    vers = []
    for pkg in ("onnx", "ml_dtypes", "numpy", "protobuf"):
        try:
            vers.append("%s %s" % (pkg, metadata.version(pkg)))
        except metadata.PackageNotFoundError:
            vers.append("%s (none)" % pkg)
    return ", ".join(vers)


def main():
    out = sys.argv[1]
    ops = set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)
    done = os.path.join(out, ".complete")
    versions = reference_versions()
    if os.path.exists(done) and not ops:
        with open(done) as f:
            if f.read().strip() == versions:
                return 0
        # made by other package versions: its expected outputs may differ
        for name in os.listdir(out):
            if name.startswith("test_"):
                shutil.rmtree(os.path.join(out, name))
        os.remove(done)
    cases = node_cases.collect_testcases(None)
    count = 0
    for case in cases:
        if ops and not any(case.name.startswith("test_" + o.lower()) for o in ops):
            continue
        d = os.path.join(out, case.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets or []):
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds, exist_ok=True)
            ok = True
            for j, v in enumerate(inputs):
                ok &= write_tensor(os.path.join(ds, f"input_{j}.pb"), v,
                                   case.model.graph.input[j].name)
            for j, v in enumerate(outputs):
                ok &= write_tensor(os.path.join(ds, f"output_{j}.pb"), v,
                                   case.model.graph.output[j].name)
            if not ok:
                open(os.path.join(d, "NOT_TENSORS"), "w").close()
        count += 1
    if not ops:
        with open(done, "w") as f:
            f.write(versions + "\n")
    print(f"wrote {count} node tests to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
