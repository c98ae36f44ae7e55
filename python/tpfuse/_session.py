"""Running models: :class:`Session` (one forward call at a time, as
onnxruntime's InferenceSession) and :func:`generate` (token generation over
a model's KV cache), over the runtime that ``tpfuse run`` and ``tpfuse
generate`` use.

Arrays are numpy arrays.  bfloat16 and the float8 types are ml_dtypes'
(``ml_dtypes.bfloat16``, ``ml_dtypes.float8_e4m3fn``, ...) when ml_dtypes is
installed; without it their outputs come back as their bits (``uint16`` for
bfloat16, ``uint8`` for float8), and such bit arrays are accepted as inputs
of those types either way.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import onnx

from . import _tpfuse
from ._models import ModelLike, _pass_list, _source
from ._tpfuse import InputError

try:
    import ml_dtypes
except ImportError:  # bfloat16 and float8 arrays as their bits
    ml_dtypes = None

#: numpy dtype of each ONNX element type (TensorProto.DataType) the runtime runs.
_DTYPES: Dict[int, np.dtype] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.UINT16: np.dtype(np.uint16),
    onnx.TensorProto.INT16: np.dtype(np.int16),
    onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.BOOL: np.dtype(np.bool_),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT64: np.dtype(np.uint64),
}
#: The types numpy has no dtype of: their ml_dtypes name, and the bits' dtype.
_EXTENDED: Dict[int, Tuple[str, np.dtype]] = {
    onnx.TensorProto.BFLOAT16: ("bfloat16", np.dtype(np.uint16)),
    onnx.TensorProto.FLOAT8E4M3FN: ("float8_e4m3fn", np.dtype(np.uint8)),
    onnx.TensorProto.FLOAT8E4M3FNUZ: ("float8_e4m3fnuz", np.dtype(np.uint8)),
    onnx.TensorProto.FLOAT8E5M2: ("float8_e5m2", np.dtype(np.uint8)),
    onnx.TensorProto.FLOAT8E5M2FNUZ: ("float8_e5m2fnuz", np.dtype(np.uint8)),
}
for _code, (_name, _bits) in _EXTENDED.items():
    _DTYPES[_code] = np.dtype(getattr(ml_dtypes, _name)) if ml_dtypes is not None else _bits
_CODES: Dict[np.dtype, int] = {
    dt: code for code, dt in _DTYPES.items() if code not in _EXTENDED or ml_dtypes is not None
}


def _type_name(code: int) -> str:
    """ONNX Runtime's spelling of an element type: ``tensor(float)``."""
    try:
        return "tensor(%s)" % onnx.TensorProto.DataType.Name(code).lower()
    except ValueError:
        return "tensor(undefined)"


class IOInfo(NamedTuple):
    """An input or output of a :class:`Session`, as onnxruntime's NodeArg:
    ``shape`` lists ints, names of symbolic dims and ``None`` for unknown
    ones (``None`` when even the rank is unknown); ``type`` is
    ``"tensor(float)"`` and the like; ``dtype`` the numpy dtype its arrays
    have (``None`` for a type numpy cannot hold)."""

    name: str
    shape: Optional[List[Union[int, str, None]]]
    type: str
    dtype: Optional[np.dtype]


class GenerateStats(NamedTuple):
    """What :func:`generate` measured (``stats=True``)."""

    steps: int  #: forward calls made
    new_tokens: int  #: tokens generated, every prompt together
    ttft_ms: float  #: the prefill: time to the first token
    decode_ms: float  #: the later steps together
    decode_tokens_per_s: float
    step_p50_ms: float  #: median latency of a decode step
    step_p99_ms: float
    plans_built: int  #: plans the session has built (one per input signature)
    cache_in_place: bool  #: the cache written in place (kv-cache-in-place)
    cache_length: int  #: in place: the positions of each cache
    cache_bytes: int  #: in place: the device bytes the caches hold
    prefill_calls: int  #: forward calls the prompts took (chunks of a cache in place)
    graphs_captured: int  #: CUDA graphs captured (0 on the CPU)
    graph_replays: int  #: CUDA graph launches
    device_bytes: int  #: what the session holds on its device (arena, workspace, caches, constants)
    peak_rss_bytes: int  #: the process's peak resident memory


