#!/usr/bin/env python3
"""Generate the export corpus: Hugging Face models split Megatron-style over W
ranks in PyTorch and exported with torch.onnx, one ONNX file per rank.

For every (family, exporter, dtype, W) this writes one folder

  tests/corpus/<family>-<exporter>-<dtype>-w<W>/
    model.rank{r}.onnx      r = 0..W-1, com.microsoft AllReduce / AllGather
    test_data_set_0/        input_N.pb (input_ids, attention_mask) and
                            output_0.pb (logits of the UNSHARDED float32 torch
                            model, stored in the model's output dtype)
    manifest.json           written last: a folder with a manifest is complete

Steps for one folder:
  1. Build the family's model from a small config (random init, fixed seed;
     nothing is downloaded) in float32: the unsharded reference.
  2. For each rank, build the same class from a rank config (heads and
     intermediate sizes divided by W), load the rank's weight shards and wrap
     the row-parallel projections, the MoE blocks, the LM head (and, for
     minimax_m2, the all-head Q/K norms) with the collectives below.
  3. Run the W rank models in W threads in lock step (the collectives meet at
     a barrier) and compare rank 0's logits with the unsharded model's.
  4. Export every rank with the chosen exporter.  At W = 1 the collectives
     stay, with a group of one.
  5. Run the exported ranks together in onnxruntime (ort_ranks.py: the
     collectives computed between runs) and compare rank 0's logits with the
     float32 reference, for dynamic exports also at batch 3, sequence 5
     against the torch ranks.

Collectives are torch.library custom ops (tpc::all_reduce, tpc::all_gather);
the TorchScript exporter writes them through an ONNX symbolic, the dynamo
exporter through a custom translation table, both as com.microsoft
AllReduce (no attributes) and AllGather(axis, group_size), the contrib ops of
onnxruntime's collective schema.

Usage:
  generate.py [--families F,..] [--exporters torchscript,dynamo,dynamo-static]
              [--dtypes fp32,fp16,bf16] [--world-sizes 1,2,4,8] [--matrix default|full]
              [--out DIR] [--force] [--list]

  generate.py --kv [--families F,..] [--exporters torchscript,dynamo] [--dtypes ..]
              the KV-cache exports (tests/corpus/kv/, generate_kv.py)

Existing complete folders are skipped (resumable); --force rewrites them.
Requirements: tests/corpus/requirements-generate.txt (torch, transformers,
onnxscript, onnx, onnxruntime), locked with every transitive package in
constraints-generate.txt: it refuses to write from another environment
(--unlocked overrides).  See tests/corpus/README.md.
"""

import argparse
import collections
import contextlib
import copy
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback

import numpy as np
import onnx
import torch
import transformers
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SEED = 1234
BATCH, SEQ = 2, 8
PAD = 2                      # right padding of the second sequence
MS = "com.microsoft"

# ---------------------------------------------------------------- collectives

_tls = threading.local()


class _World:
	"""W ranks of one process, one thread each, meeting at a barrier."""

	def __init__(self, world):
		self.world = world
		self.barrier = threading.Barrier(world)
		self.slots = [None] * world

	def exchange(self, rank, x):
		self.slots[rank] = x
		self.barrier.wait()
		got = list(self.slots)
		self.barrier.wait()
		return got


def _ctx():
	return getattr(_tls, "ctx", None)


@torch.library.custom_op("tpc::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor) -> torch.Tensor:
	c = _ctx()
	if c is None:            # export or a single rank: a group of one
		return x.clone()
	world, rank = c
	parts = world.exchange(rank, x)
	acc = parts[0].to(torch.float32, copy=True)
	for p in parts[1:]:
		acc = acc + p.float()
	return acc.to(x.dtype)


@all_reduce.register_fake
def _(x):
	return torch.empty_like(x)


@torch.library.custom_op("tpc::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, axis: int, group_size: int) -> torch.Tensor:
	c = _ctx()
	if c is None:            # export: the right shape (copies of this rank's part)
		return torch.cat([x] * group_size, dim=axis)
	world, rank = c
	return torch.cat(world.exchange(rank, x), dim=axis)


@all_gather.register_fake
def _(x, axis, group_size):
	shape = list(x.shape)
	shape[axis] = shape[axis] * group_size
	return x.new_empty(shape)


def _register_torchscript_symbolics():
	from torch.onnx import symbolic_helper

	def sym_all_reduce(g, x):
		out = g.op(MS + "::AllReduce", x)
		out.setType(x.type())
		return out

	@symbolic_helper.parse_args("v", "i", "i")
	def sym_all_gather(g, x, axis, group_size):
		return g.op(MS + "::AllGather", x, axis_i=axis, group_size_i=group_size)

	torch.onnx.register_custom_op_symbolic("tpc::all_reduce", sym_all_reduce, 1)
	torch.onnx.register_custom_op_symbolic("tpc::all_gather", sym_all_gather, 1)


_SCHEMAS = []


def _register_collective_schemas():
	"""onnxruntime's collective contrib schemas (com.microsoft, since 1), so
	onnxscript can build the nodes: AllReduce (variadic in ORT, one tensor
	here, no attributes) and AllGather (group_size, axis)."""
	if _SCHEMAS:
		return
	_SCHEMAS.append(True)
	from onnx import defs, helper
	OS = defs.OpSchema
	fp = OS.FormalParameter
	types = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)",
		 "tensor(int32)", "tensor(int64)"]
	for name, attrs in (("AllReduce", []),
			    ("AllGather", [OS.Attribute("group_size", helper.make_attribute("group_size", 1), ""),
					   OS.Attribute("axis", helper.make_attribute("axis", 0), "")])):
		try:
			defs.get_schema(name, 1, MS)
			continue
		except Exception:  # noqa: BLE001
			pass
		defs.register_schema(OS(name, MS, 1, doc="onnxruntime collective", inputs=[fp("input", "T")],
					outputs=[fp("output", "T")], type_constraints=[("T", types, "")],
					attributes=attrs))


