#!/usr/bin/env python3
"""Reference evaluator for the tpfuse example models.

A small numpy interpreter of exactly the ops the examples use runs the W
per-rank models side by side, simulating the com.microsoft collectives
(AllReduce, AllGather, AllToAll) across them, and compares every rank's
outputs with onnxruntime's outputs of the unsharded model.

Usage:
  python3 examples/reference.py DIR FAMILY [--precision float32|native]
                                [--atol A] [--rtol R] [--no-self-check]

--precision float32 (default) converts both sides to float32 first (the
oracle setting); native runs the rank models in their own dtype (bfloat16
rounding after every op, float32 accumulation) against the float32 full model.
The self check also runs the full model through the interpreter and compares
it with onnxruntime, which validates the interpreter itself.

Exit status: 0 all outputs agree, 1 a mismatch, 2 bad usage or files.
"""

import argparse
import copy
import json
import math
import os
import sys

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
FP8_MAX = 448.0
NP_OF_TP = {
	TP.FLOAT: np.dtype(np.float32),
	TP.FLOAT16: np.dtype(np.float16),
	TP.DOUBLE: np.dtype(np.float64),
	TP.BFLOAT16: BF16,
	TP.FLOAT8E4M3FN: FP8,
	TP.INT64: np.dtype(np.int64),
	TP.INT32: np.dtype(np.int32),
	TP.BOOL: np.dtype(np.bool_),
}
FLOATS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64), BF16, FP8)
COLLECTIVES = ("AllReduce", "AllGather", "AllToAll")
TPF = "ai.tpfuse"
# tpfuse's fused ops that exchange data between ranks
TPF_COLLECTIVES = ("AllReduceRMSNorm", "AllReduceRMSNormQuant", "ShardedRMSNorm")


class EvalError(Exception):
	pass


def tensor_to_array(t):
	"""numpy array of a TensorProto (raw_data or typed fields)."""
	dt = NP_OF_TP.get(t.data_type)
	if dt is None:
		raise EvalError("tensor '%s': unsupported data type %d" % (t.name, t.data_type))
	shape = tuple(t.dims)
	if t.HasField("raw_data"):
		return np.frombuffer(t.raw_data, dtype=dt).reshape(shape).copy()
	if t.data_type in (TP.FLOAT,):
		return np.array(t.float_data, np.float32).reshape(shape)
	if t.data_type in (TP.INT64,):
		return np.array(t.int64_data, np.int64).reshape(shape)
	if t.data_type in (TP.BFLOAT16, TP.FLOAT16, TP.FLOAT8E4M3FN, TP.INT32, TP.BOOL):
		bits = np.array(t.int32_data, np.int32)
		if t.data_type == TP.BFLOAT16:
			return bits.astype(np.uint16).view(BF16).reshape(shape)
		if t.data_type == TP.FLOAT16:
			return bits.astype(np.uint16).view(np.float16).reshape(shape)
		if t.data_type == TP.FLOAT8E4M3FN:
			return bits.astype(np.uint8).view(FP8).reshape(shape)
		return bits.astype(dt).reshape(shape)
	from onnx import numpy_helper
	return numpy_helper.to_array(t)


def read_pb(path):
	t = TP()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return t.name, tensor_to_array(t)


def as_float32(model):
	"""Copy of model with every bfloat16 tensor, type and Cast target made float32."""
	m = copy.deepcopy(model)
	g = m.graph
	for t in g.initializer:
		if t.data_type == TP.BFLOAT16:
			a = tensor_to_array(t).astype(np.float32)
			t.ClearField("int32_data")
			t.data_type = TP.FLOAT
			t.raw_data = a.tobytes()
	for vi in list(g.input) + list(g.output) + list(g.value_info):
		tt = vi.type.tensor_type
		if tt.elem_type == TP.BFLOAT16:
			tt.elem_type = TP.FLOAT
	for n in g.node:
		for a in n.attribute:
			if a.name in ("to", "output_dtype") and a.i == TP.BFLOAT16:
				a.i = TP.FLOAT
			if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TP.BFLOAT16:
				arr = tensor_to_array(a.t).astype(np.float32)
				a.t.CopyFrom(helper.make_tensor(a.t.name, TP.FLOAT, arr.shape,
								arr.tobytes(), raw=True))
	return m


