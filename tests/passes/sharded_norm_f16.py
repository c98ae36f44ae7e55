#!/usr/bin/env python3
"""fuse-sharded-rmsnorm on Olmo2-style Q/K norms of a float16 or bfloat16
tensor-parallel export whose norm weights are float32: each rank gathers
its Q (and K) part, normalizes the full width in float32 with the float32
gamma, casts back and keeps its part
(AllGather -> Cast(f32) -> x * rsqrt(mean(x^2) + eps) -> * gamma -> Cast ->
Slice).

Generates the two rank models and their inputs, then:

* `tpfuse optimize --stats` on rank 0 fires canonicalize-rmsnorm,
  sharded-rmsnorm (2) and qk-pairs-merged (1);
* `mpirun -np 2 tpfuse run --optimize --verify` matches the unfused graph
  and each rank's outputs are within one unit in the last place (2^-10 of
  the value for float16, 2^-7 for bfloat16) of a NumPy reference that
  normalizes in float32 with the float32 gamma and rounds once.

Exit status: 0 all passed, 1 a failure, 77 (skipped) without onnx and numpy.

  sharded_norm_f16.py --tpfuse build/cli/tpfuse [--mpirun mpirun] [--work DIR]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

try:
	import numpy as np
	import onnx
	from onnx import TensorProto as T
	from onnx import helper, numpy_helper
except ImportError as e:
	print("%s: skipped (needs onnx and numpy)" % e)
	sys.exit(77)

W, D, S = 2, 16, 5
EPS = 1e-6
MPI_ENV = {
	"OMPI_ALLOW_RUN_AS_ROOT": "1",
	"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"OMPI_MCA_rmaps_base_oversubscribe": "1",
	"OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}


def bf16_bits(a):
	"""float32 array -> bfloat16 bit patterns (round to nearest even)."""
	b = a.astype(np.float32).view(np.uint32).astype(np.uint64)
	return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
	return (bits.astype(np.uint32) << 16).view(np.float32)


def tensor(name, a, dtype):
	if dtype == T.BFLOAT16:
		return helper.make_tensor(name, T.BFLOAT16, a.shape, bf16_bits(a).tobytes(), raw=True)
	return numpy_helper.from_array(a.astype(np.float16), name)


def rank_model(r, dtype, gammas):
	d = D // W
	inits = [numpy_helper.from_array(g, n + "_gamma") for n, g in gammas.items()]
	inits += [numpy_helper.from_array(np.array([-1], np.int64), "axes"),
		  numpy_helper.from_array(np.array(2.0, np.float32), "two"),
		  numpy_helper.from_array(np.array(EPS, np.float32), "eps"),
		  numpy_helper.from_array(np.array([r * d], np.int64), "start"),
		  numpy_helper.from_array(np.array([(r + 1) * d], np.int64), "end")]
	nodes = []
	for n in gammas:
		nodes += [
			helper.make_node("AllGather", [n], [n + "_ag"], domain="com.microsoft",
					 group_size=W, axis=-1, name=n + "_ag"),
			helper.make_node("Cast", [n + "_ag"], [n + "_f"], to=T.FLOAT),
			helper.make_node("Pow", [n + "_f", "two"], [n + "_sq"]),
			helper.make_node("ReduceMean", [n + "_sq", "axes"], [n + "_ms"], keepdims=1),
			helper.make_node("Add", [n + "_ms", "eps"], [n + "_ve"]),
			helper.make_node("Sqrt", [n + "_ve"], [n + "_rms"]),
			helper.make_node("Reciprocal", [n + "_rms"], [n + "_inv"]),
			helper.make_node("Mul", [n + "_f", n + "_inv"], [n + "_n"]),
			helper.make_node("Mul", [n + "_gamma", n + "_n"], [n + "_g"]),
			helper.make_node("Cast", [n + "_g"], [n + "_y"], to=dtype),
			helper.make_node("Slice", [n + "_y", "start", "end", "axes"], [n + "_out"],
					 name=n + "_slice"),
		]
	g = helper.make_graph(
		nodes, "qk_norm",
		[helper.make_tensor_value_info(n, dtype, [1, S, d]) for n in gammas],
		[helper.make_tensor_value_info(n + "_out", dtype, [1, S, d]) for n in gammas], inits)
	m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
						helper.make_opsetid("com.microsoft", 1)])
	m.ir_version = 9
	for k, v in (("tp_rank", r), ("tp_world_size", W)):
		m.metadata_props.add(key=k, value=str(v))
	return m


def as_float(a, dtype):
	"""Values of float32 `a` rounded to the activation dtype, as float32."""
	return a.astype(np.float16).astype(np.float32) if dtype == T.FLOAT16 else bf16_value(bf16_bits(a))


def read_output(path, dtype):
	t = onnx.TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	if dtype == T.BFLOAT16:
		raw = np.frombuffer(t.raw_data, np.uint16) if t.raw_data else np.array(t.int32_data, np.uint16)
		return bf16_value(raw).reshape(tuple(t.dims))
	return numpy_helper.to_array(t).astype(np.float32)


def case(tpfuse, mpirun, work, dtype, rng):
	name = "f16" if dtype == T.FLOAT16 else "bf16"
	out = os.path.join(work, name)
	os.makedirs(out, exist_ok=True)
	gammas = {n: (rng.standard_normal(D) * 0.5 + 1).astype(np.float32) for n in ("q", "k")}
	full = {n: as_float(rng.standard_normal((1, S, D)).astype(np.float32), dtype) for n in gammas}
	d = D // W
	for r in range(W):
		onnx.save(rank_model(r, dtype, gammas), os.path.join(out, "m.rank%d.onnx" % r))
		ind = os.path.join(out, "in%d" % r)
		os.makedirs(ind, exist_ok=True)
		for i, n in enumerate(gammas):
			part = np.ascontiguousarray(full[n][..., r * d:(r + 1) * d])
			with open(os.path.join(ind, "input_%d.pb" % i), "wb") as f:
				f.write(tensor(n, part, dtype).SerializeToString())
	errors = []
	r = subprocess.run([tpfuse, "optimize", os.path.join(out, "m.rank0.onnx"), "-o",
			    os.path.join(out, "opt.onnx"), "--stats"], capture_output=True, text=True)
	text = r.stdout + r.stderr
	for counter, want in (("sharded-rmsnorm", 2), ("qk-pairs-merged", 1)):
		got = re.search(r"fuse-sharded-rmsnorm\s+%s\s+(\d+)" % counter, text)
		if r.returncode or not got or int(got.group(1)) != want:
			errors.append("%s: %s is %s, expected %d" % (name, counter, got.group(1) if got else "?", want))
	env = dict(os.environ)
	env.update(MPI_ENV)
	r = subprocess.run([mpirun, "-np", str(W), tpfuse, "run", os.path.join(out, "m.rank{rank}.onnx"),
			    "--inputs", os.path.join(out, "in{rank}"), "--optimize", "--verify",
			    "--outputs", os.path.join(out, "out{rank}"), "--quiet"],
			   capture_output=True, text=True, env=env, timeout=300)
	if r.returncode:
		return errors + ["%s: mpirun failed: %s" % (name, (r.stdout + r.stderr).strip()[-600:])]
	ulp = 2.0 ** -10 if dtype == T.FLOAT16 else 2.0 ** -7
	worst = 0.0
	for rk in range(W):
		for i, n in enumerate(gammas):
			x = full[n]
			ref = gammas[n] * (x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS))
			ref = as_float(ref.astype(np.float32), dtype)[..., rk * d:(rk + 1) * d]
			got = read_output(os.path.join(out, "out%d" % rk, "output_%d.pb" % i), dtype)
			err = np.abs(got - ref)
			worst = max(worst, float(err.max()))
			if got.shape != ref.shape or (err > ulp * np.maximum(np.abs(ref), 1.0)).any():
				errors.append("%s: rank %d output '%s_out' differs from the reference (max abs error %.3g)"
					      % (name, rk, n, err.max()))
	print("%s: fused (2 norms, 1 merged exchange), W = %d matches the reference (max abs error %.3g)"
	      % (name, W, worst))
	return errors


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--tpfuse", required=True)
	ap.add_argument("--mpirun", default="mpirun")
	ap.add_argument("--work")
	a = ap.parse_args(argv)
	work = a.work or tempfile.mkdtemp(prefix="sharded-norm-f16-")
	rng = np.random.default_rng(7)
	errors = []
	for dtype in (T.FLOAT16, T.BFLOAT16):
		errors += case(a.tpfuse, a.mpirun, work, dtype, rng)
	for e in errors:
		print("FAIL:", e)
	return 1 if errors else 0


if __name__ == "__main__":
	sys.exit(main())
