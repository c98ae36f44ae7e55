"""The package's runtime: tpfuse.Session against onnxruntime (the oracle) and
the committed test data, its inputs and outputs, its errors; tpfuse.generate
against the reference tokens of tests/corpus/kv (as tests/generate_check.py
checks the command), with a tokenizer, with sampling; world_size 2 under
mpirun."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tpfuse
from conftest import ROOT, tiny_model

KV = os.path.join(ROOT, "tests", "corpus", "kv")
LLAMA = os.path.join(KV, "llama-dynamo-kv-fp32-w1")
FP32_FOLDERS = sorted(glob.glob(os.path.join(KV, "*-fp32-w1")))

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None


def _ort():
    return pytest.importorskip("onnxruntime")


def _as_float(a: np.ndarray) -> np.ndarray:
    """bfloat16 in either of its forms (ml_dtypes, uint16 bits) as float32."""
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def _read_set(folder: str, prefix: str, names):
    """A test_data_set's input_N.pb / output_N.pb as {name: array}."""
    out = {}
    for i, path in enumerate(sorted(glob.glob(os.path.join(folder, prefix + "_*.pb")))):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        out[t.name or names[i]] = numpy_helper.to_array(t)
    return out


def _cases(folder: str):
    """(name, prompts unpadded, reference tokens, suppressed ids) of a
    folder's reference_tokens.json: the batch and each prompt alone."""
    with open(os.path.join(folder, "reference_tokens.json")) as f:
        ref = json.load(f)
    for case in ref["cases"]:
        prompts = [
            [t for t, m in zip(ids, mask) if m]
            for ids, mask in zip(case["input_ids"], case["attention_mask"])
        ]
        yield case["name"], prompts, case["generated_ids"], ref["suppressed_token_ids"]


# ------------------------------------------------------------ Session.run


@pytest.mark.parametrize("data_set", ["test_data_set_0", "test_data_set_1"])
def test_run_llama_against_onnxruntime(data_set):
    ort = _ort()
    model = os.path.join(LLAMA, "model.onnx")
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with tpfuse.Session(model) as sess:
        names = [i.name for i in sess.get_inputs()]
        feeds = _read_set(os.path.join(LLAMA, data_set), "input", names)
        got = sess.run(None, feeds)
    want = oracle.run(None, feeds)
    assert len(got) == len(want) == len(oracle.get_outputs())
    for g, w, o in zip(got, want, oracle.get_outputs()):
        assert g.shape == w.shape and g.dtype == w.dtype, o.name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=o.name)
    # and the committed outputs of the set
    stored = _read_set(os.path.join(LLAMA, data_set), "output", [o.name for o in oracle.get_outputs()])
    for g, o in zip(got, oracle.get_outputs()):
        np.testing.assert_allclose(g, stored[o.name], rtol=1e-4, atol=1e-4, err_msg=o.name)


def test_run_selected_outputs_in_order():
    model = os.path.join(LLAMA, "model.onnx")
    with tpfuse.Session(model, optimize=False) as sess:
        feeds = _read_set(os.path.join(LLAMA, "test_data_set_0"), "input",
                          [i.name for i in sess.get_inputs()])
        every = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        two = sess.run(["present.1.value", "logits"], feeds)
    np.testing.assert_array_equal(two[0], every["present.1.value"])
    np.testing.assert_array_equal(two[1], every["logits"])


def test_run_tiny_model_every_way_in():
    ort = _ort()
    m = tiny_model()
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    for model in (m, m.SerializeToString()):
        for kwargs in ({}, {"optimize": False}, {"passes": "cleanup"}, {"passes": ["fold-constants"]}):
            with tpfuse.Session(model, **kwargs) as sess:
                (got,) = sess.run(None, {"x": x})
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
                # a list is taken as numpy.asarray takes it; another batch size
                (one,) = sess.run(["y"], {"x": x[:1].tolist()})
                np.testing.assert_allclose(one, want[:1], rtol=1e-5, atol=1e-6)


