"""The model arguments every function of the package takes."""

from __future__ import annotations

import os
from typing import Sequence, Union

import onnx

from ._tpfuse import ModelError

#: A model argument: a ModelProto, its serialized bytes, or a path.
ModelLike = Union[onnx.ModelProto, bytes, bytearray, memoryview, str, "os.PathLike[str]"]


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
