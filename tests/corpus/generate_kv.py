#!/usr/bin/env python3
"""KV-cache exports of the corpus families (generate.py --kv): the
single-device model of a family exported with the KV-cache I/O of Hugging
Face Hub ONNX LLMs (tests/corpus/kv_ort.py), with prefill and decode test
data and greedy reference tokens of transformers' generate().

For every (family, exporter, dtype) this writes

  tests/corpus/kv/<family>-<exporter>-kv-<dtype>-w1/
    model.onnx              the single-device model (no collectives), weights inline
    test_data_set_0/        a prefill: input_N.pb in graph input order (empty
                            pasts), output_N.pb in graph output order (logits,
                            presents) of the float32 torch model
    test_data_set_1/        a decode step on the prefill's presents
    reference_tokens.json   greedy generation of transformers (float32)
    manifest.json           written last: a folder with a manifest is complete

The model is the family's W = 1 rank model of generate.py with its
collectives unwrapped (so the MoE experts are generate.py's DenseExperts:
every expert on every token, as exporters need), wrapped in KVCacheIO, a
module whose forward takes flat past tensors and returns the logits and
flat presents: the pasts fill a transformers Cache of plain (full-length)
layers that the model extends.  Sliding-window layers (Mistral, Gemma 2's
alternate layers) keep full-length caches too; their window is applied by
the mask, as in the Hub's exports.
"""
import json
import os
import shutil
import time

import numpy as np
import onnx
import torch
import transformers
from transformers.cache_utils import Cache, DynamicLayer

import generate as G
import kv_ort

KV_EXPORTERS = {"torchscript": dict(opset=17), "dynamo": dict(opset=18)}
# float32 for every family; float16 and bfloat16 for llama
KV_MATRIX = {"fp32": "all", "fp16": ("llama",), "bf16": ("llama",)}
# Qwen3-Next's linear-attention layers carry a convolution state and a
# recurrent state, not keys and values: the convention has no inputs for them
KV_SKIP = {"qwen3_next": "hybrid: its Gated DeltaNet layers carry a convolution state and a "
			 "recurrent state instead of keys and values, which the past_key_values / "
			 "present convention cannot hold"}
NEW_TOKENS = 32
PROMPTS = (7, 4)             # prompt lengths: the shorter one is left-padded in the batch
EXPORT_PAST, EXPORT_SEQ = 5, 3
DIM_NAMES = ("batch", "sequence", "past_sequence", "total_sequence")


def folder_name(name, exporter, dtype):
	return "%s-%s-kv-%s-w1" % (name, exporter, dtype)


def jobs(families, exporters, dtypes):
	out = []
	for exp in exporters:
		for dt in dtypes:
			for fam in families:
				sel = KV_MATRIX.get(dt, ())
				if fam in KV_SKIP or not (sel == "all" or fam in sel):
					continue
				out.append((fam, exp, dt))
	return out


# ------------------------------------------------------------------- the model


class FlatLayer(DynamicLayer):
	"""A full-length cache layer holding a graph input's past: extended by
	concatenation, its length read from the tensor's shape (no test of its
	emptiness, so an exporter keeps the past length symbolic)."""

	def __init__(self, keys, values):
		super().__init__()
		self.keys, self.values = keys, values
		self.device = keys.device
		self.is_initialized = True

	def get_seq_length(self):
		return self.keys.shape[-2]


class KVCacheIO(torch.nn.Module):
	"""forward(input_ids, attention_mask, position_ids, pasts) -> (logits,
	*presents), pasts and presents flat: layer 0 key, layer 0 value, ..."""

	def __init__(self, model):
		super().__init__()
		self.model = model
		self.layers = model.config.num_hidden_layers

	def forward(self, input_ids, attention_mask, position_ids, pasts):
		cache = Cache(layers=[FlatLayer(pasts[2 * i], pasts[2 * i + 1]) for i in range(self.layers)])
		out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
				 cache=cache, use_cache=True)
		presents = []
		for layer in cache.layers:
			presents += [layer.keys, layer.values]
		return (out.logits, *presents)


