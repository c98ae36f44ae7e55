#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets.

    make_corpus.py OUTDIR        writes OUTDIR/model/*.onnx, OUTDIR/builder/*,
                                 OUTDIR/tensor/*.pb, OUTDIR/session/* and
                                 OUTDIR/strategy/*

model/ holds small valid models (the round-trip fixtures, one rank of each
example family, and models made here for each fusion pattern) plus broken
ones (truncated, cycles, undefined inputs, wrong arity, bad dtypes, external
data that points out of the model's folder, absurd shapes).  builder/ holds a
few byte programs for the structure-aware target (tests/fuzz/fuzz-builder.c),
tensor/ test-data TensorProto files (tests/fuzz/fuzz-tensor.c), session/
the valid models of model/ behind a byte that says how to run them
(tests/fuzz/fuzz-session.c), strategy/ collective strategy tables, the
measured ones of bench/results and broken ones (tests/fuzz/fuzz-strategy.c).

The committed corpus (tests/fuzz/corpus/) was made with this script; files
larger than 24 KiB are left out to keep the corpus small.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

MAX_BYTES = 24 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def model(nodes, inputs, outputs, inits=(), opsets=None, ir=10, meta=None, value_info=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    ops = opsets or [helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = ir
    for k, v in (meta or {}).items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def gamma(name, n, dtype=np.float32):
    return numpy_helper.from_array(np.linspace(0.5, 1.5, n).astype(dtype), name)


def fusable():
    """Model seeds that the default pipeline rewrites."""
    out = {}
    H = 8
    tp = {"tp_rank": "0", "tp_world_size": "2"}
    # AllReduce -> Add(residual) -> RMSNormalization
    out["ar_add_rms"] = model(
        [helper.make_node("AllReduce", ["x"], ["r"], domain="com.microsoft", name="ar"),
         helper.make_node("Add", ["r", "res"], ["s"], name="add"),
         helper.make_node("RMSNormalization", ["s", "g"], ["y"], epsilon=1e-6, axis=-1,
                          name="norm")],
        [vi("x", T.FLOAT, [2, H]), vi("res", T.FLOAT, [2, H])],
        [vi("y", T.FLOAT, [2, H]), vi("s", T.FLOAT, [2, H])], [gamma("g", H)], meta=tp)
    # without a residual, SimplifiedLayerNormalization
    out["ar_sln"] = model(
        [helper.make_node("AllReduce", ["x"], ["r"], domain="com.microsoft"),
         helper.make_node("SimplifiedLayerNormalization", ["r", "g"], ["y"], epsilon=1e-5,
                          axis=-1)],
        [vi("x", T.FLOAT, ["T", H])], [vi("y", T.FLOAT, ["T", H])], [gamma("g", H)], meta=tp)
    # decomposed chain Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul -> Mul(gamma)
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    eps = numpy_helper.from_array(np.array(1e-6, np.float32), "eps")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    out["decomposed_rms"] = model(
        [helper.make_node("AllReduce", ["x"], ["r"], domain="com.microsoft"),
         helper.make_node("Add", ["r", "res"], ["s"]),
         helper.make_node("Pow", ["s", "two"], ["sq"]),
         helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
         helper.make_node("Add", ["ms", "eps"], ["mse"]),
         helper.make_node("Sqrt", ["mse"], ["rms"]),
         helper.make_node("Div", ["one", "rms"], ["inv"]),
         helper.make_node("Mul", ["s", "inv"], ["nrm"]),
         helper.make_node("Mul", ["nrm", "g"], ["y"])],
        [vi("x", T.FLOAT, [1, H]), vi("res", T.FLOAT, [1, H])],
        [vi("y", T.FLOAT, [1, H]), vi("s", T.FLOAT, [1, H])],
        [two, eps, axes, one, gamma("g", H)], meta=tp)
    # FP8 quantize after the norm
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    zp = helper.make_tensor("zp", T.FLOAT8E4M3FN, [], [0.0])
    out["ar_rms_fp8"] = model(
        [helper.make_node("AllReduce", ["x"], ["r"], domain="com.microsoft"),
         helper.make_node("Add", ["r", "res"], ["s"]),
         helper.make_node("RMSNormalization", ["s", "g"], ["n"], epsilon=1e-6),
         helper.make_node("QuantizeLinear", ["n", "scale", "zp"], ["q"])],
        [vi("x", T.FLOAT, [2, H]), vi("res", T.FLOAT, [2, H])],
        [vi("q", T.FLOAT8E4M3FN, [2, H]), vi("s", T.FLOAT, [2, H])],
        [gamma("g", H), scale, zp], meta=tp)
    # sigmoid gate: final + sigmoid(gate) * shared
    out["sigmoid_gate"] = model(
        [helper.make_node("Sigmoid", ["gate"], ["sg"]),
         helper.make_node("Mul", ["shared", "sg"], ["p"]),
         helper.make_node("Add", ["final", "p"], ["y"])],
        [vi("final", T.FLOAT, [2, H]), vi("gate", T.FLOAT, [2, 1]), vi("shared", T.FLOAT, [2, H])],
        [vi("y", T.FLOAT, [2, H])])
    # sharded RMSNorm: AllGather(axis=-1) -> RMSNorm(full gamma) -> Slice
    starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([H], np.int64), "ends")
    sl_axes = numpy_helper.from_array(np.array([-1], np.int64), "sl_axes")
    out["sharded_rms"] = model(
        [helper.make_node("AllGather", ["x"], ["full"], domain="com.microsoft", axis=-1,
                          group_size=2),
         helper.make_node("RMSNormalization", ["full", "g"], ["n"], epsilon=1e-6),
         helper.make_node("Slice", ["n", "starts", "ends", "sl_axes"], ["y"])],
        [vi("x", T.FLOAT, [1, H])], [vi("y", T.FLOAT, [1, H])],
        [gamma("g", 2 * H), starts, ends, sl_axes], meta=tp)
    # two independent AllToAll nodes
    out["alltoall_pair"] = model(
        [helper.make_node("AllToAll", ["a"], ["a2"], domain="com.microsoft", group_size=2),
         helper.make_node("AllToAll", ["b"], ["b2"], domain="com.microsoft", group_size=2),
         helper.make_node("Add", ["a2", "b2"], ["y"])],
        [vi("a", T.FLOAT, [4, H]), vi("b", T.FLOAT, [4, H])], [vi("y", T.FLOAT, [4, H])],
        meta=tp)
    # bf16 with Cast around a norm, identity and dead code for the clean-up passes
    out["bf16_cast_identity"] = model(
        [helper.make_node("Identity", ["x"], ["xi"]),
         helper.make_node("Cast", ["xi"], ["xf"], to=T.FLOAT),
         helper.make_node("Cast", ["xf"], ["xf2"], to=T.FLOAT),
         helper.make_node("RMSNormalization", ["xf2", "g"], ["n"], epsilon=1e-6),
         helper.make_node("Cast", ["n"], ["y"], to=T.BFLOAT16),
         helper.make_node("Neg", ["x"], ["dead"])],
        [vi("x", T.BFLOAT16, [2, H])], [vi("y", T.BFLOAT16, [2, H])], [gamma("g", H)])
    return out


def broken():
    """Model seeds that must be rejected (with a clear error)."""
    out = {}
    H = 4
    ok_in, ok_out = [vi("x", T.FLOAT, [H])], [vi("y", T.FLOAT, [H])]
    out["bad_cycle"] = model(
        [helper.make_node("Neg", ["b"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
         helper.make_node("Add", ["x", "a"], ["y"])], ok_in, ok_out)
    out["bad_undefined_input"] = model([helper.make_node("Add", ["x", "nope"], ["y"])], ok_in,
                                       ok_out)
    out["bad_arity"] = model([helper.make_node("Add", ["x"], ["y"])], ok_in, ok_out)
    out["bad_double_def"] = model(
        [helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Abs", ["x"], ["y"])], ok_in,
        ok_out)
    out["bad_dtype_mix"] = model(
        [helper.make_node("Add", ["x", "i"], ["y"])], ok_in + [vi("i", T.INT64, [H])], ok_out)
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.dims[:] = [3]  # 16 bytes for 3 elements
    out["bad_raw_size"] = model([helper.make_node("Add", ["x", "w"], ["y"])], ok_in, ok_out,
                                [t])
    ext = helper.make_tensor("w", T.FLOAT, [H], [0.0] * H)
    ext.ClearField("float_data")
    ext.data_location = T.EXTERNAL
    for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "16")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    out["bad_external_escape"] = model([helper.make_node("Add", ["x", "w"], ["y"])], ok_in,
                                       ok_out, [ext])
    huge = T(name="w", data_type=T.FLOAT, dims=[2**31, 2**31])
    out["bad_huge_dims"] = model([helper.make_node("Add", ["x", "w"], ["y"])], ok_in, ok_out,
                                 [huge])
    out["bad_huge_value_info"] = model(
        [helper.make_node("Neg", ["x"], ["y"])], [vi("x", T.FLOAT, [2**62, 4])],
        [vi("y", T.FLOAT, [2**62, 4])])
    out["bad_negative_dim"] = model([helper.make_node("Neg", ["x"], ["y"])],
                                    [vi("x", T.FLOAT, [-5])], ok_out)
    out["bad_rank_65"] = model([helper.make_node("Neg", ["x"], ["y"])],
                               [vi("x", T.FLOAT, [1] * 65)], [vi("y", T.FLOAT, [1] * 65)])
    out["bad_unknown_dtype"] = model([helper.make_node("Neg", ["x"], ["y"])],
                                     [vi("x", 99, [H])], [vi("y", 99, [H])])
    out["bad_graph_output_undefined"] = model([helper.make_node("Neg", ["x"], ["z"])], ok_in,
                                              ok_out)
    # If whose branch uses a name that exists nowhere
    then_g = helper.make_graph([helper.make_node("Neg", ["missing"], ["t"])], "then", [],
                               [vi("t", T.FLOAT, [H])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", T.FLOAT, [H])])
    out["bad_if_capture"] = model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        ok_in + [vi("c", T.BOOL, [])], ok_out)
    return out


def tensor_seeds():
    """TensorProto files as `tpfuse run --inputs` reads them."""
    out = {}
    out["float_raw"] = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "x")
    out["int64_typed"] = helper.make_tensor("ids", T.INT64, [3], [1, -2, 3])
    out["float_typed"] = helper.make_tensor("f", T.FLOAT, [2, 2], [0.5, -1.0, 2.0, 3.5])
    out["bf16_raw"] = helper.make_tensor("b", T.BFLOAT16, [2], [1.0, -2.0])
    out["fp8_raw"] = helper.make_tensor("q", T.FLOAT8E4M3FN, [4], [0.5, 1.0, -2.0, 448.0])
    out["int4_odd"] = helper.make_tensor("i4", T.INT4, [3], [1, -2, 7])
    out["bool"] = helper.make_tensor("m", T.BOOL, [2, 2], [True, False, False, True])
    out["scalar"] = helper.make_tensor("s", T.DOUBLE, [], [3.25])
    out["empty"] = helper.make_tensor("e", T.FLOAT, [0, 4], [])
    bad = numpy_helper.from_array(np.zeros(4, np.float32), "short")
    bad.dims[:] = [5]
    out["bad_raw_short"] = bad
    out["bad_negative_dim"] = T(name="n", data_type=T.FLOAT, dims=[-1])
    out["bad_dtype"] = T(name="d", data_type=99, dims=[1], raw_data=b"\0")
    return {k: v.SerializeToString() for k, v in out.items()}


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# The length of fuzz-builder's op table (tests/fuzz/builder-ops.h) the
# seeds are written for: their op bytes pick from its first 98 entries,
# which stay what they are when ops are added.
BUILDER_OPS = 98


def builder_program(data):
    """data's first byte (the tensor-parallel one), the op table length,
    then the rest of data."""
    return data[:1] + bytes([BUILDER_OPS]) + data[1:]


def builder_seeds():
    """Byte programs for fuzz-builder; their meaning is in fuzz-builder.c."""
    return {
        "zeros": builder_program(bytes(16)),
        "ramp": builder_program(bytes(range(64))),
        "ar_add_norm": builder_program(
            bytes([1, 0, 2, 3, 8, 0, 1, 0, 0, 0, 1, 1, 0, 2, 2, 0, 3, 3, 2, 0, 0]) * 2),
        "mixed": builder_program(bytes((i * 37 + 11) % 256 for i in range(200))),
    }


# fuzz-session's first byte (tests/fuzz/fuzz-session.c): world sizes 1 and
# 2 as they are; optimized by the default pipeline; optimized, with symbolic
# dims 2 and another data seed.
SESSION_CONFIGS = {"plain": 0x00, "opt": 0x04, "opt-d2": 0x2c}


def session_seeds(mdir):
    """The valid models of model/, each behind every SESSION_CONFIGS byte."""
    out = {}
    for f in sorted(os.listdir(mdir)):
        if f.startswith("bad_") or not f.endswith(".onnx"):
            continue
        with open(os.path.join(mdir, f), "rb") as fh:
            data = fh.read()
        for tag, cfg in SESSION_CONFIGS.items():
            out["%s-%s" % (f[: -len(".onnx")], tag)] = bytes([cfg]) + data
    return out


def strategy_seeds():
    """Strategy tables: the measured ones (bench/results/strategy-*.txt) and
    small valid and broken ones."""
    out = {}
    res = os.path.join(ROOT, "bench", "results")
    for f in sorted(os.listdir(res)):
        if f.startswith("strategy-") and f.endswith(".txt"):
            with open(os.path.join(res, f), "rb") as fh:
                out[f[: -len(".txt")]] = fh.read()
    out["small"] = (b"# world kind hidden max_tokens path\n2 allreduce-rmsnorm 4096 128 oneshot  # decode\n"
                    b"2 allreduce-rmsnorm 4096 inf twoshot\n4 sharded-rmsnorm 2 2048 oneshot\n"
                    b"4 sharded-rmsnorm 2 inf nccl\n8 allreduce-rmsnorm-fp8 8192 16 oneshot\n")
    out["crlf_tabs"] = b"2\tallreduce\t2048\t64\toneshot\r\n2 allreduce 2048 inf\ttwoshot\r\n"
    out["empty"] = b""
    out["comments_only"] = b"# nothing\n\n   \n#\n"
    out["bad_kind"] = b"2 allreduce-norm 4096 128 oneshot\n"
    out["bad_path"] = b"2 allreduce 4096 128 fastest\n"
    out["bad_count"] = b"2 allreduce 4096 0 nccl\n2 allreduce 4096 -5 nccl\n"
    out["bad_world"] = b"1025 allreduce 4096 inf nccl\n"
    out["bad_fields"] = b"2 allreduce 4096 inf nccl extra\n2 allreduce\n"
    out["bad_long_line"] = b"2 allreduce 4096 inf nccl\n# " + b"x" * 600 + b"\n"
    out["bad_nul"] = b"2 allreduce 4096 inf nccl\n\x002 bogus\n"
    out["big_numbers"] = b"2 allreduce 9223372036854775807 99999999999999999999 nccl\n"
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    mdir, bdir = os.path.join(out, "model"), os.path.join(out, "builder")
    tdir = os.path.join(out, "tensor")
    sdir = os.path.join(out, "session")
    gdir = os.path.join(out, "strategy")
    for d in (mdir, bdir, tdir, sdir, gdir):
        os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fx = os.path.join(tmp, "fixtures")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests/fixtures/make_fixtures.py"), fx],
                       check=True, stdout=subprocess.DEVNULL)
        ex = os.path.join(tmp, "examples")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples/tpmodels.py"), "all", "-w", "2",
                        "-o", ex, "--layers", "1", "--hidden", "16", "--heads", "2",
                        "--kv-heads", "2", "--head-dim", "8", "--ffn", "16", "--experts", "2",
                        "--topk", "1", "--moe-ffn", "8", "--shared-ffn", "8", "--past", "2",
                        "--batch", "1"], check=True, stdout=subprocess.DEVNULL)
        for base, prefix in ((fx, "fixture_"), (ex, "example_")):
            for dirpath, _, files in sorted(os.walk(base)):
                for f in sorted(files):
                    if not f.endswith(".onnx") or ".rank1." in f or ".full." in f:
                        continue
                    src = os.path.join(dirpath, f)
                    if os.path.getsize(src) <= MAX_BYTES:
                        shutil.copy(src, os.path.join(mdir, prefix + f))
    valid = fusable()
    for name, m in sorted(valid.items()):
        write(os.path.join(mdir, name + ".onnx"), m.SerializeToString())
    for name, m in sorted(broken().items()):
        write(os.path.join(mdir, name + ".onnx"), m.SerializeToString())
    # truncated and bit-flipped copies of one valid model
    data = valid["ar_add_rms"].SerializeToString()
    write(os.path.join(mdir, "bad_truncated_half.onnx"), data[: len(data) // 2])
    write(os.path.join(mdir, "bad_truncated_last.onnx"), data[:-1])
    flipped = bytearray(data)
    for i in range(7, len(flipped), 53):
        flipped[i] ^= 0x40
    write(os.path.join(mdir, "bad_bitflips.onnx"), bytes(flipped))
    write(os.path.join(mdir, "bad_empty.onnx"), b"")
    write(os.path.join(mdir, "bad_not_protobuf.onnx"), b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
    for name, data in builder_seeds().items():
        write(os.path.join(bdir, name), data)
    for name, data in tensor_seeds().items():
        write(os.path.join(tdir, name + ".pb"), data)
    for name, data in session_seeds(mdir).items():
        write(os.path.join(sdir, name), data)
    for name, data in strategy_seeds().items():
        write(os.path.join(gdir, name + ".txt"), data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
