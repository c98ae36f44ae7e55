#!/usr/bin/env python3
"""Example tensor-parallel LLM models for tpfuse.

For a world size W this writes, into one folder:

  FAMILY.rank{r}.onnx     r = 0..W-1: one model per rank, same structure,
                          rank-specific weight shards, com.microsoft collectives;
                          metadata_props tp_rank, tp_world_size, tp_family
  FAMILY.full.onnx        the unsharded single-device model with the same
                          (full) weights and no collectives
  FAMILY_data/            ONNX test data: input_N.pb / output_N.pb for the full
                          model, rank{r}/input_N.pb / output_N.pb for each rank
                          (replicated inputs are copies, sharded ones such as a
                          KV cache are the rank's slice), manifest.json

Families: dense, dense_fp8, hybrid, minimax_qk, qwen_moe, gdn_a2a (see
examples/README.md for what each contains and which fusion it exercises).

Usage:
  python3 examples/tpmodels.py FAMILY --world-size W --out DIR [size options]
  python3 examples/tpmodels.py all --world-size 2 --out /tmp/tp2

Weights and inputs depend only on the seed, the family's sizes and the tensor
name, never on W, so the full model of one configuration is the same for every
world size.  All float values are representable in bfloat16, so a float32 and
a bfloat16 model of the same configuration hold identical numbers.
"""

import argparse
import collections
import json
import math
import os
import sys
import zlib

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

BF16 = ml_dtypes.bfloat16
FP8 = ml_dtypes.float8_e4m3fn
FP8_MAX = 448.0
MS = "com.microsoft"
OPSET = 23
IR_VERSION = 11

NORM_FORMS = ("rms", "skip", "pow", "gemma", "simplified", "mul")
FAMILIES = ("dense", "dense_fp8", "hybrid", "minimax_qk", "qwen_moe", "gdn_a2a")
# --norm-form mix: norms that add a residual rotate through NORM_FORMS, norms
# without one through NORM_FORMS less "skip"; where each family starts in the
# two rotations (residual, no residual)
FORM_OFFSET = {"dense": (1, 0), "hybrid": (0, 4), "minimax_qk": (1, 0), "qwen_moe": (1, 2),
	       "gdn_a2a": (5, 0)}

DTYPES = {"bfloat16": TP.BFLOAT16, "float32": TP.FLOAT}
NP_OF_TP = {
	TP.FLOAT: np.dtype(np.float32),
	TP.BFLOAT16: np.dtype(BF16),
	TP.FLOAT8E4M3FN: np.dtype(FP8),
	TP.INT64: np.dtype(np.int64),
	TP.BOOL: np.dtype(np.bool_),
}

# Per-family default sizes (argparse leaves unset options at None).
DEFAULTS = {
	"common": dict(hidden=64, heads=4, kv_heads=4, head_dim=16, ffn=128, batch=2, past=8,
		       eps=1e-5, experts=4, topk=2, moe_ffn=32, shared_ffn=64),
	"dense": dict(layers=2),
	"hybrid": dict(pattern="MEAME"),
	"minimax_qk": dict(layers=2),
	"qwen_moe": dict(layers=2),
	"gdn_a2a": dict(layers=1, seq_lens="8,16,8"),
}


class ConfigError(Exception):
	pass


def bf16_round(a):
	"""Round float values to the nearest bfloat16 and return them as float32."""
	return np.asarray(a, dtype=np.float32).astype(BF16).astype(np.float32)


def make_rng(seed, name):
	return np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(name.encode())])


TILE = 65521


def tiled_weight(seed, name, shape, std):
	"""--tiled-weights: a random block of TILE values repeated over shape, cheap
	at any size (the same distribution as the drawn weights, not the same values)."""
	n = int(np.prod(shape))
	block = bf16_round(make_rng(seed, name).standard_normal(min(n, TILE)) * std)
	return np.resize(block, shape)


def array_to_tensor(name, arr, tp):
	"""TensorProto with raw_data in element type tp (arr holds the values)."""
	arr = np.asarray(arr)
	t = TP()
	t.name = name
	t.data_type = tp
	t.dims.extend(int(d) for d in arr.shape)
	t.raw_data = np.ascontiguousarray(arr.astype(NP_OF_TP[tp])).tobytes()
	return t


def pow2_at_least(v):
	return float(2.0 ** math.ceil(math.log2(max(v, 1e-30))))


class Stream:
	"""Residual stream of a pre-norm decoder: value = res + delta."""

	def __init__(self, x):
		self.res = None
		self.delta = x


