#!/usr/bin/env python3
"""The FP8 form of a KV-cache model from bench/gen_kv_model.py, for the FP8
rows of the end-to-end benchmark (bench/gpu/run-e2e.sh, TPF_E2E_DTYPE=fp8):
every MatMul by a constant weight [K, N] (K and N multiples of 16) reads
its weight as FP8 E4M3 codes through DequantizeLinear with a per-tensor
scale (max |W| / 448), and its input through a static per-tensor
QuantizeLinear -> DequantizeLinear pair (scale --act-scale, saturating), the
Q/DQ form the examples' dense_fp8 model has and that tpfuse's
`lower-matmul-fp8` runs as FP8 GEMMs on the codes.  An input shared by
several MatMuls (q, k and v) is quantized once.  The scales have the
activations' dtype, so the dequantized values keep it.  The model must be
at opset 19 or later (FP8 in QuantizeLinear): gen_kv_model.py --opset 19.

  fp8_kv_model.py IN.onnx OUT.onnx [--act-scale 0.0357] [--keep-lm-head]

The weights go to external data beside OUT (OUT.data).  Prints one JSON
line: the MatMuls rewritten, those left (and why), the bytes and seconds.
"""
import argparse
import json
import os
import sys
import time

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FP8_MAX = 448.0
NP_OF = {TensorProto.BFLOAT16: ml_dtypes.bfloat16, TensorProto.FLOAT16: np.float16,
	 TensorProto.FLOAT: np.float32}


def scalar(name, value, elem):
	return numpy_helper.from_array(np.array(value, dtype=NP_OF[elem]), name)


def main():
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("inp")
	ap.add_argument("out")
	ap.add_argument("--act-scale", type=float, default=16.0 / FP8_MAX,
			help="the activations' quantization scale (default 16/448: values up to 16)")
	ap.add_argument("--keep-lm-head", action="store_true",
			help="leave the vocabulary projection (the last MatMul into logits) in the model's dtype")
	a = ap.parse_args()
	t0 = time.time()
	m = onnx.load(a.inp)
	opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
	if opset < 19:
		print("fp8_kv_model.py: %s is at opset %d; FP8 QuantizeLinear needs 19 or later "
		      "(gen_kv_model.py --opset 19)" % (a.inp, opset), file=sys.stderr)
		return 2
	g = m.graph
	inits = {t.name: t for t in g.initializer}
	producer = {o: n for n in g.node for o in n.output}
	logits_mm = producer.get("logits")
	zero = numpy_helper.from_array(np.array(0, dtype=ml_dtypes.float8_e4m3fn), "fp8.zero")
	zero.data_type = TensorProto.FLOAT8E4M3FN
	new_inits, new_nodes, quantized, left = [zero], [], {}, []
	drop = set()
	done = 0
	for n in g.node:
		w = inits.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
		if w is None:
			new_nodes.append(n)
			continue
		if a.keep_lm_head and n is logits_mm:
			left.append((n.name, "the vocabulary projection (--keep-lm-head)"))
			new_nodes.append(n)
			continue
		if len(w.dims) != 2 or w.dims[0] % 16 or w.dims[1] % 16 or w.data_type not in NP_OF:
			left.append((n.name, "weight %s %s is not [K, N] of multiples of 16 in a float type"
				     % (w.name, list(w.dims))))
			new_nodes.append(n)
			continue
		elem = w.data_type
		wf = numpy_helper.to_array(w).astype(np.float32)
		amax = float(np.abs(wf).max()) if wf.size else 0.0
		sw = amax / FP8_MAX if amax > 0 else 1.0
		codes = np.clip(wf / np.float32(sw), -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn)
		del wf
		wq = numpy_helper.from_array(codes, w.name + ".fp8")
		wq.data_type = TensorProto.FLOAT8E4M3FN
		new_inits += [wq, scalar(w.name + ".scale", sw, elem)]
		drop.add(w.name)
		wd = w.name + ".dequant"
		new_nodes.append(helper.make_node("DequantizeLinear", [wq.name, w.name + ".scale", "fp8.zero"], [wd],
						  name=n.name + "/weight_dequant"))
		x = n.input[0]
		if x not in quantized:
			s = x + ".fp8_scale"
			new_inits.append(scalar(s, a.act_scale, elem))
			xq, xd = x + ".fp8", x + ".fp8_dequant"
			new_nodes.append(helper.make_node("QuantizeLinear", [x, s, "fp8.zero"], [xq],
							  name=n.name + "/input_quant", saturate=1))
			new_nodes.append(helper.make_node("DequantizeLinear", [xq, s, "fp8.zero"], [xd],
							  name=n.name + "/input_dequant"))
			quantized[x] = xd
		new_nodes.append(helper.make_node("MatMul", [quantized[x], wd], list(n.output), name=n.name))
		done += 1
	# a weight another node still reads stays
	still = {i for nd in new_nodes for i in nd.input}
	keep = [t for t in g.initializer if t.name not in drop or t.name in still]
	del g.initializer[:]
	g.initializer.extend(keep + new_inits)
	del g.node[:]
	g.node.extend(new_nodes)
	os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
	onnx.save_model(m, a.out, save_as_external_data=True, all_tensors_to_one_file=True,
			location=os.path.basename(a.out) + ".data", size_threshold=1024)
	folder = os.path.dirname(os.path.abspath(a.out))
	print(json.dumps({"model": a.out, "fp8_matmuls": done, "left": left, "act_scale": a.act_scale,
			  "bytes": sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)),
			  "seconds": round(time.time() - t0, 1)}))
	return 0


if __name__ == "__main__":
	sys.exit(main())