def _dynamo_translation_table():
	import onnxscript
	_register_collective_schemas()
	ms = onnxscript.values.Opset(MS, 1)

	def onnx_all_reduce(x):
		return ms.AllReduce(x)

	def onnx_all_gather(x, axis: int, group_size: int):
		return ms.AllGather(x, axis=axis, group_size=group_size)

	return {torch.ops.tpc.all_reduce.default: onnx_all_reduce,
		torch.ops.tpc.all_gather.default: onnx_all_gather}


# ------------------------------------------------------- tensor-parallel modules


class RowParallel(torch.nn.Module):
	"""A row-parallel projection (input dim sharded) followed by an all-reduce."""

	def __init__(self, linear):
		super().__init__()
		assert linear.bias is None, "row-parallel bias would be added W times"
		self.linear = linear

	def forward(self, x):
		return all_reduce(self.linear(x))


class AllReduceAfter(torch.nn.Module):
	"""A MoE block whose experts and shared expert produce partial sums: one
	all-reduce of the block's output (where vLLM reduces)."""

	def __init__(self, block):
		super().__init__()
		self.block = block

	def forward(self, x):
		return all_reduce(self.block(x))


class VocabParallelHead(torch.nn.Module):
	"""Column-parallel LM head (vocab sharded) and an all-gather of the logits."""

	def __init__(self, linear, world):
		super().__init__()
		self.linear = linear
		self.world = world

	def forward(self, x):
		return all_gather(self.linear(x), -1, self.world)


class ShardedNorm(torch.nn.Module):
	"""A norm over all heads of a head-sharded tensor (MiniMax-M2's q_norm /
	k_norm): all-gather the rank parts, normalize with the full weight, keep
	this rank's part.  Q takes its part by slicing, K by chunking."""

	def __init__(self, norm, rank, world, use_chunk):
		super().__init__()
		self.norm = norm
		self.rank = rank
		self.world = world
		self.use_chunk = use_chunk

	def forward(self, x):
		n = x.shape[-1]
		y = self.norm(all_gather(x, -1, self.world))
		if self.use_chunk:
			return torch.chunk(y, self.world, dim=-1)[self.rank]
		return y[..., self.rank * n:(self.rank + 1) * n]


class DenseExperts(torch.nn.Module):
	"""The HF experts module (3-D gate_up_proj [E, 2I, H], down_proj [E, H, I])
	computed without data-dependent shapes: every expert runs on every token
	and is weighted by its routing weight (zero when not selected), as
	exporters need.  Each rank holds an I/W shard of every expert (vLLM's
	tensor-parallel MoE); the sum over experts is a partial sum."""

	def __init__(self, num_experts, hidden, inter, act_fn):
		super().__init__()
		self.num_experts = num_experts
		self.gate_up_proj = torch.nn.Parameter(torch.empty(num_experts, 2 * inter, hidden))
		self.down_proj = torch.nn.Parameter(torch.empty(num_experts, hidden, inter))
		self.act_fn = act_fn

	def forward(self, hidden_states, top_k_index, top_k_weights):
		t = hidden_states.shape[0]
		dense = torch.zeros(t, self.num_experts, dtype=top_k_weights.dtype,
				    device=hidden_states.device)
		dense = dense.scatter(1, top_k_index, top_k_weights)           # [T, E]
		gu = torch.matmul(hidden_states.unsqueeze(0), self.gate_up_proj.transpose(1, 2))
		gate, up = gu.chunk(2, dim=-1)                                  # [E, T, I]
		h = torch.matmul(self.act_fn(gate) * up, self.down_proj.transpose(1, 2))  # [E, T, H]
		w = dense.transpose(0, 1).unsqueeze(-1).to(h.dtype)             # [E, T, 1]
		return (h * w).sum(dim=0)


# ------------------------------------------------------------------ families

COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
	      num_key_value_heads=4, head_dim=16, intermediate_size=128,
	      max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
	      pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=False)