class Builder:
	"""Builds one model: a rank's shard (full=False) or the unsharded model."""

	def __init__(self, cfg, family, rank, world, full):
		self.cfg = cfg
		self.family = family
		self.rank = rank
		self.world = world
		self.full = full
		self.W = 1 if full else world
		self.r = 0 if full else rank
		self.dt = DTYPES[cfg.dtype]
		self.fp8 = cfg.fp8
		self.nodes = []
		self.inits = collections.OrderedDict()
		self.inputs = []      # (name, tp, full_shape, shard_axis)
		self.outputs = []     # (name, tp, full_shape, shard_axis)
		self.node_names = set()
		self.cache = {}
		self.form_index = list(FORM_OFFSET.get(family, (0, 0)))
		self.allreduce_values = set()
		self.ar_norm_sites = []      # (allreduce value, norm output value)
		self.sharded_norms = 0
		self.sharded_norm_pairs = 0
		self.sigmoid_gates = 0
		self.alltoall_groups = 0
		self.forms_used = []         # (norm name, form) in build order

	# ---- low level -------------------------------------------------------

	def uniq(self, name):
		base = name
		i = 1
		while name in self.node_names:
			name = "%s_%d" % (base, i)
			i += 1
		self.node_names.add(name)
		return name

	def op(self, op_type, inputs, name, outputs=None, domain="", **attrs):
		"""Append a node; returns its output name, or the list when outputs is a list/int."""
		name = self.uniq(name)
		if outputs is None:
			outs = [name]
		elif isinstance(outputs, int):
			outs = ["%s.%d" % (name, i) for i in range(outputs)]
		else:
			outs = list(outputs)
		node = helper.make_node(op_type, list(inputs), outs, name=name, domain=domain, **attrs)
		self.nodes.append(node)
		return outs[0] if outputs is None else outs

	def add_init(self, name, arr, tp):
		if name in self.inits:
			raise ConfigError("duplicate initializer %s" % name)
		self.inits[name] = array_to_tensor(name, arr, tp)
		return name

	def c_i64(self, vals):
		vals = tuple(int(v) for v in vals)
		key = ("i64", vals)
		if key not in self.cache:
			name = "const.i64[%s]" % ",".join(str(v) for v in vals)
			self.cache[key] = self.add_init(name, np.array(vals, np.int64), TP.INT64)
		return self.cache[key]

	def c_f32(self, value):
		key = ("f32", float(value))
		if key not in self.cache:
			name = "const.f32[%r]" % float(value)
			self.cache[key] = self.add_init(name, np.array(value, np.float32), TP.FLOAT)
		return self.cache[key]

	def c_act(self, value):
		"""Scalar in the activation dtype (rounded to bf16 so dtypes agree)."""
		v = float(bf16_round(value))
		key = ("act", v)
		if key not in self.cache:
			name = "const.act[%r]" % v
			self.cache[key] = self.add_init(name, np.array(v, np.float32), self.dt)
		return self.cache[key]

	def fp8_zero(self):
		key = ("fp8zero",)
		if key not in self.cache:
			self.cache[key] = self.add_init("const.fp8_zero", np.array(0.0, np.float32),
							TP.FLOAT8E4M3FN)
		return self.cache[key]

	def shard(self, full, axis):
		if axis is None or self.W == 1:
			return full
		if full.shape[axis] % self.W:
			raise ConfigError("dimension %d of shape %s is not divisible by world size %d"
					  % (axis, full.shape, self.W))
		return np.split(full, self.W, axis=axis)[self.r]

	def full_weight(self, name, shape, std):
		if self.cfg.tiled_weights:
			return tiled_weight(self.cfg.seed, name, shape, std)
		return bf16_round(make_rng(self.cfg.seed, name).standard_normal(shape) * std)

	def param(self, name, shape, std, shard_axis=None):
		w = self.full_weight(name, shape, std)
		return self.add_init(name, self.shard(w, shard_axis), self.dt)

	def add_input(self, name, full_shape, shard_axis=None):
		self.inputs.append((name, self.dt, list(full_shape), shard_axis))
		return name

	def add_output(self, name, full_shape, shard_axis=None):
		self.outputs.append((name, self.dt, list(full_shape), shard_axis))

	def cast(self, x, to, name):
		return self.op("Cast", [x], name, to=to)

	def to_float(self, x, name):
		return x if self.dt == TP.FLOAT else self.cast(x, TP.FLOAT, name)

	def from_float(self, x, name):
		return x if self.dt == TP.FLOAT else self.cast(x, self.dt, name)

	# ---- collectives -----------------------------------------------------

	def allreduce(self, x, name):
		if self.full:
			return x
		y = self.op("AllReduce", [x], name, domain=MS)
		self.allreduce_values.add(y)
		return y

	def allgather(self, x, axis, name):
		return self.op("AllGather", [x], name, domain=MS, axis=axis, group_size=self.W)

	def alltoall(self, x, name):
		return self.op("AllToAll", [x], name, domain=MS, group_size=self.W)

	# ---- quantization ----------------------------------------------------

	def qdq(self, x, scale, name):
		"""Static per-tensor FP8 E4M3 quantize + dequantize of an activation."""
		if not self.fp8:
			return x
		s = self.c_act(scale)
		q = self.op("QuantizeLinear", [x, s, self.fp8_zero()], name + ".quant")
		return self.op("DequantizeLinear", [q, s, self.fp8_zero()], name + ".dequant")

	def linear(self, x, name, din, dout, shard=None, quant=True, shape=None):
		"""x @ W with W [din, dout] (or shape); shard 'col' splits dout, 'row' splits din."""
		shape = list(shape or (din, dout))
		axis = {"col": len(shape) - 1, "row": len(shape) - 2, None: None}[shard]
		std = 1.0 / math.sqrt(shape[-2])
		wname = name + ".weight"
		if self.fp8 and quant:
			w = self.full_weight(wname, shape, std)
			scale = pow2_at_least(float(np.abs(w).max()) / FP8_MAX)
			wq = np.clip(w / scale, -FP8_MAX, FP8_MAX).astype(FP8)
			self.add_init(wname, self.shard(wq, axis), TP.FLOAT8E4M3FN)
			wd = self.op("DequantizeLinear", [wname, self.c_act(scale), self.fp8_zero()],
				     name + ".weight_dequant")
		else:
			wd = self.param(wname, shape, std, axis)
		return self.op("MatMul", [x, wd], name)

	# ---- RMSNorm in every form -------------------------------------------

	def next_form(self, has_residual):
		if self.cfg.norm_form != "mix":
			f = self.cfg.norm_form
			return "simplified" if f == "skip" and not has_residual else f
		forms = NORM_FORMS if has_residual else tuple(f for f in NORM_FORMS if f != "skip")
		k = 0 if has_residual else 1
		f = forms[self.form_index[k] % len(forms)]
		self.form_index[k] += 1
		return f

	def norm(self, x, name, dim, residual=None, form=None):
		"""RMSNorm over the last axis of x (+ residual first); returns (y, residual sum)."""
		cfg = self.cfg
		if form is None:
			form = self.next_form(residual is not None)
		self.forms_used.append((name, form))
		gname = name + ".weight"
		gamma = bf16_round(1.0 + 0.1 * make_rng(cfg.seed, gname).standard_normal(dim))
		if form == "gemma":
			self.add_init(gname, bf16_round(gamma - 1.0), self.dt)
		else:
			self.add_init(gname, gamma, self.dt)
		if residual is not None and form == "skip":
			outs = self.op("SkipSimplifiedLayerNormalization", [x, residual, gname], name,
				       outputs=[name, "", "", name + ".residual"], domain=MS,
				       epsilon=cfg.eps)
			return outs[0], outs[3]
		h = x
		if residual is not None:
			h = self.op("Add", [residual, x], name + ".residual")
		if form == "rms":
			y = self.op("RMSNormalization", [h, gname], name, axis=-1, epsilon=cfg.eps,
				    stash_type=1)
		elif form in ("simplified", "skip"):
			y = self.op("SimplifiedLayerNormalization", [h, gname], name, axis=-1,
				    epsilon=cfg.eps, stash_type=1)
		else:
			xf = self.to_float(h, name + ".cast_in")
			if form == "mul":
				sq = self.op("Mul", [xf, xf], name + ".square")
			else:
				sq = self.op("Pow", [xf, self.c_f32(2.0)], name + ".pow")
			ms = self.op("ReduceMean", [sq, self.c_i64([-1])], name + ".mean", keepdims=1)
			ve = self.op("Add", [ms, self.c_f32(cfg.eps)], name + ".add_eps")
			sd = self.op("Sqrt", [ve], name + ".sqrt")
			if form == "mul":
				inv = self.op("Reciprocal", [sd], name + ".reciprocal")
				xn = self.op("Mul", [inv, xf], name + ".normalize")
			else:
				inv = self.op("Div", [self.c_f32(1.0), sd], name + ".div")
				xn = self.op("Mul", [xf, inv], name + ".normalize")
			if form == "gemma":
				gf = self.to_float(gname, name + ".cast_weight")
				g1 = self.op("Add", [self.c_f32(1.0), gf], name + ".one_plus_weight")
				yf = self.op("Mul", [xn, g1], name + ".scale")
				y = self.from_float(yf, name + ".cast_out")
			else:
				xb = self.from_float(xn, name + ".cast_out")
				if form == "mul":
					y = self.op("Mul", [gname, xb], name + ".scale")
				else:
					y = self.op("Mul", [xb, gname], name + ".scale")
		return y, (h if residual is not None else None)

	def stream_norm(self, st, name, dim):
		"""Pre-norm of a residual stream; records allreduce->norm fusion sites."""
		if st.res is None:
			y, _ = self.norm(st.delta, name, dim)
			st.res = st.delta
		else:
			ar = st.delta if st.delta in self.allreduce_values else None
			y, st.res = self.norm(st.delta, name, dim, residual=st.res)
			if ar is not None:
				self.ar_norm_sites.append((ar, y))
		st.delta = None
		return y

	def sharded_norm(self, x, name, dim_full, take, form):
		"""MiniMax-style norm over the full (all heads) dim of a column shard."""
		if self.full:
			y, _ = self.norm(x, name, dim_full, form=form)
			return y
		g = self.allgather(x, -1, name + ".allgather")
		y, _ = self.norm(g, name, dim_full, form=form)
		dl = dim_full // self.W
		self.sharded_norms += 1
		if take == "slice":
			return self.op("Slice", [y, self.c_i64([self.r * dl]),
						 self.c_i64([(self.r + 1) * dl]), self.c_i64([-1])],
				       name + ".slice")
		parts = self.op("Split", [y], name + ".split", outputs=self.W, axis=-1,
				num_outputs=self.W)
		return parts[self.r]

	# ---- blocks ------------------------------------------------------------

	def attention(self, x, L, qk_norm=False):
		"""Decode attention of one new token per sequence over a KV cache input."""
		c = self.cfg
		W = self.W
		H, Hkv, D, B, S = c.heads, c.kv_heads, c.head_dim, c.batch, c.past
		Hl, Hkvl, G = H // W, Hkv // W, H // Hkv
		p = "layers.%d.attn" % L
		xq = self.qdq(x, 2.0 ** -6, p + ".input")
		q = self.linear(xq, p + ".q_proj", c.hidden, H * D, "col")
		k = self.linear(xq, p + ".k_proj", c.hidden, Hkv * D, "col")
		v = self.linear(xq, p + ".v_proj", c.hidden, Hkv * D, "col")
		if qk_norm:
			form = self.next_form(False)
			q = self.sharded_norm(q, p + ".q_norm", H * D, "slice", form)
			k = self.sharded_norm(k, p + ".k_norm", Hkv * D, "split", form)
			if not self.full:
				self.sharded_norm_pairs += 1
		q4 = self.op("Reshape", [q, self.c_i64([B, Hkvl, G, D])], p + ".q_heads")
		k4 = self.op("Reshape", [k, self.c_i64([B, Hkvl, 1, D])], p + ".k_heads")
		v4 = self.op("Reshape", [v, self.c_i64([B, Hkvl, 1, D])], p + ".v_heads")
		pk = self.add_input("past_key.%d" % L, [B, Hkv, S, D], 1)
		pv = self.add_input("past_value.%d" % L, [B, Hkv, S, D], 1)
		kc = self.op("Concat", [pk, k4], p + ".k_cache", outputs=["present_key.%d" % L],
			     axis=2)[0]
		vc = self.op("Concat", [pv, v4], p + ".v_cache", outputs=["present_value.%d" % L],
			     axis=2)[0]
		self.add_output(kc, [B, Hkv, S + 1, D], 1)
		self.add_output(vc, [B, Hkv, S + 1, D], 1)
		kt = self.op("Transpose", [kc], p + ".k_transpose", perm=[0, 1, 3, 2])
		sc = self.op("MatMul", [q4, kt], p + ".scores")
		sc = self.op("Mul", [sc, self.c_act(1.0 / math.sqrt(D))], p + ".scale")
		pr = self.op("Softmax", [sc], p + ".softmax", axis=-1)
		o = self.op("MatMul", [pr, vc], p + ".context")
		o = self.op("Reshape", [o, self.c_i64([B, Hl * D])], p + ".merge_heads")
		oq = self.qdq(o, 2.0 ** -6, p + ".o_input")
		return self.linear(oq, p + ".o_proj", H * D, c.hidden, "row")

	def mlp_swiglu(self, x, p, ffn):
		c = self.cfg
		xq = self.qdq(x, 2.0 ** -6, p + ".input")
		g = self.linear(xq, p + ".gate_proj", c.hidden, ffn, "col")
		u = self.linear(xq, p + ".up_proj", c.hidden, ffn, "col")
		sg = self.op("Sigmoid", [g], p + ".sigmoid")
		a = self.op("Mul", [g, sg], p + ".silu")
		h = self.op("Mul", [a, u], p + ".gated")
		hq = self.qdq(h, 2.0 ** -4, p + ".down_input")
		return self.linear(hq, p + ".down_proj", ffn, c.hidden, "row")

	def mlp_relu2(self, x, p, ffn):
		"""Nemotron-H MLP: down(relu(up(x))^2)."""
		c = self.cfg
		xq = self.qdq(x, 2.0 ** -6, p + ".input")
		u = self.linear(xq, p + ".up_proj", c.hidden, ffn, "col")
		r = self.op("Relu", [u], p + ".relu")
		s = self.op("Mul", [r, r], p + ".square")
		sq = self.qdq(s, 2.0 ** -4, p + ".down_input")
		return self.linear(sq, p + ".down_proj", ffn, c.hidden, "row")

	def router(self, x, p):
		"""Softmax top-k router; returns dense routing weights [T, E] (zeros off the top k)."""
		c = self.cfg
		T, E, K = self.tokens, c.experts, c.topk
		lg = self.linear(x, p + ".router", c.hidden, E, None, quant=False)
		lf = self.to_float(lg, p + ".router_cast")
		pr = self.op("Softmax", [lf], p + ".router_softmax", axis=-1)
		vals, idx = self.op("TopK", [pr, self.c_i64([K])], p + ".topk",
				    outputs=[p + ".topk.values", p + ".topk.indices"], axis=-1)
		sm = self.op("ReduceSum", [vals, self.c_i64([-1])], p + ".topk_sum", keepdims=1)
		wn = self.op("Div", [vals, sm], p + ".topk_norm")
		zname = "const.zeros_f32[%d,%d]" % (T, E)
		if zname not in self.inits:
			self.add_init(zname, np.zeros((T, E), np.float32), TP.FLOAT)
		dense = self.op("ScatterElements", [zname, idx, wn], p + ".routing", axis=1)
		return self.from_float(dense, p + ".routing_cast")

	def moe_loop(self, x, p):
		"""Masked MoE: every expert on every token, weighted by its routing weight."""
		c = self.cfg
		rw = self.router(x, p)
		acc = None
		for e in range(c.experts):
			pe = "%s.experts.%d" % (p, e)
			we = self.op("Slice", [rw, self.c_i64([e]), self.c_i64([e + 1]), self.c_i64([1])],
				     pe + ".route_weight")
			y = self.mlp_relu2(x, pe, c.moe_ffn)
			t = self.op("Mul", [y, we], pe + ".weighted")
			acc = t if acc is None else self.op("Add", [acc, t], pe + ".accumulate")
		return acc

	def moe_batched(self, x, p, L):
		"""Qwen3-Next MoE: batched experts + sigmoid-gated shared expert, partial sums."""
		c = self.cfg
		E, F, Hd = c.experts, c.moe_ffn, c.hidden
		rw = self.router(x, p)
		x3 = self.op("Unsqueeze", [x, self.c_i64([0])], p + ".experts.unsqueeze")
		xq = self.qdq(x3, 2.0 ** -6, p + ".experts.input")
		g = self.linear(xq, p + ".experts.gate_proj", Hd, F, "col", shape=(E, Hd, F))
		u = self.linear(xq, p + ".experts.up_proj", Hd, F, "col", shape=(E, Hd, F))
		sg = self.op("Sigmoid", [g], p + ".experts.sigmoid")
		a = self.op("Mul", [g, sg], p + ".experts.silu")
		h = self.op("Mul", [a, u], p + ".experts.gated")
		hq = self.qdq(h, 2.0 ** -4, p + ".experts.down_input")
		d = self.linear(hq, p + ".experts.down_proj", F, Hd, "row", shape=(E, F, Hd))
		rt = self.op("Transpose", [rw], p + ".routing_transpose", perm=[1, 0])
		r3 = self.op("Unsqueeze", [rt, self.c_i64([2])], p + ".routing_unsqueeze")
		wd = self.op("Mul", [d, r3], p + ".experts.weighted")
		final = self.op("ReduceSum", [wd, self.c_i64([0])], p + ".experts.combine", keepdims=0)
		shared = self.mlp_swiglu(x, p + ".shared_expert", c.shared_ffn)
		gate = self.linear(x, p + ".shared_expert_gate", Hd, 1, None, quant=False)
		sgate = self.op("Sigmoid", [gate], p + ".shared_expert_gate.sigmoid")
		self.sigmoid_gates += 1
		if L % 2 == 0:
			m = self.op("Mul", [sgate, shared], p + ".shared_expert.gated")
			return self.op("Add", [final, m], p + ".output")
		m = self.op("Mul", [shared, sgate], p + ".shared_expert.gated")
		return self.op("Add", [m, final], p + ".output")

	# ---- families ----------------------------------------------------------

	def decoder(self, kinds):
		"""Pre-norm decoder over a sequence of layer kinds; returns the final output name."""
		c = self.cfg
		x = self.add_input("hidden_states", [self.tokens, c.hidden])
		st = Stream(x)
		for L, kind in enumerate(kinds):
			p = "layers.%d" % L
			if kind == "dense" or kind == "minimax":
				h = self.stream_norm(st, p + ".input_norm", c.hidden)
				a = self.attention(h, L, qk_norm=(kind == "minimax"))
				st.delta = self.allreduce(a, p + ".attn.allreduce")
				h = self.stream_norm(st, p + ".post_attention_norm", c.hidden)
				m = self.mlp_swiglu(h, p + ".mlp", c.ffn)
				st.delta = self.allreduce(m, p + ".mlp.allreduce")
			elif kind == "M":
				h = self.stream_norm(st, p + ".norm", c.hidden)
				m = self.mlp_relu2(h, p + ".mlp", c.ffn)
				st.delta = self.allreduce(m, p + ".mlp.allreduce")
			elif kind == "A":
				h = self.stream_norm(st, p + ".norm", c.hidden)
				a = self.attention(h, L)
				st.delta = self.allreduce(a, p + ".attn.allreduce")
			elif kind == "E":
				h = self.stream_norm(st, p + ".norm", c.hidden)
				m = self.moe_loop(h, p + ".moe")
				st.delta = self.allreduce(m, p + ".moe.allreduce")
			elif kind == "Q":
				h = self.stream_norm(st, p + ".norm", c.hidden)
				m = self.moe_batched(h, p + ".moe", L)
				st.delta = self.allreduce(m, p + ".moe.allreduce")
			else:
				raise ConfigError("unknown layer kind %r" % kind)
		y = self.stream_norm(st, "final_norm", c.hidden)
		self.rename_output(y, "last_hidden_state")
		self.outputs.insert(0, ("last_hidden_state", self.dt, [self.tokens, c.hidden], None))

	def rename_output(self, value, new):
		for n in self.nodes:
			for i, o in enumerate(n.output):
				if o == value:
					n.output[i] = new
			for i, o in enumerate(n.input):
				if o == value:
					n.input[i] = new
		self.ar_norm_sites = [(a, new if y == value else y) for a, y in self.ar_norm_sites]

	def gdn(self):
		"""Gated-DeltaNet-style context-parallel <-> head-parallel conversion."""
		c = self.cfg
		W, r = self.W, self.r
		H, D, Hd = c.heads, c.head_dim, c.hidden
		Hl = H // W
		lens = self.seq_lens
		offs = np.concatenate([[0], np.cumsum(lens)]).astype(int)
		x = self.add_input("hidden_states", [self.tokens, Hd])
		st = Stream(x)
		xn = self.stream_norm(st, "gdn.input_norm", Hd)
		if self.full:
			xl = xn
		else:
			parts = []
			for s, L in enumerate(lens):
				Lr = L // W
				parts.append(self.op("Slice", [xn, self.c_i64([offs[s] + r * Lr]),
							      self.c_i64([offs[s] + (r + 1) * Lr]),
							      self.c_i64([0])], "gdn.cp_tokens.seq%d" % s))
			xl = self.op("Concat", parts, "gdn.cp_tokens", axis=0)
		secs = collections.OrderedDict()
		for sec in ("q", "k", "v", "g"):
			secs[sec] = self.linear(xl, "gdn.%s_proj" % sec, Hd, H * D, None)
		ys = []
		lo = 0
		for s, L in enumerate(lens):
			Lr = L // W
			ps = "gdn.seq%d" % s
			hp = {}
			for sec, t in secs.items():
				t = self.op("Slice", [t, self.c_i64([lo]), self.c_i64([lo + Lr]),
						      self.c_i64([0])], "%s.%s" % (ps, sec))
				if not self.full:
					t = self.op("Reshape", [t, self.c_i64([Lr, W, Hl * D])],
						    "%s.%s.split_heads" % (ps, sec))
					t = self.op("Transpose", [t], "%s.%s.head_major" % (ps, sec),
						    perm=[1, 0, 2])
					t = self.op("Reshape", [t, self.c_i64([W * Lr, Hl * D])],
						    "%s.%s.pack" % (ps, sec))
					t = self.alltoall(t, "%s.%s.cp_to_hp" % (ps, sec))
				hp[sec] = t
			heads = {}
			for sec in ("q", "k", "v"):
				t = self.op("Reshape", [hp[sec], self.c_i64([L, Hl, D])],
					    "%s.%s.heads" % (ps, sec))
				heads[sec] = self.op("Transpose", [t], "%s.%s.head_first" % (ps, sec),
						     perm=[1, 0, 2])
			kt = self.op("Transpose", [heads["k"]], ps + ".k_transpose", perm=[0, 2, 1])
			sc = self.op("MatMul", [heads["q"], kt], ps + ".scores")
			sc = self.op("Mul", [sc, self.c_act(1.0 / math.sqrt(D))], ps + ".scale")
			mname = "gdn.causal_mask[%d]" % L
			if mname not in self.inits:
				self.add_init(mname, np.tril(np.ones((L, L), np.float32)), self.dt)
			sc = self.op("Mul", [sc, mname], ps + ".causal")
			y = self.op("MatMul", [sc, heads["v"]], ps + ".attend")
			y = self.op("Transpose", [y], ps + ".token_first", perm=[1, 0, 2])
			y, _ = self.norm(y, ps + ".head_norm", D)
			y = self.op("Reshape", [y, self.c_i64([L, Hl * D])], ps + ".merge_heads")
			gs = self.op("Sigmoid", [hp["g"]], ps + ".g.sigmoid")
			ga = self.op("Mul", [hp["g"], gs], ps + ".g.silu")
			y = self.op("Mul", [y, ga], ps + ".gated")
			if not self.full:
				y = self.alltoall(y, ps + ".hp_to_cp")
				y = self.op("Reshape", [y, self.c_i64([W, Lr, Hl * D])], ps + ".unpack")
				y = self.op("Transpose", [y], ps + ".token_major", perm=[1, 0, 2])
				y = self.op("Reshape", [y, self.c_i64([Lr, H * D])], ps + ".cp_out")
			ys.append(y)
			lo += Lr
		yc = self.op("Concat", ys, "gdn.concat", axis=0) if len(ys) > 1 else ys[0]
		o = self.linear(yc, "gdn.o_proj", H * D, Hd, None)
		if not self.full:
			Tl = lo
			ga = self.allgather(o, 0, "gdn.gather_tokens")
			perm = []
			for s, L in enumerate(lens):
				Lr = L // W
				loff = sum(lens[:s]) // W
				for q in range(W):
					perm.extend(q * Tl + loff + t for t in range(Lr))
			pname = "gdn.token_order"
			self.add_init(pname, np.array(perm, np.int64), TP.INT64)
			o = self.op("Gather", [ga, pname], "gdn.reorder_tokens", axis=0)
			self.alltoall_groups = 2
		st.delta = o
		y = self.stream_norm(st, "final_norm", Hd)
		self.rename_output(y, "last_hidden_state")
		self.add_output("last_hidden_state", [self.tokens, Hd])

	def build(self):
		c = self.cfg
		fam = self.family
		if fam in ("dense", "minimax_qk", "hybrid"):
			if c.heads % c.kv_heads:
				raise ConfigError("--heads must be a multiple of --kv-heads")
			if c.kv_heads % self.world:
				raise ConfigError("--kv-heads %d is not divisible by world size %d"
						  % (c.kv_heads, self.world))
		need = {"dense": ("heads", "ffn"), "minimax_qk": ("heads", "ffn"),
			"hybrid": ("heads", "ffn", "moe_ffn"), "qwen_moe": ("moe_ffn", "shared_ffn"),
			"gdn_a2a": ("heads",)}[fam]
		for opt in need:
			if getattr(c, opt) % self.world:
				raise ConfigError("--%s %d is not divisible by world size %d"
						  % (opt.replace("_", "-"), getattr(c, opt), self.world))
		self.tokens = c.batch
		if fam == "dense":
			self.decoder(["dense"] * c.layers)
		elif fam == "minimax_qk":
			self.decoder(["minimax"] * c.layers)
		elif fam == "hybrid":
			if not c.pattern or set(c.pattern) - set("MAE"):
				raise ConfigError("--pattern takes letters M (MLP), A (attention), E (MoE)")
			self.decoder(list(c.pattern))
		elif fam == "qwen_moe":
			self.decoder(["Q"] * c.layers)
		elif fam == "gdn_a2a":
			self.seq_lens = [int(v) for v in str(c.seq_lens).split(",") if v]
			if not self.seq_lens or any(L <= 0 or L % self.world for L in self.seq_lens):
				raise ConfigError("--seq-lens must be positive multiples of the world size")
			self.tokens = sum(self.seq_lens)
			self.gdn()
		else:
			raise ConfigError("unknown family %r" % fam)
		return self.model()

	def rank_shape(self, shape, axis):
		if axis is None or self.full:
			return shape
		s = list(shape)
		s[axis] //= self.W
		return s

	def model(self):
		ins = [helper.make_tensor_value_info(n, tp, self.rank_shape(s, a))
		       for n, tp, s, a in self.inputs]
		outs = [helper.make_tensor_value_info(n, tp, self.rank_shape(s, a))
			for n, tp, s, a in self.outputs]
		name = "%s.%s" % (self.cfg.name, "full" if self.full else "rank%d" % self.rank)
		graph = helper.make_graph(self.nodes, name, ins, outs, list(self.inits.values()))
		m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
							     helper.make_opsetid(MS, 1)],
				      producer_name="tpfuse-examples", producer_version="1")
		m.ir_version = IR_VERSION
		meta = {
			"tp_family": self.family,
			"tp_rank": str(self.r),
			"tp_world_size": str(1 if self.full else self.world),
			"tp_variant": "full" if self.full else "rank",
		}
		if self.fp8:
			meta["tp_quant"] = "fp8"
		helper.set_model_props(m, meta)
		m.doc_string = ("tpfuse example '%s': %s" %
				(self.cfg.name, "unsharded single-device model" if self.full else
				 "rank %d of %d" % (self.rank, self.world)))
		return m

	def expected(self, model):
		"""Fusion sites found while building (only meaningful for rank models)."""
		consumers = collections.defaultdict(list)
		for n in model.graph.node:
			for i in n.input:
				consumers[i].append(n.op_type)
		ar_q = sum(1 for _, y in self.ar_norm_sites
			   if consumers[y] and all(o == "QuantizeLinear" for o in consumers[y]))
		n_a2a = sum(1 for n in model.graph.node if n.op_type == "AllToAll")
		return {
			"allreduce": len(self.allreduce_values),
			"allreduce_rmsnorm": len(self.ar_norm_sites),
			"allreduce_rmsnorm_followed_by_fp8_quant": ar_q,
			"allreduce_left_after_fusion": len(self.allreduce_values) - len(self.ar_norm_sites),
			"sharded_rmsnorm": self.sharded_norms,
			"sharded_rmsnorm_qk_pairs": self.sharded_norm_pairs,
			"sigmoid_gate": self.sigmoid_gates,
			"alltoall": n_a2a,
			"alltoall_after_coalescing": self.alltoall_groups if n_a2a else 0,
		}