def build_single(name):
	"""(full HF model, single-device model, cfg): generate.py's W = 1 rank
	model with its collectives unwrapped."""
	full, cfg = G.build_full(name)
	m = G.build_rank(name, full, cfg, 0, 1)
	for layer in G.decoder_layers(m):
		attn = layer.self_attn
		attn.o_proj = attn.o_proj.linear
		if name == "minimax_m2":
			attn.q_norm = attn.q_norm.norm
			attn.k_norm = attn.k_norm.norm
		if isinstance(layer.mlp, G.AllReduceAfter):
			layer.mlp = layer.mlp.block
		else:
			layer.mlp.down_proj = layer.mlp.down_proj.linear
	m.lm_head = m.lm_head.linear
	m.eval()
	return full, m, cfg


def io_names(layers):
	past = ["past_key_values.%d.%s" % (i, kv) for i in range(layers) for kv in ("key", "value")]
	return (["input_ids", "attention_mask", "position_ids"] + past,
		["logits"] + [p.replace("past_key_values.", "present.") for p in past])


def kv_shape(cfg, batch, length):
	return (batch, cfg.num_key_value_heads, length, cfg.head_dim)


def export_kv(wrapped, cfg, path, exporter, dtype):
	L = cfg.num_hidden_layers
	ins, outs = io_names(L)
	g = torch.Generator().manual_seed(G.SEED + 7)
	b, s, p = 2, EXPORT_SEQ, EXPORT_PAST
	ids = torch.randint(3, cfg.vocab_size, (b, s), generator=g)
	mask = torch.ones(b, p + s, dtype=torch.int64)
	mask[1, :2] = 0
	pos = torch.from_numpy(kv_ort.position_ids(mask.numpy(), s))
	pasts = [torch.randn(kv_shape(cfg, b, p), generator=g).to(dtype) for _ in range(2 * L)]
	opset = KV_EXPORTERS[exporter]["opset"]
	if exporter == "torchscript":
		axes = {"input_ids": {0: "batch", 1: "sequence"},
			"attention_mask": {0: "batch", 1: "total_sequence"},
			"position_ids": {0: "batch", 1: "sequence"},
			"logits": {0: "batch", 1: "sequence"}}
		for n in ins[3:]:
			axes[n] = {0: "batch", 2: "past_sequence"}
		for n in outs[1:]:
			axes[n] = {0: "batch", 2: "total_sequence"}
		with torch.no_grad():
			torch.onnx.export(wrapped, (ids, mask, pos, pasts), path, dynamo=False,
					  opset_version=opset, input_names=ins, output_names=outs,
					  dynamic_axes=axes)
	else:
		D = torch.export.Dim.DYNAMIC
		dyn = {"input_ids": {0: D, 1: D}, "attention_mask": {0: D, 1: D},
		       "position_ids": {0: D, 1: D}, "pasts": [{0: D, 2: D}] * (2 * L)}
		with torch.no_grad():
			prog = torch.onnx.export(wrapped, (ids, mask, pos, pasts), dynamo=True,
						 opset_version=opset, input_names=ins, output_names=outs,
						 dynamic_shapes=dyn, external_data=False)
		prog.save(path, external_data=False)
	if os.path.exists(path + ".data"):
		raise RuntimeError("unexpected external data")
	m = onnx.load(path)
	name_dims(m, ins, outs)
	return m


