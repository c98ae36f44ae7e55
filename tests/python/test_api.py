"""The tpfuse Python package: round trips against onnx, every entry point,
agreement with the command, and clear exceptions on bad input."""

from __future__ import annotations

import os
import pathlib
import re

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tpfuse
from conftest import (
    ROOT,
    allreduce_norm_model,
    op_types,
    read_cli_stats,
    run_cli,
    tiny_model,
    undefined_input_model,
)

# ------------------------------------------------------------------ helpers


def _strip_value_info(c):
    """A canonical form (onnx_compare.canon) without value_info entries,
    which optimize() adds for the types it infers."""
    if isinstance(c, dict):
        return {k: _strip_value_info(v) for k, v in c.items() if k != "value_info"}
    if isinstance(c, list):
        return [_strip_value_info(v) for v in c]
    return c


def _value_infos(graph: onnx.GraphProto):
    return {v.name: v.type for v in graph.value_info}


def _static_dims(t: onnx.TypeProto):
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim]


# --------------------------------------------------------------- round trips


def test_version_matches_command_and_project(tpfuse_cli):
    p = run_cli(tpfuse_cli, "--version")
    assert p.returncode == 0
    assert p.stdout.split() == ["tpfuse", tpfuse.__version__]
    with open(os.path.join(ROOT, "meson.build")) as f:
        m = re.search(r"version\s*:\s*'([^']+)'", f.read())
    assert m and m.group(1) == tpfuse.__version__


def test_package_is_typed():
    folder = os.path.dirname(tpfuse.__file__)
    assert os.path.isfile(os.path.join(folder, "py.typed"))
    assert os.path.isfile(os.path.join(folder, "_tpfuse.pyi"))


def test_passes_match_command(tpfuse_cli):
    infos = tpfuse.passes()
    assert infos and all(isinstance(p, tpfuse.PassInfo) for p in infos)
    p = run_cli(tpfuse_cli, "passes")
    assert p.returncode == 0
    listed = []
    section = None
    for line in p.stdout.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line[:-1]
        elif section == "passes" and line.strip():
            name, summary = line.strip().split(None, 1)
            listed.append((name, summary.strip()))
    assert [(i.name, i.summary) for i in infos] == listed
    names = {i.name for i in infos}
    assert {"fuse-allreduce-rmsnorm", "dce"} <= names
    fuse = next(i for i in infos if i.name == "fuse-allreduce-rmsnorm")
    assert "allreduce-residual-rmsnorm" in fuse.counters
    assert set(tpfuse.PIPELINES) == {"none", "cleanup", "default", "lower-cpu", "lower-cuda"}


def test_roundtrip_modelproto_in_modelproto_out():
    m = tiny_model()
    r = tpfuse.optimize(m, passes="none")
    assert isinstance(r.model, onnx.ModelProto)
    onnx.checker.check_model(r.model, full_check=True)
    assert op_types(r.model) == ["MatMul", "Add", "Relu"]
    assert {p.key: p.value for p in r.model.metadata_props} == {"purpose": "python package tests"}
    for a, b in zip(m.graph.initializer, r.model.graph.initializer):
        assert a.name == b.name
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    # the types it inferred are onnx's
    inferred = onnx.shape_inference.infer_shapes(m)
    theirs = _value_infos(inferred.graph)
    ours = _value_infos(r.model.graph)
    assert set(theirs) <= set(ours)
    for name, t in theirs.items():
        assert ours[name].tensor_type.elem_type == t.tensor_type.elem_type, name
        assert _static_dims(ours[name]) == _static_dims(t), name


def test_roundtrip_every_fixture(tmp_path):
    """Every fixture of tests/fixtures (all dtypes, external data, control
    flow, functions, metadata, unknown ops, ...) in memory and by path: the
    output passes onnx.checker and equals the input (inferred value_info aside)."""
    import make_fixtures
    import onnx_compare

    paths = make_fixtures.write_all(str(tmp_path / "fixtures"))
    assert len(paths) >= 10
    for path in paths:
        name = os.path.basename(path)
        m = onnx.load(path)  # external data loaded into the ModelProto
        r = tpfuse.optimize(m, passes="none")
        onnx.checker.check_model(r.model)
        want = _strip_value_info(onnx_compare.canon(m))
        assert onnx_compare.diff(want, _strip_value_info(onnx_compare.canon(r.model))) is None, name
        # value_info the input had is kept
        assert set(_value_infos(m.graph)) <= set(_value_infos(r.model.graph)), name

        out = tmp_path / "out" / name
        out.parent.mkdir(exist_ok=True)
        r2 = tpfuse.optimize(path, passes="none", output=out)
        assert r2.model is None and r2.output == str(out)
        assert onnx_compare.check(str(out)) is None, name
        got = _strip_value_info(onnx_compare.canon(onnx_compare.load(str(out))))
        assert onnx_compare.diff(want, got) is None, name


