#!/usr/bin/env python3
"""PyTorch peer of `tpfuse generate` for bench/gpu/run-e2e.sh: the weights of
a bench/gen_kv_model.py model read from its ONNX initializers (external
data) into a transformers LlamaForCausalLM of the same shapes, then timed
by transformers' `generate` on the same prompts.

  torch_generate_peer.py MODEL.onnx --rows ROWS.json [--modes eager,compile]
                         [--device cuda] [--deadline UNIX_SECONDS] [--out ROWS.jsonl]
  torch_generate_peer.py MODEL.onnx --check      the HF model's logits against
                         onnxruntime's on the ONNX model (a float32 model)

ROWS.json: a list of {"kind": "ttft"|"decode", "batch": B, "prompt": P,
"new": N, "prompts": FILE} (FILE: one prompt a line, ids separated by
commas, as `tpfuse generate --prompts` reads it; its first B lines).
Modes:
  eager    the default dynamic cache, attention through SDPA
  compile  `cache_implementation="static"`: generate compiles the decode
           step with torch.compile (its CompileConfig: Inductor,
           reduce-overhead, so CUDA graphs) and runs the prefill eagerly
Every run is greedy with exactly N new tokens (no EOS).  Each row runs
once to warm up (compiles, captures) and is then timed: ttft_ms is the
time of a generate of 1 new token (the median of 3), decode_tokens_per_s
is B * (N - 1) over the time of the N-token generate less that (the steps
after the prefill, every sequence together, as tpfuse counts them).  One
JSON line a row on stdout (and appended to --out), as soon as measured;
a row that fails carries "error" and the others stand; rows not started
before --deadline are written with "skipped".

Name mapping (the TorchScript export renames transposed weights): the
MatMul nodes whose second input is an initializer, in graph order, are
per layer q, k, v, o, gate, up, down (their output names say so, /q/,
/q_1/, ...), then lm_head; they hold W^T ([in, out]).  Norm weights are
the initializers behind `blocks.N.norm1`/`norm2`/`norm` (the export
shares equal ones through Identity nodes); the embedding is
`embed.weight`.  Shapes (KV heads, head size) come from the pasts'
input shapes.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import onnx
import torch

try:  # transformers' generate compiles the decode step of a static cache itself
	from transformers import CompileConfig  # noqa: F401
	AUTO_COMPILE = True
except ImportError:
	AUTO_COMPILE = False

DTYPES = {onnx.TensorProto.FLOAT: (np.float32, None), onnx.TensorProto.FLOAT16: (np.float16, None),
	  onnx.TensorProto.BFLOAT16: (np.uint16, torch.bfloat16)}


def read_initializer(t, base):
	"""One initializer as a CPU tensor, read straight from its external file
	(no copy of the whole model in memory)."""
	npdt, view = DTYPES[t.data_type]
	count = int(np.prod(t.dims)) if len(t.dims) else 1
	if t.data_location == onnx.TensorProto.EXTERNAL:
		ext = {e.key: e.value for e in t.external_data}
		arr = np.fromfile(os.path.join(base, ext["location"]), dtype=npdt, count=count,
				  offset=int(ext.get("offset", 0)))
	elif t.raw_data:
		arr = np.frombuffer(t.raw_data, dtype=npdt, count=count).copy()
	else:
		arr = onnx.numpy_helper.to_array(t).astype(npdt)
	x = torch.from_numpy(arr.reshape(tuple(t.dims)))
	return x.view(view) if view is not None else x


def onnx_weights(path):
	"""(graph, initializers by name, {hf name: onnx initializer name}, shapes)."""
	m = onnx.load(path, load_external_data=False)
	g = m.graph
	inits = {t.name: t for t in g.initializer}
	alias = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity" and n.input[0] in inits}
	names = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": alias.get("norm", "norm")}
	mats = [n.input[1] for n in g.node if n.op_type == "MatMul" and n.input[1] in inits]
	layers = (len(mats) - 1) // 7
	if len(mats) != 7 * layers + 1:
		raise ValueError("%d MatMul weights: not 7 a layer and lm_head" % len(mats))
	parts = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
		 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
	for i in range(layers):
		for j, p in enumerate(parts):
			names["model.layers.%d.%s.weight" % (i, p)] = mats[7 * i + j]
		for k, hf in (("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm")):
			src = "blocks.%d.%s" % (i, k)
			names["model.layers.%d.%s.weight" % (i, hf)] = alias.get(src, src)
	names["lm_head.weight"] = mats[-1]
	past = next(i for i in g.input if i.name == "past_key_values.0.key")
	dims = [d.dim_value for d in past.type.tensor_type.shape.dim]
	emb = inits["embed.weight"].dims
	shapes = {"layers": layers, "vocab": emb[0], "hidden": emb[1], "kv_heads": dims[1], "head_dim": dims[3],
		  "heads": inits[mats[0]].dims[1] // dims[3], "ffn": inits[mats[4]].dims[1],
		  "dtype": inits["embed.weight"].data_type}
	return g, inits, names, shapes


def hf_model(path, device):
	"""LlamaForCausalLM with the ONNX model's weights on device."""
	from transformers import LlamaConfig, LlamaForCausalLM
	g, inits, names, s = onnx_weights(path)
	base = os.path.dirname(os.path.abspath(path))
	dtype = {onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.FLOAT16: torch.float16,
		 onnx.TensorProto.BFLOAT16: torch.bfloat16}[s["dtype"]]
	cfg = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"],
			  num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
			  num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"], rms_norm_eps=1e-5,
			  max_position_embeddings=131072, tie_word_embeddings=False,
			  rope_theta=500000.0, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
			  bos_token_id=None, eos_token_id=None, pad_token_id=0)
	with torch.device("meta"):
		model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
	state = {}
	for hf, src in names.items():
		x = read_initializer(inits[src], base).to(device)
		if hf.endswith("proj.weight") or hf == "lm_head.weight":
			x = x.t().contiguous()  # the export's MatMul holds W^T
		state[hf] = x
	model.load_state_dict(state, strict=True, assign=True)  # the weights' dtype
	import transformers
	major = int(transformers.__version__.split(".")[0])
	setattr(model.config, "dtype" if major >= 5 else "torch_dtype", dtype)
	del state
	# the rotary buffers are not in the state: built again, and checked
	# (transformers 4 reads rope_theta, 5 rope_parameters)
	rot = type(model.model.rotary_emb)(cfg).to(device)
	d = s["head_dim"]
	want = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
	if not torch.allclose(rot.inv_freq.float().cpu(), want, rtol=1e-5):
		raise ValueError("the rotary frequencies are not theta 500000's")
	model.model.rotary_emb = rot
	model.generation_config.pad_token_id = 0
	model.generation_config.eos_token_id = None
	model.generation_config.bos_token_id = None
	return model.eval(), s


