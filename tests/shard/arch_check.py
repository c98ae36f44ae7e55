#!/usr/bin/env python3
"""`tpfuse shard` on tiny exports of Hugging Face architectures
(tests/shard/arch, written by generate_arch.py): MoE families whose
experts' weights a Gather picks out of stacked tables, post-norm models,
DeepSeek-V3's MLA attention, and the Mamba-2 hybrids NemotronH and Falcon-H1
(tests/fixtures/mamba2 as nemotron_h-dynamo, falcon_h1-dynamo and
nemotron_h_dynseq-dynamo, a dynamic sequence length; their outputs are
torch's logits).

For every folder and world size W:
  1. tpfuse shard model.onnx -w W -o 'OUT/m.rank{rank}.onnx' --explain
  2. every rank holds at most --max-fraction of the model's weight bytes
     (float initializers; the MoE families at W = 2: 0.6, the Mamba-2
     hybrids 0.65), and a Mamba-2 mixer's in_proj splits by sections
     (and the default pipeline fuses every AllReduce of rank 0's graph
     with the residual Add and RMSNorm after it)
  3. the rank graphs have one AllReduce per row-parallel product (the
     summary line of --explain), never two on the inputs of one Add
  4. mpirun -np W tpfuse run --optimize --verify (the rank models) matches
     test_data_set_0's outputs (onnxruntime on the single-device model)

Usage:
  arch_check.py --tpfuse build/cli/tpfuse [--models all|NAME,..] [--world-sizes 2,4]
                [--run-world-sizes 2,4] [--work DIR]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ARCH = os.path.join(HERE, "arch")
MAMBA2 = os.path.join(HERE, "..", "fixtures", "mamba2")
MPI_ENV = {
	"OMPI_ALLOW_RUN_AS_ROOT": "1",
	"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"OMPI_MCA_rmaps_base_oversubscribe": "1",
	"OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}
# the largest share of the weights one rank may hold at W = 2
MAX_FRACTION = 0.6
# per-model limits other than MAX_FRACTION: the Mamba-2 hybrids (their
# embedding and LM head, replicated, weigh more of these small fixtures)
FRACTION_LIMITS = {"nemotron_h-dynamo": 0.65, "falcon_h1-dynamo": 0.65, "nemotron_h_dynseq-dynamo": 0.65}
ATOL, RTOL = 1e-4, 1e-3


def read_pb(path):
	t = onnx.TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return t.name, numpy_helper.to_array(t)


def weight_bytes(path):
	m = onnx.load(path)
	total = 0
	for t in m.graph.initializer:
		if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
			total += numpy_helper.to_array(t).nbytes
	return total


def run(cmd, timeout=300):
	e = dict(os.environ)
	e.update(MPI_ENV)
	return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


def double_reduced_adds(path):
	"""Adds both of whose operands come straight from an AllReduce."""
	m = onnx.load(path, load_external_data=False)
	ar = {n.output[0] for n in m.graph.node if n.op_type == "AllReduce"}
	return [n.name for n in m.graph.node
		if n.op_type == "Add" and len(n.input) == 2 and all(i in ar for i in n.input)]


def folder_of(name):
	family = name.split("-")[0]
	return os.path.join(MAMBA2, family) if family in MAMBA else os.path.join(ARCH, name)


def check(tpfuse, name, world, run_it, work):
	folder = folder_of(name)
	out = os.path.join(work, "%s-w%d" % (name, world))
	shutil.rmtree(out, ignore_errors=True)
	os.makedirs(out)
	pattern = os.path.join(out, "m.rank{rank}.onnx")
	r = run([tpfuse, "shard", os.path.join(folder, "model.onnx"), "-w", str(world), "-o", pattern,
		 "--explain"])
	if r.returncode:
		raise RuntimeError("shard failed: " + r.stderr.strip()[-600:])
	summary = re.search(r"(\d+) row-parallel.*?(\d+) AllReduce", r.stderr)
	rows, reduces = (int(summary.group(1)), int(summary.group(2))) if summary else (-1, -1)
	full = weight_bytes(os.path.join(folder, "model.onnx"))
	fracs = [weight_bytes(pattern.replace("{rank}", str(k))) / full for k in range(world)]
	msg = "rank weights %s" % "/".join("%.2f" % f for f in fracs)
	limit = FRACTION_LIMITS.get(name, MAX_FRACTION)
	if world == 2 and name.split("-")[0] in MOE + MAMBA and max(fracs) > limit:
		raise RuntimeError("%s: a rank holds more than %.2f of the weights" % (msg, limit))
	if name.split("-")[0] in MAMBA and "section by section" not in r.stderr:
		raise RuntimeError("the Mamba-2 mixer's in_proj is not split by sections")
	if reduces > rows:
		raise RuntimeError("%d AllReduce for %d row-parallel products" % (reduces, rows))
	twice = double_reduced_adds(pattern.replace("{rank}", "0"))
	if twice:
		raise RuntimeError("Add '%s' reduces both of its operands" % twice[0])
	msg += ", %d row-parallel, %d AllReduce" % (rows, reduces)
	if name.split("-")[0] in MAMBA:
		r = run([tpfuse, "optimize", pattern.replace("{rank}", "0"), "-o",
			 os.path.join(out, "opt.onnx"), "--stats"])
		fused = sum(int(k) for k in re.findall(r"^fuse-allreduce-rmsnorm\s+\S+\s+(\d+)$",
							r.stdout, re.M))
		if r.returncode or fused != reduces:
			raise RuntimeError("the default pipeline fuses %d of %d AllReduce with the residual "
					   "and RMSNorm" % (fused, reduces))
		msg += " (%d fused with the residual and RMSNorm)" % fused
	if run_it:
		res = os.path.join(out, "out{rank}")
		r = run(["mpirun", "-np", str(world), tpfuse, "run", pattern, "--inputs",
			 os.path.join(folder, "test_data_set_0"), "--optimize", "--verify", "--outputs", res,
			 "--quiet"])
		if r.returncode:
			raise RuntimeError("mpirun failed: " + (r.stdout + r.stderr).strip()[-600:])
		worst = 0.0
		for k in range(world):
			_, want = read_pb(os.path.join(folder, "test_data_set_0", "output_0.pb"))
			_, got = read_pb(os.path.join(res.replace("{rank}", str(k)), "output_0.pb"))
			err = np.abs(got.astype(np.float64) - want)
			if got.shape != want.shape or (err > ATOL + RTOL * np.abs(want)).any():
				raise RuntimeError("rank %d: logits differ (max abs error %.3g)" % (k, err.max()))
			worst = max(worst, float(err.max()))
		msg += ", matches (max abs error %.2g)" % worst
	return msg


MOE = ("qwen3_moe", "mixtral", "olmoe", "phimoe", "gpt_oss", "deepseek_v3")
MAMBA = ("nemotron_h", "falcon_h1", "nemotron_h_dynseq")


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--tpfuse", required=True)
	ap.add_argument("--models", default="all")
	ap.add_argument("--world-sizes", default="2,4")
	ap.add_argument("--run-world-sizes", default="2,4")
	ap.add_argument("--work")
	a = ap.parse_args(argv)
	names = sorted(os.listdir(ARCH) + [f + "-dynamo" for f in MAMBA]) if a.models == "all" \
		else a.models.split(",")
	work = a.work or tempfile.mkdtemp(prefix="arch-check-")
	runs = {int(w) for w in a.run_world_sizes.split(",") if w}
	failed = 0
	for name in names:
		for w in (int(x) for x in a.world_sizes.split(",")):
			try:
				print("%s W=%d: %s" % (name, w, check(a.tpfuse, name, w, w in runs, work)), flush=True)
			except Exception as e:  # noqa: BLE001
				failed += 1
				print("%s W=%d: FAIL: %s" % (name, w, e), flush=True)
	return 1 if failed else 0


if __name__ == "__main__":
	sys.exit(main())