def test_every_input_kind_gives_the_same_model(tmp_path):
    m = allreduce_norm_model()
    raw = m.SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(raw)
    results = [
        tpfuse.optimize(src)
        for src in (m, raw, bytearray(raw), memoryview(raw), str(path), path)
    ]
    first = results[0].model.SerializeToString()
    for r in results:
        assert r.model.SerializeToString() == first
        assert r.stats == results[0].stats
    assert op_types(results[0].model) == ["AllReduceRMSNorm"]


def test_optimize_result_unpacks_and_reports():
    model, stats, near_misses = tpfuse.optimize(allreduce_norm_model())
    assert op_types(model) == ["AllReduceRMSNorm"]
    assert stats["fuse-allreduce-rmsnorm"]["allreduce-residual-rmsnorm"] == 1
    assert near_misses == []
    r = tpfuse.optimize(allreduce_norm_model(), passes=["canonicalize-rmsnorm"])
    assert list(r.stats) == ["canonicalize-rmsnorm"]
    assert "AllReduce" in op_types(r.model)
    r = tpfuse.optimize(allreduce_norm_model(), passes=None)
    assert r.stats == {} and op_types(r.model) == ["AllReduce", "Add", "RMSNormalization"]
    notes = [d for d in tpfuse.optimize(tiny_model()).diagnostics if d.severity == "note"]
    assert any("matched nothing" in d.message for d in notes)


def test_explain_lists_near_misses():
    r = tpfuse.optimize(allreduce_norm_model(near_miss=True), explain=True)
    assert r.stats["fuse-allreduce-rmsnorm"]["allreduce-residual-rmsnorm"] == 0
    assert r.near_misses, "the refused fusion must be explained"
    line = next(x for x in r.near_misses if "fuse-allreduce-rmsnorm" in x)
    assert "2 uses" in line and "'allreduce'" in line
    assert tpfuse.optimize(allreduce_norm_model(near_miss=True)).near_misses == []


def test_rank_and_world_size_reach_the_passes(example_models):
    """rank/world_size reach the passes and win over the model's metadata
    (which gives the same answer when they are left out): the sharded
    RMSNorm of a 2-rank model fuses only when the world size is 2."""
    path = os.path.join(example_models[("minimax_qk", 2)], "minimax_qk.rank0.onnx")
    right = tpfuse.optimize(path, rank=0, world_size=2)
    wrong = tpfuse.optimize(path, rank=0, world_size=4)
    from_metadata = tpfuse.optimize(path)
    assert right.stats["fuse-sharded-rmsnorm"]["sharded-rmsnorm"] > 0
    assert wrong.stats["fuse-sharded-rmsnorm"]["sharded-rmsnorm"] == 0
    assert from_metadata.stats == right.stats


def test_output_with_external_data(tmp_path, dense_rank0):
    out = tmp_path / "opt" / "dense.opt.onnx"
    out.parent.mkdir()
    r = tpfuse.optimize(dense_rank0, output=out, external_data_threshold=1024)
    assert r.model is None and r.output == str(out)
    data = [f for f in os.listdir(out.parent) if f != out.name]
    assert data, "initializers of 1 KiB and more go to external data"
    bare = onnx.load(str(out), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in bare.graph.initializer)
    onnx.checker.check_model(str(out))
    full = onnx.load(str(out))
    mem = tpfuse.optimize(dense_rank0).model
    want = {t.name: numpy_helper.to_array(t) for t in mem.graph.initializer}
    got = {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])


def test_external_data_from_a_path_and_with_base_dir(tmp_path):
    import make_fixtures

    (path,) = make_fixtures.write_all(str(tmp_path), ["external_one_file"])
    folder = os.path.dirname(path)
    by_path = tpfuse.optimize(path, passes="none").model
    bare = onnx.load(path, load_external_data=False)
    with pytest.raises(tpfuse.ModelError) as e:
        tpfuse.optimize(bare, passes="none")
    assert "external" in str(e.value)
    with_dir = tpfuse.optimize(bare, passes="none", base_dir=folder).model
    assert with_dir.SerializeToString() == by_path.SerializeToString()
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in by_path.graph.initializer)


