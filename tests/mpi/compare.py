#!/usr/bin/env python3
"""Compares two folders of ONNX test data (output_N.pb): prints the max
abs/rel error of every output and exits 1 when one is out of tolerance.

Usage: compare.py GOT_DIR WANT_DIR [--atol A] [--rtol R]
Default tolerances depend on the dtype of WANT (bf16: 0.05/0.05,
fp16: 0.01/0.01, float32: 1e-3/1e-3, fp8: 0.05/0.15, integers exact)."""
import argparse
import glob
import os
import sys

import numpy as np
from onnx import TensorProto, numpy_helper

TOL = {
    TensorProto.FLOAT: (1e-3, 1e-3),
    TensorProto.DOUBLE: (1e-9, 1e-7),
    TensorProto.FLOAT16: (1e-2, 1e-2),
    TensorProto.BFLOAT16: (5e-2, 5e-2),
    TensorProto.FLOAT8E4M3FN: (5e-2, 0.15),
    TensorProto.FLOAT8E5M2: (5e-2, 0.3),
    TensorProto.FLOAT4E2M1: (0.5, 0.34),
}


def load(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t, numpy_helper.to_array(t)


def compare(got_dir, want_dir, atol=None, rtol=None, quiet=False, amax_frac=None):
    """amax_frac: the absolute tolerance is at least this fraction of the
    output's largest magnitude (chains of fp8 requantization: a value on a
    rounding boundary moves one fp8 step, and the move propagates)."""
    wants = sorted(glob.glob(os.path.join(want_dir, "output_*.pb")),
                   key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
    if not wants:
        print(f"no outputs in {want_dir}")
        return False
    ok = True
    for w in wants:
        g = os.path.join(got_dir, os.path.basename(w))
        wt, wa = load(w)
        if not os.path.exists(g):
            print(f"{os.path.basename(w)} ({wt.name}): missing in {got_dir}")
            ok = False
            continue
        gt, ga = load(g)
        a0, r0 = TOL.get(wt.data_type, (0.0, 0.0))
        a = a0 if atol is None else atol
        r = r0 if rtol is None else rtol
        if ga.shape != wa.shape or gt.data_type != wt.data_type:
            print(f"{wt.name}: got {ga.shape} type {gt.data_type}, want {wa.shape} type {wt.data_type}")
            ok = False
            continue
        x = ga.astype(np.float64)
        y = wa.astype(np.float64)
        if amax_frac and y.size:
            a = max(a, amax_frac * float(np.nanmax(np.abs(y))))
        err = np.abs(x - y)
        both_nan = np.isnan(x) & np.isnan(y)
        err[both_nan] = 0
        rel = err / np.maximum(np.abs(y), 1e-30)
        bad = ~(err <= a + r * np.abs(y))
        mx = float(np.nanmax(err)) if err.size else 0.0
        mr = float(np.nanmax(rel[err > 0])) if np.any(err > 0) else 0.0
        status = "ok" if not bad.any() else f"MISMATCH ({int(bad.sum())} of {bad.size})"
        if not quiet or bad.any():
            print(f"{wt.name}: max abs {mx:.3g} max rel {mr:.3g} (atol {a}, rtol {r}): {status}")
        ok &= not bad.any()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("got")
    ap.add_argument("want")
    ap.add_argument("--atol", type=float)
    ap.add_argument("--rtol", type=float)
    a = ap.parse_args()
    return 0 if compare(a.got, a.want, a.atol, a.rtol) else 1


if __name__ == "__main__":
    sys.exit(main())
