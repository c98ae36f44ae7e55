#!/usr/bin/env python3
"""Synthetic dense decoder for tpfuse's import/optimize benchmarks.

Writes one rank of a tensor-parallel dense decoder with N layers and all
weights in one ONNX external data file next to the model:

  python3 bench/gen_synthetic.py --layers 1000 --out /tmp/syn/dense1000.onnx
  -> /tmp/syn/dense1000.onnx and /tmp/syn/dense1000.onnx.data

Each layer (19 nodes):
  RMSNormalization -> MatMul (fused QKV, column shard) -> Split -> Transpose(k)
  -> MatMul -> Softmax -> MatMul -> MatMul (O, row shard) -> AllReduce -> Add
  -> RMSNormalization -> MatMul (fused gate/up) -> Split -> Sigmoid -> Mul -> Mul
  -> MatMul (down, row shard) -> AllReduce -> Add
then a final RMSNormalization: 19 * N + 1 nodes, 2N allreduce+add+norm sites.

The external data file is written directly (offsets aligned to 4096 bytes,
tensor entries carry location/offset/length), so memory stays small and
10,000 layers work.  Weight values repeat one random block per shape; with
--sparse the data file is only sized (reads back as zeros) and costs no
writing at all.
"""

import argparse
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

ALIGN = 4096


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
	ap.add_argument("--layers", type=int, default=1000)
	ap.add_argument("--hidden", type=int, default=256)
	ap.add_argument("--ffn", type=int, help="MLP size (default: hidden)")
	ap.add_argument("--tokens", type=int, default=8)
	ap.add_argument("--world-size", type=int, default=2)
	ap.add_argument("--rank", type=int, default=0)
	ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
	ap.add_argument("--sparse", action="store_true",
			help="size the data file without writing weights (zeros)")
	ap.add_argument("--out", "-o", required=True, help="model path (.onnx)")
	a = ap.parse_args(argv)
	ffn = a.ffn or a.hidden
	W = a.world_size
	if a.layers < 1 or a.hidden < 1 or ffn < 1 or a.tokens < 1 or W < 1:
		print("gen_synthetic: error: sizes must be positive", file=sys.stderr)
		return 2
	if not 0 <= a.rank < W:
		print("gen_synthetic: error: --rank must be in [0, world size)", file=sys.stderr)
		return 2
	if a.hidden % W or ffn % W:
		print("gen_synthetic: error: --hidden and --ffn must be divisible by the world size",
		      file=sys.stderr)
		return 2
	t0 = time.perf_counter()
	H, F, T = a.hidden, ffn // W, a.tokens
	Hl = H // W
	tp = TP.BFLOAT16 if a.dtype == "bfloat16" else TP.FLOAT
	esize = 2 if tp == TP.BFLOAT16 else 4
	out_dir = os.path.dirname(os.path.abspath(a.out))
	os.makedirs(out_dir, exist_ok=True)
	data_name = os.path.basename(a.out) + ".data"
	data_path = os.path.join(out_dir, data_name)

	rng = np.random.default_rng(0)
	blocks = {}

	def block(shape, gamma):
		key = (shape, gamma)
		if key not in blocks:
			n = int(np.prod(shape))
			if gamma:
				v = 1.0 + 0.1 * rng.standard_normal(n)
			else:
				v = rng.standard_normal(n) / np.sqrt(shape[0])
			v = v.astype(np.float32)
			if tp == TP.BFLOAT16:
				# round to nearest even bf16 and keep the high halves
				u = v.view(np.uint32).astype(np.uint64)
				u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
				blocks[key] = u.astype(np.uint16).tobytes()
			else:
				blocks[key] = v.tobytes()
		return blocks[key]

	inits = []
	offset = 0
	f = open(data_path, "wb")

	def weight(name, shape, gamma=False):
		nonlocal offset
		nbytes = int(np.prod(shape)) * esize
		pad = (-offset) % ALIGN
		if not a.sparse:
			if pad:
				f.write(b"\0" * pad)
			f.write(block(tuple(shape), gamma))
		offset += pad
		t = TP()
		t.name = name
		t.data_type = tp
		t.dims.extend(shape)
		t.data_location = TP.EXTERNAL
		for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(nbytes))):
			e = t.external_data.add()
			e.key = k
			e.value = v
		offset += nbytes
		inits.append(t)
		return name

	nodes = []
	mk = helper.make_node

	def norm(x, name):
		g = weight(name + ".weight", [H], gamma=True)
		nodes.append(mk("RMSNormalization", [x, g], [name], name=name, axis=-1, epsilon=1e-5,
				stash_type=1))
		return name

	res = "hidden_states"
	delta = None
	for L in range(a.layers):
		p = "layers.%d." % L
		if delta is None:
			n1 = norm(res, p + "input_norm")
		else:
			nodes.append(mk("Add", [res, delta], [p + "residual0"], name=p + "residual0"))
			res = p + "residual0"
			n1 = norm(res, p + "input_norm")
		wqkv = weight(p + "attn.qkv_proj.weight", [H, 3 * Hl])
		wo = weight(p + "attn.o_proj.weight", [Hl, H])
		nodes += [
			mk("MatMul", [n1, wqkv], [p + "qkv"], name=p + "attn.qkv_proj"),
			mk("Split", [p + "qkv"], [p + "q", p + "k", p + "v"], name=p + "attn.split",
			   axis=-1, num_outputs=3),
			mk("Transpose", [p + "k"], [p + "kt"], name=p + "attn.k_transpose", perm=[1, 0]),
			mk("MatMul", [p + "q", p + "kt"], [p + "scores"], name=p + "attn.scores"),
			mk("Softmax", [p + "scores"], [p + "probs"], name=p + "attn.softmax", axis=-1),
			mk("MatMul", [p + "probs", p + "v"], [p + "ctx"], name=p + "attn.context"),
			mk("MatMul", [p + "ctx", wo], [p + "attn_out"], name=p + "attn.o_proj"),
			mk("AllReduce", [p + "attn_out"], [p + "attn_ar"], name=p + "attn.allreduce",
			   domain="com.microsoft"),
			mk("Add", [res, p + "attn_ar"], [p + "residual1"], name=p + "residual1"),
		]
		res = p + "residual1"
		n2 = norm(res, p + "post_attention_norm")
		wgu = weight(p + "mlp.gate_up_proj.weight", [H, 2 * F])
		wd = weight(p + "mlp.down_proj.weight", [F, H])
		nodes += [
			mk("MatMul", [n2, wgu], [p + "gate_up"], name=p + "mlp.gate_up_proj"),
			mk("Split", [p + "gate_up"], [p + "gate", p + "up"], name=p + "mlp.split", axis=-1,
			   num_outputs=2),
			mk("Sigmoid", [p + "gate"], [p + "sig"], name=p + "mlp.sigmoid"),
			mk("Mul", [p + "gate", p + "sig"], [p + "silu"], name=p + "mlp.silu"),
			mk("Mul", [p + "silu", p + "up"], [p + "act"], name=p + "mlp.gated"),
			mk("MatMul", [p + "act", wd], [p + "mlp_out"], name=p + "mlp.down_proj"),
			mk("AllReduce", [p + "mlp_out"], [p + "mlp_ar"], name=p + "mlp.allreduce",
			   domain="com.microsoft"),
		]
		delta = p + "mlp_ar"
	nodes.append(mk("Add", [res, delta], ["final_residual"], name="final_residual"))
	gf = weight("final_norm.weight", [H], gamma=True)
	nodes.append(mk("RMSNormalization", ["final_residual", gf], ["last_hidden_state"],
			name="final_norm", axis=-1, epsilon=1e-5, stash_type=1))
	if a.sparse:
		f.truncate(offset)
	f.close()

	graph = helper.make_graph(
		nodes, "synthetic_dense_L%d" % a.layers,
		[helper.make_tensor_value_info("hidden_states", tp, [T, H])],
		[helper.make_tensor_value_info("last_hidden_state", tp, [T, H])], inits)
	model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23),
							 helper.make_opsetid("com.microsoft", 1)],
				  producer_name="tpfuse-bench")
	model.ir_version = 11
	helper.set_model_props(model, {"tp_family": "synthetic_dense", "tp_rank": str(a.rank),
				       "tp_world_size": str(W)})
	with open(a.out, "wb") as mf:
		mf.write(model.SerializeToString())
	dt = time.perf_counter() - t0
	print("%s: %d layers, %d nodes, %d initializers, %.1f MiB external data, %.2f s"
	      % (a.out, a.layers, len(nodes), len(inits), offset / 2**20, dt))
	return 0


if __name__ == "__main__":
	sys.exit(main())
