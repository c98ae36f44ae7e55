#!/usr/bin/env python3
"""The tpfuse command on models made with the onnx package: exit codes
(docs/cli.md: 0 ok, 1 model error, 2 usage, 3 I/O), deterministic dumps,
and `optimize` writing a valid, equivalent model.

Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import needs_onnx  # noqa: F401 (first: exits 77, skipped, without onnx)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
import onnx_compare  # noqa: E402

failures: list[str] = []
checks = 0


def expect(cond, what):
    global checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def tpfuse(*args, timeout=120):
    p = subprocess.run([TPFUSE, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def cleanup_model(path):
    """y = Relu(Identity(x) @ W); a dead Neg(x) and an Identity chain on the way."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "W")
    nodes = [
        helper.make_node("Identity", ["x"], ["x_id"], name="id0"),
        helper.make_node("Identity", ["x_id"], ["x_id2"], name="id1"),
        helper.make_node("MatMul", ["x_id2", "W"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
        helper.make_node("Neg", ["x"], ["dead"], name="dead_neg"),
    ]
    g = helper.make_graph(nodes, "cleanup", [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 11
    onnx.checker.check_model(m)
    onnx.save(m, path)


def cycle_model(path):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="cyc_a"),
        helper.make_node("Relu", ["a"], ["b"], name="cyc_b"),
    ]
    g = helper.make_graph(nodes, "cycle", [helper.make_tensor_value_info("x", T.FLOAT, [4])],
                          [helper.make_tensor_value_info("b", T.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 11
    onnx.save(m, path)


def main():
    global TPFUSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    TPFUSE = a.tpfuse
    if os.path.isdir(a.work):
        shutil.rmtree(a.work)
    os.makedirs(a.work)
    w = lambda name: os.path.join(a.work, name)  # noqa: E731

    rc, out, _ = tpfuse("--version")
    expect(rc == 0 and "0.1.0" in out, "tpfuse --version prints the version")
    rc, out, _ = tpfuse("--help")
    expect(rc == 0 and all(c in out for c in ("dump", "check", "optimize")),
           "tpfuse --help lists dump, check, optimize")
    for cmd in ("dump", "check", "optimize"):
        rc, out, _ = tpfuse(cmd, "--help")
        expect(rc == 0 and "usage" in out.lower(), f"tpfuse {cmd} --help")
    rc, _, err = tpfuse("no-such-command")
    expect(rc == 2 and err.strip() != "", "unknown command: exit 2 with a message")
    rc, _, err = tpfuse("check")
    expect(rc == 2, "check without a model: exit 2")
    rc, _, err = tpfuse("dump", w("missing.onnx"))
    expect(rc == 3 and "missing.onnx" in err, "missing model file: exit 3 naming the file")

    model = w("cleanup.onnx")
    cleanup_model(model)
    rc, out, err = tpfuse("check", model)
    expect(rc == 0, f"check on a valid model exits 0 ({err.strip()[:200]})")

    rc1, d1, _ = tpfuse("dump", model)
    rc2, d2, _ = tpfuse("dump", model)
    expect(rc1 == 0 and rc2 == 0 and d1 == d2 and d1.strip() != "", "text dump is deterministic")
    expect("%0" in d1 and "MatMul" in d1 and "Relu" in d1, "text dump numbers values and lists ops")
    rc, _, _ = tpfuse("dump", model, "--format", "dot", "-o", w("g.dot"))
    dot = open(w("g.dot")).read() if os.path.exists(w("g.dot")) else ""
    expect(rc == 0 and "digraph" in dot and "MatMul" in dot, "DOT dump to a file")

    out_model = w("cleanup.opt.onnx")
    rc, out, err = tpfuse("optimize", model, "-o", out_model, "--passes", "cleanup", "--stats",
                          "--dump-before", w("before.txt"), "--dump-after", w("after.txt"))
    expect(rc == 0, f"optimize --passes cleanup exits 0 ({err.strip()[:300]})")
    if rc == 0:
        expect(out.strip() != "", "--stats prints counters")
        before = open(w("before.txt")).read()
        after = open(w("after.txt")).read()
        expect("Identity" in before and "Neg" in before, "--dump-before shows the input graph")
        expect("Identity" not in after and "Neg" not in after and "MatMul" in after,
               "--dump-after shows Identity and dead code removed")
        why = onnx_compare.check(out_model)
        expect(why is None, f"optimized model passes onnx.checker ({why})")
        m = onnx.load(out_model)
        ops = [n.op_type for n in m.graph.node]
        expect(ops == ["MatMul", "Relu"], f"optimized graph is MatMul, Relu (got {ops})")
        expect([o.name for o in m.graph.output] == ["y"], "graph output name kept")
        try:
            import onnxruntime as ort
        except ImportError:
            ort = None
        if ort is not None:
            x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
            ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
            got = ort.InferenceSession(out_model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
            expect(np.array_equal(ref[0], got[0]), "onnxruntime: optimized model computes the same y")
        # Optimizing the optimized model changes nothing.
        rc, _, _ = tpfuse("optimize", out_model, "-o", w("twice.onnx"), "--passes", "cleanup")
        expect(rc == 0 and onnx_compare.compare_files(out_model, w("twice.onnx")) is None,
               "cleanup is idempotent")

    rc, _, err = tpfuse("optimize", model)
    expect(rc == 2, "optimize without -o: exit 2")
    rc, _, err = tpfuse("optimize", model, "-o", w("x.onnx"), "--passes", "no-such-pass")
    expect(rc != 0 and "no-such-pass" in err, "unknown pass is named in the error")
    # every named pipeline of the library is a --passes name (lower-cpu: the backend ops)
    for pipeline in ("none", "cleanup", "default", "lower-cpu", "lower-cuda"):
        rc, out, err = tpfuse("optimize", model, "-o", w("pipe.onnx"), "--passes", "default," + pipeline,
                              "--stats")
        expect(rc == 0 and "unknown pass" not in err, f"--passes default,{pipeline} is accepted")
    rc, out, _ = tpfuse("optimize", model, "-o", w("pipe.onnx"), "--passes", "lower-cpu", "--stats")
    expect(rc == 0 and "lower-matmul-transb" in out, "--passes lower-cpu runs the lowering passes (--stats)")
    # "-NAME" takes a pass out of the names before it
    rc, out, err = tpfuse("optimize", model, "-o", w("pipe.onnx"), "--passes", "default,-fuse-swiglu,-cse",
                          "--stats")
    ran = {line.split()[0] for line in out.splitlines() if line.strip()}
    expect(rc == 0 and "fuse-swiglu" not in ran and "cse" not in ran and "fuse-attention" in ran,
           f"--passes default,-fuse-swiglu,-cse runs the rest of default only: {sorted(ran)} {err[-200:]}")
    rc, _, err = tpfuse("optimize", model, "-o", w("pipe.onnx"), "--passes", "cleanup,-fuse-swiglu")
    expect(rc == 1 and "'-fuse-swiglu': the names before it do not run pass 'fuse-swiglu'" in err,
           f"--passes cleanup,-fuse-swiglu: exit 1 naming the pass ({rc}, {err.strip()[-200:]})")
    rc, _, err = tpfuse("optimize", model, "-o", w("pipe.onnx"), "--passes", "default,-no-such-pass")
    expect(rc == 2 and "unknown pass 'no-such-pass'" in err, f"--passes default,-no-such-pass: exit 2 ({rc})")
    rc, _, err = tpfuse("optimize", model, "-o", w("pipe.onnx"), "--passes", "default,-default")
    expect(rc == 2 and "unknown pass 'default'" in err, f"--passes default,-default (a pipeline): exit 2 ({rc})")

    # run --strategy-table: the table is read (and checked) before anything runs
    bad = w("bad-table.txt")
    with open(bad, "w") as f:
        f.write("2 allreduce-rmsnorm 4096 128 oneshot\n2 bogus 1 2 3\n")
    good = w("good-table.txt")
    with open(good, "w") as f:
        f.write("# a table\n2 allreduce-rmsnorm 4096 inf twoshot\n")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--quiet", "--strategy-table", bad)
    expect(rc == 1 and "bad-table.txt:2: expected" in err,
           "run --strategy-table with a malformed line: exit 1 naming the file and the line")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--quiet", "--strategy-table", w("no-table.txt"))
    expect(rc == 3 and "no-table.txt" in err, "run --strategy-table with a missing file: exit 3 naming it")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--quiet", "--strategy-table", good)
    expect(rc == 0 and err == "", "run --strategy-table with a valid table: exit 0")
    long_line = w("long-table.txt")
    with open(long_line, "w") as f:
        f.write("2 allreduce 4096 inf nccl\n# " + "x" * 600 + "\n")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--quiet", "--strategy-table", long_line)
    expect(rc == 1 and "long-table.txt:2: line too long" in err,
           "run --strategy-table with a 600-character line: exit 1 naming the file and the line")
    rc, _, err = tpfuse("run", model, "--strategy-table")
    expect(rc == 2 and "--strategy-table" in err, "run --strategy-table without a file: exit 2")

    # run --comm: the CUDA backend's communicator; its usage errors hold
    # everywhere (the runs themselves need mpirun and a GPU: tests/gpu)
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--comm", "gloo")
    expect(rc == 2 and "--comm takes nccl or mpi, not 'gloo'" in err, "run --comm gloo: exit 2 naming the choices")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--comm", "nccl")
    expect(rc == 2 and "--comm nccl needs --backend cuda" in err, "run --comm nccl on the cpu backend: exit 2")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--comm", "mpi", "--cuda-graph", "--backend", "cuda")
    expect(rc == 2 and "--cuda-graph needs --comm nccl" in err,
           "run --comm mpi --cuda-graph: exit 2 (no CUDA graph captures a collective through host memory)")
    rc, _, err = tpfuse("run", model, "--random-inputs", "1", "--quiet", "--comm", "mpi")
    expect(rc == 0 and err == "", "run --comm mpi on the cpu backend (its own communicator): exit 0")
    rc, _, err = tpfuse("run", model, "--comm")
    expect(rc == 2 and "--comm needs a value" in err, "run --comm without a value: exit 2")

    # tune measures GPUs under mpirun; its usage errors hold everywhere
    rc, out, _ = tpfuse("tune", "--help")
    expect(rc == 0 and "TPF_STRATEGY_TABLE" in out, "tune --help: exit 0, says how the table is used")
    rc, _, err = tpfuse("tune", "--hidden", "0,4096")
    expect(rc == 2 and "--hidden" in err, "tune --hidden 0: exit 2 naming the option")
    rc, _, err = tpfuse("tune", "--tokens", "8,4")
    expect(rc == 2 and "ascending" in err, "tune --tokens not ascending: exit 2")
    rc, _, err = tpfuse("tune", "--replays", "0")
    expect(rc == 2 and "--replays" in err, "tune --replays 0: exit 2")
    rc, _, err = tpfuse("tune", "--no-such-option", "1")
    expect(rc == 2 and "--no-such-option" in err, "tune with an unknown option: exit 2 naming it")
    rc, _, err = tpfuse("tune")
    expect((rc == 2 and "mpirun" in err) or (rc == 4 and "without CUDA" in err),
           "tune outside mpirun: exit 2 (or 4 when built without CUDA and NCCL) with the reason")

    cyc = w("cycle.onnx")
    cycle_model(cyc)
    rc, _, err = tpfuse("check", cyc)
    expect(rc == 1 and "cycle" in err.lower(), "check on a cycle: exit 1, message says cycle")

    print(f"\ncli checks: {checks - len(failures)}/{checks} passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