def name_dims(m, ins, outs):
	"""The dynamic dims named as the convention does (batch, sequence,
	past_sequence, total_sequence, whatever symbols the exporter chose);
	refuses a graph whose input lost a dynamic dim."""
	want = {"input_ids": ("batch", "sequence"), "attention_mask": ("batch", "total_sequence"),
		"position_ids": ("batch", "sequence"), "logits": ("batch", "sequence", None)}
	for n in ins[3:]:
		want[n] = ("batch", None, "past_sequence", None)
	for n in outs[1:]:
		want[n] = ("batch", None, "total_sequence", None)
	got_in = [i.name for i in m.graph.input]
	got_out = [o.name for o in m.graph.output]
	if got_in != ins or got_out != outs:
		raise RuntimeError("graph I/O %s -> %s, not %s -> %s" % (got_in, got_out, ins, outs))
	for v in list(m.graph.input) + list(m.graph.output):
		dims = v.type.tensor_type.shape.dim
		for d, label in zip(dims, want[v.name]):
			if label is None:
				if not d.HasField("dim_value"):
					raise RuntimeError("%s: a static dim is symbolic" % v.name)
				continue
			if not d.dim_param and v in m.graph.input:
				raise RuntimeError("%s lost its dynamic axes: %s" % (
					v.name, [x.dim_param or x.dim_value for x in dims]))
			d.ClearField("dim_value")
			d.dim_param = label
	# the exporter's symbols may also label intermediate values: drop those
	# shapes rather than keep names that no longer match the I/O
	del m.graph.value_info[:]


def finish_model(m, path, meta):
	G.strip_debug_info(m)
	del m.metadata_props[:]
	for k in sorted(meta):
		p = m.metadata_props.add()
		p.key, p.value = k, meta[k]
	onnx.checker.check_model(m)
	onnx.save(m, path)
	return m


# -------------------------------------------------------------------- running


def prompts(cfg):
	"""The two prompts, the left-padded batch of both and each one alone:
	[(case name, ids [B, S], mask [B, S])]."""
	g = torch.Generator().manual_seed(G.SEED + 11)
	ps = [torch.randint(3, cfg.vocab_size, (n,), generator=g) for n in PROMPTS]
	width = max(PROMPTS)
	ids = torch.full((len(ps), width), cfg.pad_token_id, dtype=torch.int64)
	mask = torch.zeros(len(ps), width, dtype=torch.int64)
	for r, p in enumerate(ps):
		ids[r, width - len(p):] = p
		mask[r, width - len(p):] = 1
	cases = [("batch", ids, mask)]
	for r, p in enumerate(ps):
		cases.append(("prompt%d" % r, p[None, :].clone(), torch.ones(1, len(p), dtype=torch.int64)))
	return cases


def hf_generate(full, ids, mask):
	with torch.no_grad():
		out = full.generate(input_ids=ids, attention_mask=mask, do_sample=False,
				    max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
				    pad_token_id=full.config.pad_token_id)
	return out[:, ids.shape[1]:]


def torch_step(wrapped, ids, mask, pasts):
	pos = torch.from_numpy(kv_ort.position_ids(mask.numpy(), ids.shape[1]))
	with torch.no_grad():
		res = wrapped(ids, mask, pos, list(pasts))
	return pos, [r.float() for r in res]


def valid_max_err(a, b, mask, axis):
	"""Max |a - b| over the positions where mask is 1 (axis: the position
	axis of a and b; the mask is [batch, positions])."""
	a = np.asarray(a, np.float32)
	b = np.asarray(b, np.float32)
	keep = mask.astype(bool)
	shape = [1] * a.ndim
	shape[0], shape[axis] = keep.shape
	keep = np.broadcast_to(keep.reshape(shape), a.shape)
	return float(np.abs(a - b)[keep].max())


def kv_tolerance(dtype, low_err):
	tol = G.tolerance(dtype, low_err)
	if dtype == "fp32":
		tol["why"] = "float32 export against the float32 torch model: only kernels differ"
	else:
		tol["why"] = ("%s export against the float32 torch model: twice the %s torch model's own "
			      "max error on the prefill logits (%.4f), at least %g"
			      % (G.NP_NAME[dtype], G.NP_NAME[dtype], low_err, tol["atol"]))
	return tol


