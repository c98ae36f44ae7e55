"""Semantic comparison of two ONNX models, for the round-trip tests.

Two models are equal when every field of every message holds the same value,
with these differences ignored because ONNX gives them no meaning:
  - how a tensor stores its elements (raw_data, the typed *_data fields, or
    external data): tensors compare by name, dtype, dims, metadata and the
    element values (bitwise, through onnx.numpy_helper);
  - a scalar field left unset versus set to its default value;
  - the domain spelling "ai.onnx" versus "";
  - the order of opset imports, of a node's attributes, of initializers and of
    value_info entries;
  - a sparse initializer versus a dense initializer of the same name and value
    (tpfuse's IR stores initializers dense).
Node order, graph input/output order and metadata order must be kept.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor as FD
from onnx import numpy_helper

_ONNX_DOMAIN_ALIASES = ("ai.onnx",)


def _scalar(fd, v):
    if fd.type == FD.TYPE_FLOAT:
        return "f32:" + struct.pack("<f", v).hex()
    if fd.type == FD.TYPE_DOUBLE:
        return "f64:" + struct.pack("<d", v).hex()
    return v


def _tensor_values(t: onnx.TensorProto):
    if t.data_type == onnx.TensorProto.STRING:
        return ("strings", tuple(bytes(s) for s in t.string_data))
    if t.data_location == onnx.TensorProto.EXTERNAL:
        # The loader should have filled raw_data; if not, say so plainly.
        return ("external-not-loaded", tuple((e.key, e.value) for e in t.external_data))
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:  # a dtype numpy_helper cannot read
        return ("unreadable", type(exc).__name__, bytes(t.raw_data))
    arr = np.ascontiguousarray(arr)
    return ("array", str(arr.dtype), tuple(arr.shape), arr.tobytes())


def _canon_tensor(t: onnx.TensorProto):
    d = {
        "name": t.name,
        "dims": list(t.dims),
        "data_type": t.data_type,
        "values": _tensor_values(t),
    }
    if t.doc_string:
        d["doc_string"] = t.doc_string
    if len(t.metadata_props):
        d["metadata_props"] = [canon(e) for e in t.metadata_props]
    if t.HasField("segment"):
        d["segment"] = canon(t.segment)
    return d


def _canon_sparse_as_dense(sp: onnx.SparseTensorProto):
    values = numpy_helper.to_array(sp.values)
    indices = numpy_helper.to_array(sp.indices).astype(np.int64)
    dims = [int(d) for d in sp.dims]
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        indices = np.ravel_multi_index(tuple(indices.T), dims) if indices.size else indices[:, 0]
    dense.reshape(-1)[indices] = values.reshape(-1)
    d = {
        "name": sp.values.name,
        "dims": dims,
        "data_type": sp.values.data_type,
        "values": ("array", str(dense.dtype), tuple(dense.shape), dense.tobytes()),
    }
    if sp.values.doc_string:
        d["doc_string"] = sp.values.doc_string
    return d


def canon(msg):
    """A nested dict/list form of `msg` with the differences above removed."""
    full = msg.DESCRIPTOR.full_name
    if full == "onnx.TensorProto":
        return _canon_tensor(msg)
    out = {}
    for fd in msg.DESCRIPTOR.fields:
        if fd.is_repeated:
            vals = getattr(msg, fd.name)
            if not len(vals):
                continue
            if fd.type == FD.TYPE_MESSAGE:
                out[fd.name] = [canon(v) for v in vals]
            else:
                out[fd.name] = [_scalar(fd, v) for v in vals]
        elif fd.type == FD.TYPE_MESSAGE:
            if msg.HasField(fd.name):
                out[fd.name] = canon(getattr(msg, fd.name))
        elif fd.containing_oneof is not None:
            if msg.HasField(fd.name):
                out[fd.name] = _scalar(fd, getattr(msg, fd.name))
        else:
            v = getattr(msg, fd.name)
            if v != fd.default_value:
                out[fd.name] = _scalar(fd, v)

    if full in ("onnx.NodeProto", "onnx.OperatorSetIdProto", "onnx.FunctionProto"):
        if out.get("domain") in _ONNX_DOMAIN_ALIASES:
            del out["domain"]
    if full == "onnx.NodeProto" and "attribute" in out:
        out["attribute"] = sorted(out["attribute"], key=lambda a: a.get("name", ""))
    if full in ("onnx.ModelProto", "onnx.FunctionProto") and "opset_import" in out:
        out["opset_import"] = sorted(out["opset_import"], key=lambda o: o.get("domain", ""))
    if full == "onnx.GraphProto" and len(msg.sparse_initializer):
        out.pop("sparse_initializer", None)
        dense = [_canon_sparse_as_dense(sp) for sp in msg.sparse_initializer]
        out["initializer"] = out.get("initializer", []) + dense
    if full == "onnx.GraphProto":
        for key in ("initializer", "value_info"):
            if key in out:
                out[key] = sorted(out[key], key=lambda v: v.get("name", ""))
    if full == "onnx.FunctionProto" and "value_info" in out:
        out["value_info"] = sorted(out["value_info"], key=lambda v: v.get("name", ""))
    return out


def _short(v, limit=120):
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def _label(item):
    if isinstance(item, dict) and item.get("name"):
        return ":" + str(item["name"])
    return ""


def diff(a, b, path="model"):
    """The first difference between two canonical forms, or None."""
    if type(a) is not type(b):
        return f"{path}: {_short(a)} (input) != {_short(b)} (output)"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in b:
                return f"{path}.{k}: {_short(a[k])} lost in the output"
            if k not in a:
                return f"{path}.{k}: {_short(b[k])} appeared in the output"
            if k == "values" and isinstance(a[k], tuple):
                d = _diff_values(a[k], b[k], f"{path}.values")
            else:
                d = diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b) and all(isinstance(x, dict) and "name" in x for x in a + b):
            na, nb = [x["name"] for x in a], [x["name"] for x in b]
            lost = [n for n in na if n not in nb]
            extra = [n for n in nb if n not in na]
            if lost or extra:
                return (f"{path}: {len(a)} entries in the input, {len(b)} in the output"
                        f" (lost: {_short(lost)}, added: {_short(extra)})")
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}{_label(x)}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: {len(a)} entries in the input, {len(b)} in the output"
        return None
    if a != b:
        return f"{path}: {_short(a)} (input) != {_short(b)} (output)"
    return None


def _diff_values(a, b, path):
    if a == b:
        return None
    if a[0] == "array" and b[0] == "array":
        if a[1] != b[1] or a[2] != b[2]:
            return f"{path}: {a[1]}{list(a[2])} (input) != {b[1]}{list(b[2])} (output)"
        xa, xb = np.frombuffer(a[3], np.uint8), np.frombuffer(b[3], np.uint8)
        first = int(np.nonzero(xa != xb)[0][0]) if len(xa) == len(xb) else -1
        return f"{path}: element bytes differ (first differing byte {first})"
    return f"{path}: {_short(a)} (input) != {_short(b)} (output)"


def load(path: str) -> onnx.ModelProto:
    """Loads a model with its external data (resolved next to the file)."""
    return onnx.load(path, load_external_data=True)


def compare_files(path_in: str, path_out: str):
    """None when the two model files are semantically equal, else the first difference."""
    a = canon(load(path_in))
    b = canon(load(path_out))
    return diff(a, b)


def check(path: str):
    """None when onnx.checker accepts the model file, else its message."""
    try:
        onnx.checker.check_model(os.fspath(path))
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return None
