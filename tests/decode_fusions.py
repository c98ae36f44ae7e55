#!/usr/bin/env python3
"""The decode fusions on generated decoder blocks: merge-parallel-matmuls,
fuse-swiglu and fuse-rotary-embedding.

For every model (the rotary and gated-MLP spellings of the dynamo and
TorchScript exporters, partial rotary with constant caches, GELU forms) in
float32, float16 and bfloat16:

* `tpfuse optimize --stats` fires the expected counters (a pass that
  stops matching fails here);
* `tpfuse run --random-inputs --optimize --verify` runs the unfused and
  the fused graph on the CPU runtime and compares every output (the fused
  kernels round where the chains they replace round, so 16-bit graphs
  match within the dtype bound, in practice bit for bit);
* for float32, the model rewritten by merge-parallel-matmuls and
  fuse-rotary-embedding only (standard ONNX ops: MatMul, Split,
  RotaryEmbedding) runs in ONNX Runtime and gives the original model's
  outputs there (the output stays usable by other ONNX tools);
* tpfuse's CPU runtime on that rewritten model matches ONNX Runtime on
  the original, and the same model with a planted sign flip of the
  rotation does not (the comparison is not vacuous).

Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import os
import re
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

B, S, H, HKV, D, HID, FFN = 2, 3, 4, 2, 8, 16, 12
DTYPES = {"f32": T.FLOAT, "f16": T.FLOAT16, "bf16": T.BFLOAT16}


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
        self.n = 0
        self.rng = np.random.default_rng(7)

    def name(self, p):
        self.n += 1
        return "%s_%d" % (p, self.n)

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def init(self, arr, tp=None, prefix="c"):
        nm = self.name(prefix)
        arr = np.asarray(arr)
        if tp is None:
            tp = self.dt if arr.dtype.kind == "f" else T.INT64
        if tp in (T.FLOAT, T.INT64):
            t = numpy_helper.from_array(arr.astype(np.float32 if tp == T.FLOAT else np.int64), nm)
        elif tp == T.FLOAT16:
            t = numpy_helper.from_array(arr.astype(np.float16), nm)
        else:
            t = helper.make_tensor(nm, T.BFLOAT16, arr.shape, arr.astype(np.float32).flatten().tolist())
        self.inits.append(t)
        return nm

    def ints(self, vals):
        return self.init(np.array(vals, dtype=np.int64), T.INT64, "i")

    def weight(self, k, n):
        return self.init(self.rng.standard_normal((k, n)) / np.sqrt(k), prefix="w")

    # ---- rotate-half ------------------------------------------------------
    def rotate_half(self, x, torchscript):
        ax = self.ints([3])
        one = self.ints([1])
        if torchscript:
            # end = Unsqueeze(Div(Gather(Shape(x), 3), 2), 0)
            sh = self.op("Shape", [x])
            d = self.op("Gather", [sh, self.init(np.array(3, dtype=np.int64), T.INT64)], axis=0)
            h = self.op("Div", [d, self.init(np.array(2, dtype=np.int64), T.INT64)])
            h1 = self.op("Unsqueeze", [h, self.ints([0])])
            lo = self.op("Slice", [x, self.ints([0]), h1, ax, one])
            hi = self.op("Slice", [x, h1, self.ints([2**63 - 1]), ax, one])
        else:
            lo = self.op("Slice", [x, self.ints([0]), self.ints([D // 2]), ax, one])
            hi = self.op("Slice", [x, self.ints([D // 2]), self.ints([2**63 - 1]), ax, one])
        return self.op("Concat", [self.op("Neg", [hi]), lo], axis=-1)

    def rope(self, x, cos, sin, torchscript):
        a = self.op("Mul", [x, cos])
        r = self.op("Mul", [self.rotate_half(x, torchscript), sin])
        return self.op("Add", [a, r] if not torchscript else [r, a])

    def heads(self, y, nh):
        r = self.op("Reshape", [y, self.ints([B, S, nh, D])])
        return self.op("Transpose", [r], perm=[0, 2, 1, 3])


def llama_block(dt, torchscript, act):
    """q/k/v and gate/up projections of one input, rotary on q and k with
    caches Cos/Sin(Concat(f, f)) unsqueezed at the heads axis, a gated MLP."""
    b = Builder(dt)
    x = "x"
    q = b.op("MatMul", [x, b.weight(HID, H * D)])
    k = b.op("MatMul", [x, b.weight(HID, HKV * D)])
    v = b.op("MatMul", [x, b.weight(HID, HKV * D)])
    cat = b.op("Concat", ["angles", "angles"], axis=-1)
    cos, sin = b.op("Cos", [cat]), b.op("Sin", [cat])
    if torchscript:
        cos = b.op("Mul", [cos, b.init(np.array(1.0, dtype=np.float32))])
        sin = b.op("Mul", [sin, b.init(np.array(1.0, dtype=np.float32))])
    cos4 = b.op("Unsqueeze", [cos, b.ints([1])])
    sin4 = b.op("Unsqueeze", [sin, b.ints([1])])
    qr = b.rope(b.heads(q, H), cos4, sin4, torchscript)
    kr = b.rope(b.heads(k, HKV), cos4, sin4, torchscript)
    vh = b.heads(v, HKV)
    g = b.op("MatMul", [x, b.weight(HID, FFN)])
    u = b.op("MatMul", [x, b.weight(HID, FFN)])
    h = gated(b, g, u, act, torchscript)
    outs = [("q_rot", qr, [B, H, S, D]), ("k_rot", kr, [B, HKV, S, D]), ("v", vh, [B, HKV, S, D]),
            ("h", h, [B, S, FFN])]
    ins = [("x", [B, S, HID]), ("angles", [1, S, D // 2])]
    return finish(b, ins, outs, 17 if torchscript else 18)


def gated(b, g, u, act, torchscript):
    c = lambda v: b.init(np.array(v, dtype=np.float32))  # noqa: E731
    if act == "silu":
        s = b.op("Sigmoid", [g])
        return b.op("Mul", [b.op("Mul", [g, s]), u])
    if act == "gelu_tanh":
        if torchscript:
            cube = b.op("Mul", [g, b.op("Mul", [g, g])])
        else:
            cube = b.op("Pow", [g, c(3.0)])
        inner = b.op("Add", [g, b.op("Mul", [c(0.044715), cube])])
        t = b.op("Tanh", [b.op("Mul", [c(0.7978845608), inner])])
        if torchscript:
            gl = b.op("Mul", [c(0.5), b.op("Mul", [g, b.op("Add", [c(1.0), t])])])
        else:
            gl = b.op("Mul", [g, b.op("Mul", [c(0.5), b.op("Add", [t, c(1.0)])])])
        return b.op("Mul", [gl, u])
    # gelu (erf)
    e = b.op("Erf", [b.op("Div", [g, c(1.4142135)])])
    gl = b.op("Mul", [b.op("Mul", [g, b.op("Add", [e, c(1.0)])]), c(0.5)])
    return b.op("Mul", [u, gl])


def partial_block(dt):
    """Partial rotary (4 of 8 dims turn) with constant caches [1, 1, S, 4]."""
    b = Builder(dt)
    rot = 4
    ang = np.arange(S)[:, None] * (10000.0 ** (-np.arange(rot // 2) / (rot // 2)))[None, :]
    emb = np.concatenate([ang, ang], axis=-1)[None, None]
    cos, sin = b.init(np.cos(emb), prefix="cos"), b.init(np.sin(emb), prefix="sin")
    ax, one = b.ints([3]), b.ints([1])
    x = "q"
    xr = b.op("Slice", [x, b.ints([0]), b.ints([rot]), ax, one])
    xp = b.op("Slice", [x, b.ints([rot]), b.ints([2**63 - 1]), ax, one])
    lo = b.op("Slice", [xr, b.ints([0]), b.ints([rot // 2]), ax, one])
    hi = b.op("Slice", [xr, b.ints([rot // 2]), b.ints([2**63 - 1]), ax, one])
    rh = b.op("Concat", [b.op("Neg", [hi]), lo], axis=-1)
    y = b.op("Add", [b.op("Mul", [xr, cos]), b.op("Mul", [rh, sin])])
    out = b.op("Concat", [y, xp], axis=-1)
    return finish(b, [("q", [B, H, S, D])], [("q_rot", out, [B, H, S, D])], 23)


def gather_block(dt):
    """Older exports: cos/sin tables [P, D] (buffers) gathered at position ids
    [1, seq] (batch 1: expanded to the input's batch), unsqueezed at the heads axis."""
    b = Builder(dt)
    P = 16
    ang = np.arange(P)[:, None] * (10000.0 ** (-np.arange(D // 2) / (D // 2)))[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    ct, st = b.init(np.cos(emb), prefix="cos_cached"), b.init(np.sin(emb), prefix="sin_cached")
    cos = b.op("Unsqueeze", [b.op("Gather", [ct, "position_ids"], axis=0), b.ints([1])])
    sin = b.op("Unsqueeze", [b.op("Gather", [st, "position_ids"], axis=0), b.ints([1])])
    y = b.rope("q", cos, sin, False)
    g = helper.make_graph(
        b.nodes + [helper.make_node("Identity", [y], ["q_rot"], name="out")], "block",
        [helper.make_tensor_value_info("q", dt, [B, H, S, D]),
         helper.make_tensor_value_info("position_ids", T.INT64, [1, S])],
        [helper.make_tensor_value_info("q_rot", dt, [B, H, S, D])], initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def finish(b, ins, outs, opset):
    nodes = list(b.nodes)
    for nm, v, _ in outs:
        nodes.append(helper.make_node("Identity", [v], [nm], name="out_" + nm))
    g = helper.make_graph(nodes, "block",
                          [helper.make_tensor_value_info(n, b.dt, s) for n, s in ins],
                          [helper.make_tensor_value_info(n, b.dt, s) for n, _, s in outs],
                          initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


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


def ort_equal(orig, fused, feeds):
    a = ort_run(orig, feeds)
    b = ort_run(fused, feeds)
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def plant_sign_flip(path, out):
    """The fused model with the first RotaryEmbedding's sin cache negated."""
    m = onnx.load(path)
    g = m.graph
    for i, n in enumerate(g.node):
        if n.op_type == "RotaryEmbedding":
            neg = helper.make_node("Neg", [n.input[2]], [n.input[2] + "_planted"], name="planted")
            n.input[2] = n.input[2] + "_planted"
            g.node.insert(i, neg)
            break
    onnx.save(m, out)


def main():
    global TPFUSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    a = ap.parse_args()
    TPFUSE = a.tpfuse
    work = tempfile.mkdtemp(prefix="tpf-decode-")

    cases = []
    for dn, dt in DTYPES.items():
        for ts in (False, True):
            for act in ("silu", "gelu_tanh", "gelu"):
                cases.append(("%s-%s-%s" % ("torchscript" if ts else "dynamo", act, dn),
                              llama_block(dt, ts, act),
                              {("merge-parallel-matmuls", "groups-merged"): 1,
                               ("merge-parallel-matmuls", "matmuls-merged"): 5,
                               ("fuse-rotary-embedding", "rotate-half"): 2,
                               ("fuse-swiglu", {"silu": "swiglu", "gelu_tanh": "geglu-tanh",
                                                "gelu": "geglu"}[act]): 1}))
        cases.append(("partial-" + dn, partial_block(dt),
                      {("fuse-rotary-embedding", "rotate-half-partial"): 1}))
        cases.append(("gathered-" + dn, gather_block(dt),
                      {("fuse-rotary-embedding", "rotate-half"): 1}))

    for name, model, want in cases:
        path = os.path.join(work, name + ".onnx")
        onnx.save(model, path)
        rc, counters, text = stats_of(path)
        if not expect(rc == 0, "%s: optimize" % name):
            print(text)
            continue
        for key, n in want.items():
            expect(counters.get(key) == n, "%s: %s %s = %s (want %d)" % (name, key[0], key[1],
                                                                        counters.get(key), n))
        fused = onnx.load(path + ".opt.onnx")
        ops = [n.op_type for n in fused.graph.node]
        expect("Neg" not in ops and "Sigmoid" not in ops and "Tanh" not in ops and "Erf" not in ops,
               "%s: no Neg/Sigmoid/Tanh/Erf left (%s)" % (name, ",".join(sorted(set(ops)))))
        rc, out, err = tpfuse("run", path, "--random-inputs", "5", "--optimize", "--verify", "--quiet")
        if not expect(rc == 0, "%s: run --optimize --verify" % name):
            print(out + err)

        if name.endswith("-f32"):
            # standard ONNX ops only: ONNX Runtime runs the rewritten model
            rc, _, text = stats_of(path, "merge-parallel-matmuls,fuse-rotary-embedding")
            std = path + ".opt.onnx"
            rng = np.random.default_rng(3)
            feeds = {}
            for i in model.graph.input:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
                if i.type.tensor_type.elem_type == T.INT64:
                    feeds[i.name] = rng.integers(0, 16, shape).astype(np.int64)
                else:
                    feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
            try:
                err_max = ort_equal(path, std, feeds)
                expect(err_max <= 1e-5, "%s: ONNX Runtime, original vs rewritten: max error %.2g"
                       % (name, err_max))
            except Exception as e:  # noqa: BLE001
                expect(False, "%s: ONNX Runtime runs the rewritten model (%s)" % (name, str(e)[:200]))
            # tpfuse's CPU kernels on the rewritten model against ONNX Runtime
            # on the original; a planted sign flip of the rotation must fail
            want = ort_run(path, feeds)
            ind = os.path.join(work, name + ".in")
            os.makedirs(ind, exist_ok=True)
            for i, inp in enumerate(model.graph.input):
                onnx.save_tensor(numpy_helper.from_array(feeds[inp.name], inp.name),
                                 os.path.join(ind, "input_%d.pb" % i))
            bad = path + ".planted.onnx"
            plant_sign_flip(std, bad)
            for label, mp, ok in (("rewritten", std, True), ("planted", bad, False)):
                od = os.path.join(work, name + "." + label)
                rc, out, err = tpfuse("run", mp, "--inputs", ind, "--quiet", "--outputs", od)
                if not expect(rc == 0, "%s: tpfuse runs the %s model" % (name, label)):
                    print(out + err)
                    continue
                got = [numpy_helper.to_array(onnx.load_tensor(os.path.join(od, "output_%d.pb" % i)))
                       for i in range(len(want))]
                e = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
                if ok:
                    expect(e <= 1e-5, "%s: CPU runtime on the rewritten model vs ONNX Runtime on "
                           "the original: %.2g" % (name, e))
                else:
                    expect(e > 1e-3, "%s: a planted sign flip of the rotation is seen (%.2g)"
                           % (name, e))

    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