# ---- the interpreter --------------------------------------------------------

def f32(a):
	return a.astype(np.float32) if a.dtype != np.float32 else a


def out_as(res, dtype):
	if dtype == FP8:
		res = np.clip(res, -FP8_MAX, FP8_MAX)
	return np.asarray(res).astype(dtype)


def rms(x, axis, eps):
	axes = tuple(range(axis % x.ndim, x.ndim))
	ms = np.mean(x * x, axis=axes, keepdims=True)
	return x / np.sqrt(ms + np.float32(eps))


def attrs_of(node):
	return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def binary(fn, a, b):
	if a.dtype in FLOATS:
		return out_as(fn(f32(a), f32(b)), a.dtype)
	return fn(a, b)


def is_collective(node):
	if node.domain == TPF:
		return node.op_type in TPF_COLLECTIVES
	return node.op_type in COLLECTIVES


def norm_scale(gamma, offset):
	return f32(gamma) + np.float32(offset)


def eval_tpfuse(node, ins):
	"""tpfuse's local fused ops (the unfused formula, same roundings)."""
	op = node.op_type
	at = attrs_of(node)
	x = ins[0]
	if op == "RMSNorm":
		# RMSNorm(x, gamma[, residual]) -> (y[, the sum, rounded as the Add rounds it])
		if len(ins) > 2 and ins[2] is not None:
			x = out_as(f32(x) + f32(ins[2]), x.dtype)
		y = rms(f32(x), at.get("axis", -1), at.get("epsilon", 1e-5))
		return [out_as(y * norm_scale(ins[1], at.get("weight_offset", 0.0)), x.dtype), x][:len(node.output)]
	if op == "SigmoidGateAdd":
		final, gate, shared = (f32(v) for v in ins[:3])
		return [out_as(final + shared / (1.0 + np.exp(-gate)), x.dtype)]
	if op == "GatedActivation":
		if at.get("packed", 0):
			gate, up = np.split(f32(x), 2, axis=-1)
		else:
			gate, up = f32(x), f32(ins[1])
		act = at.get("activation", "silu")
		if isinstance(act, bytes):
			act = act.decode()
		g = gate.astype(np.float64)
		if act == "silu":
			a = g / (1.0 + np.exp(-g))
		elif act == "gelu":
			a = 0.5 * g * (1.0 + np.vectorize(math.erf)(g / math.sqrt(2.0)))
		else:
			a = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))
		return [out_as(out_as(a, x.dtype).astype(np.float32) * up, x.dtype)]
	if op == "Pack":
		seg = np.array(at["segments"], np.int64).reshape(-1, 4)
		size = int((seg[:, 2] + seg[:, 3]).max(initial=0))
		out = np.zeros(size, dtype=x.dtype)
		flat = [v.reshape(-1) for v in ins]
		for i, src, dst, n in seg:
			out[dst:dst + n] = flat[i][src:src + n]
		return [out]
	if op == "Unpack":
		seg = np.array(at["segments"], np.int64).reshape(-1, 4)
		ranks = at["output_ranks"]
		dims = list(at["output_dims"])
		outs = []
		for r in ranks:
			shape, dims = dims[:r], dims[r:]
			outs.append(np.zeros(int(np.prod(shape)), dtype=x.dtype).reshape(shape))
		flat = [o.reshape(-1) for o in outs]
		for i, src, dst, n in seg:
			flat[i][dst:dst + n] = x[src:src + n]
		return outs
	raise EvalError("node '%s' (%s.%s): op not supported by the reference evaluator"
			% (node.name, TPF, op))


