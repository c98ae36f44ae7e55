"""tpfuse: rewrite the ONNX graphs of tensor-parallel LLM inference.

Fuses the collectives of a per-rank ONNX model (AllReduce, AllGather,
AllToAll) with the compute around them and returns valid ONNX again::

    import onnx, tpfuse
    result = tpfuse.optimize(onnx.load("model.rank0.onnx"), rank=0, world_size=2)
    onnx.save(result.model, "opt.rank0.onnx")

A model is an ``onnx.ModelProto``, its serialized bytes, or a path (``str``
or ``os.PathLike``).  A path is read by the library itself: weights in
external data stay mapped from their files instead of being copied, so pass
large models by path, together with ``output=PATH``.

The library work runs with the GIL released, one call at a time.  Library
errors raise :class:`Error` (or a subclass) whose ``diagnostics`` attribute
lists every message.  docs/python.md in the source tree is the guide.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import onnx

from . import _tpfuse
from ._tpfuse import Diagnostic, Error, FileError, ModelError, UnsupportedError

__version__: str = _tpfuse.__version__

__all__ = [
    "Diagnostic",
    "Error",
    "FileError",
    "ModelError",
    "OptimizeResult",
    "PIPELINES",
    "PassInfo",
    "UnsupportedError",
    "__version__",
    "check",
    "dump",
    "optimize",
    "passes",
]

#: A model argument: a ModelProto, its serialized bytes, or a path.
ModelLike = Union[onnx.ModelProto, bytes, bytearray, memoryview, str, "os.PathLike[str]"]

#: Named pipelines accepted by ``optimize(passes=...)`` next to pass names.
PIPELINES: Dict[str, str] = {
    "none": "no passes (the command's -O0)",
    "cleanup": "clean-up passes (-O1)",
    "default": "the full pipeline (-O2)",
    "lower-cpu": "the backend ops of the CPU's kernels (what tpfuse run does before planning)",
    "lower-cuda": "the backend ops of the CUDA kernels (what tpfuse run does before planning)",
}


class PassInfo(NamedTuple):
    """A registered pass: its name, one-line summary and counter names."""

    name: str
    summary: str
    counters: Tuple[str, ...]


class OptimizeResult:
    """What :func:`optimize` returns.

    Unpacks as ``model, stats, near_misses = result``.

    - ``model``: the optimized ``onnx.ModelProto``, or ``None`` when it was
      written to ``output``.
    - ``stats``: pass counters, ``{pass: {counter: value}}``, as the
      command's ``--stats`` prints them.
    - ``near_misses``: with ``explain=True``, one line per pattern that
      almost matched, saying why it did not (the command's ``--explain``).
    - ``diagnostics``: notes and warnings of the run, such as "pass NAME
      matched nothing".
    - ``output``: the path written, or ``None``.
    """

    __slots__ = ("model", "stats", "near_misses", "diagnostics", "output")

    def __init__(
        self,
        model: Optional[onnx.ModelProto],
        stats: Dict[str, Dict[str, int]],
        near_misses: List[str],
        diagnostics: List[Diagnostic],
        output: Optional[str],
    ) -> None:
        self.model = model
        self.stats = stats
        self.near_misses = near_misses
        self.diagnostics = diagnostics
        self.output = output

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.stats, self.near_misses))

    def __repr__(self) -> str:
        where = "output=%r" % self.output if self.output else "model=<ModelProto>"
        return "OptimizeResult(%s, stats=%r, near_misses=<%d>, diagnostics=<%d>)" % (
            where,
            self.stats,
            len(self.near_misses),
            len(self.diagnostics),
        )


def _source(model: ModelLike) -> Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]:
    """The model as the extension takes it: serialized bytes or a path."""
    if isinstance(model, onnx.ModelProto):
        try:
            data: bytes = model.SerializeToString()
            return data
        except ValueError as e:  # protobuf refuses messages over 2 GB
            raise ModelError(
                "the ModelProto cannot be serialized (%s): save it with external data "
                "(onnx.save(model, path, save_as_external_data=True)) and pass the path" % e
            ) from e
    if isinstance(model, (bytes, bytearray, memoryview, str, os.PathLike)):
        return model
    raise TypeError(
        "model: expected an onnx.ModelProto, serialized bytes or a path "
        "(str or os.PathLike), not %s" % type(model).__name__
    )


def _pass_list(passes: Union[str, Sequence[str], None]) -> str:
    if passes is None:
        return "none"
    if isinstance(passes, str):
        return passes
    try:
        names = list(passes)
    except TypeError:
        raise TypeError(
            "passes: expected a str, a sequence of str or None, not %s" % type(passes).__name__
        ) from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                "passes: expected a str or a sequence of str, found %s in the sequence"
                % type(name).__name__
            )
        if "," in name:
            raise ValueError("passes: %r: give one name per item of the sequence" % name)
    return ",".join(names)


def optimize(
    model: ModelLike,
    passes: Union[str, Sequence[str], None] = "default",
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    explain: bool = False,
    *,
    output: Union[str, "os.PathLike[str]", None] = None,
    external_data_threshold: Optional[int] = None,
    verify_each: bool = False,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> OptimizeResult:
    """Runs a pass pipeline over ``model``, as ``tpfuse optimize`` does.

    The model is verified and its shapes inferred first; the result is
    verified again.  ``passes`` is a pipeline name (``"default"``,
    ``"cleanup"``, ``"none"``), a comma-separated list of pass names, or a
    sequence of names (``None``: no passes).  ``rank`` and ``world_size``
    go together; without them, passes read the model's ``tp_rank`` and
    ``tp_world_size`` metadata.  ``explain`` collects the near misses.

    With ``output=PATH`` the model is written there (initializers of at
    least ``external_data_threshold`` bytes go to ``PATH.data``; by default
    only tensors that were external already, or all when the model exceeds
    2 GB) and ``result.model`` is ``None``.  Neither may be the model's
    file or one of its external data files (every spelling, links
    included); both are renamed into place only once complete.
    ``verify_each`` verifies the
    model after every pass.  ``base_dir`` is where a model given as bytes
    finds its external data (by default it may have none).

    Raises :class:`ModelError` for a malformed or invalid model,
    :class:`FileError` when a file cannot be read or written,
    ``ValueError``/``TypeError`` for bad arguments (an unknown pass name, a
    rank not below the world size, an ``output`` that is one of the model's
    files: ``ValueError`` with ``.status == "conflict"``).
    """
    out_path = os.fspath(output) if output is not None else None
    raw_model, stats, near_misses, diagnostics = _tpfuse.optimize(
        _source(model),
        _pass_list(passes),
        rank,
        world_size,
        explain,
        output=out_path,
        external_data_threshold=external_data_threshold,
        verify_each=verify_each,
        base_dir=base_dir,
    )
    proto: Optional[onnx.ModelProto] = None
    if raw_model is not None:
        proto = onnx.ModelProto()
        proto.ParseFromString(raw_model)
    return OptimizeResult(proto, stats, near_misses, diagnostics, out_path)


def check(
    model: ModelLike,
    *,
    raise_on_error: bool = False,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> List[Diagnostic]:
    """Loads and verifies ``model`` and infers its shapes, as ``tpfuse check``.

    Returns every problem found as a list of :class:`Diagnostic`
    (``severity``, ``node``, ``op``, ``message``); an empty list means the
    model is valid.  A model that cannot even be parsed gives its errors the
    same way.  With ``raise_on_error=True``, any error raises
    :class:`ModelError` carrying the list.  A file that cannot be read always
    raises :class:`FileError`.
    """
    return _tpfuse.check(_source(model), raise_on_error=raise_on_error, base_dir=base_dir)


def dump(
    model: ModelLike,
    format: str = "text",
    *,
    infer_shapes: bool = True,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> str:
    """``model`` as tpfuse's deterministic text dump (``format="text"``:
    values numbered %0, %1, ..., one node a line) or as Graphviz DOT
    (``format="dot"``), as ``tpfuse dump`` prints it.  Shapes are inferred
    first unless ``infer_shapes=False``."""
    return _tpfuse.dump(_source(model), format, infer_shapes=infer_shapes, base_dir=base_dir)


def passes() -> List[PassInfo]:
    """The registered passes, in registry order (the pipelines are in
    :data:`PIPELINES`)."""
    return [PassInfo(name, summary, counters) for name, summary, counters in _tpfuse.passes()]