def test_check_reports_diagnostics():
    assert tpfuse.check(tiny_model()) == []
    diags = tpfuse.check(undefined_input_model())
    errors = [d for d in diags if d.severity == "error"]
    assert errors, diags
    d = errors[0]
    assert isinstance(d, tpfuse.Diagnostic)
    assert (d.node, d.op) == ("bad", "Add")
    assert "nowhere" in d.message
    severity, node, op, message = d
    assert (severity, node, op, message) == (d.severity, d.node, d.op, d.message)
    with pytest.raises(tpfuse.ModelError) as e:
        tpfuse.check(undefined_input_model(), raise_on_error=True)
    assert e.value.diagnostics == diags
    assert "'bad'" in str(e.value)
    # unparseable bytes are diagnostics too, unless asked to raise
    diags = tpfuse.check(b"\x07garbage")
    assert diags and diags[0].severity == "error" and diags[0].node is None
    with pytest.raises(tpfuse.ModelError):
        tpfuse.check(b"\x07garbage", raise_on_error=True)


def test_check_matches_command(tmp_path, tpfuse_cli):
    path = tmp_path / "bad.onnx"
    onnx.save(undefined_input_model(), str(path))
    p = run_cli(tpfuse_cli, "check", str(path))
    assert p.returncode == 1
    texts = ["%s: %s" % (d.severity, ("node '%s' (%s): %s" % (d.node, d.op, d.message))
                         if d.node is not None else d.message)
             for d in tpfuse.check(path)]
    for t in texts:
        assert "tpfuse: " + t in p.stderr


def test_dump_matches_command(tmp_path, tpfuse_cli, dense_rank0):
    for fmt in ("text", "dot"):
        p = run_cli(tpfuse_cli, "dump", dense_rank0, "--format", fmt)
        assert p.returncode == 0
        assert tpfuse.dump(dense_rank0, fmt) == p.stdout
        assert tpfuse.dump(onnx.load(dense_rank0), format=fmt) == p.stdout
    p = run_cli(tpfuse_cli, "dump", dense_rank0, "--no-infer")
    assert tpfuse.dump(dense_rank0, infer_shapes=False) == p.stdout
    assert tpfuse.dump(dense_rank0, "dot").startswith("digraph")


def test_optimize_matches_command_output(tmp_path, tpfuse_cli, dense_rank0):
    out = tmp_path / "cli.onnx"
    p = run_cli(tpfuse_cli, "optimize", dense_rank0, "-o", str(out), "--stats")
    assert p.returncode == 0, p.stderr
    r = tpfuse.optimize(dense_rank0)
    assert r.stats == read_cli_stats(p.stdout)
    assert tpfuse.dump(r.model) == tpfuse.dump(out)


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "data",
    [b"", b"\x07garbage", b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256))],
    ids=["empty", "bad-wire-type", "overlong-length", "noise"],
)
def test_malformed_bytes_raise_model_error(data):
    with pytest.raises(tpfuse.ModelError) as e:
        tpfuse.optimize(data)
    assert e.value.status in ("parse", "invalid", "limit")
    assert e.value.diagnostics and e.value.diagnostics[0].severity == "error"
    assert str(e.value).startswith("cannot load the model: ")
    assert isinstance(e.value, ValueError)


def test_every_prefix_of_a_model_fails_cleanly():
    """A truncated model either loads (a shorter valid message) or raises
    tpfuse.Error with diagnostics; never anything else."""
    raw = allreduce_norm_model().SerializeToString()
    failed = 0
    for n in range(0, len(raw), 5):
        for call in (tpfuse.optimize, lambda b: tpfuse.check(b, raise_on_error=True)):
            try:
                call(raw[:n])
            except tpfuse.Error as e:
                assert e.diagnostics and e.status, n
                failed += 1
    assert failed > len(raw) // 5


def test_unsupported_model_raises_unsupported_error():
    """A valid model tpfuse does not handle (a segmented initializer) raises
    UnsupportedError with status "unsupported", not ModelError: the caller
    tells "fix the model" from "tpfuse cannot do this"."""
    m = tiny_model()
    m.graph.initializer[0].segment.begin = 0
    m.graph.initializer[0].segment.end = 12
    raw = m.SerializeToString()
    for call in (tpfuse.optimize, tpfuse.dump):
        with pytest.raises(tpfuse.UnsupportedError) as e:
            call(raw)
        assert not isinstance(e.value, tpfuse.ModelError)
        assert e.value.status == "unsupported"
        assert "segmented tensors are not supported" in str(e.value)
        assert e.value.diagnostics and e.value.diagnostics[0].severity == "error"