def eval_attention(node, ins, at):
	"""ONNX Attention (opset 23), 4-D: Q [B, Hq, S, D], K/V [B, Hkv, L, D],
	optional mask and past K/V; float32 accumulation (what fuse-attention
	creates from the examples' decode attention)."""
	x = ins[0]
	opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
	if x.ndim != 4:
		raise EvalError("node '%s' (Attention): only 4-D Q/K/V" % node.name)
	q, k, v = f32(x), f32(ins[1]), f32(ins[2])
	mask, pk, pv = opt(3), opt(4), opt(5)
	if pk is not None:
		k = np.concatenate([f32(pk), k], axis=2)
		v = np.concatenate([f32(pv), v], axis=2)
	g = q.shape[1] // k.shape[1]
	kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
	scale = at.get("scale", 1.0 / math.sqrt(q.shape[3]))
	s = np.matmul(q, np.swapaxes(kr, -1, -2)) * np.float32(scale)
	cap = at.get("softcap", 0.0)
	if cap > 0:
		s = np.float32(cap) * np.tanh(s / np.float32(cap))
	if mask is not None:
		s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + f32(mask)
	if at.get("is_causal", 0):
		P, S, T = k.shape[2] - ins[1].shape[2], q.shape[2], k.shape[2]
		s = np.where(np.arange(T)[None, :] <= np.arange(S)[:, None] + P, s, -np.inf)
	mx = s.max(axis=-1, keepdims=True)
	mx = np.where(np.isneginf(mx), 0, mx)
	e = np.exp(s - mx)
	tot = e.sum(axis=-1, keepdims=True)
	p = e / np.where(tot > 0, tot, 1)
	outs = [out_as(np.matmul(p, vr), x.dtype), out_as(k, x.dtype), out_as(v, x.dtype)]
	return outs[:len(node.output)]