def check(path):
	"""The HF model's logits (and presents) against onnxruntime on the ONNX
	model, for a 7-token prompt of batch 2 with empty pasts."""
	import onnxruntime as ort
	model, s = hf_model(path, "cpu")
	ids = np.random.RandomState(3).randint(3, s["vocab"], size=(2, 7)).astype(np.int64)
	feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.tile(np.arange(7), (2, 1))}
	for i in range(s["layers"]):
		for kv in ("key", "value"):
			feeds["past_key_values.%d.%s" % (i, kv)] = np.zeros((2, s["kv_heads"], 0, s["head_dim"]), np.float32)
	so = ort.SessionOptions()  # as exported: its optimizer trips on the float32 model's no-op Casts
	so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
	sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
	want = sess.run(["logits"], feeds)[0]
	with torch.no_grad():
		got = model(input_ids=torch.from_numpy(ids)).logits.float().numpy()
	err = float(np.abs(got - want).max())
	scale = float(np.abs(want).max())
	row = {"part": "peer-check", "max_abs_err": err, "max_abs_logit": scale, "same_argmax":
	       bool((got.argmax(-1) == want.argmax(-1)).all()), "ok": err <= 1e-4 * max(1.0, scale)}
	print(json.dumps(row))
	return 0 if row["ok"] else 1


def sync(device):
	if device.startswith("cuda"):
		torch.cuda.synchronize()


def timed_generate(model, ids, new, mode, device):
	kw = dict(do_sample=False, max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
		  attention_mask=torch.ones_like(ids))
	if mode == "compile":
		kw["cache_implementation"] = "static"
		if not AUTO_COMPILE:  # an older transformers: the forward compiled as its docs did
			if not hasattr(model.forward, "_torchdynamo_orig_callable"):
				model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
		elif not device.startswith("cuda"):  # a check of this script: generate compiles only when told to
			from transformers import CompileConfig
			kw["compile_config"] = CompileConfig()
			kw["compile_config"]._compile_all_devices = True
	sync(device)
	t = time.perf_counter()
	with torch.no_grad():
		out = model.generate(ids, **kw)
	sync(device)
	return (time.perf_counter() - t) * 1e3, out


