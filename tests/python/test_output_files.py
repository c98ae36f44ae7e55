"""optimize(output=...) refuses an output that is one of the input's files
(the model, its external data: every spelling, symbolic and hard links) with
a ValueError naming both, before writing anything; a write that fails
leaves nothing behind."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tpfuse


def _model(folder, name="m.onnx", location="m.onnx.data"):
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, str(folder / name), save_as_external_data=True, location=location,
              size_threshold=0)


def _snapshot(folder):
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link -> " + os.readlink(p)
        elif p.is_dir():
            out[str(p)] = "dir"
        else:
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def renamed(tmp_path, monkeypatch):
    """orig.onnx, whose weights are in m.onnx.data (it was saved as m.onnx)."""
    _model(tmp_path)
    os.rename(tmp_path / "m.onnx", tmp_path / "orig.onnx")
    os.symlink("orig.onnx", tmp_path / "link.onnx")
    os.link(tmp_path / "orig.onnx", tmp_path / "hard.onnx")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("output", ["m.onnx", "./m.onnx", "sub/../m.onnx", "m.onnx.data",
                                    "orig.onnx", "./orig.onnx", "link.onnx", "hard.onnx"])
def test_output_that_is_an_input_file_is_refused(renamed, output):
    before = _snapshot(renamed)
    with pytest.raises(ValueError, match="is the same file as the input") as e:
        tpfuse.optimize("orig.onnx", output=output)
    assert e.value.status == "conflict"
    assert output in str(e.value) or output + ".data" in str(e.value)
    assert _snapshot(renamed) == before
    tpfuse.check("orig.onnx", raise_on_error=True)


def test_model_in_memory_with_base_dir_is_checked_too(renamed):
    m = onnx.load("orig.onnx", load_external_data=False)
    before = _snapshot(renamed)
    with pytest.raises(ValueError, match="m.onnx.data"):
        tpfuse.optimize(m, base_dir=str(renamed), output="m.onnx")
    assert _snapshot(renamed) == before


def test_other_outputs_are_written(renamed):
    r = tpfuse.optimize("orig.onnx", output="new.onnx")
    assert r.output == "new.onnx"
    tpfuse.check("new.onnx", raise_on_error=True)
    tpfuse.check("orig.onnx", raise_on_error=True)


def test_output_folder_leaves_nothing(renamed):
    (renamed / "F").mkdir()
    before = _snapshot(renamed)
    with pytest.raises(tpfuse.FileError, match="folder"):
        tpfuse.optimize("orig.onnx", output="F")
    assert _snapshot(renamed) == before