def _io_info(raw: Sequence[Tuple[str, int, Any]]) -> List[IOInfo]:
    return [IOInfo(name, shape, _type_name(code), _DTYPES.get(code)) for name, code, shape in raw]


def _array(code: int, shape: Tuple[int, ...], data: bytearray) -> np.ndarray:
    dtype = _DTYPES.get(code)
    if dtype is None:  # packed sub-byte types: the bytes as they are
        return np.frombuffer(data, dtype=np.uint8)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


class Session:
    """A model compiled for a backend with a runtime session of it, as
    ``tpfuse run`` makes them; :meth:`run` is onnxruntime's
    ``InferenceSession.run``::

        with tpfuse.Session("model.onnx") as sess:
            names = [i.name for i in sess.get_inputs()]
            logits, = sess.run(["logits"], {"input_ids": ids, ...})

    ``model`` is a path, an ``onnx.ModelProto`` or its bytes.  The model is
    verified, its shapes inferred where they can be, optimized with
    ``passes`` (a pipeline or pass names as :func:`optimize` takes them;
    ``None``: the default pipeline) unless ``optimize=False``, and lowered
    to the backend's ops.  ``backend`` is ``"cpu"`` or ``"cuda"`` (where
    the library is built with CUDA; else :class:`UnsupportedError`).

    ``world_size > 1`` runs this process as rank ``rank`` of a
    tensor-parallel job started by an MPI launcher (``mpirun -np N python
    script.py``), each rank with its own rank's model; the collectives go
    through MPI (CPU) or NCCL (CUDA).  Every rank must make the same calls.

    Raises :class:`ModelError` for an invalid model, :class:`UnsupportedError`
    when the backend cannot run one of its ops, ``ValueError`` for bad
    arguments.
    """

    def __init__(
        self,
        model: ModelLike,
        rank: int = 0,
        world_size: int = 1,
        backend: str = "cpu",
        optimize: bool = True,
        passes: Union[str, Sequence[str], None] = None,
        *,
        base_dir: Union[str, "os.PathLike[str]", None] = None,
    ) -> None:
        if not optimize and passes is not None:
            raise ValueError("passes: give them with optimize=True (optimize=False runs none)")
        pipeline = None
        if optimize:
            pipeline = "default" if passes is None else _pass_list(passes)
        self._attach(
            _tpfuse.open_session(
                _source(model), rank, world_size, backend, pipeline, base_dir=base_dir
            )
        )

    @classmethod
    def _as_generate_loads(
        cls, model: ModelLike, backend: str, greedy: bool = False, without: Sequence[str] = ()
    ) -> "Session":
        """A session of the model as ``tpfuse generate`` compiles it: the
        default pipeline, the cache written in place (kv-cache-in-place,
        where the model takes it), for greedy generation without
        suppressed ids the next token's ArgMax on the device
        (greedy-next-token), the logits of a call's last position only
        (last-position-logits), lowered for the backend."""
        self = cls.__new__(cls)
        passes = "default,kv-cache-in-place,cleanup,last-position-logits" + (",greedy-next-token" if greedy else "")
        passes += "".join(",-" + p for p in without)
        self._attach(_tpfuse.open_session(_source(model), 0, 1, backend, passes))
        return self

    def _attach(self, s: Any) -> None:
        self._s: Any = s
        self._inputs = _io_info(s.inputs())
        self._outputs = _io_info(s.outputs())
        self._input_codes = {name: code for name, code, _ in s.inputs()}

    # ------------------------------------------------------------ info

    def get_inputs(self) -> List[IOInfo]:
        """The inputs a run takes (graph inputs without an initializer), in order."""
        return list(self._inputs)

    def get_outputs(self) -> List[IOInfo]:
        """The graph outputs, in order."""
        return list(self._outputs)

    @property
    def closed(self) -> bool:
        return self._s is None

    # ------------------------------------------------------------- run

    def _live(self) -> Any:
        if self._s is None:
            raise ValueError("the session is closed")
        return self._s

    def _feed(self, name: Any, value: Any) -> Tuple[str, int, Tuple[int, ...], np.ndarray]:
        if not isinstance(name, str):
            raise TypeError("input_feed: names must be str, not %s" % type(name).__name__)
        declared = self._input_codes.get(name)
        if isinstance(value, np.ndarray) or declared not in _DTYPES:
            arr = np.asarray(value)
        else:  # a list or a scalar: the input's dtype
            arr = np.asarray(value, dtype=_DTYPES[declared])
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        code = _CODES.get(arr.dtype)
        if declared in _EXTENDED and arr.dtype == _EXTENDED[declared][1]:
            code = declared  # bfloat16 or float8 given as its bits
        if code is None:
            raise InputError("input '%s': numpy dtype %s has no ONNX tensor type" % (name, arr.dtype))
        return name, code, tuple(int(d) for d in arr.shape), arr.reshape(-1).view(np.uint8)

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[np.ndarray]:
        """One forward call: ``input_feed`` maps input names to arrays (or
        anything ``numpy.asarray`` takes: lists and scalars become arrays of
        the input's dtype); returns the outputs named in
        ``output_names`` in that order (``None``: every output).

        Raises :class:`InputError` (a ``ValueError``) when the inputs do not
        fit the model: an unknown or missing name, another dtype, rank or
        shape; the message and ``.diagnostics`` are the runtime's.
        ``run_options`` is accepted for onnxruntime's signature and ignored.
        """
        s = self._live()
        if not isinstance(input_feed, Mapping):
            raise TypeError(
                "input_feed: expected a dict of name -> array, not %s" % type(input_feed).__name__
            )
        feeds = [self._feed(name, value) for name, value in input_feed.items()]
        raw = s.run(feeds)
        if output_names is None:
            return [_array(code, shape, data) for _, code, shape, data in raw]
        if isinstance(output_names, str):
            raise TypeError("output_names: expected a list of names or None, not a str")
        by_name = {name: (code, shape, data) for name, code, shape, data in raw}
        out = []
        for name in output_names:
            if name not in by_name:
                raise InputError(
                    "output '%s' is not an output of the model (outputs: %s)"
                    % (name, ", ".join(o.name for o in self._outputs))
                )
            out.append(_array(*by_name[name]))
        return out

    # ----------------------------------------------------------- close

    def close(self) -> None:
        """Frees the runtime session and the model; later calls raise
        ``ValueError``.  Closing again does nothing."""
        if self._s is not None:
            self._s.close()
            self._s = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._s is None else "%d inputs, %d outputs" % (
            len(self._inputs),
            len(self._outputs),
        )
        return "<tpfuse.Session %s>" % state


