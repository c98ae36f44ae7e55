#!/usr/bin/env python3
"""A Llama-shaped language model with KV-cache I/O for the generation
benchmarks (bench/gpu/run-generate.sh), written with torch alone (no
transformers): random weights, the Hub exports' inputs and outputs
(input_ids, attention_mask, position_ids, past_key_values.N.key/value ->
logits, present.N.key/value) and their mask (causal and padding, from the
past length read off a past's shape), exported by torch.onnx (TorchScript)
with its weights in external data.

  gen_kv_model.py OUT.onnx [--layers 4] [--hidden 4096] [--heads 32]
                  [--kv-heads 8] [--ffn 14336] [--vocab 128256] [--dtype bf16]
                  [--init-device cuda]   the weights made and exported there
                  [--opset 17]   (19: for bench/fp8_kv_model.py's FP8 form)
  gen_kv_model.py OUT.onnx ... --tokens PROMPT_IDS --new 32
                  prints the greedy tokens of the torch model (CUDA when there)
                  [--save-prefill DIR]: and the prompt's prefill inputs and
                  last logits (the model's dtype and float32) for a check

Llama-3-8B is the default (--layers 32 for the full depth).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
from torch import nn


class Block(nn.Module):
	def __init__(self, a):
		super().__init__()
		h, d = a.hidden, a.hidden // a.heads
		self.heads, self.kv_heads, self.d = a.heads, a.kv_heads, d
		self.norm1 = nn.Parameter(torch.ones(h))
		self.norm2 = nn.Parameter(torch.ones(h))
		self.q = nn.Linear(h, a.heads * d, bias=False)
		self.k = nn.Linear(h, a.kv_heads * d, bias=False)
		self.v = nn.Linear(h, a.kv_heads * d, bias=False)
		self.o = nn.Linear(a.heads * d, h, bias=False)
		self.gate = nn.Linear(h, a.ffn, bias=False)
		self.up = nn.Linear(h, a.ffn, bias=False)
		self.down = nn.Linear(a.ffn, h, bias=False)


def rms(x, w, eps=1e-5):
	v = x.float().pow(2).mean(-1, keepdim=True)
	return (x.float() * torch.rsqrt(v + eps)).to(x.dtype) * w


def rotate(x, cos, sin):
	h = x.shape[-1] // 2
	rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
	return x * cos + rot * sin


class Model(nn.Module):
	def __init__(self, a):
		super().__init__()
		self.embed = nn.Embedding(a.vocab, a.hidden)
		self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
		self.norm = nn.Parameter(torch.ones(a.hidden))
		self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
		d = a.hidden // a.heads
		self.register_buffer("inv_freq", 1.0 / (500000.0 ** (torch.arange(0, d, 2).float() / d)),
				     persistent=False)

	def forward(self, input_ids, attention_mask, position_ids, pasts):
		x = self.embed(input_ids)
		b, s = input_ids.shape
		past = pasts[0].shape[2]
		total = past + s
		keys = torch.arange(total, device=x.device)
		queries = torch.arange(s, device=x.device) + past
		causal = keys[None, :] <= queries[:, None]
		allowed = causal[None, None, :, :] & attention_mask.bool()[:, None, None, :]
		bias = torch.where(allowed, torch.tensor(0.0, dtype=x.dtype, device=x.device),
				   torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device))
		ang = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
		ang = torch.cat((ang, ang), dim=-1)
		cos, sin = ang.cos().to(x.dtype)[:, None], ang.sin().to(x.dtype)[:, None]
		presents = []
		for i, blk in enumerate(self.blocks):
			h = rms(x, blk.norm1)
			q = blk.q(h).view(b, s, blk.heads, blk.d).transpose(1, 2)
			k = blk.k(h).view(b, s, blk.kv_heads, blk.d).transpose(1, 2)
			v = blk.v(h).view(b, s, blk.kv_heads, blk.d).transpose(1, 2)
			q, k = rotate(q, cos, sin), rotate(k, cos, sin)
			k = torch.cat((pasts[2 * i], k), dim=2)
			v = torch.cat((pasts[2 * i + 1], v), dim=2)
			presents += [k, v]
			rep = blk.heads // blk.kv_heads
			kk = k[:, :, None].expand(b, blk.kv_heads, rep, total, blk.d).reshape(b, blk.heads, total, blk.d)
			vv = v[:, :, None].expand(b, blk.kv_heads, rep, total, blk.d).reshape(b, blk.heads, total, blk.d)
			sc = torch.matmul(q, kk.transpose(2, 3)) * (1.0 / math.sqrt(blk.d)) + bias
			p = torch.softmax(sc.float(), dim=-1).to(x.dtype)
			y = torch.matmul(p, vv).transpose(1, 2).reshape(b, s, blk.heads * blk.d)
			x = x + blk.o(y)
			h = rms(x, blk.norm2)
			x = x + blk.down(nn.functional.silu(blk.gate(h)) * blk.up(h))
		return (self.lm_head(rms(x, self.norm)), *presents)


def build(a):
	torch.manual_seed(a.seed)
	dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
	with torch.device("meta"):
		m = Model(a)
	if a.init_device:
		return build_on(m, dt, a), dt
	m = m.to_empty(device="cpu")
	g = torch.Generator().manual_seed(a.seed)
	with torch.no_grad():
		for name, p in m.named_parameters():
			if "norm" in name:
				p.fill_(1.0)
			else:
				p.normal_(0.0, 0.02, generator=g)
		d = a.hidden // a.heads
		m.inv_freq.copy_(1.0 / (500000.0 ** (torch.arange(0, d, 2).float() / d)))
	return m.to(dt).eval(), dt


def build_on(m, dt, a):
	"""The model made in its dtype on --init-device, each weight drawn in
	place there: one copy of the weights, no float32 stage (other values
	than the default's, the same distribution)."""
	m = m.to(dt).to_empty(device=a.init_device)
	g = torch.Generator(device=a.init_device).manual_seed(a.seed)
	with torch.no_grad():
		for name, p in m.named_parameters():
			if "norm" in name:
				p.fill_(1.0)
			else:
				p.normal_(0.0, 0.02, generator=g)
		d = a.hidden // a.heads
		m.inv_freq.copy_(1.0 / (500000.0 ** (torch.arange(0, d, 2, device=a.init_device).float() / d)))
	return m.eval()


def export(m, dt, a):
	L, d = a.layers, a.hidden // a.heads
	past = ["past_key_values.%d.%s" % (i, kv) for i in range(L) for kv in ("key", "value")]
	ins = ["input_ids", "attention_mask", "position_ids"] + past
	outs = ["logits"] + [p.replace("past_key_values.", "present.") for p in past]
	b, s, p = 1, 2, 3
	dev = m.inv_freq.device
	ids = torch.randint(3, a.vocab, (b, s)).to(dev)
	mask = torch.ones(b, p + s, dtype=torch.int64, device=dev)
	pos = torch.arange(p, p + s, device=dev)[None]
	pasts = [torch.zeros(b, a.kv_heads, p, d, dtype=dt, device=dev) for _ in range(2 * L)]
	axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"},
		"position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
	for n in past:
		axes[n] = {0: "batch", 2: "past_sequence"}
	for n in outs[1:]:
		axes[n] = {0: "batch", 2: "total_sequence"}
	with torch.no_grad():
		torch.onnx.export(m, (ids, mask, pos, pasts), a.out, dynamo=False, opset_version=a.opset,
				  input_names=ins, output_names=outs, dynamic_axes=axes,
				  external_data=True)


def greedy(m, a, prompt, new):
	dev = "cuda" if torch.cuda.is_available() else "cpu"
	m = m.to(dev)
	d = a.hidden // a.heads
	dt = next(m.parameters()).dtype
	ids = torch.tensor([prompt], device=dev)
	mask = torch.ones_like(ids)
	pasts = [torch.zeros(1, a.kv_heads, 0, d, dtype=dt, device=dev) for _ in range(2 * a.layers)]
	out = []
	with torch.no_grad():
		for step in range(new):
			pos = torch.arange(mask.shape[1] - ids.shape[1], mask.shape[1], device=dev)[None]
			logits, *pasts = m(ids, mask, pos, pasts)
			t = int(logits[0, -1].float().argmax())
			out.append(t)
			ids = torch.tensor([[t]], device=dev)
			mask = torch.cat((mask, torch.ones_like(ids)), dim=1)
	return out


def save_prefill(m, a, prompt, out_dir):
	"""The prompt's prefill as ONNX test data (out_dir/input_N.pb, the
	export's input order) and the last position's logits of the model in
	its dtype (torch_logits.npy) and upcast to float32 (ref_logits.npy)."""
	import copy
	import numpy as np
	import onnx
	from onnx import numpy_helper
	dev = "cuda" if torch.cuda.is_available() else "cpu"
	m = m.to(dev)
	d, L = a.hidden // a.heads, a.layers
	dt = next(m.parameters()).dtype
	ids = torch.tensor([prompt], device=dev)
	mask = torch.ones_like(ids)
	pos = torch.arange(ids.shape[1], device=dev)[None]
	os.makedirs(out_dir, exist_ok=True)
	feeds = [ids, mask, pos]
	for i, t in enumerate(feeds):
		onnx.save_tensor(numpy_helper.from_array(t.cpu().numpy()), os.path.join(out_dir, "input_%d.pb" % i))
	code = {torch.bfloat16: onnx.TensorProto.BFLOAT16, torch.float16: onnx.TensorProto.FLOAT16,
		torch.float32: onnx.TensorProto.FLOAT}[dt]
	for i in range(2 * L):  # empty pasts [1, kv_heads, 0, d]
		t = onnx.helper.make_tensor("", code, [1, a.kv_heads, 0, d], [])
		onnx.save_tensor(t, os.path.join(out_dir, "input_%d.pb" % (3 + i)))
	with torch.no_grad():
		pasts = [torch.zeros(1, a.kv_heads, 0, d, dtype=dt, device=dev) for _ in range(2 * L)]
		lg = m(ids, mask, pos, pasts)[0][0, -1].float().cpu().numpy()
		np.save(os.path.join(out_dir, "torch_logits.npy"), lg)
		m32 = copy.deepcopy(m).float()
		pasts = [p.float() for p in pasts]
		ref = m32(ids, mask, pos, pasts)[0][0, -1].float().cpu().numpy()
		np.save(os.path.join(out_dir, "ref_logits.npy"), ref)
		del m32


def main():
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("out")
	ap.add_argument("--layers", type=int, default=4)
	ap.add_argument("--hidden", type=int, default=4096)
	ap.add_argument("--heads", type=int, default=32)
	ap.add_argument("--kv-heads", type=int, default=8)
	ap.add_argument("--ffn", type=int, default=14336)
	ap.add_argument("--vocab", type=int, default=128256)
	ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
	ap.add_argument("--seed", type=int, default=1)
	ap.add_argument("--opset", type=int, default=17, help="the export's opset (19 or later for "
			"bench/fp8_kv_model.py's FP8 QuantizeLinear)")
	ap.add_argument("--init-device", metavar="DEV", help="make the model in its dtype on DEV (cuda: fast at "
			"full depth), each weight drawn there, and export it from there (other random values)")
	ap.add_argument("--tokens", help="comma-separated prompt ids: print the torch model's greedy tokens")
	ap.add_argument("--new", type=int, default=32)
	ap.add_argument("--save-prefill", metavar="DIR", help="with --tokens: also write the prompt's prefill inputs "
			"(ONNX test data) and its last logits, of the model's dtype and of float32, to DIR")
	a = ap.parse_args()
	t0 = time.time()
	m, dt = build(a)
	if a.tokens:
		prompt = [int(t) for t in a.tokens.split(",")]
		toks = greedy(m, a, prompt, a.new)
		if a.save_prefill:
			save_prefill(m, a, prompt, a.save_prefill)
		print(json.dumps({"tokens": toks, "seconds": round(time.time() - t0, 1)}))
		return 0
	os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
	export(m, dt, a)
	print(json.dumps({"model": a.out, "layers": a.layers, "seconds": round(time.time() - t0, 1),
			  "bytes": sum(os.path.getsize(os.path.join(os.path.dirname(a.out) or ".", f))
				       for f in os.listdir(os.path.dirname(a.out) or "."))}))
	return 0


if __name__ == "__main__":
	sys.exit(main())