# norms: per layer, a list of (name, kind) in forward order, kind "pre" (a
# residual is added just before it), "post" (applied to a sublayer output, no
# residual), "head" (per-head Q/K norm), "allheads" (MiniMax Q/K norm)
FAMILIES = collections.OrderedDict([
	("llama", dict(cls="LlamaForCausalLM", attn="eager", cfg={},
		       about="Llama: GQA, SwiGLU, eager attention")),
	("mistral", dict(cls="MistralForCausalLM", attn="sdpa", cfg=dict(sliding_window=4),
			 about="Mistral: sliding-window attention (window 4), SDPA")),
	("qwen3", dict(cls="Qwen3ForCausalLM", attn="sdpa", cfg=dict(),
		       about="Qwen3: per-head RMSNorm of Q and K, SDPA")),
	("gemma2", dict(cls="Gemma2ForCausalLM", attn="eager",
			cfg=dict(sliding_window=4, query_pre_attn_scalar=16, attn_logit_softcapping=50.0,
				 final_logit_softcapping=30.0, tie_word_embeddings=True,
				 hidden_activation="gelu_pytorch_tanh"),
			about="Gemma 2: (1 + w) norms computed in float32 (weights kept in float32 "
			      "in fp16 and bf16 exports), sandwich norms, embedding scale, attention and "
			      "final logit softcaps, alternating sliding/full attention, eager")),
	("phi3", dict(cls="Phi3ForCausalLM", attn="eager", cfg=dict(),
		      about="Phi-3: fused qkv_proj and gate_up_proj (sharded section by section)")),
	("mixtral", dict(cls="MixtralForCausalLM", attn="sdpa",
			 cfg=dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=64),
			 about="Mixtral: routed MoE (4 experts, top-2, softmax router), SDPA")),
	("qwen2moe", dict(cls="Qwen2MoeForCausalLM", attn="eager",
			  cfg=dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
				   shared_expert_intermediate_size=64, decoder_sparse_step=1,
				   norm_topk_prob=False, qkv_bias=True),
			  about="Qwen2-MoE: routed experts plus a sigmoid-gated shared expert, "
				"Q/K/V bias, eager")),
	("minimax_m2", dict(cls="MiniMaxM2ForCausalLM", attn="sdpa",
			    cfg=dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=64),
			    about="MiniMax-M2: RMSNorm of Q and K over all heads (sharded by tensor "
				  "parallelism: all-gather, norm, this rank's part), sigmoid router "
				  "with a score-correction bias, SDPA")),
	("qwen3_next", dict(cls="Qwen3NextForCausalLM", attn="eager",
			    cfg=dict(layer_types=["linear_attention", "full_attention"],
				     linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=16,
				     linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4,
				     num_experts_per_tok=2, moe_intermediate_size=32,
				     shared_expert_intermediate_size=64, decoder_sparse_step=1,
				     norm_topk_prob=True),
			    about="Qwen3-Next: hybrid of a Gated DeltaNet (linear attention) layer "
				  "and a gated full-attention layer, (1 + w) norms, MoE with a "
				  "sigmoid-gated shared expert; static dynamo export only (the linear "
				  "attention's triangular solve has no TorchScript symbolic, and its "
				  "loop over sequence chunks makes the dynamo exporter specialize the "
				  "sequence length)",
			    exporters=("dynamo-static",))),
])

EXPORTERS = collections.OrderedDict([
	("torchscript", dict(opset=17, dynamic=True)),
	("dynamo", dict(opset=18, dynamic=True)),
	("dynamo-static", dict(opset=18, dynamic=False)),
])
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
NP_NAME = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

# The default matrix (what is committed) keeps the corpus near 40 MB: every
# family at W = 1 and 2 with the TorchScript exporter in float32 and at W = 2
# with the dynamo exporter; W = 4 of the TorchScript export, float16 and the
# static dynamo export at W = 2 for four families that differ most in their
# graphs; W = 1 and 4 of the dynamo export for llama; Qwen3-Next (static
# only) at W = 1 and 2; W = 8 (8 key/value heads: WIDE_WORLD) of the
# TorchScript export for llama, qwen2moe and minimax_m2 and of the dynamo
# export for llama.  --matrix full gives every combination.
FEW = ("llama", "gemma2", "qwen2moe", "minimax_m2")
DEFAULT_MATRIX = {
	("torchscript", "fp32"): {1: "all", 2: "all", 4: FEW, 8: ("llama", "qwen2moe", "minimax_m2")},
	("dynamo", "fp32"): {1: ("llama",), 2: "all", 4: ("llama",), 8: ("llama",)},
	("torchscript", "fp16"): {2: FEW},
	("dynamo", "fp16"): {2: FEW},
	("dynamo-static", "fp32"): {1: ("qwen3_next",), 2: FEW + ("qwen3_next",)},
	("dynamo-static", "fp16"): {},
	("torchscript", "bf16"): {2: ("gemma2",)},
	("dynamo", "bf16"): {2: ("llama", "gemma2")},
	("dynamo-static", "bf16"): {},
}


# Above W = 4 the 4 key/value heads (and Qwen3-Next's 4 linear-attention
# key heads) no longer shard: each rank gets one of 8 (the model is then
# multi-head, not grouped; each folder has its own reference).
WIDE_WORLD = {"num_key_value_heads": 8, "linear_num_key_heads": 8}


