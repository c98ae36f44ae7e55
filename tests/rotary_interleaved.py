#!/usr/bin/env python3
"""fuse-rotary-embedding on interleaved rotary embeddings (GPT-J's
rotate_every_two, Cohere's and ERNIE 4.5's rotate_half, DeepSeek-V3's
apply_rotary_pos_emb_interleave: the pairs (x[2i], x[2i+1]) turn) and on
opset-17 models whose Reduce ops keep their `axes` attribute.

The models spell the rotation as the exporters do: x[..., ::2] and
x[..., 1::2] (Slice with step 2), torch.stack(-1) (Unsqueeze + Concat) and
flatten (Reshape), caches Cos/Sin of repeat_interleave(f, 2) (Unsqueeze,
Expand or Tile, Reshape) or constants whose pairs are equal.  For each:

* `tpfuse optimize --stats` fires the expected counter and writes one
  RotaryEmbedding per site, with interleaved = 1 (DeepSeek-V3's form, laid
  out in halves: 0);
* `tpfuse run --random-inputs --optimize --verify` compares the unfused and
  the fused graph on the CPU runtime;
* for float32, ONNX Runtime gives the original model's outputs on the
  rewritten one, and the rewritten model with a planted sign flip of the
  rotation does not (the comparison is not vacuous).

Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import needs_onnx  # noqa: F401 (first: exits 77, skipped, without onnx)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import decode_fusions  # noqa: E402 (its checks, optimize --stats, ONNX Runtime, sign flip)
from decode_fusions import expect, failures, ort_run, plant_sign_flip, stats_of, tpfuse  # noqa: E402,E501

B, H, S, D = 2, 3, 5, 8
BIG = 9223372036854775807


class Builder:
    def __init__(self, dt):
        self.dt, self.nodes, self.inits, self.k = dt, [], [], 0

    def name(self, p):
        self.k += 1
        return "%s_%d" % (p, self.k)

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def ints(self, vals):
        nm = self.name("i")
        self.inits.append(numpy_helper.from_array(np.array(vals, dtype=np.int64), nm))
        return nm

    def const(self, arr):
        nm = self.name("c")
        t = numpy_helper.from_array(arr.astype(np.float32), nm)
        if self.dt != T.FLOAT:
            t = helper.make_tensor(nm, self.dt, arr.shape,
                                   arr.astype(np.float16 if self.dt == T.FLOAT16 else np.float32)
                                   .flatten().tolist())
        self.inits.append(t)
        return nm

    def repeat_pairs(self, f, rank, tile, torchscript):
        """repeat_interleave(f, 2, dim=-1): Unsqueeze, Expand|Tile, Reshape."""
        u = self.op("Unsqueeze", [f, self.ints([rank])])
        e = self.op("Tile" if tile else "Expand", [u, self.ints([1] * rank + [2])])
        if torchscript:
            sh = self.op("Shape", [e])
            head = self.op("Slice", [sh, self.ints([0]), self.ints([rank - 1]), self.ints([0])])
            shape = self.op("Concat", [head, self.ints([-1])], axis=0)
        else:
            shape = self.ints([0] * (rank - 1) + [-1])
        return self.op("Reshape", [e, shape])

    def rotate_pairs(self, x, torchscript):
        """stack([-x[..., 1::2], x[..., ::2]], -1).flatten(-2)"""
        even = self.op("Slice", [x, self.ints([0]), self.ints([BIG]), self.ints([3]),
                                 self.ints([2])])
        odd = self.op("Slice", [x, self.ints([1]), self.ints([BIG]), self.ints([-1]),
                                self.ints([2])])
        neg = self.op("Neg", [odd])
        ax = 4 if torchscript else -1
        st = self.op("Concat", [self.op("Unsqueeze", [neg, self.ints([ax])]),
                                self.op("Unsqueeze", [even, self.ints([ax])])], axis=ax)
        if torchscript:
            sh = self.op("Shape", [st])
            head = self.op("Slice", [sh, self.ints([0]), self.ints([3]), self.ints([0])])
            shape = self.op("Concat", [head, self.ints([-1])], axis=0)
        else:
            shape = self.ints([0, 0, 0, -1])
        return self.op("Reshape", [st, shape])

    def rope(self, x, cos, sin, torchscript):
        return self.op("Add", [self.op("Mul", [x, cos]),
                               self.op("Mul", [self.rotate_pairs(x, torchscript), sin])])


def finish(b, ins, outs, opset):
    g = helper.make_graph(b.nodes, "block",
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                          [helper.make_tensor_value_info(v, b.dt, s) for v, s in outs],
                          initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def computed_block(dt, torchscript, halves=False, ernie=False):
    """q and k turned by Cos/Sin(repeat_interleave(angles)) (halves: of
    Concat(angles, angles), which does not fuse; ernie: ERNIE 4.5's
    repeat_interleave of the first half of Cos/Sin(Concat(angles, angles))
    unsqueezed); the TorchScript spelling at opset 17 with an RMSNorm of
    ReduceMean {axes = [-1]}."""
    b = Builder(dt)
    if halves or ernie:
        rep = b.op("Concat", ["angles", "angles"], axis=-1)
    else:
        rep = b.repeat_pairs("angles", 3, torchscript, torchscript)
    cos = b.op("Unsqueeze", [b.op("Cos", [rep]), b.ints([1])])
    sin = b.op("Unsqueeze", [b.op("Sin", [rep]), b.ints([1])])
    if ernie:
        half = [b.ints([0]), b.ints([D // 2]), b.ints([-1])]
        cos = b.repeat_pairs(b.op("Slice", [cos] + half), 4, False, torchscript)
        sin = b.repeat_pairs(b.op("Slice", [sin] + half), 4, False, torchscript)
    outs = [(b.rope("q", cos, sin, torchscript), [B, H, S, D]),
            (b.rope("k", cos, sin, torchscript), [B, 1, S, D])]
    ins = [("q", dt, [B, H, S, D]), ("k", dt, [B, 1, S, D]), ("angles", dt, [B, S, D // 2])]
    opset = 23
    if torchscript:
        # RMSNorm as TorchScript writes it at opset 17
        ms = b.op("ReduceMean", [b.op("Mul", ["h", "h"])], axes=[-1], keepdims=1)
        outs.append((b.op("Div", ["h", b.op("Sqrt", [ms])]), [B, S, D]))
        ins.append(("h", dt, [B, S, D]))
        opset = 17
    return finish(b, ins, outs, opset)


def partial_block(dt):
    """GPT-J: the first 4 of 8 dims turn, caches constants of equal pairs."""
    b = Builder(dt)
    r = 4
    ang = np.arange(S * r // 2, dtype=np.float32).reshape(1, 1, S, r // 2) * 0.37
    cos = b.const(np.repeat(np.cos(ang), 2, axis=-1))
    sin = b.const(np.repeat(np.sin(ang), 2, axis=-1))
    rot = b.op("Slice", ["q", b.ints([0]), b.ints([r]), b.ints([-1])])
    keep = b.op("Slice", ["q", b.ints([r]), b.ints([BIG]), b.ints([-1])])
    y = b.op("Concat", [b.rope(rot, cos, sin, False), keep], axis=-1)
    return finish(b, [("q", dt, [B, H, S, D])], [(y, [B, H, S, D])], 18)


def deepseek_block(dt):
    """DeepSeek-V3's apply_rotary_pos_emb_interleave: the pairs turn, the
    result in halves, Concat(x1 * cos - x2 * sin, x2 * cos + x1 * sin)."""
    b = Builder(dt)
    full = b.op("Concat", ["angles", "angles"], axis=-1)
    half = [b.ints([0]), b.ints([D // 2]), b.ints([-1])]
    cos = b.op("Unsqueeze", [b.op("Slice", [b.op("Cos", [full])] + half), b.ints([1])])
    sin = b.op("Unsqueeze", [b.op("Slice", [b.op("Sin", [full])] + half), b.ints([1])])
    outs = []
    for x, h in (("q", H), ("k", 1)):
        x1 = b.op("Slice", [x, b.ints([0]), b.ints([BIG]), b.ints([-1]), b.ints([2])])
        x2 = b.op("Slice", [x, b.ints([1]), b.ints([BIG]), b.ints([-1]), b.ints([2])])
        re = b.op("Sub", [b.op("Mul", [x1, cos]), b.op("Mul", [x2, sin])])
        im = b.op("Add", [b.op("Mul", [x2, cos]), b.op("Mul", [x1, sin])])
        outs.append((b.op("Concat", [re, im], axis=-1), [B, h, S, D]))
    ins = [("q", dt, [B, H, S, D]), ("k", dt, [B, 1, S, D]), ("angles", dt, [B, S, D // 2])]
    return finish(b, ins, outs, 18)


def max_err(a_path, b_path, feeds):
    a, b = ort_run(a_path, feeds), ort_run(b_path, feeds)
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def check_case(work, name, model, counter, sites, interleaved=1):
    path = os.path.join(work, name + ".onnx")
    onnx.save(model, path)
    rc, counters, text = stats_of(path)
    if not expect(rc == 0, "%s: optimize" % name):
        print(text)
        return
    got = counters.get(("fuse-rotary-embedding", counter))
    expect(got == sites, "%s: fuse-rotary-embedding %s = %s (want %d)" % (name, counter, got, sites))
    fused = onnx.load(path + ".opt.onnx")
    ropes = [n for n in fused.graph.node if n.op_type == "RotaryEmbedding"]
    il = [a.i for n in ropes for a in n.attribute if a.name == "interleaved"]
    expect(len(ropes) == sites and il == [1] * (sites * interleaved),
           "%s: %d RotaryEmbedding with interleaved=%d (%d, %s)" % (name, sites, interleaved,
                                                                   len(ropes), il))
    expect(all(n.op_type not in ("Neg", "Sub") for n in fused.graph.node),
           "%s: no Neg or Sub left" % name)
    rc, out, err = tpfuse("run", path, "--random-inputs", "5", "--optimize", "--verify", "--quiet")
    if not expect(rc == 0, "%s: run --optimize --verify" % name):
        print(out + err)
    if model.graph.input[0].type.tensor_type.elem_type != T.FLOAT:
        return
    rc, _, text = stats_of(path, "fuse-rotary-embedding")
    std = path + ".opt.onnx"
    rng = np.random.default_rng(5)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    try:
        e = max_err(path, std, feeds)
        expect(e <= 1e-5, "%s: ONNX Runtime, original vs rewritten: max error %.2g" % (name, e))
        planted = path + ".planted.onnx"
        plant_sign_flip(std, planted)
        e = max_err(path, planted, feeds)
        expect(e > 1e-2, "%s: a planted sign flip differs (max error %.2g)" % (name, e))
    except Exception as ex:  # noqa: BLE001
        expect(False, "%s: ONNX Runtime runs the rewritten model (%s)" % (name, str(ex)[:200]))


def unfused_stays(work):
    """An opset-17 model that does not fuse is written as it was read: the
    raise to 23 (ReduceMean's axes made an input) is undone, attribute
    order included."""
    path = os.path.join(work, "unfused-opset17.onnx")
    onnx.save(computed_block(T.FLOAT, True, halves=True), path)
    rc1, _, _ = tpfuse("optimize", path, "-o", path + ".none.onnx", "--passes", "none")
    rc2, _, _ = tpfuse("optimize", path, "-o", path + ".rope.onnx", "--passes",
                       "fuse-rotary-embedding")
    with open(path + ".none.onnx", "rb") as f1, open(path + ".rope.onnx", "rb") as f2:
        same = f1.read() == f2.read()
    expect(rc1 == 0 and rc2 == 0 and same,
           "unfused-opset17: the model is written unchanged (opset 17, axes attributes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    decode_fusions.TPFUSE = ap.parse_args().tpfuse
    work = tempfile.mkdtemp(prefix="tpf-rope-il-")
    for dn, dt in (("f32", T.FLOAT), ("f16", T.FLOAT16)):
        check_case(work, "dynamo-" + dn, computed_block(dt, False), "interleaved", 2)
        check_case(work, "torchscript-opset17-" + dn, computed_block(dt, True), "interleaved", 2)
        check_case(work, "partial-" + dn, partial_block(dt), "interleaved-partial", 1)
        check_case(work, "ernie-" + dn, computed_block(dt, False, ernie=True), "interleaved", 2)
        check_case(work, "deepseek-" + dn, deepseek_block(dt), "interleaved-to-halves", 2,
                   interleaved=0)
    unfused_stays(work)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