# ---- schemas, checking, data ---------------------------------------------

_SCHEMAS_DONE = False


def register_ort_schemas():
	"""Register ONNX Runtime's SimplifiedLayerNormalization (ONNX domain, since 1)
	so onnx.checker accepts models using it; the checker skips com.microsoft ops."""
	global _SCHEMAS_DONE
	if _SCHEMAS_DONE:
		return
	_SCHEMAS_DONE = True
	defs = onnx.defs
	try:
		defs.get_schema("SimplifiedLayerNormalization", OPSET, "")
		return
	except Exception:
		pass
	OS = defs.OpSchema
	fp = OS.FormalParameter
	floats = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"]
	schema = OS(
		"SimplifiedLayerNormalization", "", 1,
		doc="RMS normalization over the axes from axis on (ONNX Runtime contrib op).",
		inputs=[fp("X", "T"), fp("scale", "V")],
		outputs=[fp("Y", "V"),
			 fp("inv_std_var", "U", param_option=OS.FormalParameterOption.Optional)],
		type_constraints=[("T", floats, ""), ("V", floats, ""),
				  ("U", ["tensor(float)", "tensor(double)"], "")],
		attributes=[OS.Attribute("axis", helper.make_attribute("axis", -1), ""),
			    OS.Attribute("epsilon", helper.make_attribute("epsilon", 1e-5), ""),
			    OS.Attribute("stash_type", helper.make_attribute("stash_type", 1), "")])
	defs.register_schema(schema)