def dump_rows(obj):
	"""JSON with every innermost list of numbers on one line."""
	def enc(o, ind):
		pad = " " * ind
		if isinstance(o, dict):
			items = ["%s %s: %s" % (pad, json.dumps(k), enc(v, ind + 1)) for k, v in o.items()]
			return "{\n" + ",\n".join(items) + "\n" + pad + "}"
		if isinstance(o, list) and o and isinstance(o[0], (dict, list)):
			items = ["%s %s" % (pad, enc(v, ind + 1)) for v in o]
			return "[\n" + ",\n".join(items) + "\n" + pad + "]"
		return json.dumps(o)
	return enc(obj, 0) + "\n"


def generate_kv_one(out_root, name, exporter, dtype, force=False, log=print):
	import ml_dtypes
	folder = os.path.join(out_root, folder_name(name, exporter, dtype))
	manifest_path = os.path.join(folder, "manifest.json")
	if os.path.exists(manifest_path) and not force:
		log("%s: exists, skipped" % os.path.basename(folder))
		return "skipped"
	t0 = time.time()
	shutil.rmtree(folder, ignore_errors=True)
	os.makedirs(folder)
	tdt = G.DTYPES[dtype]
	np_dt = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
	full, single, cfg = build_single(name)
	L = cfg.num_hidden_layers
	ins, outs = io_names(L)
	wrap32 = KVCacheIO(single).eval()
	checks = {}

	# the reference: transformers' greedy generation, float32
	cases = prompts(cfg)
	ref_tokens = [(c, ids, mask, hf_generate(full, ids, mask)) for c, ids, mask in cases]
	# the wrapper against the plain HF model, for the prefill and one decode step
	_, bids, bmask = cases[0]
	empty = [torch.zeros(kv_shape(cfg, 2, 0)) for _ in range(2 * L)]
	pos0, pre = torch_step(wrap32, bids, bmask, empty)
	with torch.no_grad():
		plain = full(input_ids=bids, attention_mask=bmask, position_ids=pos0, use_cache=False).logits
	checks["torch_kv_prefill_vs_hf_logits_max_abs"] = valid_max_err(pre[0], plain, bmask.numpy(), 1)
	nxt = ref_tokens[0][3][:, :1]
	dmask = torch.cat([bmask, torch.ones(2, 1, dtype=torch.int64)], dim=1)
	pos1, dec = torch_step(wrap32, nxt, dmask, pre[1:])
	ext = torch.cat([bids, nxt], dim=1)
	with torch.no_grad():
		plain = full(input_ids=ext, attention_mask=dmask,
			     position_ids=torch.from_numpy(kv_ort.position_ids(dmask.numpy(), ext.shape[1])),
			     use_cache=False).logits[:, -1:]
	checks["torch_kv_decode_vs_hf_logits_max_abs"] = float((dec[0] - plain).abs().max())
	for k in ("torch_kv_prefill_vs_hf_logits_max_abs", "torch_kv_decode_vs_hf_logits_max_abs"):
		if not checks[k] <= 1e-4:
			raise RuntimeError("%s = %g" % (k, checks[k]))

	# export, in the folder's dtype
	model = G.to_dtype(single, name, tdt) if tdt != torch.float32 else single
	wrapped = KVCacheIO(model).eval()
	path = os.path.join(folder, "model.onnx")
	m = export_kv(wrapped, cfg, path, exporter, tdt)
	meta = {"tp_family": name, "tp_exporter": exporter, "tp_dtype": dtype, "tp_kv_cache": "1"}
	m = finish_model(m, path, meta)
	inventory = G.op_inventory(m)

	# test data: float32 torch values stored in the model's dtype
	sets = []
	feeds0 = [bids, bmask, pos0] + [e.to(tdt) for e in empty]
	res0 = pre
	feeds1 = [nxt, dmask, pos1] + [p.to(tdt) for p in pre[1:]]
	res1 = dec
	for k, (feeds, res) in enumerate(((feeds0, res0), (feeds1, res1))):
		d = os.path.join(folder, "test_data_set_%d" % k)
		os.makedirs(d)
		arrs_in = []
		for i, (n, t) in enumerate(zip(ins, feeds)):
			a = t.numpy() if t.dtype == torch.int64 else t.float().numpy().astype(np_dt)
			G.write_pb(os.path.join(d, "input_%d.pb" % i), a, n)
			arrs_in.append(a)
		arrs_out = []
		for i, (n, t) in enumerate(zip(outs, res)):
			a = t.numpy().astype(np_dt)
			G.write_pb(os.path.join(d, "output_%d.pb" % i), a, n)
			arrs_out.append(a)
		sets.append((arrs_in, arrs_out))

	# onnxruntime against torch on both sets
	tol = kv_tolerance(dtype, 0.0)
	if tdt != torch.float32:
		low_pre = torch_step(wrapped, bids, bmask, [e.to(tdt) for e in empty])[1]
		low_err = valid_max_err(low_pre[0], pre[0], bmask.numpy(), 1)
		checks["torch_%s_prefill_vs_fp32_logits_max_abs" % dtype] = low_err
		tol = kv_tolerance(dtype, low_err)
	sess = None
	try:
		sess = kv_ort.session(path)
	except Exception as e:  # noqa: BLE001
		if tdt != torch.bfloat16:
			raise
		checks["onnxruntime"] = "not run: " + str(e).splitlines()[0][:160]
	if sess is not None:
		for k, (arrs_in, arrs_out) in enumerate(sets):
			try:
				got = sess.run(None, dict(zip(ins, arrs_in)))
			except Exception as e:  # noqa: BLE001
				if tdt != torch.bfloat16:
					raise
				checks["onnxruntime"] = "not run: " + str(e).splitlines()[0][:160]
				sess = None
				break
			mask = arrs_in[1]
			step = ("prefill", "decode")[k]
			# prefill: only the positions the mask keeps (a left-padded row's
			# first queries attend to nothing: what an implementation makes
			# of them is not specified); decode: every position
			lm = mask if k == 0 else np.ones_like(arrs_in[0])
			el = valid_max_err(got[0], sets[k][1][0], lm, 1)
			ep = max(valid_max_err(g_, w_, mask, 2) for g_, w_ in zip(got[1:], sets[k][1][1:]))
			checks["onnxruntime_%s_logits_max_abs" % step] = el
			checks["onnxruntime_%s_presents_max_abs" % step] = ep
			scale = max(float(np.abs(np.asarray(w_, np.float32)).max()) for w_ in sets[k][1])
			for key, err in (("logits", el), ("presents", ep)):
				if not err <= tol["atol"] + tol["rtol"] * scale:
					raise RuntimeError("onnxruntime %s %s: max error %g" % (step, key, err))

	# onnxruntime's greedy loop against transformers' tokens
	eos = [cfg.eos_token_id]
	greedy = {}
	if sess is not None:
		for c, ids, mask, want in ref_tokens:
			got = kv_ort.greedy(sess, ids.numpy(), mask.numpy(), NEW_TOKENS, suppress=eos)
			same = got == want.numpy()
			greedy[c] = {"equal": bool(same.all()),
				     "tokens_equal": int(same.sum()), "tokens": int(same.size)}
		checks["onnxruntime_greedy_matches_transformers"] = all(v["equal"] for v in greedy.values())
		checks["onnxruntime_greedy"] = greedy
		if tdt == torch.float32 and not checks["onnxruntime_greedy_matches_transformers"]:
			raise RuntimeError("onnxruntime's greedy tokens differ from transformers': %s" % greedy)
	else:
		checks["onnxruntime_greedy_matches_transformers"] = "not run"

	ref = {
		"reference": "transformers %s generate() of the float32 %s model (attention "
			     "implementation %s), the weights of this folder's model"
			     % (transformers.__version__, G.FAMILIES[name]["cls"], G.FAMILIES[name]["attn"]),
		"generate": {"do_sample": False, "max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS,
			     "pad_token_id": cfg.pad_token_id},
		"suppressed_token_ids": eos,
		"why_suppressed": "min_new_tokens keeps the EOS token from being generated: a greedy "
				  "loop takes the argmax over every other token",
		"position_ids": "cumsum(attention_mask) - 1, 0 at padding (the last sequence columns)",
		"cases": [{"name": c, "input_ids": ids.tolist(), "attention_mask": mask.tolist(),
			   "generated_ids": want.tolist()} for c, ids, mask, want in ref_tokens],
	}
	with open(os.path.join(folder, "reference_tokens.json"), "w") as f:
		f.write(dump_rows(ref))

	fam = G.FAMILIES[name]
	sizes = {k: getattr(cfg, k) for k in sorted(G.COMMON) if hasattr(cfg, k)}
	sizes.update({k: getattr(cfg, k) for k in sorted(fam["cfg"])})

	def io_list(k, kind, names, arrs):
		return [{"name": n, "file": "test_data_set_%d/%s_%d.pb" % (k, kind, i),
			 "dtype": str(a.dtype), "shape": list(a.shape)}
			for i, (n, a) in enumerate(zip(names, arrs))]

	manifest = {
		"family": name,
		"about": fam["about"],
		"hf_class": fam["cls"],
		"attention": fam["attn"],
		"kv_cache": True,
		"exporter": exporter,
		"opset": KV_EXPORTERS[exporter]["opset"],
		"dynamic_axes": list(DIM_NAMES),
		"dtype": dtype,
		"world_size": 1,
		"models": ["model.onnx"],
		"config": sizes,
		"test_data": [
			{"set": "test_data_set_0", "step": "prefill", "past_sequence": 0,
			 "inputs": io_list(0, "input", ins, sets[0][0]),
			 "outputs": io_list(0, "output", outs, sets[0][1]),
			 "compare": "positions where attention_mask is 1 (logits: sequence positions, "
				    "presents: cache positions); a left-padded row's padding queries attend "
				    "to nothing and are not specified"},
			{"set": "test_data_set_1", "step": "decode", "past_sequence": int(sets[1][0][3].shape[2]),
			 "inputs": io_list(1, "input", ins, sets[1][0]),
			 "outputs": io_list(1, "output", outs, sets[1][1]),
			 "compare": "logits: every position; presents: positions where attention_mask is 1 "
				    "(the others copy the stored pasts)"},
		],
		"reference": "float32 single-device torch model through KVCacheIO, stored in the "
			     "model's dtype; the decode step's pasts are the prefill's presents",
		"reference_tokens": "reference_tokens.json",
		"graph_inputs": ins,
		"graph_outputs": outs,
		"tolerance": tol,
		"greedy_exact": tdt == torch.float32,
		"checks": checks,
		"opsets": inventory[0],
		"op_counts": inventory[1],
		"nodes": len(m.graph.node),
		"versions": {"torch": torch.__version__.split("+")[0],
			     "transformers": transformers.__version__, "onnx": onnx.__version__},
		"seed": G.SEED,
	}
	with open(manifest_path, "w") as f:
		json.dump(manifest, f, indent=1)
		f.write("\n")
	log("%s: %d nodes, ort prefill %.2g decode %.2g, greedy %s, %.0f s" % (
		os.path.basename(folder), len(m.graph.node),
		checks.get("onnxruntime_prefill_logits_max_abs", float("nan")),
		checks.get("onnxruntime_decode_logits_max_abs", float("nan")),
		checks["onnxruntime_greedy_matches_transformers"], time.time() - t0))
	return "ok"