def test_invalid_model_names_the_node():
    with pytest.raises(tpfuse.ModelError) as e:
        tpfuse.optimize(undefined_input_model())
    assert "node 'bad' (Add)" in str(e.value)
    assert [(d.node, d.op) for d in e.value.diagnostics if d.severity == "error"] == [("bad", "Add")]


def test_unknown_pass_is_a_value_error():
    with pytest.raises(ValueError, match=r"unknown pass 'fuse-everything'.*fuse-allreduce-rmsnorm"):
        tpfuse.optimize(tiny_model(), passes="dce,fuse-everything")
    with pytest.raises(ValueError, match="unknown pass 'nope'"):
        tpfuse.optimize(tiny_model(), passes=["dce", "nope"])
    with pytest.raises(TypeError, match="passes"):
        tpfuse.optimize(tiny_model(), passes=["dce", 3])
    with pytest.raises(TypeError, match="passes"):
        tpfuse.optimize(tiny_model(), passes=42)


@pytest.mark.parametrize(
    "rank,world,exc,pattern",
    [
        (0, None, ValueError, "go together"),
        (None, 2, ValueError, "go together"),
        (2, 2, ValueError, "rank 2 is not below world_size 2"),
        (-1, 2, ValueError, "rank must be between"),
        (0, 0, ValueError, "world_size must be between"),
        (0, 1 << 40, ValueError, "world_size must be between"),
        ("0", 2, TypeError, "rank: expected an int"),
        (0, 2.0, TypeError, "world_size: expected an int"),
        (True, 2, TypeError, "rank: expected an int"),
    ],
)
def test_bad_rank_or_world_size(rank, world, exc, pattern):
    with pytest.raises(exc, match=pattern):
        tpfuse.optimize(tiny_model(), rank=rank, world_size=world)


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="expected an onnx.ModelProto"):
        tpfuse.optimize(42)
    with pytest.raises(TypeError, match="expected an onnx.ModelProto"):
        tpfuse.check(None)
    with pytest.raises(TypeError, match="expected an onnx.ModelProto"):
        tpfuse.dump(onnx.GraphProto())
    with pytest.raises(ValueError, match="format: expected 'text' or 'dot'"):
        tpfuse.dump(tiny_model(), "svg")
    with pytest.raises(ValueError, match="external_data_threshold needs output"):
        tpfuse.optimize(tiny_model(), external_data_threshold=1024)
    with pytest.raises(ValueError, match="external_data_threshold must be between"):
        tpfuse.optimize(tiny_model(), output=tmp_path / "x.onnx", external_data_threshold=0)
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model(), str(path))
    with pytest.raises(ValueError, match="is the same file as the input model"):
        tpfuse.optimize(path, output=str(path))
    with pytest.raises(ValueError, match="base_dir is for models given as bytes"):
        tpfuse.optimize(path, base_dir=tmp_path)


def test_file_errors_are_os_errors(tmp_path):
    missing = tmp_path / "missing.onnx"
    for call in (tpfuse.optimize, tpfuse.check, tpfuse.dump):
        with pytest.raises(tpfuse.FileError) as e:
            call(missing)
        assert isinstance(e.value, OSError)
        assert e.value.status == "io"
        assert "missing.onnx" in str(e.value)
    with pytest.raises(tpfuse.FileError):
        tpfuse.optimize(tiny_model(), output=tmp_path / "no" / "such" / "dir" / "m.onnx")
    with pytest.raises(tpfuse.FileError, match="not a regular file"):
        tpfuse.check(tmp_path)


def test_exception_hierarchy():
    assert issubclass(tpfuse.ModelError, tpfuse.Error) and issubclass(tpfuse.ModelError, ValueError)
    assert issubclass(tpfuse.FileError, tpfuse.Error) and issubclass(tpfuse.FileError, OSError)
    assert issubclass(tpfuse.UnsupportedError, tpfuse.Error)
    assert tpfuse.Error.__module__ == "tpfuse"
    e = tpfuse.ModelError("plain")
    assert e.status is None and tuple(e.diagnostics) == ()


def test_extension_is_the_built_one():
    """The package imports its compiled extension from its own folder."""
    ext = pathlib.Path(tpfuse._tpfuse.__file__)
    assert ext.suffix == ".so"
    assert ext.parent == pathlib.Path(tpfuse.__file__).parent
