#!/usr/bin/env python3
"""`tpfuse run` under mpirun -np 2: outputs per rank, refusals before inputs.

    run_refusals.py --tpfuse TPFUSE --work DIR

  - --outputs DIR without {rank}: each rank writes DIR/rank{R}/output_N.pb
    (its own values), nothing lands in DIR itself; with {rank} in DIR the
    path is the user's.
  - A model whose declared input is 64 GiB and which holds ops the runtime
    cannot run: `run --random-inputs` refuses within seconds, exit 4, and the
    list of unsupported ops (every kind once) is printed once, by rank 0.
  - The same input with supported ops: the random inputs are refused for
    their size before any is made (exit 1, a message saying how much memory
    is needed and available).
  - --dim NAME=VALUE with --inputs: an input whose dim NAME has another size
    is an error naming both.

Exit status: 0 passed, 1 failed, 77 skipped (no mpirun or onnx).
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("onnx/numpy not installed: skipped")
    sys.exit(77)

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
failures = []


def check(cond, what, log=""):
    if cond:
        print("ok  ", what)
    else:
        print("FAIL", what)
        if log:
            print(log)
        failures.append(what)


def mpirun(args, timeout=120):
    t0 = time.monotonic()
    p = subprocess.run(["mpirun", "-np", "2"] + args, capture_output=True, text=True, env=ENV,
                       timeout=timeout)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def small_models(work):
    """y = AllReduce(x * w_rank) + x, w differing per rank; x f32[batch, 4]."""
    paths = []
    for r in range(2):
        w = numpy_helper.from_array(np.full((4,), r + 1.5, np.float32), "w")
        g = helper.make_graph(
            [helper.make_node("Mul", ["x", "w"], ["p"], name="mul"),
             helper.make_node("AllReduce", ["p"], ["s"], name="ar", domain="com.microsoft"),
             helper.make_node("Add", ["s", "x"], ["y"], name="add"),
             helper.make_node("Mul", ["x", "w"], ["mine"], name="mine")],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
             helper.make_tensor_value_info("mine", TensorProto.FLOAT, ["batch", 4])], [w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 9
        path = os.path.join(work, "small.rank%d.onnx" % r)
        onnx.save(m, path)
        paths.append(path)
    data = os.path.join(work, "small_data")
    os.makedirs(data, exist_ok=True)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    t = numpy_helper.from_array(x, "x")
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(t.SerializeToString())
    return os.path.join(work, "small.rank{rank}.onnx"), data, x


def read_pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def huge_model(work, name, unsupported):
    """x f32[65536, 65536, 4] (64 GiB) and, with `unsupported`, two kinds of
    op the runtime cannot run (an unknown op twice, Det)."""
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="neg")]
    outs = ["a"]
    if unsupported:
        nodes += [helper.make_node("Frobnicate", ["a"], ["b"], name="frob_first", domain="example"),
                  helper.make_node("Frobnicate", ["b"], ["c"], name="frob_second", domain="example"),
                  helper.make_node("Det", ["m"], ["d"], name="det")]
        outs = ["c", "d"]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [65536, 65536, 4])]
    inits = [numpy_helper.from_array(np.eye(2, dtype=np.float32), "m")] if unsupported else []
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("example", 1)] if unsupported else [])
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 9
    for r in range(2):
        onnx.save(m, os.path.join(work, "%s.rank%d.onnx" % (name, r)))
    return os.path.join(work, name + ".rank{rank}.onnx")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    if not shutil.which("mpirun"):
        print("mpirun not found: skipped")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    tpf = a.tpfuse

    # --outputs without {rank}: DIR/rank{R}/
    model, data, x = small_models(a.work)
    out = os.path.join(a.work, "out")
    rc, log, _ = mpirun([tpf, "run", model, "--inputs", data, "--outputs", out, "--quiet"])
    check(rc == 0, "run with --outputs DIR under 2 ranks", log)
    for r in range(2):
        for n, want in ((0, x * 1.5 + x * 2.5 + x), (1, x * (r + 1.5))):
            p = os.path.join(out, "rank%d" % r, "output_%d.pb" % n)
            ok = os.path.exists(p) and np.array_equal(read_pb(p), want.astype(np.float32))
            check(ok, "rank %d wrote its own %s" % (r, os.path.relpath(p, a.work)))
    check(not os.path.exists(os.path.join(out, "output_0.pb")), "no rank writes DIR/output_0.pb")
    out2 = os.path.join(a.work, "out2_{rank}")
    rc, log, _ = mpirun([tpf, "run", model, "--inputs", data, "--outputs", out2, "--quiet"])
    check(rc == 0 and all(os.path.exists(os.path.join(a.work, "out2_%d" % r, "output_1.pb"))
                          for r in range(2)), "--outputs DIR with {rank} keeps the user's path", log)

    # unsupported ops next to a 64 GiB input: refused at once, listed once
    big = huge_model(a.work, "huge_unsup", True)
    rc, log, secs = mpirun([tpf, "run", big, "--random-inputs", "1"])
    check(rc == 4, "unsupported ops: exit 4 (got %d)" % rc, log)
    check(secs < 30, "refused in %.1f s, before making the 64 GiB input" % secs, log)
    check(log.count("cannot run") == 1, "the refusal is printed once (rank 0)", log)
    check("example::Frobnicate (f32): 2 nodes, the first node 'frob_first'" in log and
          "Det (f32): 1 node, the first node 'det' (Det)" in log and log.count("frob_second") == 0,
          "every unsupported op once, with its count and first node", log)

    # supported ops, the same input: refused for its size before it is made
    big = huge_model(a.work, "huge", False)
    rc, log, secs = mpirun([tpf, "run", big, "--random-inputs", "1"])
    check(rc == 1 and "the random inputs: 64.0 GiB needed, only" in log and secs < 30,
          "a 64 GiB random input is refused for its size (exit %d, %.1f s)" % (rc, secs), log)

    # --dim with --inputs: the data must agree
    rc, log, _ = mpirun([tpf, "run", model, "--inputs", data, "--dim", "batch=2", "--quiet"])
    check(rc == 1 and "input 'x': dim 0 ('batch') is 3, but batch=2 was given" in log,
          "--dim batch=2 against an input of batch 3", log)
    rc, log, _ = mpirun([tpf, "run", model, "--inputs", data, "--dim", "batch=3", "--quiet"])
    check(rc == 0, "--dim batch=3 agrees with the input", log)

    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