# --------------------------------------------------------------- generate


def _ids(value: Any, what: str) -> List[int]:
    try:
        ids = [operator.index(t) for t in value]
    except TypeError:
        raise TypeError("%s: expected a list of token ids (ints)" % what) from None
    if any(t < 0 for t in ids):
        raise ValueError("%s: token ids are 0 or more: %r" % (what, ids))
    return ids


def _id_list(value: Any, what: str) -> List[int]:
    if value is None:
        return []
    if isinstance(value, (int, np.integer)):
        return _ids([value], what)
    return _ids(value, what)


def _prompts(prompts: Any, tokenizer: Any) -> Tuple[List[List[int]], bool]:
    """The prompts as lists of ids, and whether the result is text."""
    if isinstance(prompts, str):
        prompts = [prompts]
    elif isinstance(prompts, np.ndarray) and prompts.ndim == 1:
        prompts = [prompts]
    else:
        prompts = list(prompts)
        if prompts and isinstance(prompts[0], (int, np.integer)):
            prompts = [prompts]  # one prompt
    if not prompts:
        raise ValueError("prompts: no prompt")
    text = any(isinstance(p, str) for p in prompts)
    if text and tokenizer is None:
        raise TypeError("prompts: text needs a tokenizer (an object with encode and decode)")
    rows = []
    for i, p in enumerate(prompts):
        row = _ids(tokenizer.encode(p), "tokenizer.encode") if isinstance(p, str) else p
        row = _ids(row, "prompt %d" % i)
        if not row:
            raise ValueError("prompt %d is empty" % i)
        rows.append(row)
    return rows, text or tokenizer is not None


