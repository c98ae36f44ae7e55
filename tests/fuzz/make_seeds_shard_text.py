#!/usr/bin/env python3
"""Writes the seed corpora of fuzz-shard and fuzz-text (tests/fuzz/corpus/shard
and corpus/text).

    make_seeds_shard_text.py --tpfuse build/cli/tpfuse

shard: single-device models, each behind the configuration byte of
fuzz-shard.c (world size 2, 4, and 2 with --vocab-parallel-embedding):
the example families of examples/tpmodels.py made small (hidden 16, one
layer), an MLP, an MLP whose Reshape target is computed from Shape, and an
MLP with int64 shape arithmetic at the ends of the type.

text: the text dumps (`tpfuse dump`) of those models and of the round-trip
fixtures of corpus/model that verify, the pass tests' .tpf files, and a
few hand-written texts (external data, "(N bytes)" tensors, a function,
a subgraph).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))

MAX_BYTES = 32768  # scripts/fuzz.sh's -max_len


def mlp(kind):
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w2"], ["y0"], name="down")]
    inits = [numpy_helper.from_array(np.full((16, 32), 0.5, np.float32), "w1"),
             numpy_helper.from_array(np.full((32, 16), 0.25, np.float32), "w2")]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, ["batch", 16])]
    last = "y0"
    if kind == "reshape":
        inits += [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                  numpy_helper.from_array(np.array([2], np.int64), "two"),
                  numpy_helper.from_array(np.array([8], np.int64), "eight")]
        nodes += [helper.make_node("Shape", ["y0"], ["s"], name="shape"),
                  helper.make_node("Gather", ["s", "zero"], ["b"], name="batch_dim", axis=0),
                  helper.make_node("Mul", ["b", "two"], ["b2"], name="times_two"),
                  helper.make_node("Concat", ["b2", "eight"], ["tgt"], name="target", axis=0),
                  helper.make_node("Reshape", ["y0", "tgt"], ["r"], name="reshape"),
                  helper.make_node("Shape", ["y0"], ["s2"], name="shape_back"),
                  helper.make_node("Reshape", ["r", "s2"], ["y1"], name="reshape_back")]
        last = "y1"
    if kind == "overflow":
        inits += [numpy_helper.from_array(np.array([-2**63], np.int64), "lowest"),
                  numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
                  numpy_helper.from_array(np.array([2**62], np.int64), "quarter"),
                  numpy_helper.from_array(np.array([4], np.int64), "four")]
        nodes += [helper.make_node("Div", ["lowest", "minus_one"], ["dv"], name="div"),
                  helper.make_node("Mod", ["lowest", "minus_one"], ["md"], name="mod"),
                  helper.make_node("Mul", ["quarter", "four"], ["ml"], name="mul"),
                  helper.make_node("Concat", ["dv", "md", "ml"], ["cat"], name="cat", axis=0)]
        outs.append(helper.make_tensor_value_info("cat", T.INT64, [3]))
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    g = helper.make_graph(nodes, "mlp_" + kind, [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 16])],
                          outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def families():
    import argparse as ap
    import tpmodels
    for fam in ["dense", "dense_fp8", "hybrid", "minimax_qk", "qwen_moe", "gdn_a2a"]:
        a = ap.Namespace(hidden=16, heads=2, kv_heads=2, head_dim=8, ffn=32, layers=1, experts=2, topk=1,
                         moe_ffn=8, shared_ffn=16, world_size=1, batch=1, past=2, seq_lens="2,4,2",
                         dtype="float32")
        cfg = tpmodels.make_config(fam, a)
        _, full, _, _ = tpmodels.build_models(cfg, 1, full=True)
        yield fam, full


HAND_WRITTEN = {
    "external.tpf": 'ir_version 9\nopset "" 18\ngraph "g" {\n  input %0: f32[2] "x"\n'
                    '  init %1: f32[2] "w" (8 bytes, external "w.bin" offset 0)\n'
                    '  %2 = Add(%0, %1) : f32[2]  # add\n  output %2: f32[2] "y"\n}\n',
    "zeros.tpf": 'ir_version 9\nopset "" 18\ngraph "g" {\n  input %0: f32[4,4] "x"\n'
                 '  init %1: f32[4,4] "w" (64 bytes)\n  %2 = MatMul(%0, %1) : f32[4,4]  # mm\n'
                 '  output %2: f32[4,4] "y"\n}\n',
    "not_loaded.tpf": 'ir_version 9\nopset "" 18\ngraph "g" {\n  input %0: f32[2] "x"\n'
                      '  init %1: f32[2] "w" (8 bytes, not loaded)\n  %2 = Mul(%0, %1) : f32[2]\n'
                      '  output %2: f32[2] "y"\n}\n',
    "function.tpf": 'ir_version 9\nopset "" 18\nopset "custom" 1\ngraph "g" {\n  input %0: f32[3] "x"\n'
                    '  %1 = custom.MyFn(%0) {alpha=1.0} : f32[3]  # call\n  output %1: f32[3] "y"\n}\n'
                    'function "custom" "MyFn" {\n  attribute "alpha"\n  opset "" 18\n  input %0: ? "x"\n'
                    '  %1 = Relu(%0) : ?  # -> y\n  output %1: ? "y"\n}\n',
    "if.tpf": 'ir_version 9\nopset "" 18\ngraph "g" {\n  input %0: bool[] "c"\n  input %1: f32[2] "x"\n'
              '  %2 = If(%0) {else_branch=graph, then_branch=graph} : f32[2]  # branch\n'
              '    else_branch: graph "else" {\n      %3 = Neg(%1) : f32[2]  # neg\n'
              '      output %3: f32[2] "n"\n    }\n    then_branch: graph "then" {\n'
              '      output %1: f32[2] "x"\n    }\n  output %2: f32[2] "y"\n}\n',
    "shape_math.tpf": 'ir_version 9\nopset "" 18\ngraph "g" {\n  input %0: f32[B,8] "x"\n'
                      '  init %1: i64[1] "lowest" = [-9223372036854775808]\n  init %2: i64[1] "m1" = [-1]\n'
                      '  %3 = Div(%1, %2) : i64[1]  # div\n  %4 = Mod(%1, %2) : i64[1]  # mod\n'
                      '  %5 = Shape(%0) : i64[2]  # shape\n  %6 = Concat(%3, %4, %5) {axis=0} : i64[4]  # cat\n'
                      '  output %6: i64[4] "y"\n}\n',
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    a = ap.parse_args()
    shard_dir = os.path.join(HERE, "corpus", "shard")
    text_dir = os.path.join(HERE, "corpus", "text")
    work = os.path.join(HERE, "corpus", ".work")
    for d in (shard_dir, text_dir, work):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    models = [("mlp", mlp("plain")), ("mlp_reshape", mlp("reshape")), ("mlp_overflow", mlp("overflow"))]
    models += list(families())
    for name, m in models:
        data = m.SerializeToString()
        if len(data) + 1 > MAX_BYTES:
            print("skipped (too large):", name)
            continue
        for byte, tag in ((1, "w2"), (3, "w4"), (5, "w2_vocab")):
            with open(os.path.join(shard_dir, "%s_%s" % (name, tag)), "wb") as f:
                f.write(bytes([byte]) + data)
        path = os.path.join(work, name + ".onnx")
        onnx.save(m, path)
    fixtures = os.path.join(HERE, "corpus", "model")
    sources = [os.path.join(work, f) for f in sorted(os.listdir(work))]
    sources += [os.path.join(fixtures, f) for f in sorted(os.listdir(fixtures)) if f.startswith("fixture_")]
    for src in sources:
        out = os.path.join(text_dir, os.path.splitext(os.path.basename(src))[0] + ".tpf")
        p = subprocess.run([a.tpfuse, "dump", src, "-o", out], capture_output=True, text=True)
        if p.returncode or os.path.getsize(out) > MAX_BYTES:
            if os.path.exists(out):
                os.remove(out)
            print("skipped:", os.path.basename(src), p.stderr.strip()[:120])
    passes = os.path.join(ROOT, "tests", "passes")
    for f in sorted(os.listdir(passes)):
        if f.endswith(".tpf") and os.path.getsize(os.path.join(passes, f)) <= MAX_BYTES:
            shutil.copy(os.path.join(passes, f), os.path.join(text_dir, "pass_" + f))
    for name, text in HAND_WRITTEN.items():
        with open(os.path.join(text_dir, "hand_" + name), "w") as f:
            f.write(text)
    shutil.rmtree(work)
    print(len(os.listdir(shard_dir)), "shard seeds,", len(os.listdir(text_dir)), "text seeds")


if __name__ == "__main__":
    main()