def family_config(name, world=1):
	fam = FAMILIES[name]
	cls = getattr(transformers, fam["cls"])
	cfg_cls = getattr(transformers, fam["cls"].replace("ForCausalLM", "Config"))
	kw = dict(COMMON)
	kw.update(fam["cfg"])
	if world > 4:
		kw.update({k: v for k, v in WIDE_WORLD.items() if k in kw})
	cfg = cfg_cls(**kw)
	cfg.head_dim = kw["head_dim"]
	cfg._attn_implementation = fam["attn"]
	return cls, cfg


def init_weights(model, seed):
	"""Deterministic weights giving logits of order one (HF's 0.02 init gives
	nearly uniform logits, which hides errors)."""
	g = torch.Generator().manual_seed(seed)
	gemma = any(k in type(model).__name__ for k in ("Gemma", "Qwen3Next"))
	with torch.no_grad():
		for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
			if p.dim() >= 2:
				std = 1.0 if "embed" in name else p.shape[-1] ** -0.5
				p.copy_(torch.randn(p.shape, generator=g) * std)
			elif "norm" in name:
				base = 0.0 if gemma else 1.0
				p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
			else:
				p.copy_(0.1 * torch.randn(p.shape, generator=g))
		for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
			if name.endswith("e_score_correction_bias"):
				b.copy_(0.05 * torch.randn(b.shape, generator=g))


def build_full(name, world=1):
	cls, cfg = family_config(name, world)
	torch.manual_seed(SEED)
	model = cls(cfg)
	init_weights(model, SEED)
	model.eval()
	return model, cfg