def prompts(path, batch, length):
	rows = [[int(x) for x in line.replace(" ", ",").split(",") if x] for line in open(path) if line.strip()]
	rows = rows[:batch]
	if len(rows) < batch or any(len(r) != length for r in rows):
		raise ValueError("%s: not %d prompts of %d ids" % (path, batch, length))
	return rows


def run_row(model, r, mode, device):
	ids = torch.tensor(prompts(r["prompts"], r["batch"], r["prompt"]), device=device)
	new = r["new"] if r["kind"] == "decode" else 1
	out = {"part": "e2e", "impl": "torch-" + mode, "kind": r["kind"], "batch": r["batch"],
	       "prompt": r["prompt"], "new": new}
	if device.startswith("cuda"):
		torch.cuda.reset_peak_memory_stats()
	t0 = time.perf_counter()
	timed_generate(model, ids, 1, mode, device)  # warm-up: the prefill's shapes
	if new > 1:
		timed_generate(model, ids, new, mode, device)  # warm-up: compiles and captures the step
	out["warmup_s"] = round(time.perf_counter() - t0, 2)
	from torch._dynamo.utils import counters
	out["compiled_graphs"] = counters["stats"]["unique_graphs"]  # so far, every row of this process
	one = sorted(timed_generate(model, ids, 1, mode, device)[0] for _ in range(3))[1]  # the median of 3
	out["ttft_ms"] = round(one, 3)
	if new > 1:
		full, toks = timed_generate(model, ids, new, mode, device)
		out["decode_ms"] = round(full - one, 3)
		out["decode_tokens_per_s"] = round(r["batch"] * (new - 1) * 1e3 / max(full - one, 1e-9), 1)
		out["tokens0"] = toks[0, ids.shape[1]:ids.shape[1] + 16].tolist()
	if device.startswith("cuda"):
		out["device_peak_bytes"] = torch.cuda.max_memory_allocated()
	return out


def main():
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("model")
	ap.add_argument("--check", action="store_true")
	ap.add_argument("--rows")
	ap.add_argument("--modes", default="eager,compile")
	ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
	ap.add_argument("--deadline", type=float, default=0, help="unix time: rows not started by then are skipped")
	ap.add_argument("--out", help="also append the rows to this JSON-lines file")
	a = ap.parse_args()
	if a.check:
		return check(a.model)
	from torch import _dynamo
	for k in ("recompile_limit", "cache_size_limit"):  # a compiled step per batch and cache length
		if hasattr(_dynamo.config, k):
			setattr(_dynamo.config, k, 64)
	t = time.time()
	model, s = hf_model(a.model, a.device)
	import transformers
	load = {"part": "peer-load", "seconds": round(time.time() - t, 2), "torch": torch.__version__,
		"transformers": transformers.__version__, "auto_compile": AUTO_COMPILE, **s}
	print(json.dumps(load), flush=True)
	rows = json.load(open(a.rows))
	failed = 0
	# eager first: an older transformers' compile mode replaces the forward
	for mode in sorted(a.modes.split(","), key=lambda m: m != "eager"):
		est = 0  # the longest row of this mode so far
		for r in rows:
			if a.deadline and time.time() + est > a.deadline:
				row = {"part": "e2e", "impl": "torch-" + mode, "kind": r["kind"], "batch": r["batch"],
				       "prompt": r["prompt"], "skipped": "the time budget (about %.0f s a row)" % est}
			else:
				t = time.time()
				try:
					row = run_row(model, r, mode, a.device)
				except Exception as e:  # the other rows stand
					failed = 1
					row = {"part": "e2e", "impl": "torch-" + mode, "kind": r["kind"], "batch": r["batch"],
					       "prompt": r["prompt"], "error": ("%s: %s" % (type(e).__name__, e))[:300]}
					if a.device.startswith("cuda"):
						torch.cuda.empty_cache()
				est = max(est, time.time() - t)
			print(json.dumps(row), flush=True)
			if a.out:
				with open(a.out, "a") as f:
					f.write(json.dumps(row) + "\n")
	return failed


if __name__ == "__main__":
	sys.exit(main())
