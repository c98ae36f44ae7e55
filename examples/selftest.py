#!/usr/bin/env python3
"""Self test of the example generators: every family at world sizes 1, 2, 4
and 8 (8 heads there, so that they shard; onnx.checker on every model, the
reference evaluator against onnxruntime), plus every --norm-form at world
size 2.  With --tpfuse, every rank model of
both (each family at each world size, and each family in each RMSNorm form)
is also optimized by `tpfuse optimize` (the default pipeline): the fusion
counts must equal the manifest's expected_fusions, optimizing again must fuse
nothing more, and the optimized ranks are checked against onnxruntime.

  python3 examples/selftest.py [--keep DIR] [--tpfuse PATH/TO/tpfuse]

Exit status 0 when everything agrees.
"""

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import tpmodels  # noqa: E402


def run(gen_args, name, out, quiet=True):
	buf = io.StringIO()
	with contextlib.redirect_stdout(buf):
		rc = tpmodels.main(gen_args)
		if rc == 0:
			rc = reference.main([out, name])
	text = buf.getvalue()
	if rc != 0 or not quiet:
		sys.stdout.write(text)
	return rc


def read_stats(text):
	"""`tpfuse optimize --stats` lines "PASS COUNTER VALUE" -> {(pass, counter): value}."""
	stats = {}
	for line in text.splitlines():
		parts = line.split()
		if len(parts) == 3 and parts[2].lstrip("-").isdigit():
			stats[(parts[0], parts[1])] = int(parts[2])
	return stats


def fusion_counts(stats, model_path):
	"""The manifest's expected_fusions keys, from the statistics and the model."""
	import onnx
	g = stats.get
	m = onnx.load(model_path, load_external_data=False)
	left = sum(1 for n in m.graph.node if n.op_type == "AllReduce")
	a2a_after = sum(1 for n in m.graph.node if n.op_type == "AllToAll")
	return {
		"allreduce_rmsnorm": g(("fuse-allreduce-rmsnorm", "allreduce-residual-rmsnorm"), 0)
		+ g(("fuse-allreduce-rmsnorm", "allreduce-rmsnorm"), 0),
		"allreduce_rmsnorm_followed_by_fp8_quant": g(("fuse-allreduce-rmsnorm-quant", "fp8"), 0),
		"allreduce_left_after_fusion": left,
		"sharded_rmsnorm": g(("fuse-sharded-rmsnorm", "sharded-rmsnorm"), 0),
		"sharded_rmsnorm_qk_pairs": g(("fuse-sharded-rmsnorm", "qk-pairs-merged"), 0),
		"sigmoid_gate": g(("fuse-sigmoid-gate", "sigmoid-gate"), 0),
		"alltoall_after_coalescing": a2a_after,
	}


def optimize_and_check(tpfuse, out, name, W):
	"""tpfuse-optimize every rank model with the default pipeline; the
	fusion counts must equal the manifest's, a second run must find nothing
	more to fuse, and the optimized ranks must compute what the full model
	computes."""
	import json
	with open(os.path.join(out, "%s_data" % name, "manifest.json")) as f:
		expected = json.load(f)["expected_fusions"]
	for r in range(W):
		src = os.path.join(out, "%s.rank%d.onnx" % (name, r))
		dst = os.path.join(out, "%s.opt.rank%d.onnx" % (name, r))
		again = os.path.join(out, "%s.opt2.rank%d.onnx" % (name, r))
		p = subprocess.run([tpfuse, "optimize", src, "-o", dst, "--stats", "--verify-each"],
				   capture_output=True, text=True)
		if p.returncode != 0:
			sys.stdout.write(p.stdout + p.stderr)
			return 1
		got = fusion_counts(read_stats(p.stdout), dst)
		wrong = {k: (v, expected.get(k)) for k, v in got.items() if expected.get(k) != v}
		if wrong:
			print("  %s rank %d: fusion counts (got, expected): %s" % (name, r, wrong))
			return 1
		p = subprocess.run([tpfuse, "optimize", dst, "-o", again, "--stats"],
				   capture_output=True, text=True)
		if p.returncode != 0:
			sys.stdout.write(p.stdout + p.stderr)
			return 1
		more = {k: v for k, v in read_stats(p.stdout).items()
			if v and (k[0].startswith("fuse-") or k[0].startswith("coalesce-"))}
		if more:
			print("  %s rank %d: a second optimize fused again: %s" % (name, r, more))
			return 1
	pattern = os.path.join(out, "%s.opt.rank{rank}.onnx" % name)
	buf = io.StringIO()
	with contextlib.redirect_stdout(buf):
		rc = reference.main([out, name, "--no-self-check", "--rank-models", pattern])
	if rc:
		sys.stdout.write(buf.getvalue())
	return rc


def main(argv=None):
	ap = argparse.ArgumentParser()
	ap.add_argument("--keep", help="write into this folder and keep it")
	ap.add_argument("--tpfuse", help="also check tpfuse-optimized rank models")
	a = ap.parse_args(argv)
	root = a.keep or tempfile.mkdtemp(prefix="tpfuse-examples-")
	fails = []
	total = 0
	try:
		for W in (1, 2, 4, 8):
			out = os.path.join(root, "w%d" % W)
			for fam in tpmodels.FAMILIES:
				total += 1
				rc = run([fam, "--world-size", str(W), "--out", out], fam, out)
				print("W=%d %-12s %s" % (W, fam, "ok" if rc == 0 else "FAIL"))
				if rc:
					fails.append((W, fam))
				if a.tpfuse:
					total += 1
					rc = optimize_and_check(a.tpfuse, out, fam, W)
					print("W=%d %-12s optimized %s" % (W, fam, "ok" if rc == 0 else "FAIL"))
					if rc:
						fails.append((W, fam, "optimized"))
		for form in tpmodels.NORM_FORMS:
			out = os.path.join(root, "form_" + form)
			for fam in ("dense", "hybrid", "minimax_qk", "qwen_moe", "gdn_a2a"):
				total += 1
				rc = run([fam, "--world-size", "2", "--out", out, "--norm-form", form],
					 fam, out)
				print("W=2 %-12s --norm-form %-10s %s" % (fam, form, "ok" if rc == 0 else "FAIL"))
				if rc:
					fails.append((form, fam))
				if a.tpfuse:
					total += 1
					rc = optimize_and_check(a.tpfuse, out, fam, 2)
					print("W=2 %-12s --norm-form %-10s optimized %s"
					      % (fam, form, "ok" if rc == 0 else "FAIL"))
					if rc:
						fails.append((form, fam, "optimized"))
	finally:
		if not a.keep:
			shutil.rmtree(root, ignore_errors=True)
	print("%d/%d passed" % (total - len(fails), total))
	return 1 if fails else 0


if __name__ == "__main__":
	sys.exit(main())