def rank_config(cfg, world):
	c = copy.deepcopy(cfg)
	for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size",
		    "moe_intermediate_size", "shared_expert_intermediate_size",
		    "linear_num_key_heads", "linear_num_value_heads"):
		v = getattr(c, key, None)
		if v:
			if v % world:
				raise ValueError("%s = %d does not divide by W = %d" % (key, v, world))
			setattr(c, key, v // world)
	return c


def shard(full, shape, name, cfg, rank, world):
	"""The rank's part of a full tensor: replicated when the shapes agree, else
	the r-th 1/W of the one dim that differs, section by section for fused
	projections (qkv_proj: q, k, v; gate_up_proj: gate, up)."""
	if tuple(full.shape) == tuple(shape):
		return full.clone()
	dims = [d for d in range(full.dim()) if full.shape[d] != shape[d]]
	assert len(dims) == 1 and full.shape[dims[0]] == world * shape[dims[0]], (name, full.shape, shape)
	d = dims[0]
	if "qkv_proj" in name:
		hd = cfg.head_dim
		sections = [cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd,
			    cfg.num_key_value_heads * hd]
	elif "gate_up_proj" in name:
		sections = [full.shape[d] // 2] * 2
	elif "conv1d" in name:       # Gated DeltaNet: channels q, k, v
		kd = cfg.linear_num_key_heads * cfg.linear_key_head_dim
		sections = [kd, kd, cfg.linear_num_value_heads * cfg.linear_value_head_dim]
	else:
		sections = [full.shape[d]]
	parts = []
	for sec in torch.split(full, sections, dim=d):
		n = sec.shape[d] // world
		parts.append(sec.narrow(d, rank * n, n))
	return torch.cat(parts, dim=d).clone()


def decoder_layers(model):
	return model.model.layers


def build_rank(name, full_model, cfg, rank, world):
	cls, _ = family_config(name)
	rcfg = rank_config(cfg, world)
	rcfg._attn_implementation = cfg._attn_implementation
	torch.manual_seed(SEED)
	m = cls(rcfg)
	# modules whose rank form differs from the class built with rcfg
	m.lm_head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size // world, bias=False)
	for layer, full_layer in zip(decoder_layers(m), decoder_layers(full_model)):
		if name == "minimax_m2":
			attn = layer.self_attn
			attn.q_norm = copy.deepcopy(full_layer.self_attn.q_norm)
			attn.k_norm = copy.deepcopy(full_layer.self_attn.k_norm)
		mlp = layer.mlp
		if hasattr(mlp, "experts"):
			ex = mlp.experts
			inter = ex.down_proj.shape[-1]
			mlp.experts = DenseExperts(ex.gate_up_proj.shape[0], cfg.hidden_size, inter, ex.act_fn)
	full_sd = full_model.state_dict()
	sd = {}
	for k, v in m.state_dict().items():
		sd[k] = shard(full_sd[k], v.shape, k, cfg, rank, world)
	m.load_state_dict(sd, strict=True)
	# the collectives
	for layer in decoder_layers(m):
		if hasattr(layer, "linear_attn"):
			layer.linear_attn.out_proj = RowParallel(layer.linear_attn.out_proj)
			attn = None
		else:
			attn = layer.self_attn
			attn.o_proj = RowParallel(attn.o_proj)
		if name == "minimax_m2":
			attn.q_norm = ShardedNorm(attn.q_norm, rank, world, use_chunk=False)
			attn.k_norm = ShardedNorm(attn.k_norm, rank, world, use_chunk=True)
		if hasattr(layer.mlp, "experts"):
			layer.mlp = AllReduceAfter(layer.mlp)
		else:
			layer.mlp.down_proj = RowParallel(layer.mlp.down_proj)
	m.lm_head = VocabParallelHead(m.lm_head, world)
	m.eval()
	return m


@contextlib.contextmanager
def rank_forward(name):
	"""Qwen3-Next's rank models run the Gated DeltaNet's chunked form with
	chunks of 8 instead of 64 (the same math: the chunking is exact), so the
	exporter unrolls a forward substitution of 7 steps, not 63.  The
	unsharded reference keeps HF's default."""
	if name != "qwen3_next":
		yield
		return
	from transformers.models.qwen3_next import modeling_qwen3_next as mq
	orig = mq.torch_chunk_gated_delta_rule
	mq.torch_chunk_gated_delta_rule = functools.partial(orig, chunk_size=8)
	try:
		yield
	finally:
		mq.torch_chunk_gated_delta_rule = orig


def to_dtype(model, name, dtype):
	model = model.to(dtype)
	if name == "gemma2" and dtype != torch.float32:
		# Gemma keeps its norm weights in float32 (the model computes its norms
		# in float32 and casts back); the graph reads Cast -> norm -> Cast.
		for mod in model.modules():
			if type(mod).__name__.endswith("RMSNorm"):
				mod.float()
	return model


class LogitsOnly(torch.nn.Module):
	def __init__(self, model):
		super().__init__()
		self.model = model

	def forward(self, input_ids, attention_mask):
		return self.model(input_ids=input_ids, attention_mask=attention_mask,
				  use_cache=False).logits


# ------------------------------------------------------------------- running


def make_inputs(cfg, batch=BATCH, seq=SEQ, pad=PAD):
	g = torch.Generator().manual_seed(SEED + 1 + 1000 * batch + seq)
	ids = torch.randint(3, cfg.vocab_size, (batch, seq), generator=g)
	mask = torch.ones(batch, seq, dtype=torch.int64)
	mask[1, seq - pad:] = 0      # right padding: every query keeps a key
	ids[1, seq - pad:] = cfg.pad_token_id
	return ids, mask


def run_full(model, ids, mask):
	with torch.no_grad():
		return LogitsOnly(model)(ids, mask)


def run_ranks(models, ids, mask):
	world = len(models)
	w = _World(world)
	outs = [None] * world
	errs = []

	def body(r):
		_tls.ctx = (w, r)
		try:
			with torch.no_grad():
				outs[r] = LogitsOnly(models[r])(ids, mask)
		except BaseException as e:  # noqa: BLE001
			errs.append(traceback.format_exc())
			w.barrier.abort()
		finally:
			_tls.ctx = None

	threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
	for t in threads:
		t.start()
	for t in threads:
		t.join()
	if errs:
		raise RuntimeError("rank failed:\n" + errs[0])
	for r in range(1, world):
		assert torch.equal(outs[0], outs[r]), "ranks disagree"
	return outs[0]


def max_err(a, b):
	return float((a.float() - b.float()).abs().max())


# ----------------------------------------------------------------- exporting


def export_rank(model, path, exporter, opset, ids, mask):
	wrapped = LogitsOnly(model).eval()
	if exporter == "torchscript":
		_register_torchscript_symbolics()
		with torch.no_grad():
			torch.onnx.export(
				wrapped, (ids, mask), path, dynamo=False, opset_version=opset,
				input_names=["input_ids", "attention_mask"], output_names=["logits"],
				dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
					      "attention_mask": {0: "batch", 1: "sequence"},
					      "logits": {0: "batch", 1: "sequence"}},
				custom_opsets={MS: 1})
	else:
		dyn = None
		if EXPORTERS[exporter]["dynamic"]:
			batch = torch.export.Dim("batch", min=1, max=64)
			seq = torch.export.Dim("sequence", min=2, max=cfg_max_seq(model))
			dyn = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
		with torch.no_grad():
			prog = torch.onnx.export(
				wrapped, (ids, mask), dynamo=True, opset_version=opset,
				input_names=["input_ids", "attention_mask"], output_names=["logits"],
				dynamic_shapes=dyn, custom_translation_table=_dynamo_translation_table(),
				external_data=False)
		prog.save(path, external_data=False)
	m = onnx.load(path)
	if os.path.exists(path + ".data"):
		raise RuntimeError("unexpected external data")
	if EXPORTERS[exporter]["dynamic"]:
		# an exporter may specialize a dim it was told is dynamic (a loop over
		# sequence chunks does): refuse to label such a graph dynamic
		for i in m.graph.input:
			dims = i.type.tensor_type.shape.dim
			if any(not d.dim_param for d in dims[:2]):
				raise RuntimeError("input %s lost its dynamic axes: %s" % (
					i.name, [d.dim_param or d.dim_value for d in dims]))
	return m


def cfg_max_seq(model):
	return model.config.max_position_embeddings


def strip_debug_info(m):
	"""Drop the exporters' per-node stack traces and doc strings (most of a
	small model's bytes); the graph itself is untouched."""
	def walk(g):
		g.doc_string = ""
		for n in g.node:
			n.doc_string = ""
			del n.metadata_props[:]
			for a in n.attribute:
				if a.type == onnx.AttributeProto.GRAPH:
					walk(a.g)
				for sg in a.graphs:
					walk(sg)
		for v in list(g.input) + list(g.output) + list(g.value_info):
			v.doc_string = ""
			del v.metadata_props[:]
		for t in g.initializer:
			t.doc_string = ""
			del t.metadata_props[:]
	walk(m.graph)
	for f in m.functions:
		for n in f.node:
			n.doc_string = ""
			del n.metadata_props[:]
	m.doc_string = ""


def set_metadata(path, rank, world, meta):
	m = onnx.load(path)
	strip_debug_info(m)
	del m.metadata_props[:]
	items = dict(meta)
	items.update(tp_rank=str(rank), tp_world_size=str(world))
	for k in sorted(items):
		p = m.metadata_props.add()
		p.key, p.value = k, items[k]
	onnx.save(m, path)
	return m


def op_inventory(m):
	opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}
	counts = collections.Counter()

	def walk(g):
		for n in g.node:
			counts["%s::%s" % (n.domain or "ai.onnx", n.op_type)] += 1
			for a in n.attribute:
				if a.type == onnx.AttributeProto.GRAPH:
					walk(a.g)
				for sg in a.graphs:
					walk(sg)
	walk(m.graph)
	for f in m.functions:
		walk(f)
	return opsets, dict(sorted(counts.items()))