def eval_node(node, ins):
	"""Evaluate one non-collective node; ins holds arrays (None for absent inputs)."""
	if node.domain == TPF:
		return eval_tpfuse(node, ins)
	op = node.op_type
	at = attrs_of(node)
	x = ins[0] if ins else None
	if op == "Add":
		return [binary(np.add, x, ins[1])]
	if op == "Sub":
		return [binary(np.subtract, x, ins[1])]
	if op == "Mul":
		return [binary(np.multiply, x, ins[1])]
	if op == "Div":
		return [binary(np.divide, x, ins[1])]
	if op == "Pow":
		return [out_as(np.power(f32(x), f32(ins[1])), x.dtype)]
	if op == "MatMul":
		return [out_as(np.matmul(f32(x), f32(ins[1])), x.dtype)]
	if op == "Sqrt":
		return [out_as(np.sqrt(f32(x)), x.dtype)]
	if op == "Reciprocal":
		return [out_as(1.0 / f32(x), x.dtype)]
	if op == "Sigmoid":
		return [out_as(1.0 / (1.0 + np.exp(-f32(x))), x.dtype)]
	if op == "Relu":
		return [out_as(np.maximum(f32(x), 0), x.dtype)]
	if op == "Neg":
		return [out_as(-f32(x), x.dtype)]
	if op == "Exp":
		return [out_as(np.exp(f32(x)), x.dtype)]
	if op == "Identity":
		return [x]
	if op == "Softmax":
		ax = at.get("axis", -1)
		v = f32(x)
		e = np.exp(v - v.max(axis=ax, keepdims=True))
		return [out_as(e / e.sum(axis=ax, keepdims=True), x.dtype)]
	if op == "Cast":
		to = NP_OF_TP[at["to"]]
		return [out_as(f32(x) if x.dtype in FLOATS else x, to)]
	if op == "Reshape":
		shape = [int(v) for v in ins[1]]
		shape = [x.shape[i] if v == 0 and not at.get("allowzero", 0) else v
			 for i, v in enumerate(shape)]
		return [x.reshape(shape)]
	if op == "Transpose":
		perm = at.get("perm", list(range(x.ndim))[::-1])
		return [np.transpose(x, perm).copy()]
	if op == "Concat":
		return [np.concatenate(ins, axis=at["axis"])]
	if op == "Slice":
		starts, ends = ins[1], ins[2]
		axes = ins[3] if len(ins) > 3 and ins[3] is not None else range(len(starts))
		steps = ins[4] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
		sl = [slice(None)] * x.ndim
		for s, e, a, st in zip(starts, ends, axes, steps):
			sl[int(a) % x.ndim] = slice(int(s), int(e), int(st))
		return [x[tuple(sl)].copy()]
	if op == "Split":
		ax = at.get("axis", 0) % x.ndim
		if len(ins) > 1 and ins[1] is not None:
			idx = np.cumsum([int(v) for v in ins[1]])[:-1]
			parts = np.split(x, idx, axis=ax)
		else:
			n = at.get("num_outputs", len(node.output))
			if x.shape[ax] % n:
				raise EvalError("node '%s' (Split): uneven split" % node.name)
			parts = np.split(x, n, axis=ax)
		return [p.copy() for p in parts]
	if op == "Gather":
		return [np.take(x, ins[1].astype(np.int64), axis=at.get("axis", 0))]
	if op == "Unsqueeze":
		axes = sorted(int(a) % (x.ndim + len(ins[1])) for a in ins[1])
		y = x
		for a in axes:
			y = np.expand_dims(y, a)
		return [y]
	if op == "Squeeze":
		return [np.squeeze(x, axis=tuple(int(a) for a in ins[1]))]
	if op in ("ReduceMean", "ReduceSum", "ReduceMax"):
		keep = bool(at.get("keepdims", 1))
		axes = ins[1] if len(ins) > 1 and ins[1] is not None else None
		if axes is not None and len(axes) == 0:
			axes = None
		ax = None if axes is None else tuple(int(a) % x.ndim for a in axes)
		fn = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max}[op]
		return [out_as(fn(f32(x), axis=ax, keepdims=keep), x.dtype)]
	if op == "TopK":
		k = int(ins[1][0])
		ax = at.get("axis", -1) % x.ndim
		v = f32(x)
		order = np.argsort(-v if at.get("largest", 1) else v, axis=ax, kind="stable")
		idx = np.take(order, np.arange(k), axis=ax)
		return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]
	if op == "ScatterElements":
		if at.get("reduction", "none") != "none":
			raise EvalError("node '%s' (ScatterElements): reduction unsupported" % node.name)
		y = x.copy()
		np.put_along_axis(y, ins[1].astype(np.int64), ins[2].astype(x.dtype),
				  axis=at.get("axis", 0))
		return [y]
	if op == "QuantizeLinear":
		scale = ins[1]
		zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
		if scale.size != 1:
			raise EvalError("node '%s' (QuantizeLinear): only per-tensor scales" % node.name)
		to = zp.dtype if zp is not None else NP_OF_TP[at.get("output_dtype", TP.UINT8)]
		if to != FP8:
			raise EvalError("node '%s' (QuantizeLinear): only FLOAT8E4M3FN" % node.name)
		return [out_as(f32(x) / f32(scale), FP8)]
	if op == "DequantizeLinear":
		scale = ins[1]
		zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
		v = f32(x) - (f32(zp) if zp is not None else 0)
		to = NP_OF_TP[at["output_dtype"]] if at.get("output_dtype") else scale.dtype
		return [out_as(v * f32(scale), to)]
	if op == "Attention":
		return eval_attention(node, ins, at)
	if op in ("RMSNormalization", "SimplifiedLayerNormalization"):
		y = rms(f32(x), at.get("axis", -1), at.get("epsilon", 1e-5)) * f32(ins[1])
		outs = [out_as(y, ins[1].dtype)]
		if op == "SimplifiedLayerNormalization" and len(node.output) > 1:
			outs.append(None)
		return outs
	if op == "SkipSimplifiedLayerNormalization":
		s = f32(x) + f32(ins[1])
		if len(ins) > 3 and ins[3] is not None:
			s = s + f32(ins[3])
		y = rms(s, -1, at.get("epsilon", 1e-5)) * f32(ins[2])
		return [out_as(y, x.dtype), None, None, out_as(s, x.dtype)]
	raise EvalError("node '%s' (%s): op not supported by the reference evaluator"
			% (node.name, op))