def check(model):
	register_ort_schemas()
	onnx.checker.check_model(model, full_check=True)


def op_counts(model):
	c = collections.Counter()
	for n in model.graph.node:
		c[(n.domain + "." if n.domain else "") + n.op_type] += 1
	return dict(sorted(c.items()))


def make_config(family, args):
	"""Resolve defaults for a family; args is an argparse Namespace (or None)."""
	base = family[:-4] if family.endswith("_fp8") else family
	if base not in FORM_OFFSET:
		raise ConfigError("unknown family %r (one of %s)" % (family, ", ".join(FAMILIES)))
	vals = dict(DEFAULTS["common"])
	vals.update(dict(layers=2, pattern="MEAME", seq_lens="8,16,8", seed=0,
			 dtype="bfloat16", norm_form="mix", fp8=False, ranks_only=False,
			 tiled_weights=False))
	vals.update(DEFAULTS[base])
	# the default 4 (kv) heads shard up to 4 ranks; more ranks get a head
	# each unless the heads are given
	world = getattr(args, "world_size", None) or 1
	for k in ("heads", "kv_heads"):
		vals[k] = max(vals[k], world)
	if args is not None:
		for k, v in vars(args).items():
			if v is not None and k in vals:
				vals[k] = v
	if family.endswith("_fp8"):
		vals["fp8"] = True
	cfg = argparse.Namespace(**vals)
	cfg.family = base
	cfg.name = base + ("_fp8" if cfg.fp8 else "")
	return cfg