# ------------------------------------------------------------ expected fusions


def expected_fusions(name, cfg):
	"""Derived from the model structure (not from running tpfuse).

	Every row-parallel projection and every MoE block ends in an AllReduce;
	what follows it decides the fusion site: a residual Add feeding an RMSNorm
	(pre-norm models: the next sublayer's norm, the last one the final norm)
	or an RMSNorm directly (Gemma 2's post-sublayer norms of the sandwich)."""
	L = cfg.num_hidden_layers
	moe = name in ("mixtral", "qwen2moe", "minimax_m2", "qwen3_next")
	ar = 2 * L
	norms = 2 * L + 1
	with_res, without_res = 2 * L, 0
	sharded, pairs = 0, 0
	head_norms = 0
	if name == "gemma2":
		norms = 4 * L + 1
		with_res, without_res = 0, 2 * L
	if name == "qwen3":
		head_norms = 2 * L
	if name == "minimax_m2":
		sharded, pairs = 2 * L, L
		norms += 2 * L
	if name == "qwen3_next":
		# full-attention layers: per-head Q/K norms; linear-attention layers:
		# the gated per-head norm of the DeltaNet output
		kinds = cfg.layer_types[:L]
		head_norms = 2 * kinds.count("full_attention") + kinds.count("linear_attention")
	gates = L if name in ("qwen2moe", "qwen3_next") else 0
	return {
		"allreduce": ar,
		"allgather": 1 + (2 * L if name == "minimax_m2" else 0),
		"rmsnorm": norms + head_norms,
		"rmsnorm_per_head": head_norms,
		"fuse-allreduce-rmsnorm": {"allreduce-residual-rmsnorm": with_res,
					   "allreduce-rmsnorm": without_res},
		"fuse-sharded-rmsnorm": {"sharded-rmsnorm": sharded, "qk-pairs-merged": pairs},
		"fuse-sigmoid-gate": {"sigmoid-gate": gates},
		"moe_blocks": L if moe else 0,
		"allreduce_left_after_fusion": 0,
	}


# -------------------------------------------------------------------- driver


def write_pb(path, arr, name):
	t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
	with open(path, "wb") as f:
		f.write(t.SerializeToString())


def tolerance(dtype, low_err):
	if dtype == "fp32":
		return {"atol": 1e-3, "rtol": 1e-3,
			"why": "float32 ranks against the float32 unsharded model: only summation order differs"}
	# float16 / bfloat16: the sharded torch model in that dtype is itself off
	# by low_err; allow twice that for another kernel order, at least 0.05
	# (fp16) or 0.25 (bf16, 8x coarser)
	floor, rtol = (0.05, 0.02) if dtype == "fp16" else (0.25, 0.05)
	a = max(floor, round(2.0 * low_err + 0.005, 3))
	return {"atol": a, "rtol": rtol,
		"why": "%s ranks against the float32 unsharded model: twice the %s torch ranks' "
		       "own max error (%.4f), at least %g" % (NP_NAME[dtype], NP_NAME[dtype], low_err, floor)}


def generate_one(out_root, name, exporter, dtype, world, force=False, log=print):
	folder = os.path.join(out_root, "%s-%s-%s-w%d" % (name, exporter, dtype, world))
	manifest_path = os.path.join(folder, "manifest.json")
	if os.path.exists(manifest_path) and not force:
		log("%s: exists, skipped" % os.path.basename(folder))
		return "skipped"
	t0 = time.time()
	shutil.rmtree(folder, ignore_errors=True)
	os.makedirs(os.path.join(folder, "test_data_set_0"))
	opset = EXPORTERS[exporter]["opset"]
	tdt = DTYPES[dtype]

	full, cfg = build_full(name, world)
	ids, mask = make_inputs(cfg)
	ref = run_full(full, ids, mask)
	assert torch.isfinite(ref).all()
	ranks = [build_rank(name, full, cfg, r, world) for r in range(world)]
	with rank_forward(name):
		return _generate_ranks(folder, manifest_path, name, exporter, dtype, world, opset, tdt,
				       full, cfg, ids, mask, ref, ranks, t0, log)