def eval_tpfuse_collective(nodes, ins_per_rank):
	W = len(nodes)
	node = nodes[0]
	op = node.op_type
	at = attrs_of(node)
	if op == "ShardedRMSNorm":
		ws = at.get("world_size", W)
		if ws != W:
			raise EvalError("node '%s' (ShardedRMSNorm): world_size %d but %d ranks"
					% (node.name, ws, W))
		n = len(ins_per_rank[0]) // 2
		eps = at.get("epsilons", [at.get("epsilon", 1e-5)] * n)
		dims = at.get("full_dims", [at.get("full_dim", -1)] * n)
		off = at.get("weight_offset", 0.0)
		outs = [[] for _ in range(W)]
		for i in range(n):
			xs = [f32(ins[i]) for ins in ins_per_rank]
			ss = np.sum([np.sum(v * v, axis=-1, keepdims=True) for v in xs], axis=0)
			inv = 1.0 / np.sqrt(ss / np.float32(dims[i]) + np.float32(eps[i]))
			for r in range(W):
				g = norm_scale(ins_per_rank[r][n + i], off)
				outs[r].append(out_as(xs[r] * inv * g, ins_per_rank[r][i].dtype))
		return outs
	# AllReduceRMSNorm(x, gamma[, residual]) -> (norm_out, residual_out)
	# AllReduceRMSNormQuant(x, gamma, scale[, residual]) -> (quant, residual_out, -, norm_out)
	quant = op == "AllReduceRMSNormQuant"
	if quant and at.get("quant", b"fp8") not in (b"fp8", "fp8"):
		raise EvalError("node '%s' (%s): only quant=fp8 is supported" % (node.name, op))
	xs = [ins[0] for ins in ins_per_rank]
	dt = xs[0].dtype
	red = out_as(np.sum([f32(v) for v in xs], axis=0), dt)
	outs = []
	for ins in ins_per_rank:
		ri = 3 if quant else 2
		res = ins[ri] if len(ins) > ri else None
		h = red if res is None else out_as(f32(red) + f32(res), dt)
		y = rms(f32(h), at.get("axis", -1), at.get("epsilon", 1e-5))
		y = out_as(y * norm_scale(ins[1], at.get("weight_offset", 0.0)), dt)
		if quant:
			q = out_as(f32(y) / f32(ins[2]), FP8)
			outs.append([q, h, None, y])
		else:
			outs.append([y, h])
	return outs


def eval_collective(nodes, ins_per_rank):
	if nodes[0].domain == TPF:
		return eval_tpfuse_collective(nodes, ins_per_rank)
	W = len(nodes)
	node = nodes[0]
	op = node.op_type
	at = attrs_of(node)
	gs = at.get("group_size", W)
	if gs != W:
		raise EvalError("node '%s' (%s): group_size %d but %d ranks" % (node.name, op, gs, W))
	xs = [ins[0] for ins in ins_per_rank]
	dt = xs[0].dtype
	if any(x.shape != xs[0].shape or x.dtype != dt for x in xs):
		raise EvalError("node '%s' (%s): ranks disagree on shape or dtype" % (node.name, op))
	if op == "AllReduce":
		s = np.sum([f32(x) for x in xs], axis=0)
		return [[out_as(s, dt)] for _ in range(W)]
	if op == "AllGather":
		g = np.concatenate(xs, axis=at.get("axis", 0))
		return [[g.copy()] for _ in range(W)]
	if op == "AllToAll":
		if xs[0].shape[0] % W:
			raise EvalError("node '%s' (AllToAll): axis 0 not divisible by %d" % (node.name, W))
		chunks = [np.split(x, W, axis=0) for x in xs]
		return [[np.concatenate([chunks[j][r] for j in range(W)], axis=0)] for r in range(W)]
	raise EvalError("unknown collective %s" % op)