def build_models(cfg, world, full=True):
	"""Returns (rank models, full model (None unless full), expected fusion counts,
	io description)."""
	if world < 1:
		raise ConfigError("world size must be at least 1")
	ranks = []
	exp = None
	io = None
	for r in range(world):
		b = Builder(cfg, cfg.family, r, world, full=False)
		m = b.build()
		ranks.append(m)
		if r == 0:
			exp = b.expected(m)
			io = (b.inputs, b.outputs)
	fm = Builder(cfg, cfg.family, 0, world, full=True).build() if full else None
	return ranks, fm, exp, io


def input_arrays(cfg, inputs):
	"""Full-size test inputs (float32 holding bf16-exact values)."""
	out = collections.OrderedDict()
	for name, _tp, shape, _axis in inputs:
		out[name] = bf16_round(make_rng(cfg.seed, "input:" + name).standard_normal(shape))
	return out


def shard_of(arr, axis, rank, world):
	return arr if axis is None else np.split(arr, world, axis=axis)[rank]


def write_pb(path, name, arr, tp):
	with open(path, "wb") as f:
		f.write(array_to_tensor(name, arr, tp).SerializeToString())


def generate(cfg, world, out_dir, verbose=True):
	ranks, full, exp, (inputs, outputs) = build_models(cfg, world, full=not cfg.ranks_only)
	os.makedirs(out_dir, exist_ok=True)
	name = cfg.name
	for m in ranks + ([full] if full is not None else []):
		check(m)
	paths = []
	for r, m in enumerate(ranks):
		p = os.path.join(out_dir, "%s.rank%d.onnx" % (name, r))
		onnx.save_model(m, p)
		paths.append(p)
	if full is None:  # --ranks-only
		if verbose:
			print("%s: W=%d, %d nodes per rank (rank models only) -> %s"
			      % (name, world, len(ranks[0].graph.node), out_dir))
		return {"name": name, "world_size": world, "nodes": {"rank": len(ranks[0].graph.node)}}
	fpath = os.path.join(out_dir, "%s.full.onnx" % name)
	onnx.save_model(full, fpath)

	feeds = input_arrays(cfg, inputs)
	here = os.path.dirname(os.path.abspath(__file__))
	if here not in sys.path:
		sys.path.insert(0, here)
	import reference  # examples/reference.py
	f32 = reference.as_float32(full)
	res = reference.run_full(f32, feeds)
	data = os.path.join(out_dir, "%s_data" % name)
	os.makedirs(data, exist_ok=True)
	for r in range(world):
		os.makedirs(os.path.join(data, "rank%d" % r), exist_ok=True)
	dt = DTYPES[cfg.dtype]
	for i, (n, _tp, _s, axis) in enumerate(inputs):
		write_pb(os.path.join(data, "input_%d.pb" % i), n, feeds[n], dt)
		for r in range(world):
			write_pb(os.path.join(data, "rank%d" % r, "input_%d.pb" % i), n,
				 shard_of(feeds[n], axis, r, world), dt)
	for i, (n, _tp, _s, axis) in enumerate(outputs):
		write_pb(os.path.join(data, "output_%d.pb" % i), n, res[n], dt)
		for r in range(world):
			write_pb(os.path.join(data, "rank%d" % r, "output_%d.pb" % i), n,
				 shard_of(res[n], axis, r, world), dt)

	def desc(lst):
		return [{"index": i, "name": n, "dtype": cfg.dtype, "shape": s,
			 "shard_axis": a,
			 "rank_shape": s if a is None else
			 [d // world if j == a else d for j, d in enumerate(s)]}
			for i, (n, _tp, s, a) in enumerate(lst)]

	keep = {"dense": ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "batch", "past"),
		"minimax_qk": ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "batch",
			       "past"),
		"hybrid": ("pattern", "hidden", "heads", "kv_heads", "head_dim", "ffn", "batch", "past",
			   "experts", "topk", "moe_ffn"),
		"qwen_moe": ("layers", "hidden", "batch", "experts", "topk", "moe_ffn", "shared_ffn"),
		"gdn_a2a": ("seq_lens", "hidden", "heads", "head_dim")}[cfg.family]
	cfg_out = {k: getattr(cfg, k) for k in keep + ("eps", "seed", "dtype", "norm_form", "fp8")}
	manifest = {
		"family": cfg.family,
		"name": name,
		"world_size": world,
		"dtype": cfg.dtype,
		"config": cfg_out,
		"models": {"full": os.path.basename(fpath),
			   "ranks": [os.path.basename(p) for p in paths],
			   "rank_pattern": "%s.rank{rank}.onnx" % name},
		"data": {"full": ".", "rank_pattern": "rank{rank}",
			 "expected_outputs": "onnxruntime on the full model computed in float32, "
					     "stored in the model dtype"},
		"inputs": desc(inputs),
		"outputs": desc(outputs),
		"expected_fusions": exp,
		"op_counts": {"rank": op_counts(ranks[0]), "full": op_counts(full)},
		"nodes": {"rank": len(ranks[0].graph.node), "full": len(full.graph.node)},
	}
	with open(os.path.join(data, "manifest.json"), "w") as f:
		json.dump(manifest, f, indent=1, sort_keys=False)
		f.write("\n")
	if verbose:
		print("%s: W=%d, %d nodes per rank, %d in the full model -> %s"
		      % (name, world, manifest["nodes"]["rank"], manifest["nodes"]["full"], out_dir))
	return manifest