def _generate_ranks(folder, manifest_path, name, exporter, dtype, world, opset, tdt, full, cfg,
		    ids, mask, ref, ranks, t0, log):
	sharded32 = run_ranks(ranks, ids, mask)
	err32 = max_err(sharded32, ref)
	if err32 > 1e-4:
		raise RuntimeError("%s W=%d: sharded model differs from the unsharded one by %g"
				   % (name, world, err32))
	checks = {"sharded_fp32_vs_full_fp32_max_abs": err32}
	fp16_err = 0.0
	if tdt != torch.float32:
		ranks = [to_dtype(m, name, tdt) for m in ranks]
		low = run_ranks(ranks, ids, mask)
		fp16_err = max_err(low, ref)
		checks["sharded_%s_vs_full_fp32_max_abs" % dtype] = fp16_err
		rank_ref = low
	else:
		rank_ref = sharded32

	meta = {"tp_family": name, "tp_exporter": exporter, "tp_dtype": dtype}
	inventory = None
	nodes = None
	for r, m in enumerate(ranks):
		path = os.path.join(folder, "model.rank%d.onnx" % r)
		export_rank(m, path, exporter, opset, ids, mask)
		om = set_metadata(path, r, world, meta)
		if r == 0:
			inventory = op_inventory(om)
			nodes = len(om.graph.node)
			graph_inputs = [i.name for i in om.graph.input]
			graph_outputs = [o.name for o in om.graph.output]
	# onnxruntime runs the exported ranks together (tests/corpus/ort_ranks.py):
	# rank 0's logits against the float32 reference, and for dynamic exports
	# at another batch and sequence length against the torch ranks
	import ort_ranks
	paths = [os.path.join(folder, "model.rank%d.onnx" % r) for r in range(world)]
	limit = 1e-3 if tdt == torch.float32 else tolerance(dtype, fp16_err)["atol"]
	cases = [("onnxruntime_ranks_vs_full_fp32_max_abs", ids, mask, ref)]
	if EXPORTERS[exporter]["dynamic"]:
		ids2, mask2 = make_inputs(cfg, batch=3, seq=5, pad=1)
		cases.append(("onnxruntime_ranks_b3s5_vs_torch_ranks_max_abs", ids2, mask2,
			      run_ranks(ranks, ids2, mask2)))
	for key, i_, m_, want in cases:
		try:
			got = ort_ranks.run_ranks(paths, {"input_ids": i_.numpy(), "attention_mask": m_.numpy()})
		except Exception as e:  # noqa: BLE001
			if tdt != torch.bfloat16:
				raise
			checks[key] = "not run: " + str(e).splitlines()[0][:120]
			continue
		err = float(np.abs(got.astype(np.float32) - want.float().numpy()).max())
		checks[key] = err
		if not err <= limit:
			raise RuntimeError("%s = %g, above %g" % (key, err, limit))

	data = os.path.join(folder, "test_data_set_0")
	feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
	inputs = [n for n in graph_inputs if n in feeds]
	for i, n in enumerate(inputs):
		write_pb(os.path.join(data, "input_%d.pb" % i), feeds[n], n)
	import ml_dtypes
	np_out = ref.numpy().astype({"fp32": np.float32, "fp16": np.float16,
				     "bf16": ml_dtypes.bfloat16}[dtype])
	write_pb(os.path.join(data, "output_0.pb"), np_out, "logits")

	fam = FAMILIES[name]
	sizes = {k: getattr(cfg, k) for k in sorted(COMMON) if hasattr(cfg, k)}
	sizes.update({k: getattr(cfg, k) for k in sorted(fam["cfg"])})
	manifest = {
		"family": name,
		"about": fam["about"],
		"hf_class": fam["cls"],
		"attention": fam["attn"],
		"exporter": exporter,
		"opset": opset,
		"dynamic_axes": EXPORTERS[exporter]["dynamic"],
		"dtype": dtype,
		"world_size": world,
		"models": ["model.rank%d.onnx" % r for r in range(world)],
		"rank_pattern": "model.rank{rank}.onnx",
		"config": sizes,
		"inputs": [{"name": n, "file": "test_data_set_0/input_%d.pb" % i, "dtype": "int64",
			    "shape": list(feeds[n].shape)} for i, n in enumerate(inputs)],
		"outputs": [{"name": "logits", "file": "test_data_set_0/output_0.pb",
			     "dtype": NP_NAME[dtype],
			     "shape": list(np_out.shape),
			     "reference": "unsharded float32 torch model (eager), stored in the "
					  "model's output dtype"}],
		"graph_inputs": graph_inputs,
		"graph_outputs": graph_outputs,
		"tolerance": tolerance(dtype, fp16_err),
		"checks": checks,
		"opsets": inventory[0],
		"op_counts": inventory[1],
		"nodes": nodes,
		"expected_fusions": expected_fusions(name, cfg),
		"versions": {"torch": torch.__version__.split("+")[0],
			     "transformers": transformers.__version__, "onnx": onnx.__version__},
		"seed": SEED,
	}
	with open(manifest_path, "w") as f:
		json.dump(manifest, f, indent=1)
		f.write("\n")
	log("%s: %d nodes, max err sharded %.2g%s, %.0f s" % (
		os.path.basename(folder), nodes, err32,
		"" if tdt == torch.float32 else ", %s %.3g" % (dtype, fp16_err), time.time() - t0))
	return "ok"


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
				     formatter_class=argparse.RawDescriptionHelpFormatter)
	ap.add_argument("--families", default="",
			help="comma list (default: every family)")
	ap.add_argument("--exporters", default=",".join(EXPORTERS))
	ap.add_argument("--dtypes", default="fp32,fp16,bf16")
	ap.add_argument("--world-sizes", default=None,
			help="comma list; default: the default matrix (see DEFAULT_MATRIX)")
	ap.add_argument("--matrix", choices=("default", "full"), default="default")
	ap.add_argument("--out", default=None, help="default: tests/corpus (--kv: tests/corpus/kv)")
	ap.add_argument("--force", action="store_true")
	ap.add_argument("--list", action="store_true", help="print the folders and exit")
	ap.add_argument("--keep-going", action="store_true")
	ap.add_argument("--kv", action="store_true",
			help="the KV-cache exports instead (tests/corpus/kv/, generate_kv.py): "
			     "the selected families, exporters and dtypes of its matrix, W = 1")
	ap.add_argument("--unlocked", action="store_true",
			help="write even when this environment differs from constraints-generate.txt")
	a = ap.parse_args(argv)
	if not a.list and not a.unlocked:
		# other versions of any package, transitive ones too, change the graphs
		lock = os.path.join(HERE, "constraints-generate.txt")
		check = os.path.join(HERE, "..", "..", "scripts", "check-lock.py")
		if subprocess.run([sys.executable, check, lock, "--python", sys.executable]).returncode != 0:
			sys.exit("generate.py: this environment is not %s (above); install with -c it, "
				 "or pass --unlocked to write folders that differ from the committed ones" % lock)
	torch.set_num_threads(1)
	if a.kv:
		return main_kv(a, ap)
	jobs = []
	fams = a.families.split(",") if a.families else [f for f in FAMILIES
							 if FAMILIES[f].get("default", True)]
	for fam in fams:
		if fam not in FAMILIES:
			ap.error("unknown family %s" % fam)
	for exp in a.exporters.split(","):
		for dt in a.dtypes.split(","):
			for fam in fams:
				if exp not in FAMILIES[fam].get("exporters", EXPORTERS):
					continue
				if a.world_sizes:
					ws = [int(x) for x in a.world_sizes.split(",")]
				elif a.matrix == "full":
					ws = [1, 2, 4, 8]
				else:
					ws = [w for w, sel in sorted(DEFAULT_MATRIX[(exp, dt)].items())
					      if sel == "all" or fam in sel]
				for w in ws:
					jobs.append((fam, exp, dt, w))
	a.out = a.out or HERE
	if a.list:
		for j in jobs:
			print("%s-%s-%s-w%d" % j)
		return 0
	failed = []
	for fam, exp, dt, w in jobs:
		try:
			generate_one(a.out, fam, exp, dt, w, force=a.force)
		except Exception:  # noqa: BLE001
			tb = traceback.format_exc()
			print("%s-%s-%s-w%d: FAILED\n%s" % (fam, exp, dt, w, tb[-3000:]), flush=True)
			failed.append("%s-%s-%s-w%d" % (fam, exp, dt, w))
			shutil.rmtree(os.path.join(a.out, "%s-%s-%s-w%d" % (fam, exp, dt, w)),
				      ignore_errors=True)
			if not a.keep_going:
				break
	print("%d jobs, %d failed%s" % (len(jobs), len(failed),
				       (": " + " ".join(failed)) if failed else ""))
	return 1 if failed else 0


