"""Shared fixtures of the Python package tests (tests/python/).

meson runs these through run_pytest.py with PYTHONPATH pointing at
BUILD/python (where the build assembles the `tpfuse` package) and with the
project's test variables: TPFUSE (the command), TPF_SOURCE_ROOT, TPF_TEST_TMP.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TPF_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples")
TESTS = os.path.join(ROOT, "tests")

for p in (EXAMPLES, TESTS, os.path.join(TESTS, "fixtures")):
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.fixture(scope="session")
def tpfuse_cli() -> str:
    """The `tpfuse` command of the same build."""
    exe = os.environ.get("TPFUSE")
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("TPFUSE (the tpfuse command) is not set; meson test sets it")
    return exe


def run_cli(exe: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)


def read_cli_stats(text: str) -> Dict[str, Dict[str, int]]:
    """`tpfuse optimize --stats` lines "PASS COUNTER VALUE" -> {pass: {counter: value}}."""
    out: Dict[str, Dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].lstrip("-").isdigit():
            out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out


@pytest.fixture(scope="session")
def example_models(tmp_path_factory) -> Dict[Tuple[str, int], str]:
    """Every example family at world sizes 1, 2 and 4: {(family, W): folder}."""
    import tpmodels  # examples/tpmodels.py

    import contextlib
    import io

    root = tmp_path_factory.mktemp("examples")
    out: Dict[Tuple[str, int], str] = {}
    for w in (1, 2, 4):
        folder = str(root / ("w%d" % w))
        for fam in tpmodels.FAMILIES:
            with contextlib.redirect_stdout(io.StringIO()):
                rc = tpmodels.main([fam, "--world-size", str(w), "--out", folder])
            assert rc == 0, "tpmodels.py %s --world-size %d failed" % (fam, w)
            out[(fam, w)] = folder
    return out


@pytest.fixture(scope="session")
def dense_rank0(example_models) -> str:
    """Path of the dense example's rank-0 model at world size 2."""
    return os.path.join(example_models[("dense", 2)], "dense.rank0.onnx")


def tiny_model() -> onnx.ModelProto:
    """y = relu(x @ W + b): a valid model with initializers and metadata."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((3,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
        helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
        helper.make_node("Relu", ["xwb"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[w, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="tests")
    helper.set_model_props(m, {"purpose": "python package tests"})
    return m


def allreduce_norm_model(near_miss: bool = False) -> onnx.ModelProto:
    """AllReduce -> Add(residual) -> RMSNormalization, the main fusion's
    pattern.  With near_miss, the all-reduce's result is also a graph output
    (an intermediate with two uses): the fusion refuses and says why."""
    hidden = 8
    nodes = [
        helper.make_node("AllReduce", ["x"], ["ar"], name="allreduce", domain="com.microsoft"),
        helper.make_node("Add", ["ar", "residual"], ["sum"], name="residual_add"),
        helper.make_node("RMSNormalization", ["sum", "gamma"], ["y"], name="norm",
                         axis=-1, epsilon=1e-5),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden]),
        helper.make_tensor_value_info("sum", TensorProto.FLOAT, [2, hidden]),
    ]
    if near_miss:
        outputs.append(helper.make_tensor_value_info("ar", TensorProto.FLOAT, [2, hidden]))
    g = helper.make_graph(
        nodes,
        "ar_norm",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden]),
            helper.make_tensor_value_info("residual", TensorProto.FLOAT, [2, hidden]),
        ],
        outputs,
        initializer=[numpy_helper.from_array(np.ones(hidden, dtype=np.float32), "gamma")],
    )
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)],
        producer_name="tests",
    )
    helper.set_model_props(m, {"tp_rank": "0", "tp_world_size": "2"})
    return m


def undefined_input_model() -> onnx.ModelProto:
    """Node 'bad' reads a value nothing defines: verification must name it."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "nowhere"], ["y"], name="bad")],
        "broken",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def op_types(model: onnx.ModelProto) -> List[str]:
    return [n.op_type for n in model.graph.node]
