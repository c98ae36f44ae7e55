#!/usr/bin/env python3
"""Compares two folders of ONNX test data (output_N.pb): prints the errors of
every output and exits 1 when one is out of tolerance.

Usage: compare.py GOT_DIR WANT_DIR [--atol A] [--rtol R] [--quantized] [--self-check]

Three checks per float output (integers and bools must be equal):

  elements  |got - want| <= atol + rtol * |want| for every element (NaN only
            where want is NaN).  Defaults per dtype in TOL below.
  drift     the least-squares scale error sum((got-want)*want) / sum(want^2)
            and the bias sum(got-want) / sum(|want|) are each at most
            DRIFT_FRAC * rtol (a quarter of the element bound).  Rounding
            errors have no sign and average out; a uniform scale error or an
            offset does not, so it fails here even where every element is
            small enough to pass the element bound.
  quantized (--quantized, for graphs with FP8/FP4 QDQ inside) an element of
            the graph's output may derive from a quantized value that landed
            in the neighbouring bin: up to Q_OFF_FRAC of the elements may
            exceed the element bound by one quantization step (1/16 of the
            output's largest magnitude: one E4M3 step at the top of its
            range), the mean error sum|got-want| / sum|want| is at most
            Q_MEAN_ABS, and the drift caps become Q_DRIFT.

--self-check also applies the comparison to got x1.05, got x1.15 and got
plus 5% of its mean magnitude, each of which must FAIL; it exits 1 if one
passes (the tolerances would then hide such a regression)."""
import argparse
import glob
import os
import sys

import numpy as np
from onnx import TensorProto, numpy_helper

# Element bounds (atol, rtol) for two implementations of the same graph in
# that dtype, measured with tests/mpi/oracle.py (tpfuse's CPU backend
# against onnxruntime on the unsharded model computed in float32):
#  float32   both compute in float32 and differ only in summation order and
#            libm: the largest error over every family at W = 1, 2, 4 was
#            1.3e-6 of max(|want|, 1) (at W = 8: 9.2e-7) (mean 5e-8): 1e-5 leaves a margin of
#            7x and is still 100x below what a float32 -> bf16 slip gives.
#  bfloat16  every op rounds to bf16 (half an ulp: 2^-9 = 0.2% relative) and
#            the expected outputs are float32 rounded once; the deepest
#            outputs pass through ~15 such roundings along the residual
#            chain: 15 * 2^-9 = 0.029.  Largest measured: 0.027 of
#            max(|want|, 1) (dense, W=1); 0.035 is 18 half-ulps.
#  float16   the same chain length in fp16 (half an ulp 2^-11): 18 * 2^-11
#            = 0.009 -> 0.01 (no fp16 example model; not measured).
#  double    float64 reference kernels, summation order only.
#  fp8/fp4   direct quantized outputs: one step of the format (E4M3: 2^-3
#            relative; E5M2: 2^-2; E2M1 between neighbours 0.5 .. 2 apart);
#            the drift caps keep a rounding toward zero (a bias of half a
#            step on average) from passing.
TOL = {
    TensorProto.FLOAT: (1e-5, 1e-5),
    TensorProto.DOUBLE: (1e-9, 1e-7),
    TensorProto.FLOAT16: (1e-2, 1e-2),
    TensorProto.BFLOAT16: (3.5e-2, 3.5e-2),
    TensorProto.FLOAT8E4M3FN: (2e-2, 0.125),
    TensorProto.FLOAT8E5M2: (2e-2, 0.25),
    TensorProto.FLOAT4E2M1: (0.5, 0.34),
}
FLOAT_TYPES = set(TOL)

# drift caps: a quarter of the element bound's rtol (float32 2.5e-6, bf16
# 0.009).  Measured worst over the oracle's runs: float32 1.5e-7 (scale) and
# 8e-8 (bias); bfloat16 7.4e-4 and 1.2e-3 without FP8, 1.2e-3 and 2.2e-3
# with it.
DRIFT_FRAC = 0.25

# Quantized graphs (dense_fp8 in bfloat16 against onnxruntime in float32,
# measured at W = 1, 2, 4): a bf16 rounding before a QuantizeLinear moves a
# value near an E4M3 rounding boundary into the next bin (a 6-12% change of
# that activation), and the change travels through the following GEMMs.
# Measured: up to 17% of an output's elements (22 of the 128 of
# last_hidden_state) beyond the bf16 bound, each within 0.045 of the
# output's largest magnitude (one step: 1/16 = 0.0625); mean error 0.044;
# drift 0.0022.  The CUDA backend against the CPU backend in bfloat16 (FP8
# GEMMs on one side, tests/gpu/gpu_models.py on 2x H100): 19.5% beyond,
# mean error 0.046, drift 0.004.
Q_STEP_FRAC = 1.0 / 16
Q_OFF_FRAC = 0.25
Q_MEAN_ABS = 0.06
Q_DRIFT = 0.01


