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

It also runs them, as ``tpfuse run`` and ``tpfuse generate`` do::

    with tpfuse.Session("model.onnx") as sess:
        logits, *_ = sess.run(None, {"input_ids": ids, "attention_mask": mask})
    tokens = tpfuse.generate("model.onnx", [[1, 15, 27]], max_new_tokens=16)

The library work runs with the GIL released, one call at a time.  Library
errors raise :class:`Error` (or a subclass) whose ``diagnostics`` attribute
lists every message.  docs/python.md in the source tree is the guide.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import onnx

from . import _tpfuse
from ._tpfuse import Diagnostic, Error, FileError, InputError, ModelError, UnsupportedError
from ._models import ModelLike, _pass_list, _source
from ._session import GenerateStats, IOInfo, Session, generate

__version__: str = _tpfuse.__version__

__all__ = [
    "Diagnostic",
    "Error",
    "FileError",
    "GenerateStats",
    "IOInfo",
    "InputError",
    "ModelError",
    "OptimizeResult",
    "PIPELINES",
    "PassInfo",
    "Session",
    "UnsupportedError",
    "__version__",
    "check",
    "dump",
    "generate",
    "optimize",
    "passes",
]

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