def topo_order(graph, known):
	"""Node indices in an order where every input is defined first (stable)."""
	defined = set(known) | {""}
	pending = list(range(len(graph.node)))
	order = []
	while pending:
		rest = []
		for i in pending:
			nd = graph.node[i]
			if all(x in defined for x in nd.input):
				order.append(i)
				defined.update(nd.output)
			else:
				rest.append(i)
		if len(rest) == len(pending):
			nd = graph.node[rest[0]]
			missing = [x for x in nd.input if x not in defined]
			raise EvalError("node '%s' (%s): input '%s' is never defined (or a cycle)"
					% (nd.name, nd.op_type, missing[0]))
		pending = rest
	return order


def run_ranks(models, feeds):
	"""Run W rank models in lock step; feeds[r] maps input names to arrays.
	Returns one dict of outputs per rank."""
	W = len(models)
	graphs = [m.graph for m in models]
	n = len(graphs[0].node)
	if any(len(g.node) != n for g in graphs):
		raise EvalError("rank models differ in node count")
	envs = []
	for g, f in zip(graphs, feeds):
		env = {t.name: tensor_to_array(t) for t in g.initializer}
		for vi in g.input:
			if vi.name not in env:
				if vi.name not in f:
					raise EvalError("missing input '%s'" % vi.name)
				env[vi.name] = f[vi.name]
		envs.append(env)

	def fetch(env, node):
		out = []
		for i in node.input:
			if i == "":
				out.append(None)
			elif i in env:
				out.append(env[i])
			else:
				raise EvalError("node '%s' (%s): input '%s' is not defined yet"
						% (node.name, node.op_type, i))
		return out

	for i in topo_order(graphs[0], envs[0]):
		nodes = [g.node[i] for g in graphs]
		if any(nd.op_type != nodes[0].op_type for nd in nodes):
			raise EvalError("node %d: ranks disagree on the op" % i)
		if is_collective(nodes[0]):
			outs = eval_collective(nodes, [fetch(e, nd) for e, nd in zip(envs, nodes)])
		else:
			outs = [eval_node(nd, fetch(e, nd)) for e, nd in zip(envs, nodes)]
		for env, nd, o in zip(envs, nodes, outs):
			for name, v in zip(nd.output, o):
				if name:
					env[name] = v
	return [{o.name: env[o.name] for o in g.output} for env, g in zip(envs, graphs)]


def run_full(model, feeds, use_ort=True):
	"""Run the unsharded model: onnxruntime CPU when available, else the interpreter."""
	names = [vi.name for vi in model.graph.input]
	types = {vi.name: NP_OF_TP[vi.type.tensor_type.elem_type] for vi in model.graph.input}
	feed = {n: np.asarray(feeds[n]).astype(types[n]) for n in names}
	if use_ort:
		try:
			import onnxruntime as ort
		except ImportError:
			ort = None
		if ort is not None:
			so = ort.SessionOptions()
			so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
			so.intra_op_num_threads = 1
			sess = ort.InferenceSession(model.SerializeToString(), so,
						    providers=["CPUExecutionProvider"])
			outs = sess.run(None, feed)
			return {o.name: v for o, v in zip(sess.get_outputs(), outs)}
	return run_ranks([model], [feed])[0]


# ---- comparison CLI ---------------------------------------------------------

def load_case(folder, name):
	data = os.path.join(folder, name + "_data")
	with open(os.path.join(data, "manifest.json")) as f:
		man = json.load(f)
	W = man["world_size"]
	full = onnx.load(os.path.join(folder, man["models"]["full"]))
	ranks = [onnx.load(os.path.join(folder, p)) for p in man["models"]["ranks"]]

	def inputs(d):
		out = {}
		for desc in man["inputs"]:
			n, a = read_pb(os.path.join(d, "input_%d.pb" % desc["index"]))
			if n != desc["name"]:
				raise EvalError("%s: input_%d.pb holds '%s', expected '%s'"
						% (d, desc["index"], n, desc["name"]))
			out[n] = a
		return out

	full_in = inputs(data)
	rank_in = [inputs(os.path.join(data, "rank%d" % r)) for r in range(W)]
	return man, full, ranks, full_in, rank_in