def main_kv(a, ap):
	import generate_kv
	out = a.out or os.path.join(HERE, "kv")
	fams = a.families.split(",") if a.families else list(FAMILIES)
	for fam in fams:
		if fam not in FAMILIES:
			ap.error("unknown family %s" % fam)
		if fam in generate_kv.KV_SKIP:
			print("%s: skipped, %s" % (fam, generate_kv.KV_SKIP[fam]))
	exps = [e for e in a.exporters.split(",") if e in generate_kv.KV_EXPORTERS]
	jobs = generate_kv.jobs(fams, exps, a.dtypes.split(","))
	if a.list:
		for j in jobs:
			print(generate_kv.folder_name(*j))
		return 0
	failed = []
	for fam, exp, dt in jobs:
		name = generate_kv.folder_name(fam, exp, dt)
		try:
			generate_kv.generate_kv_one(out, fam, exp, dt, force=a.force)
		except Exception:  # noqa: BLE001
			tb = traceback.format_exc()
			print("%s: FAILED\n%s" % (name, tb[-3000:]), flush=True)
			failed.append(name)
			shutil.rmtree(os.path.join(out, name), ignore_errors=True)
			if not a.keep_going:
				break
	print("%d jobs, %d failed%s" % (len(jobs), len(failed),
				       (": " + " ".join(failed)) if failed else ""))
	return 1 if failed else 0


if __name__ == "__main__":
	sys.exit(main())