def main(argv=None):
	ap = argparse.ArgumentParser(
		description="Write per-rank tensor-parallel example models, the unsharded model "
			    "and test data.")
	ap.add_argument("family", help="one of %s, or 'all'" % ", ".join(FAMILIES))
	ap.add_argument("--world-size", "-w", type=int, required=True)
	ap.add_argument("--out", "-o", required=True, help="output folder")
	ap.add_argument("--seed", type=int)
	ap.add_argument("--dtype", choices=sorted(DTYPES))
	ap.add_argument("--norm-form", choices=("mix",) + NORM_FORMS,
			help="RMSNorm form: mix (default: rotate through all forms), rms "
			     "(RMSNormalization), simplified (SimplifiedLayerNormalization), skip "
			     "(com.microsoft SkipSimplifiedLayerNormalization where a residual is "
			     "added), pow / mul (decomposed chain with Pow(x,2)+Div or "
			     "Mul(x,x)+Reciprocal), gemma (decomposed, (1 + gamma))")
	ap.add_argument("--fp8", action="store_true", default=None,
			help="FP8 E4M3 QDQ on the projections' inputs and weights")
	ap.add_argument("--ranks-only", action="store_true", default=None,
			help="write the rank models only: no unsharded model, reference outputs or "
			     "test data (benchmarks of models too large for them)")
	ap.add_argument("--tiled-weights", action="store_true", default=None,
			help="fill each weight with a repeated random block instead of drawing every "
			     "value (fast at any size; other values than without it)")
	ap.add_argument("--layers", type=int)
	ap.add_argument("--hidden", type=int)
	ap.add_argument("--heads", type=int, help="default 4, or the world size above 4")
	ap.add_argument("--kv-heads", type=int, help="default 4, or the world size above 4")
	ap.add_argument("--head-dim", type=int)
	ap.add_argument("--ffn", type=int)
	ap.add_argument("--batch", type=int, help="decode tokens (one per sequence)")
	ap.add_argument("--past", type=int, help="KV cache length")
	ap.add_argument("--eps", type=float)
	ap.add_argument("--experts", type=int)
	ap.add_argument("--topk", type=int)
	ap.add_argument("--moe-ffn", type=int)
	ap.add_argument("--shared-ffn", type=int)
	ap.add_argument("--pattern", help="hybrid layer kinds: M MLP, A attention, E MoE")
	ap.add_argument("--seq-lens", help="gdn_a2a sequence lengths, comma separated")
	args = ap.parse_args(argv)
	fams = FAMILIES if args.family == "all" else (args.family,)
	try:
		for fam in fams:
			cfg = make_config(fam, args)
			for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "batch",
				  "past", "experts", "topk", "moe_ffn", "shared_ffn"):
				if getattr(cfg, k) <= 0:
					raise ConfigError("--%s must be positive" % k.replace("_", "-"))
			if cfg.topk > cfg.experts:
				raise ConfigError("--topk must not exceed --experts")
			generate(cfg, args.world_size, args.out)
	except ConfigError as e:
		print("tpmodels: error: %s" % e, file=sys.stderr)
		return 2
	return 0


if __name__ == "__main__":
	sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
	sys.exit(main())
