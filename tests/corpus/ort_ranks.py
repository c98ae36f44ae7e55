#!/usr/bin/env python3
"""Run the W rank models of a corpus folder in onnxruntime, collectives included.

onnxruntime's CPU build has no com.microsoft AllReduce / AllGather, so the
collectives are cut out of every rank graph (their outputs become graph
inputs, their inputs extra graph outputs) and computed here between runs:

  run 0    every collective replaced by its single-rank stand-in (AllReduce:
           Identity, AllGather: W copies concatenated) to learn the shapes
           and first values of what reaches the collectives
  run k    the cut graphs, fed with the collectives' results of run k-1
           (AllReduce: float32 sum in rank order; AllGather: concatenation
           in rank order), until the collectives' inputs stop changing (a
           chain of C collectives settles in at most C + 1 runs)

It is an independent check of the exports (the generator runs it on every
folder): rank 0's logits against test_data_set_0/output_0.pb.  Needs onnx,
numpy and onnxruntime; never torch.

Usage: ort_ranks.py FOLDER [FOLDER ...]   (prints the max abs error of each)
"""
import glob
import json
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

MS = "com.microsoft"


def _collectives(model):
	return [n for n in model.graph.node if n.domain == MS and n.op_type in ("AllReduce", "AllGather")]


def _attr(node, name, default):
	for a in node.attribute:
		if a.name == name:
			return helper.get_attribute_value(a)
	return default


def _types(model):
	try:
		inferred = onnx.shape_inference.infer_shapes(model)
	except Exception:  # noqa: BLE001
		inferred = model
	g = inferred.graph
	return {v.name: v.type.tensor_type.elem_type
		for v in list(g.value_info) + list(g.input) + list(g.output)}


def _stand_in(model, world):
	"""The graph with single-rank stand-ins, the collectives' inputs as outputs."""
	m = onnx.ModelProto()
	m.CopyFrom(model)
	types = _types(model)
	extra = []
	nodes = []
	for n in m.graph.node:
		if n.domain == MS and n.op_type == "AllReduce":
			nodes.append(helper.make_node("Identity", [n.input[0]], [n.output[0]], name=n.name))
		elif n.domain == MS and n.op_type == "AllGather":
			nodes.append(helper.make_node("Concat", [n.input[0]] * world, [n.output[0]], name=n.name,
						      axis=_attr(n, "axis", 0)))
		else:
			nodes.append(n)
			continue
		extra.append(n.input[0])
	del m.graph.node[:]
	m.graph.node.extend(nodes)
	for name in extra:
		m.graph.output.append(helper.make_tensor_value_info(name, types.get(name, 0) or 1, None))
	return m, extra


def _cut(model, dtypes):
	"""The graph without collectives: their outputs are inputs, their inputs outputs."""
	m = onnx.ModelProto()
	m.CopyFrom(model)
	coll = _collectives(m)
	keep = [n for n in m.graph.node if not (n.domain == MS and n.op_type in ("AllReduce", "AllGather"))]
	del m.graph.node[:]
	m.graph.node.extend(keep)
	for n in coll:
		m.graph.input.append(helper.make_tensor_value_info(n.output[0], dtypes[n.input[0]], None))
		m.graph.output.append(helper.make_tensor_value_info(n.input[0], dtypes[n.input[0]], None))
	return m


def _session(model):
	import onnxruntime as ort
	so = ort.SessionOptions()
	so.log_severity_level = 3
	so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
	return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _combine(coll, parts, world):
	out = {}
	for n in coll:
		xs = [p[n.input[0]] for p in parts]
		if n.op_type == "AllReduce":
			acc = xs[0].astype(np.float32)
			for x in xs[1:]:
				acc = acc + x.astype(np.float32)
			out[n.output[0]] = acc.astype(xs[0].dtype)
		else:
			out[n.output[0]] = np.concatenate(xs, axis=_attr(n, "axis", 0))
	return out


def run_ranks(paths, feeds, output="logits"):
	"""Rank 0's `output` after the W rank models ran together."""
	world = len(paths)
	models = [onnx.load(p) for p in paths]
	coll = _collectives(models[0])
	names = [n.input[0] for n in coll]
	parts = []
	for m in models:
		sm, extra = _stand_in(m, world)
		s = _session(sm)
		vals = s.run([output] + extra, feeds)
		parts.append(dict(zip(extra, vals[1:])))
	dtypes = {k: helper.np_dtype_to_tensor_dtype(v.dtype) for k, v in parts[0].items()}
	sessions = [_session(_cut(m, dtypes)) for m in models]
	last = None
	for _ in range(len(coll) + 2):
		results = _combine(coll, parts, world)
		new_parts = []
		outs = []
		for s in sessions:
			f = dict(feeds)
			f.update(results)
			vals = s.run([output] + names, f)
			outs.append(vals[0])
			new_parts.append(dict(zip(names, vals[1:])))
		same = all(np.array_equal(new_parts[r][k], parts[r][k]) for r in range(world) for k in names)
		parts = new_parts
		last = outs[0]
		if same:
			return last
	raise RuntimeError("collectives did not settle")


def check_folder(folder):
	with open(os.path.join(folder, "manifest.json")) as f:
		man = json.load(f)
	feeds = {}
	for i in man["inputs"]:
		t = onnx.TensorProto()
		with open(os.path.join(folder, i["file"]), "rb") as fh:
			t.ParseFromString(fh.read())
		feeds[i["name"]] = numpy_helper.to_array(t)
	t = onnx.TensorProto()
	with open(os.path.join(folder, man["outputs"][0]["file"]), "rb") as fh:
		t.ParseFromString(fh.read())
	want = numpy_helper.to_array(t).astype(np.float32)
	paths = [os.path.join(folder, m) for m in man["models"]]
	got = run_ranks(paths, feeds).astype(np.float32)
	return float(np.abs(got - want).max())


def main(argv):
	rc = 0
	for folder in argv or sorted(os.path.dirname(p) for p in glob.glob(os.path.join(
			os.path.dirname(os.path.abspath(__file__)), "*", "manifest.json"))):
		try:
			print("%s: %.3g" % (os.path.basename(folder), check_folder(folder)), flush=True)
		except Exception as e:  # noqa: BLE001
			print("%s: %s" % (os.path.basename(folder), str(e).splitlines()[0][:200]), flush=True)
			rc = 1
	return rc


if __name__ == "__main__":
	sys.exit(main(sys.argv[1:]))