def compare(man, ranks_out, full_out, atol, rtol, label):
	W = man["world_size"]
	ok = True
	for desc in man["outputs"]:
		n, ax = desc["name"], desc["shard_axis"]
		ref = f32(np.asarray(full_out[n]))
		worst = 0.0
		worst_rel = 0.0
		bad = False
		for r in range(W):
			want = ref if ax is None else np.split(ref, W, axis=ax)[r]
			got = f32(np.asarray(ranks_out[r][n]))
			if got.shape != want.shape:
				print("  %s %s rank %d: shape %s, expected %s"
				      % (label, n, r, got.shape, want.shape))
				ok = False
				bad = True
				continue
			err = np.abs(got - want)
			worst = max(worst, float(err.max(initial=0.0)))
			worst_rel = max(worst_rel, float((err / (np.abs(want) + 1e-6)).max(initial=0.0)))
			if not np.all(np.isfinite(got)) or np.any(err > atol + rtol * np.abs(want)):
				bad = True
		ok = ok and not bad
		print("  %-10s %-22s max abs err %.3g  (max |ref| %.3g) %s"
		      % (label, n, worst, float(np.abs(ref).max(initial=0.0)),
			 "MISMATCH" if bad else "ok"))
	return ok


def main(argv=None):
	ap = argparse.ArgumentParser(description="Compare per-rank example models (numpy, "
				     "simulated collectives) with the full model (onnxruntime).")
	ap.add_argument("dir")
	ap.add_argument("name", help="model name, e.g. dense or dense_fp8")
	ap.add_argument("--precision", choices=("float32", "native"), default="float32")
	ap.add_argument("--atol", type=float)
	ap.add_argument("--rtol", type=float)
	ap.add_argument("--no-self-check", action="store_true")
	ap.add_argument("--rank-models", metavar="PATTERN",
			help="evaluate these rank models instead of DIR/NAME.rank{rank}.onnx, "
			     "e.g. tpfuse-optimized ones: 'out/NAME.opt.rank{rank}.onnx'")
	args = ap.parse_args(argv)
	try:
		man, full, ranks, full_in, rank_in = load_case(args.dir, args.name)
		if args.rank_models:
			ranks = [onnx.load(args.rank_models.replace("{rank}", str(r)))
				 for r in range(man["world_size"])]
	except (OSError, EvalError, ValueError, KeyError) as e:
		print("reference: error: %s" % e, file=sys.stderr)
		return 2
	f32_mode = args.precision == "float32"
	atol = args.atol if args.atol is not None else (2e-4 if f32_mode else 0.25)
	rtol = args.rtol if args.rtol is not None else (2e-4 if f32_mode else 0.1)
	full32 = as_float32(full)
	full_out = run_full(full32, full_in)
	if f32_mode:
		ranks = [as_float32(m) for m in ranks]
		rank_in = [{k: f32(v) for k, v in d.items()} for d in rank_in]
	print("%s: W=%d, %s rank models vs onnxruntime float32 full model"
	      % (args.name, man["world_size"], args.precision))
	ok = True
	try:
		if not args.no_self_check:
			interp = run_ranks([full32], [{k: f32(v) for k, v in full_in.items()}])
			ok = compare(dict(man, world_size=1, outputs=[dict(o, shard_axis=None)
				     for o in man["outputs"]]), interp, full_out, 2e-4, 2e-4,
				     "self") and ok
		outs = run_ranks(ranks, rank_in)
	except EvalError as e:
		print("reference: error: %s" % e, file=sys.stderr)
		return 2
	ok = compare(man, outs, full_out, atol, rtol, "ranks") and ok
	print("%s: %s" % (args.name, "PASS" if ok else "FAIL"))
	return 0 if ok else 1


if __name__ == "__main__":
	sys.exit(main())
