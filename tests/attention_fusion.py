#!/usr/bin/env python3
"""fuse-attention on generated attention blocks, and on the dense example.

For every spelling (examples/tpmodels.py's decode attention; Hugging Face
eager attention with repeat_kv, Div or Mul scale and a float16/bfloat16
Softmax in float; torch's sdpa export with sqrt(scale) on Q and K^T and a
bool mask through Where; the dynamo exporter's sdpa decomposition with
K^T through 3-D and a NaN guard on the probabilities; Gemma's softcap), in float32, float16 and
bfloat16, as decode (one new token over a KV cache, the Concats folded
into past/present) and as prefill (S > 1, a causal additive mask):

* `tpfuse optimize --stats` fires fuse-attention's counter once per layer
  and no Softmax is left (a pass that stops matching fails here);
* `tpfuse run --random-inputs --optimize --verify` runs the unfused and the
  fused graph on the CPU runtime and compares every output;
* for float32, ONNX Runtime runs the model rewritten by fuse-attention only
  (ONNX Attention, opset 23) and gives the original model's outputs; the
  same model with a planted change of the scale does not (the comparison
  is not vacuous).

Then `tpfuse optimize` on the dense example (examples/tpmodels.py dense,
world size 2, rank models, small sizes) must fuse the attention of every
layer of every rank.

Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import needs_onnx  # noqa: F401 (first: exits 77, skipped, without onnx)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

failures: list[str] = []
TPFUSE = ""
HERE = os.path.dirname(os.path.abspath(__file__))

B, H, HKV, D, HID, PAST = 2, 4, 2, 8, 16, 5
DTYPES = {"f32": T.FLOAT, "f16": T.FLOAT16, "bf16": T.BFLOAT16}
LOWEST = {T.FLOAT: float(np.finfo(np.float32).min), T.FLOAT16: -65504.0, T.BFLOAT16: -3.38e38}


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def tpfuse(*args, timeout=300):
    p = subprocess.run([TPFUSE, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


class Builder:
    def __init__(self, dt):
        self.dt = dt
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.outputs = []
        self.n = 0
        self.rng = np.random.default_rng(11)

    def name(self, p):
        self.n += 1
        return "%s_%d" % (p, self.n)

    def op(self, op_type, inputs, out=None, **attrs):
        out = out or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name("n"), **attrs))
        return out

    def init(self, arr, tp=None, prefix="c"):
        nm = self.name(prefix)
        arr = np.asarray(arr)
        if tp is None:
            tp = self.dt if arr.dtype.kind == "f" else T.INT64
        if tp == T.FLOAT:
            t = numpy_helper.from_array(arr.astype(np.float32), nm)
        elif tp == T.INT64:
            t = numpy_helper.from_array(arr.astype(np.int64), nm)
        elif tp == T.BOOL:
            t = numpy_helper.from_array(arr.astype(np.bool_), nm)
        elif tp == T.FLOAT16:
            t = numpy_helper.from_array(arr.astype(np.float16), nm)
        else:
            t = helper.make_tensor(nm, T.BFLOAT16, arr.shape, arr.astype(np.float32).flatten().tolist())
        self.inits.append(t)
        return nm

    def ints(self, vals):
        return self.init(np.array(vals, dtype=np.int64), T.INT64, "i")

    def scalar(self, v):
        return self.init(np.array(v, dtype=np.float32))

    def input(self, nm, shape, tp=None):
        self.inputs.append(helper.make_tensor_value_info(nm, tp or self.dt, shape))
        return nm

    def output(self, v, nm, shape):
        self.nodes.append(helper.make_node("Identity", [v], [nm], name=self.name("out")))
        self.outputs.append(helper.make_tensor_value_info(nm, self.dt, shape))

    def weight(self, k, n):
        return self.init(self.rng.standard_normal((k, n)) / np.sqrt(k), prefix="w")

    def model(self, opset=23):
        g = helper.make_graph(self.nodes, "attention", self.inputs, self.outputs,
                              initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        onnx.checker.check_model(m)
        return m


def tpmodels_decode(dt, layers=2):
    """examples/tpmodels.py attention(): q as [B, Hkv, G, D], k/v as
    [B, Hkv, 1, D] after the cache (present_* are graph outputs)."""
    b = Builder(dt)
    G = H // HKV
    x = b.input("x", [B, HID])
    for L in range(layers):
        q = b.op("MatMul", [x, b.weight(HID, H * D)])
        k = b.op("MatMul", [x, b.weight(HID, HKV * D)])
        v = b.op("MatMul", [x, b.weight(HID, HKV * D)])
        q4 = b.op("Reshape", [q, b.ints([B, HKV, G, D])])
        k4 = b.op("Reshape", [k, b.ints([B, HKV, 1, D])])
        v4 = b.op("Reshape", [v, b.ints([B, HKV, 1, D])])
        pk = b.input("past_key.%d" % L, [B, HKV, PAST, D])
        pv = b.input("past_value.%d" % L, [B, HKV, PAST, D])
        kc = b.op("Concat", [pk, k4], out="present_key.%d" % L, axis=2)
        vc = b.op("Concat", [pv, v4], out="present_value.%d" % L, axis=2)
        b.outputs.append(helper.make_tensor_value_info(kc, dt, [B, HKV, PAST + 1, D]))
        b.outputs.append(helper.make_tensor_value_info(vc, dt, [B, HKV, PAST + 1, D]))
        kt = b.op("Transpose", [kc], perm=[0, 1, 3, 2])
        sc = b.op("MatMul", [q4, kt])
        sc = b.op("Mul", [sc, b.scalar(1.0 / np.sqrt(D))])
        pr = b.op("Softmax", [sc], axis=-1)
        o = b.op("MatMul", [pr, vc])
        o = b.op("Reshape", [o, b.ints([B, H * D])])
        x = b.op("MatMul", [o, b.weight(H * D, HID)])
    b.output(x, "y", [B, HID])
    return b.model()


def causal_mask(b, S, T_):
    """An additive causal mask [1, 1, S, T] (0 / the dtype's lowest), the
    last S keys being the new tokens."""
    m = np.zeros((1, 1, S, T_), dtype=np.float32)
    for i in range(S):
        m[0, 0, i, T_ - S + i + 1:] = LOWEST[b.dt]
    return m


def hf_block(dt, spelling, S, past):
    """Hugging Face / torch.onnx attention over [B, S, HID]: heads by
    Reshape + Transpose, optional KV cache Concat, repeat_kv, then the
    spelling's scores and Softmax."""
    b = Builder(dt)
    x = b.input("x", [B, S, HID])
    T_ = S + (PAST if past else 0)
    sc_val = 1.0 / np.sqrt(D)

    def heads(y, nh):
        r = b.op("Reshape", [y, b.ints([B, S, nh, D])])
        return b.op("Transpose", [r], perm=[0, 2, 1, 3])

    q = heads(b.op("MatMul", [x, b.weight(HID, H * D)]), H)
    k = heads(b.op("MatMul", [x, b.weight(HID, HKV * D)]), HKV)
    v = heads(b.op("MatMul", [x, b.weight(HID, HKV * D)]), HKV)
    if past:
        pk = b.input("past_key", [B, HKV, PAST, D])
        pv = b.input("past_value", [B, HKV, PAST, D])
        k = b.op("Concat", [pk, k], out="present_key", axis=2)
        v = b.op("Concat", [pv, v], out="present_value", axis=2)
        b.outputs.append(helper.make_tensor_value_info(k, dt, [B, HKV, T_, D]))
        b.outputs.append(helper.make_tensor_value_info(v, dt, [B, HKV, T_, D]))

    def repeat_kv(t):
        u = b.op("Unsqueeze", [t, b.ints([2])])
        e = b.op("Expand", [u, b.ints([B, HKV, H // HKV, T_, D])])
        return b.op("Reshape", [e, b.ints([B, H, T_, D])])

    k, v = repeat_kv(k), repeat_kv(v)
    wide = dt != T.FLOAT
    if spelling == "eager":
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        s = b.op("Div", [b.op("MatMul", [q, kt]), b.scalar(np.sqrt(D))])
        mask = b.init(causal_mask(b, S, T_), prefix="mask")
        s = b.op("Add", [s, mask])
    elif spelling == "sdpa":
        r = np.sqrt(sc_val)
        kt = b.op("Mul", [b.op("Transpose", [k], perm=[0, 1, 3, 2]), b.scalar(r)])
        s = b.op("MatMul", [b.op("Mul", [q, b.scalar(r)]), kt])
        allowed = causal_mask(b, S, T_) == 0
        s = b.op("Where", [b.init(allowed, T.BOOL, "allowed"), s, b.scalar(-np.inf)])
        wide = False
    elif spelling == "sdpa3d":
        # the dynamo exporter's sdpa decomposition: K^T through 3-D, the
        # probabilities guarded by Where(IsNaN(p), 0, p)
        r = np.sqrt(sc_val)
        sh = b.op("Shape", [k])
        t_ = b.op("Slice", [sh, b.ints([-2]), b.ints([-1])])
        lead = b.op("Slice", [sh, b.ints([-(2 ** 63)]), b.ints([-2])])
        k3 = b.op("Reshape", [k, b.op("Concat", [b.ints([-1]), t_, b.ints([D])], axis=0)])
        kt3 = b.op("Transpose", [k3], perm=[0, 2, 1])
        kt = b.op("Reshape", [kt3, b.op("Concat", [lead, b.ints([D]), t_], axis=0)])
        s = b.op("MatMul", [b.op("Mul", [q, b.scalar(r)]), b.op("Mul", [kt, b.scalar(r)])])
        s = b.op("Add", [s, b.init(causal_mask(b, S, T_), prefix="mask")])
        p = b.op("Softmax", [s], axis=-1)
        p = b.op("Where", [b.op("IsNaN", [p]), b.scalar(0.0), p])
        wide = None
    else:  # softcap (Gemma 2)
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        s = b.op("Mul", [b.op("MatMul", [q, kt]), b.scalar(sc_val)])
        cap = b.scalar(2.0)
        s = b.op("Mul", [b.op("Tanh", [b.op("Div", [s, cap])]), cap])
        s = b.op("Add", [s, b.init(causal_mask(b, S, T_), prefix="mask")])
    if wide is None:
        pass
    elif wide:
        p = b.op("Cast", [b.op("Softmax", [b.op("Cast", [s], to=T.FLOAT)], axis=-1)], to=dt)
    else:
        p = b.op("Softmax", [s], axis=-1)
    o = b.op("MatMul", [p, v])
    o = b.op("Reshape", [b.op("Transpose", [o], perm=[0, 2, 1, 3]), b.ints([B, S, H * D])])
    b.output(b.op("MatMul", [o, b.weight(H * D, HID)]), "y", [B, S, HID])
    return b.model(18 if spelling == "sdpa" else 23)


def stats_of(path, passes=None):
    args = ["optimize", path, "-o", path + ".opt.onnx", "--stats"]
    if passes:
        args += ["--passes", passes]
    rc, out, err = tpfuse(*args)
    counters = {}
    for line in (out + err).splitlines():
        f = line.split()
        if len(f) == 3 and f[2].lstrip("-").isdigit():
            counters[(f[0], f[1])] = int(f[2])
    return rc, counters, out + err


def ort_run(path, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def plant_scale(path, out):
    """The rewritten model with every Attention's scale doubled."""
    m = onnx.load(path)
    for n in m.graph.node:
        if n.op_type == "Attention":
            for a in n.attribute:
                if a.name == "scale":
                    a.f *= 2.0
    onnx.save(m, out)


def check_case(work, name, model, layers):
    path = os.path.join(work, name + ".onnx")
    onnx.save(model, path)
    rc, counters, text = stats_of(path)
    if not expect(rc == 0, "%s: optimize" % name):
        print(text)
        return
    got = counters.get(("fuse-attention", "attention"))
    expect(got == layers, "%s: fuse-attention attention = %s (want %d)" % (name, got, layers))
    ops = [n.op_type for n in onnx.load(path + ".opt.onnx").graph.node]
    expect("Softmax" not in ops and ops.count("Attention") == layers,
           "%s: %d Attention, no Softmax left (%s)" % (name, layers, ",".join(sorted(set(ops)))))
    rc, out, err = tpfuse("run", path, "--random-inputs", "3", "--optimize", "--verify", "--quiet")
    if not expect(rc == 0, "%s: run --optimize --verify" % name):
        print(out + err)
    if not name.endswith("-f32"):
        return
    rc, _, text = stats_of(path, "fuse-attention")
    if not expect(rc == 0, "%s: optimize --passes fuse-attention" % name):
        print(text)
        return
    std = path + ".opt.onnx"
    rng = np.random.default_rng(5)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    bad = path + ".planted.onnx"
    plant_scale(std, bad)
    try:
        want = ort_run(path, feeds)
        for label, mp, ok in (("rewritten", std, True), ("planted", bad, False)):
            got = ort_run(mp, feeds)
            e = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
            if ok:
                expect(e <= 1e-5, "%s: ONNX Runtime, original vs rewritten: max error %.2g"
                       % (name, e))
            else:
                expect(e > 1e-3, "%s: ONNX Runtime sees a planted scale change (%.2g)" % (name, e))
    except Exception as ex:  # noqa: BLE001
        expect(False, "%s: ONNX Runtime runs the rewritten model (%s)" % (name, str(ex)[:300]))


def check_dense_example(work):
    """examples/tpmodels.py dense at world size 2: attention fused in every
    layer of both ranks."""
    out = os.path.join(work, "dense")
    layers = 3
    gen = [sys.executable, os.path.join(HERE, "..", "examples", "tpmodels.py"), "dense",
           "--world-size", "2", "--out", out, "--ranks-only", "--layers", str(layers),
           "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--head-dim", "8", "--ffn", "32",
           "--batch", "2", "--past", "4"]
    p = subprocess.run(gen, capture_output=True, text=True)
    if not expect(p.returncode == 0, "dense example generated"):
        print(p.stdout + p.stderr)
        return
    for r in range(2):
        path = os.path.join(out, "dense.rank%d.onnx" % r)
        rc, counters, text = stats_of(path)
        if not expect(rc == 0, "dense rank %d: optimize" % r):
            print(text)
            continue
        got = counters.get(("fuse-attention", "attention"))
        expect(got == layers, "dense rank %d: fuse-attention attention = %s (want %d, one per "
               "layer)" % (r, got, layers))
        m = onnx.load(path + ".opt.onnx")
        ops = [n.op_type for n in m.graph.node]
        att = [n for n in m.graph.node if n.op_type == "Attention"]
        expect("Softmax" not in ops and len(att) == layers,
               "dense rank %d: %d Attention nodes, no Softmax left" % (r, len(att)))
        # the caches fold: every Attention has past inputs and present outputs
        # that are the graph's present_key.L / present_value.L
        outs = {o.name for o in m.graph.output}
        expect(all(len(n.input) >= 6 and n.output[1] in outs and n.output[2] in outs for n in att),
               "dense rank %d: the KV Concats fold into past/present" % r)


def main():
    global TPFUSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    a = ap.parse_args()
    TPFUSE = a.tpfuse
    work = tempfile.mkdtemp(prefix="tpf-attention-")

    for dn, dt in DTYPES.items():
        check_case(work, "tpmodels-decode-" + dn, tpmodels_decode(dt), 2)
        for sp in ("eager", "sdpa", "sdpa3d", "softcap"):
            check_case(work, "%s-decode-%s" % (sp, dn), hf_block(dt, sp, 1, True), 1)
            check_case(work, "%s-prefill-%s" % (sp, dn), hf_block(dt, sp, 4, False), 1)
    check_dense_example(work)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
