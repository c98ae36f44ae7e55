#!/usr/bin/env python3
"""The two halves of the decode step's memory roofline, one JSON line each.

  decode_roofline.py bytes MODEL --label batch=8 [--world-size 2] [--model-name dense]
      MODEL is the per-rank ONNX path with {rank}.  For every rank: the
      bytes of its initializers (weights and constants, from their shapes
      and types; external data is not read) and of its KV cache inputs
      (graph inputs that are not initializers and whose name starts with
      "past" or contains "cache", at the model's static shapes, i.e. at the
      batch it was written for).  bytes_per_step is the largest rank's sum:
      what one decode step has to read at least.

  decode_roofline.py bandwidth [--mib 1024] [--iters 20] [--reps 5]
      Times a device-to-device copy of MIB MiB (torch: Tensor.copy_ of
      contiguous bytes, a cudaMemcpyAsync) with CUDA events on every
      visible GPU, one after the other: the best of REPS runs of ITERS
      copies.  copy_gbps counts the bytes read and the bytes written
      (2 x size / time), the DRAM traffic the copy moves per second.

decode_report.py divides the one by the other (the lowest GPU's
bandwidth) for roofline_us.
"""
import argparse
import json
import sys

# bits per element of ONNX TensorProto data types (onnx.TensorProto enum)
BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32,
	13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4,
	24: 8}


def tensor_bytes(dtype, dims):
	n = 1
	for d in dims:
		n *= int(d)
	bits = BITS.get(int(dtype))
	if bits is None:
		raise ValueError("unknown ONNX data type %d" % dtype)
	return (n * bits + 7) // 8


def is_kv(name):
	low = name.lower()
	return low.startswith("past") or "cache" in low


def rank_bytes(path):
	import onnx
	m = onnx.load(path, load_external_data=False)
	g = m.graph
	weights = sum(tensor_bytes(t.data_type, t.dims) for t in g.initializer)
	inits = {t.name for t in g.initializer}
	kv = other = 0
	for vi in g.input:
		if vi.name in inits:
			continue
		tt = vi.type.tensor_type
		dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
		b = tensor_bytes(tt.elem_type, dims)
		if is_kv(vi.name):
			kv += b
		else:
			other += b
	n_init = len(g.initializer)
	del m
	return {"weight_bytes": weights, "kv_bytes": kv, "other_input_bytes": other,
		"initializers": n_init}


def cmd_bytes(a):
	ranks = [rank_bytes(a.model.replace("{rank}", str(r))) for r in range(a.world_size)]
	worst = max(range(len(ranks)), key=lambda r: ranks[r]["weight_bytes"] + ranks[r]["kv_bytes"])
	w = ranks[worst]
	row = {"impl": "roofline", "label": a.label, "model": a.model_name, "world": a.world_size,
	       "weight_bytes": w["weight_bytes"], "kv_bytes": w["kv_bytes"],
	       "bytes_per_step": w["weight_bytes"] + w["kv_bytes"],
	       "other_input_bytes": w["other_input_bytes"], "rank": worst,
	       "rank_bytes": [r["weight_bytes"] + r["kv_bytes"] for r in ranks]}
	print(json.dumps(row), flush=True)
	return 0


def cmd_bandwidth(a):
	import torch
	n = a.mib << 20
	rows = []
	for d in range(torch.cuda.device_count()):
		with torch.cuda.device(d):
			src = torch.empty(n, dtype=torch.uint8, device="cuda")
			dst = torch.empty_like(src)
			src.fill_(1)
			dst.fill_(0)
			for _ in range(10):  # clocks up
				dst.copy_(src)
			torch.cuda.synchronize()
			best = float("inf")
			for _ in range(a.reps):
				e0 = torch.cuda.Event(enable_timing=True)
				e1 = torch.cuda.Event(enable_timing=True)
				e0.record()
				for _ in range(a.iters):
					dst.copy_(src)
				e1.record()
				e1.synchronize()
				best = min(best, e0.elapsed_time(e1) / a.iters)
			ok = bool(torch.equal(src[:4096], dst[:4096]))
			rows.append({"impl": "copy-bandwidth", "gpu": d,
				     "device": torch.cuda.get_device_name(d), "bytes": n,
				     "ms_per_copy": round(best, 4),
				     "copy_gbps": round(2 * n / (best * 1e-3) / 1e9, 1),
				     "checked": ok, "torch": torch.__version__})
			del src, dst
			torch.cuda.empty_cache()
	for r in rows:
		print(json.dumps(r), flush=True)
	return 0 if rows else 1


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	sub = ap.add_subparsers(dest="cmd", required=True)
	b = sub.add_parser("bytes", help="per-rank weight and KV cache bytes of a model")
	b.add_argument("model", help="per-rank ONNX path with {rank}")
	b.add_argument("--label", default="")
	b.add_argument("--world-size", type=int, default=2)
	b.add_argument("--model-name", default="dense",
		       help="which model the row is about (dense, dense_fp8)")
	w = sub.add_parser("bandwidth", help="device-to-device copy bandwidth of every GPU")
	w.add_argument("--mib", type=int, default=1024)
	w.add_argument("--iters", type=int, default=20)
	w.add_argument("--reps", type=int, default=5)
	a = ap.parse_args(argv)
	return cmd_bytes(a) if a.cmd == "bytes" else cmd_bandwidth(a)


if __name__ == "__main__":
	sys.exit(main())