def load(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t, numpy_helper.to_array(t)


def check_arrays(x, y, atol, rtol, quantized=False, is_float=True, q_off_frac=Q_OFF_FRAC):
    """Compares got x with want y (float64 arrays of one shape).  Returns
    (ok, message).  q_off_frac replaces Q_OFF_FRAC."""
    x = np.asarray(x, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    if not is_float:
        bad = int(np.sum(x != y))
        return bad == 0, f"{bad} of {x.size} differ" if bad else "equal"
    if x.size == 0:
        return True, "empty"
    nan_y, nan_x = np.isnan(y), np.isnan(x)
    if np.any(nan_x != nan_y):
        return False, f"NaN in {int(np.sum(nan_x & ~nan_y))} elements, missing in {int(np.sum(nan_y & ~nan_x))}"
    keep = ~nan_y
    x, y = x[keep], y[keep]
    if np.any(np.isinf(x) | np.isinf(y)):
        inf_ok = np.all((x == y) | ~(np.isinf(x) | np.isinf(y)))
        if not inf_ok:
            return False, "infinities differ"
        fin = ~np.isinf(y)
        x, y = x[fin], y[fin]
    if x.size == 0:
        return True, "no finite elements"
    err = np.abs(x - y)
    bound = atol + rtol * np.abs(y)
    beyond = err > bound
    n_beyond = int(beyond.sum())
    sum_abs = float(np.abs(y).sum())
    sum_sq = float((y * y).sum())
    scale = float(((x - y) * y).sum() / sum_sq) if sum_sq > 0 else 0.0
    bias = float((x - y).sum() / sum_abs) if sum_abs > 0 else float(np.abs(x - y).max())
    mean_abs = float(err.sum() / sum_abs) if sum_abs > 0 else float(err.max())
    drift_cap = Q_DRIFT if quantized else DRIFT_FRAC * rtol
    msg = (f"max abs {err.max():.3g}, max err/(atol+rtol|want|) {float((err / bound).max()):.3g}, "
           f"mean {mean_abs:.3g}, scale {scale:+.3g}, bias {bias:+.3g}")
    problems = []
    if quantized:
        step = Q_STEP_FRAC * float(np.abs(y).max())
        too_far = int((err > bound + step).sum())
        msg += f", {n_beyond} of {x.size} beyond the element bound"
        if too_far:
            problems.append(f"{too_far} elements more than one step ({step:.3g}) off")
        if n_beyond > q_off_frac * x.size:
            problems.append(f"{n_beyond} of {x.size} elements beyond the bound (at most {q_off_frac:.0%})")
        if mean_abs > Q_MEAN_ABS:
            problems.append(f"mean error {mean_abs:.3g} > {Q_MEAN_ABS}")
    elif n_beyond:
        problems.append(f"{n_beyond} of {x.size} elements beyond the bound")
    if abs(scale) > drift_cap:
        problems.append(f"scale error {scale:+.3g} beyond {drift_cap:.3g}")
    if abs(bias) > drift_cap:
        problems.append(f"bias {bias:+.3g} beyond {drift_cap:.3g}")
    return not problems, msg + ("; " + "; ".join(problems) if problems else "")


def output_files(want_dir):
    return sorted(glob.glob(os.path.join(want_dir, "output_*.pb")),
                  key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))


def tolerance(data_type, atol=None, rtol=None):
    a0, r0 = TOL.get(data_type, (0.0, 0.0))
    return (a0 if atol is None else atol), (r0 if rtol is None else rtol)


def compare(got_dir, want_dir, atol=None, rtol=None, quiet=False, quantized=False, q_off_frac=Q_OFF_FRAC):
    """True when every output of got_dir matches want_dir (see the module
    doc).  atol/rtol replace the dtype's element bound, q_off_frac the
    quantized rule's Q_OFF_FRAC."""
    wants = output_files(want_dir)
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
        if ga.shape != wa.shape or gt.data_type != wt.data_type:
            print(f"{wt.name}: got {ga.shape} type {gt.data_type}, want {wa.shape} type {wt.data_type}")
            ok = False
            continue
        a, r = tolerance(wt.data_type, atol, rtol)
        same, msg = check_arrays(ga.astype(np.float64), wa.astype(np.float64), a, r, quantized,
                                 wt.data_type in FLOAT_TYPES, q_off_frac)
        if not quiet or not same:
            print(f"{wt.name}: {msg} (atol {a:g}, rtol {r:g}{', quantized' if quantized else ''}): "
                  f"{'ok' if same else 'MISMATCH'}")
        ok &= same
    return ok


PERTURBATIONS = (("x1.05", lambda x, y: x * 1.05), ("x1.15", lambda x, y: x * 1.15),
                 ("+5% of the mean magnitude", lambda x, y: x + 0.05 * float(np.mean(np.abs(y)))))


def self_check(got_dir, want_dir, atol=None, rtol=None, quantized=False, q_off_frac=Q_OFF_FRAC):
    """True when every perturbation of every float output of got_dir (scaled
    by 1.05 and 1.15, shifted by 5% of its mean magnitude) FAILS the
    comparison with want_dir; prints the ones that pass."""
    ok = True
    for w in output_files(want_dir):
        g = os.path.join(got_dir, os.path.basename(w))
        if not os.path.exists(g):
            continue
        wt, wa = load(w)
        if wt.data_type not in FLOAT_TYPES:
            continue
        _, ga = load(g)
        y = wa.astype(np.float64)
        if not np.any(np.nan_to_num(y) != 0):
            continue  # an all-zero output cannot show a scale error
        a, r = tolerance(wt.data_type, atol, rtol)
        for label, f in PERTURBATIONS:
            passed, msg = check_arrays(f(ga.astype(np.float64), y), y, a, r, quantized, True, q_off_frac)
            if passed:
                print(f"{wt.name}: got {label} PASSES the comparison ({msg}): the tolerance hides it")
                ok = False
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("got")
    ap.add_argument("want")
    ap.add_argument("--atol", type=float)
    ap.add_argument("--rtol", type=float)
    ap.add_argument("--quantized", action="store_true", help="outputs of a graph with FP8/FP4 QDQ")
    ap.add_argument("--self-check", action="store_true",
                    help="also require x1.05, x1.15 and +5%% copies of GOT to fail")
    a = ap.parse_args()
    ok = compare(a.got, a.want, a.atol, a.rtol, quantized=a.quantized)
    if a.self_check:
        ok &= self_check(a.got, a.want, a.atol, a.rtol, quantized=a.quantized)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
