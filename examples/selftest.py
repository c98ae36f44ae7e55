#!/usr/bin/env python3
"""Self test of the example generators: every family at world sizes 1, 2 and 4
(onnx.checker on every model, the reference evaluator against onnxruntime),
plus every --norm-form at world size 2.  With --tpfuse, every rank model is
also optimized by `tpfuse optimize` (the default pipeline, then
--passes coalesce-alltoall) and the optimized ranks are checked the same way.

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


def optimize_and_check(tpfuse, out, name, W):
	"""tpfuse-optimize every rank model, then compare the optimized ranks."""
	for r in range(W):
		src = os.path.join(out, "%s.rank%d.onnx" % (name, r))
		mid = os.path.join(out, "%s.o2.rank%d.onnx" % (name, r))
		dst = os.path.join(out, "%s.opt.rank%d.onnx" % (name, r))
		for cmd in ([tpfuse, "optimize", src, "-o", mid],
			    [tpfuse, "optimize", mid, "-o", dst, "--passes", "coalesce-alltoall"]):
			p = subprocess.run(cmd, capture_output=True, text=True)
			if p.returncode != 0:
				sys.stdout.write(p.stdout + p.stderr)
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
		for W in (1, 2, 4):
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
	finally:
		if not a.keep:
			shutil.rmtree(root, ignore_errors=True)
	print("%d/%d passed" % (total - len(fails), total))
	return 1 if fails else 0


if __name__ == "__main__":
	sys.exit(main())
