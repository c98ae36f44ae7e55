#!/usr/bin/env python3
"""Einsum on the CPU runtime against onnxruntime.

Single-node Einsum models (the equations below: matmul forms, the Mamba-2
chunked scan's forms of NemotronH and Falcon-H1 exports, implicit output,
ellipsis, transpose, trace, diagonal, outer product, reduction, broadcast
size-1 dims, three operands) in float32, float16, double, int32 and int64
run through `tpfuse run` and are compared with onnxruntime's outputs.
Equations that do not fit their inputs are refused by `tpfuse check` with
exit 1 and an error naming the node, and one of more loops than the kernels
run by `tpfuse run` with exit 4.  With --fixtures DIR, every model
DIR/*/model.onnx runs on its test_data_set_0 and is compared with the
stored outputs (tests/fixtures/mamba2/, written by gen_mamba2.py).

Usage: einsum_check.py --tpfuse PATH --work DIR [--fixtures DIR]
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys

import needs_onnx  # noqa: F401  (exits 77 without onnx)
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

try:
    import onnxruntime as ort
except ImportError:
    print("onnxruntime is not installed for", sys.executable, "- skipped")
    sys.exit(77)

# (equation, input shapes)
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bclhn,bcshn->bclsh", [(1, 2, 8, 4, 16), (1, 2, 8, 4, 16)]),
    ("bclsh,bcshp->bclhp", [(1, 2, 8, 8, 4), (1, 2, 8, 4, 16)]),
    ("bclhn,bclhp->bchpn", [(1, 2, 8, 4, 16), (1, 2, 8, 4, 16)]),
    ("bzch,bzhpn->bchpn", [(1, 3, 3, 4), (1, 3, 4, 16, 16)]),
    ("bclhn,bchpn->bclhp", [(1, 2, 8, 4, 16), (1, 2, 4, 16, 16)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ba,ca", [(3, 4), (5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 2)]),
    ("...ij,...jk", [(2, 1, 4, 5), (1, 3, 5, 2)]),
    ("ij->ji", [(3, 4)]),
    ("ii->", [(4, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->i", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij,ij->ij", [(3, 4), (1, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i,i,i->", [(5,), (5,), (5,)]),
    ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
    ("ik,k->i", [(3, 4), (4,)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("ij,kl->", [(2, 3), (4, 5)]),
    ("iB,BJ->Ji", [(3, 4), (4, 5)]),
    ("bhsd,bhtd->bhst", [(2, 3, 1, 4), (2, 1, 5, 4)]),
]

DTYPES = {
    "f32": (np.float32, TensorProto.FLOAT, 1e-4),
    "f16": (np.float16, TensorProto.FLOAT16, 2e-2),
    "f64": (np.float64, TensorProto.DOUBLE, 1e-10),
    "i32": (np.int32, TensorProto.INT32, 0),
    "i64": (np.int64, TensorProto.INT64, 0),
}

# (equation, input shapes, what the error says)
BAD = [
    ("ij,jk->ik", [(3, 4), (5, 6)], "subscript 'j' is 4 in input 0"),
    ("ij,jk->ik", [(3, 4)], "input term"),
    ("ijk,jk->ik", [(3, 4), (4, 5)], "has 3 subscripts for input 0 of rank 2"),
    ("ij,jk->iz", [(3, 4), (4, 5)], "output subscript 'z' is in no input term"),
    ("ij,jk->ii", [(3, 4), (4, 5)], "output subscript 'i' is given twice"),
    ("i1,jk->ik", [(3, 4), (4, 5)], "'1' is not a subscript"),
    ("ij,jk-ik", [(3, 4), (4, 5)], "'-' is not followed by '>'"),
    ("i..j,jk->ik", [(3, 4), (4, 5)], "outside an ellipsis"),
    ("ij,jk,k->ik", [(3, 4), (4, 5)], "more input terms"),
]


def model(eq, shapes, elem, name="einsum_node"):
    ins = [helper.make_tensor_value_info(f"x{i}", elem, list(s)) for i, s in enumerate(shapes)]
    out = helper.make_tensor_value_info("y", elem, None)
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], name=name,
                            equation=eq)
    g = helper.make_graph([node], "einsum", ins, [out])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def values(rng, shape, dtype):
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 4, size=shape).astype(dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def run_tpfuse(tpf, model_path, data, outdir, inputs):
    os.makedirs(data, exist_ok=True)
    for i, x in enumerate(inputs):
        t = numpy_helper.from_array(x, f"x{i}")
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    r = subprocess.run([tpf, "run", model_path, "--inputs", data, "--outputs", outdir, "--quiet"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr
    t = onnx.TensorProto()
    with open(os.path.join(outdir, "output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t), ""


def close(got, want, tol):
    if got.shape != want.shape:
        return f"shape {got.shape}, onnxruntime {want.shape}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = np.max(np.abs(g - w) / (np.abs(w) + 1)) if g.size else 0.0
    return None if err <= tol else f"largest relative error {err:.3g} > {tol}"


def check_cases(tpf, work):
    rng = np.random.default_rng(7)
    fails = 0
    for k, (eq, shapes) in enumerate(CASES):
        for dname, (dtype, elem, tol) in DTYPES.items():
            d = os.path.join(work, f"case{k}-{dname}")
            os.makedirs(d, exist_ok=True)
            m = model(eq, shapes, elem)
            path = os.path.join(d, "model.onnx")
            onnx.save(m, path)
            inputs = [values(rng, s, dtype) for s in shapes]
            try:
                sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                want = sess.run(None, {f"x{i}": x for i, x in enumerate(inputs)})[0]
            except Exception as exc:  # onnxruntime has no kernel for this dtype
                print(f"skip {eq!r} {dname}: onnxruntime: {str(exc).splitlines()[0][:80]}")
                continue
            got, err = run_tpfuse(tpf, path, os.path.join(d, "data"), os.path.join(d, "out"),
                                  inputs)
            why = err.strip() if got is None else close(got, want, tol)
            print(("FAIL" if why else "ok"), f"{eq!r} {dname} {shapes}", why or "")
            fails += bool(why)
    return fails


def check_bad(tpf, work):
    fails = 0
    for k, (eq, shapes, says) in enumerate(BAD):
        path = os.path.join(work, f"bad{k}.onnx")
        onnx.save(model(eq, shapes, TensorProto.FLOAT, name=f"bad_einsum_{k}"), path)
        r = subprocess.run([tpf, "check", path], capture_output=True, text=True)
        log = r.stdout + r.stderr
        ok = r.returncode == 1 and f"bad_einsum_{k}" in log and says in log
        print("ok" if ok else "FAIL", f"bad {eq!r}: rc {r.returncode}:", log.strip()[:200])
        fails += not ok
    return fails


def check_too_many_loops(tpf, work):
    """26 subscripts of two elements: valid, but more loops than the kernels
    run, so `tpfuse run` refuses it before any input is made (exit 4)."""
    path = os.path.join(work, "loops.onnx")
    onnx.save(model("abcdefghijklm,nopqrstuvwxyz->", [(2,) * 13] * 2, TensorProto.FLOAT,
                    name="many_loops"), path)
    r = subprocess.run([tpf, "run", path, "--random-inputs", "1"], capture_output=True, text=True)
    ok = r.returncode == 4 and "'many_loops'" in r.stderr and "at most 24 run" in r.stderr
    print("ok" if ok else "FAIL", f"too many loops: rc {r.returncode}:", r.stderr.strip()[:200])
    return not ok


def check_fixtures(tpf, fixtures, work):
    fails = 0
    for path in sorted(glob.glob(os.path.join(fixtures, "*", "model.onnx"))):
        d = os.path.dirname(path)
        name = os.path.basename(d)
        data = os.path.join(d, "test_data_set_0")
        out = os.path.join(work, "fixture-" + name)
        r = subprocess.run([tpf, "run", path, "--inputs", data, "--outputs", out, "--quiet"],
                           capture_output=True, text=True)
        why = r.stderr.strip() if r.returncode else None
        for ref in sorted(glob.glob(os.path.join(data, "output_*.pb"))) if not why else []:
            t, g = onnx.TensorProto(), onnx.TensorProto()
            with open(ref, "rb") as f:
                t.ParseFromString(f.read())
            with open(os.path.join(out, os.path.basename(ref)), "rb") as f:
                g.ParseFromString(f.read())
            why = why or close(numpy_helper.to_array(g), numpy_helper.to_array(t), 1e-3)
        print("FAIL" if why else "ok", "fixture", name, why or "")
        fails += bool(why)
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    fails = check_cases(a.tpfuse, a.work) + check_bad(a.tpfuse, a.work)
    fails += check_too_many_loops(a.tpfuse, a.work)
    if a.fixtures:
        fails += check_fixtures(a.tpfuse, a.fixtures, a.work)
    print("failures:", fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