def test_get_inputs_and_outputs_like_onnxruntime():
    ort = _ort()
    model = os.path.join(LLAMA, "model.onnx")
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with tpfuse.Session(model) as sess:
        for ours, theirs in ((sess.get_inputs(), oracle.get_inputs()),
                             (sess.get_outputs(), oracle.get_outputs())):
            assert [i.name for i in ours] == [i.name for i in theirs]
            assert [i.type for i in ours] == [i.type for i in theirs]
            assert [i.shape for i in ours] == [i.shape for i in theirs]
        first = sess.get_inputs()[0]
        assert first == ("input_ids", ["batch", "sequence"], "tensor(int64)", np.dtype(np.int64))
        assert sess.get_outputs()[0].shape == ["batch", "sequence", 128]


def _cast_model(elem: int) -> onnx.ModelProto:
    """y = float(x) * 2 and z = the same cast back to x's type."""
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["xf", "xf"], ["y"]),
            helper.make_node("Cast", ["y"], ["z"], to=elem),
        ],
        "cast",
        [helper.make_tensor_value_info("x", elem, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("z", elem, [2, 3]),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_float16_in_and_out():
    x = np.array([[1.5, -2.0, 0.25], [3.0, 0.0, -0.5]], dtype=np.float16)
    with tpfuse.Session(_cast_model(TensorProto.FLOAT16)) as sess:
        assert sess.get_inputs()[0].dtype == np.float16
        y, z = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, 2 * x.astype(np.float32))
    assert z.dtype == np.float16
    np.testing.assert_array_equal(z, 2 * x)


def test_bfloat16_in_and_out():
    values = np.array([[1.5, -2.0, 0.25], [3.0, 0.0, -0.5]], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat16
    with tpfuse.Session(_cast_model(TensorProto.BFLOAT16)) as sess:
        assert sess.get_inputs()[0].type == "tensor(bfloat16)"
        feeds = [bits]  # the bits are taken for a bfloat16 input either way
        if ml_dtypes is not None:
            feeds.append(values.astype(ml_dtypes.bfloat16))
        for x in feeds:
            y, z = sess.run(None, {"x": x})
            np.testing.assert_array_equal(y, 2 * values)
            if ml_dtypes is not None:
                assert z.dtype == ml_dtypes.bfloat16
            else:
                assert z.dtype == np.uint16
            np.testing.assert_array_equal(_as_float(z), 2 * values)


@pytest.mark.parametrize("folder", ["llama-dynamo-kv-bf16-w1", "llama-torchscript-kv-fp16-w1"])
def test_run_half_precision_models_against_their_test_data(folder):
    path = os.path.join(KV, folder)
    with tpfuse.Session(os.path.join(path, "model.onnx")) as sess:
        data = os.path.join(path, "test_data_set_0")
        feeds = _read_set(data, "input", [i.name for i in sess.get_inputs()])
        if ml_dtypes is None:  # bfloat16 test data as its bits
            feeds = {k: (v.view(np.uint16) if v.dtype.itemsize == 2 and v.dtype.kind == "V" else v)
                     for k, v in feeds.items()}
        got = sess.run(None, feeds)
        stored = _read_set(data, "output", [o.name for o in sess.get_outputs()])
        for g, o in zip(got, sess.get_outputs()):
            want = stored[o.name]
            assert g.shape == want.shape, o.name
            np.testing.assert_allclose(_as_float(g), _as_float(want), rtol=0.05, atol=0.05,
                                       err_msg=o.name)


# ---------------------------------------------------------------- errors


@pytest.fixture(scope="module")
def llama_session():
    sess = tpfuse.Session(os.path.join(LLAMA, "model.onnx"))
    feeds = _read_set(os.path.join(LLAMA, "test_data_set_0"), "input",
                      [i.name for i in sess.get_inputs()])
    yield sess, feeds
    sess.close()


def test_unknown_input_name(llama_session):
    sess, feeds = llama_session
    bad = dict(feeds, input_idz=feeds["input_ids"])
    with pytest.raises(tpfuse.InputError, match="input_idz") as e:
        sess.run(None, bad)
    assert isinstance(e.value, ValueError) and isinstance(e.value, tpfuse.Error)
    assert e.value.diagnostics and e.value.status == "invalid"


def test_missing_input(llama_session):
    sess, feeds = llama_session
    bad = {k: v for k, v in feeds.items() if k != "attention_mask"}
    with pytest.raises(tpfuse.InputError, match="missing input 'attention_mask'"):
        sess.run(None, bad)


def test_wrong_dtype(llama_session):
    sess, feeds = llama_session
    bad = dict(feeds, input_ids=feeds["input_ids"].astype(np.int32))
    with pytest.raises(tpfuse.InputError, match="input 'input_ids'.*i32"):
        sess.run(None, bad)
    with pytest.raises(tpfuse.InputError, match="input 'input_ids'.*numpy dtype"):
        sess.run(None, dict(feeds, input_ids=np.array(["a"], dtype=object)))


def test_wrong_rank(llama_session):
    sess, feeds = llama_session
    bad = dict(feeds, attention_mask=feeds["attention_mask"][0])
    with pytest.raises(tpfuse.InputError, match="input 'attention_mask'.*rank 1"):
        sess.run(None, bad)


def test_wrong_output_name_and_arguments(llama_session):
    sess, feeds = llama_session
    with pytest.raises(tpfuse.InputError, match="output 'logitz'.*logits"):
        sess.run(["logitz"], feeds)
    with pytest.raises(TypeError, match="input_feed"):
        sess.run(None, [feeds["input_ids"]])
    with pytest.raises(TypeError, match="output_names"):
        sess.run("logits", feeds)
    # the session still runs after every refusal
    assert sess.run(["logits"], feeds)[0].shape == (2, 7, 128)


def test_session_arguments():
    m = tiny_model()
    with pytest.raises(ValueError, match="backend"):
        tpfuse.Session(m, backend="tpu")
    with pytest.raises(ValueError, match="rank 2 is not below world_size 2"):
        tpfuse.Session(m, rank=2, world_size=2)
    with pytest.raises(ValueError, match="unknown pass 'no-such-pass'"):
        tpfuse.Session(m, passes="no-such-pass")
    with pytest.raises(ValueError, match="optimize=True"):
        tpfuse.Session(m, optimize=False, passes="cleanup")
    # world_size 2 outside an MPI launcher
    with pytest.raises(ValueError, match="MPI launcher"):
        tpfuse.Session(m, rank=0, world_size=2)
    with pytest.raises(tpfuse.FileError):
        tpfuse.Session("/nonexistent/model.onnx")
    with pytest.raises(tpfuse.ModelError):
        tpfuse.Session(b"not a model")


def test_cuda_backend_where_not_built():
    sess = None
    try:
        sess = tpfuse.Session(tiny_model(), backend="cuda")
    except tpfuse.UnsupportedError as e:
        assert "CUDA" in str(e) or "cuda" in str(e)
    except tpfuse.Error:
        pass  # built with CUDA, no GPU here
    if sess is not None:
        sess.close()


def test_close_and_context_manager():
    sess = tpfuse.Session(tiny_model())
    with sess as same:
        assert same is sess and not sess.closed
    assert sess.closed
    sess.close()  # again: nothing
    with pytest.raises(ValueError, match="closed"):
        sess.run(None, {"x": np.zeros((1, 4), np.float32)})
    assert [i.name for i in sess.get_inputs()] == ["x"]  # still known


def test_threads_share_a_session():
    m = tiny_model()
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(4)]
    with tpfuse.Session(m) as sess:
        want = [sess.run(None, {"x": x})[0] for x in xs]
        errors = []

        def work(i):
            try:
                for _ in range(50):
                    np.testing.assert_array_equal(sess.run(None, {"x": xs[i]})[0], want[i])
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


# -------------------------------------------------------------- generate


@pytest.mark.parametrize("folder", FP32_FOLDERS, ids=os.path.basename)
def test_generate_reference_tokens(folder):
    model = os.path.join(folder, "model.onnx")
    for name, prompts, want, suppressed in _cases(folder):
        got = tpfuse.generate(model, prompts, max_new_tokens=len(want[0]), suppress=suppressed)
        assert got == want, "%s %s" % (os.path.basename(folder), name)


@pytest.mark.parametrize("folder", ["llama-torchscript-kv-fp32-w1", "qwen3-dynamo-kv-fp32-w1",
                                    "llama-dynamo-kv-bf16-w1"])
def test_generate_on_a_session(folder):
    """An optimized, lowered Session gives the reference tokens too, and
    stays open; stats count the steps."""
    path = os.path.join(KV, folder)
    with tpfuse.Session(os.path.join(path, "model.onnx")) as sess:
        for name, prompts, want, suppressed in _cases(path):
            got, st = tpfuse.generate(sess, prompts, max_new_tokens=len(want[0]),
                                      suppress=suppressed, stats=True)
            assert got == want, "%s %s" % (folder, name)
            assert isinstance(st, tpfuse.GenerateStats)
            assert st.steps == len(want[0]) and st.new_tokens == len(want) * len(want[0])
            assert st.plans_built >= 1 and st.ttft_ms > 0 and st.step_p99_ms >= st.step_p50_ms
        assert not sess.closed


def test_generate_cache_in_place():
    """A model generates with its cache in place (two plans: the prefill
    and every decode step), the tokens of the cache copied; a Session with
    the in-place pipeline too, and its run afterwards takes the caller's
    caches again."""
    path = os.path.join(LLAMA, "model.onnx")
    for name, prompts, want, suppressed in _cases(LLAMA):
        got, st = tpfuse.generate(path, prompts, max_new_tokens=len(want[0]), suppress=suppressed,
                                  stats=True)
        assert got == want and st.cache_in_place and st.plans_built == 2, name
        assert st.prefill_calls == 1
        assert st.cache_length == max(len(p) for p in prompts) + len(want[0]) and st.cache_bytes > 0
        got, st = tpfuse.generate(path, prompts, max_new_tokens=len(want[0]), suppress=suppressed,
                                  stats=True, prefill_chunk=2, max_length=64)
        assert got == want and st.cache_length == 64, name
        assert st.prefill_calls == (max(len(p) for p in prompts) + 1) // 2
    with tpfuse.Session(path, passes="default,kv-cache-in-place,cleanup") as sess:
        names = [i.name for i in sess.get_inputs()]
        assert "past_sequence_length" in names
        name, prompts, want, suppressed = next(iter(_cases(LLAMA)))
        got, st = tpfuse.generate(sess, prompts, max_new_tokens=4, suppress=suppressed, stats=True)
        assert got == [w[:4] for w in want] and st.cache_in_place
        with tpfuse.Session(path, passes="default") as plain:
            assert not tpfuse.generate(plain, prompts, max_new_tokens=4, suppress=suppressed,
                                       stats=True)[1].cache_in_place


def test_generate_one_prompt_and_eos():
    model = os.path.join(LLAMA, "model.onnx")
    # one list of ids is one prompt; greedy prompt 0 starts 65 109
    assert tpfuse.generate(model, [26, 35, 35, 86, 75, 17, 20], max_new_tokens=2, suppress=2) == [
        [65, 109]
    ]
    got = tpfuse.generate(model, [[26, 35, 35, 86, 75, 17, 20], [45, 59, 54, 14]], eos=109,
                          suppress=[2])
    assert got[0] == [65, 109] and len(got[1]) >= 1


class FakeTokenizer:
    """Letters a-z as ids 3..28 (a tokenizer only by its two methods)."""

    def encode(self, text):
        return [3 + ord(c) - ord("a") for c in text]

    def decode(self, ids):
        return "".join(chr(ord("a") + i - 3) if 3 <= i < 29 else "<%d>" % i for i in ids)


def test_generate_with_a_tokenizer():
    model = os.path.join(LLAMA, "model.onnx")
    tok = FakeTokenizer()
    ids = [tok.encode("hello"), tok.encode("abc")]
    want = tpfuse.generate(model, ids, max_new_tokens=6, suppress=2)
    text = tpfuse.generate(model, ["hello", "abc"], max_new_tokens=6, suppress=2, tokenizer=tok)
    assert text == [tok.decode(w) for w in want]
    assert all(isinstance(t, str) for t in text)
    one, st = tpfuse.generate(model, "hello", max_new_tokens=6, suppress=2, tokenizer=tok,
                              stats=True)
    assert one == text[:1] and st.steps == 6
    with pytest.raises(TypeError, match="tokenizer"):
        tpfuse.generate(model, ["hello"])


def test_generate_sampling_with_a_seed():
    model = os.path.join(LLAMA, "model.onnx")
    prompts = [[26, 35, 35, 86, 75, 17, 20], [45, 59, 54, 14]]
    kw = dict(max_new_tokens=12, temperature=0.8, top_k=20, top_p=0.9)
    a = tpfuse.generate(model, prompts, seed=7, **kw)
    b = tpfuse.generate(model, prompts, seed=7, **kw)
    assert a == b and len(a) == 2 and all(len(r) == 12 for r in a)
    hot = dict(max_new_tokens=16, temperature=5.0)
    assert tpfuse.generate(model, [1, 2, 3], seed=1, **hot) != tpfuse.generate(
        model, [1, 2, 3], seed=2, **hot
    )


def test_generate_without_passes():
    """``without`` compiles the model without those passes (as --without):
    the same tokens; an unknown pass, one the pipeline does not run and a
    Session (its own pipeline) are refused."""
    model = os.path.join(LLAMA, "model.onnx")
    name, prompts, want, suppressed = next(iter(_cases(LLAMA)))
    got = tpfuse.generate(model, prompts, max_new_tokens=len(want[0]), suppress=suppressed,
                          without=["fuse-swiglu", "fuse-rotary-embedding"])
    assert got == want, name
    got, st = tpfuse.generate(model, prompts, max_new_tokens=len(want[0]), suppress=suppressed,
                              without="fuse-attention", stats=True)
    assert got == want and not st.cache_in_place  # the in-place pass rewrites the fused Attention
    with pytest.raises(ValueError, match="unknown pass 'no-such-pass'"):
        tpfuse.generate(model, [1, 2], without="no-such-pass")
    with pytest.raises(tpfuse.ModelError, match="do not run pass 'lower-gated-matmul'"):
        tpfuse.generate(model, [1, 2], without="lower-gated-matmul")
    with pytest.raises(ValueError, match="pass names"):
        tpfuse.generate(model, [1, 2], without="cse,dce")
    with tpfuse.Session(model) as sess, pytest.raises(ValueError, match="Session"):
        tpfuse.generate(sess, [1, 2], without="cse")


def test_generate_errors():
    model = os.path.join(LLAMA, "model.onnx")
    with pytest.raises(tpfuse.ModelError, match="KV-cache"):
        tpfuse.generate(tiny_model(), [1, 2])
    with pytest.raises(tpfuse.InputError, match="128|vocabulary"):
        tpfuse.generate(model, [[1, 500]])
    with pytest.raises(ValueError, match="empty"):
        tpfuse.generate(model, [[1, 2], []])
    with pytest.raises(ValueError, match="no prompt"):
        tpfuse.generate(model, [])
    with pytest.raises(ValueError, match="max_new_tokens"):
        tpfuse.generate(model, [1], max_new_tokens=0)
    with pytest.raises(ValueError, match="seed"):
        tpfuse.generate(model, [1], seed=-1)
    with pytest.raises(ValueError, match="top_p"):
        tpfuse.generate(model, [1], top_p=1.5)
    with pytest.raises(TypeError):
        tpfuse.generate(model, [[1.5, 2]])
    sess = tpfuse.Session(model)
    sess.close()
    with pytest.raises(ValueError, match="closed"):
        tpfuse.generate(sess, [1, 2])


# ---------------------------------------------------------- world_size 2

MPI_SCRIPT = r"""
import json, os, sys
import numpy as np
import tpfuse

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
model, llama, out, dense_w1, dense_w2 = sys.argv[1:6]
x = (np.arange(8, dtype=np.float32).reshape(2, 4) - 3) * (rank + 1)
with tpfuse.Session(model.format(rank=rank), rank=rank, world_size=2) as sess:
    (y,) = sess.run(None, {"x": x})
tokens = tpfuse.generate(llama, [[26, 35, 35, 86, 75, 17, 20]], max_new_tokens=4, suppress=2)
try:
    tpfuse.Session(model.format(rank=1 - rank), rank=1 - rank, world_size=2)
    mismatch = "accepted"
except ValueError as e:
    mismatch = str(e)

# the dense example: rank 0 of world 1 alone, then this rank's shard with
# its all-reduces over MPI; the pasts split by heads
rng = np.random.default_rng(0)
with tpfuse.Session(dense_w1) as one:
    full = {i.name: (rng.standard_normal(i.shape) * 0.5).astype(np.float32) for i in one.get_inputs()}
    if one.get_inputs()[0].type == "tensor(bfloat16)":  # as bits: no ml_dtypes needed
        full = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in full.items()}
    (want,) = one.run(["last_hidden_state"], full)
with tpfuse.Session(dense_w2.format(rank=rank), rank=rank, world_size=2) as tp:
    feeds = {}
    for i in tp.get_inputs():
        a = full[i.name]
        if a.shape != tuple(i.shape):
            a = a[:, rank * i.shape[1]:(rank + 1) * i.shape[1]]
        feeds[i.name] = a
    (got,) = tp.run(["last_hidden_state"], feeds)
as_float = lambda a: (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
with open(out.format(rank=rank), "w") as f:
    json.dump({"x": x.tolist(), "y": y.tolist(), "tokens": tokens, "mismatch": mismatch,
               "dense_diff": float(np.abs(as_float(got) - as_float(want)).max()),
               "dense_max": float(np.abs(as_float(want)).max())}, f)
"""


def test_world_size_2_under_mpirun(tmp_path):
    """Each rank runs its own rank's model and generates; a rank that is
    not the job's is refused; the dense example's two shards, all-reducing
    through MPI, give what its one-rank model gives."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no mpirun")
    for rank in (0, 1):
        m = tiny_model()
        helper.set_model_props(m, {"tp_rank": str(rank), "tp_world_size": "2"})
        onnx.save(m, str(tmp_path / ("tiny.rank%d.onnx" % rank)))
    import contextlib
    import io

    import tpmodels  # examples/tpmodels.py

    for w in (1, 2):
        with contextlib.redirect_stdout(io.StringIO()):
            assert tpmodels.main(["dense", "--world-size", str(w), "--out", str(tmp_path / ("w%d" % w))]) == 0
    script = tmp_path / "ranks.py"
    script.write_text(MPI_SCRIPT)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run([mpirun, "-np", "2", "-x", "PYTHONPATH", sys.executable, str(script),
                        str(tmp_path / "tiny.rank{rank}.onnx"), os.path.join(LLAMA, "model.onnx"),
                        str(tmp_path / "out.{rank}.json"), str(tmp_path / "w1" / "dense.rank0.onnx"),
                        str(tmp_path / "w2" / "dense.rank{rank}.onnx")],
                       capture_output=True, text=True, timeout=300, env=env)
    if p.returncode and "built without MPI" in p.stderr:
        pytest.skip("tpfuse built without MPI")
    assert p.returncode == 0, p.stdout + p.stderr
    init = tiny_model().graph.initializer
    w, b = numpy_helper.to_array(init[0]), numpy_helper.to_array(init[1])
    for rank in (0, 1):
        with open(tmp_path / ("out.%d.json" % rank)) as f:
            got = json.load(f)
        want = np.maximum(np.array(got["x"], np.float32) @ w + b, 0)
        assert want.any()
        np.testing.assert_allclose(np.array(got["y"], np.float32), want, rtol=1e-5, atol=1e-6)
        assert got["tokens"] == [[65, 109, 109, 54]]
        assert "runs this process as rank %d of 2" % rank in got["mismatch"], got["mismatch"]
        # bfloat16 outputs of sums taken in another order
        assert got["dense_diff"] <= 0.02 * max(1.0, got["dense_max"]), got


def test_close_while_another_thread_runs():
    """A run either finishes or finds the session closed; never a crash."""
    model = os.path.join(LLAMA, "model.onnx")
    for _ in range(5):
        sess = tpfuse.Session(model)
        feeds = _read_set(os.path.join(LLAMA, "test_data_set_0"), "input",
                          [i.name for i in sess.get_inputs()])
        seen = []

        def work():
            for _ in range(200):
                try:
                    seen.append(sess.run(["logits"], feeds)[0].shape)
                except ValueError as e:
                    assert "closed" in str(e)
                    seen.append("closed")
                    return

        t = threading.Thread(target=work)
        t.start()
        while not seen:
            pass
        sess.close()
        t.join()
        assert all(v in ((2, 7, 128), "closed") for v in seen)