def generate(
    model_or_session: Union[ModelLike, Session],
    prompts: Any,
    max_new_tokens: int = 32,
    eos: Union[int, Sequence[int], None] = None,
    suppress: Union[int, Sequence[int], None] = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    pad_id: int = 0,
    backend: str = "cpu",
    tokenizer: Any = None,
    stats: bool = False,
    max_length: int = 0,
    prefill_chunk: int = 0,
    without: Union[str, Sequence[str], None] = None,
) -> Any:
    """Generates tokens from a language model with KV-cache I/O, as
    ``tpfuse generate`` does (docs/generate.md).

    ``prompts`` is a list of prompts, each a list of token ids (one list of
    ids is one prompt); they are left-padded with ``pad_id`` into one
    batch.  Each prompt gets up to ``max_new_tokens`` new tokens, stopping
    after one of the ``eos`` ids; ``suppress`` ids are never generated.
    ``temperature`` 0 is greedy; above it, tokens are sampled (``top_k``,
    ``top_p``) from a generator keyed by ``seed``: the same seed gives the
    same tokens.  A model whose cache is in place takes ``max_length`` (its
    caches' positions; 0: the longest prompt plus ``max_new_tokens``) and
    ``prefill_chunk`` (the prompt in calls of at most that many positions;
    0: whole, halved while its memory does not fit).

    ``model_or_session`` is a model (compiled and run as the command does,
    its cache in place where the model takes it, on ``backend``; without
    the passes named in ``without``, each one the pipeline runs, as
    ``--without``) or a :class:`Session` (its backend and pipeline; it
    stays open; ``without`` does not apply).
    With ``tokenizer`` (any object with ``encode(str) -> list[int]`` and
    ``decode(list[int]) -> str``), prompts may be strings and the results
    are decoded.

    Returns the new tokens of each prompt (a list of lists of ids, or of
    strings with a tokenizer), in the order given; with ``stats=True``, a
    pair of that and :class:`GenerateStats`.  Raises :class:`ModelError`
    for a model without KV-cache I/O, :class:`InputError` for a token id
    outside the vocabulary.
    """
    rows, text = _prompts(prompts, tokenizer)
    if isinstance(max_new_tokens, bool) or operator.index(max_new_tokens) < 1:
        raise ValueError("max_new_tokens must be 1 or more, not %r" % (max_new_tokens,))
    if not 0 <= operator.index(seed) < 1 << 64:
        raise ValueError("seed must be from 0 to 2**64 - 1, not %r" % (seed,))
    if operator.index(top_k) < 0 or not 0.0 <= float(top_p) <= 1.0 or float(temperature) < 0:
        raise ValueError(
            "temperature must be 0 or more, top_k 0 or more and top_p from 0 to 1 "
            "(temperature=%r, top_k=%r, top_p=%r)" % (temperature, top_k, top_p)
        )
    if operator.index(pad_id) < 0:
        raise ValueError("pad_id must be 0 or more, not %r" % (pad_id,))
    drop = [without] if isinstance(without, str) else list(without or ())
    if not all(isinstance(p, str) and p and "," not in p and not p.startswith("-") for p in drop):
        raise ValueError("without must be pass names, not %r" % (without,))
    if isinstance(model_or_session, Session):
        if drop:
            raise ValueError("without applies to a model compiled here, not to a Session (its own pipeline)")
        session, own = model_or_session, False
    else:
        greedy = float(temperature) == 0 and not _id_list(suppress, "suppress")
        session, own = Session._as_generate_loads(model_or_session, backend, greedy, drop), True
    try:
        tokens, raw_stats = session._live().generate(
            rows,
            operator.index(max_new_tokens),
            _id_list(eos, "eos"),
            _id_list(suppress, "suppress"),
            float(temperature),
            operator.index(top_k),
            float(top_p),
            operator.index(seed),
            operator.index(pad_id),
            operator.index(max_length),
            operator.index(prefill_chunk),
        )
    finally:
        if own:
            session.close()
    result: List[Any] = [tokenizer.decode(t) for t in tokens] if text else tokens
    if stats:
        return result, GenerateStats(**raw_stats)
    return result
