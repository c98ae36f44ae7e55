#!/usr/bin/env python3
"""The sharder as the pass `shard` of `tpfuse optimize`.

On a 2-layer MLP (mlp.tpf): `--passes shard --world-size 2 --rank R`
writes the same bytes as `tpfuse shard`'s rank R file; `--verify-each`,
`--print-after-all` and `--stats` reach the pass (its dump and counters);
without a world size the pass fails with exit 1 and says what it needs.

Usage: shard_pass_cli.py --tpfuse build/cli/tpfuse --work DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

failures: list[str] = []


def expect(cond, what):
	print(("ok   " if cond else "FAIL ") + what, flush=True)
	if not cond:
		failures.append(what)
	return cond


def run(tpfuse, *args):
	p = subprocess.run([tpfuse, *args], capture_output=True, text=True, timeout=120)
	return p.returncode, p.stdout, p.stderr


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__)
	ap.add_argument("--tpfuse", required=True)
	ap.add_argument("--work", required=True)
	a = ap.parse_args(argv)
	here = os.path.dirname(os.path.abspath(__file__))
	shutil.rmtree(a.work, ignore_errors=True)
	os.makedirs(a.work)
	w = lambda *p: os.path.join(a.work, *p)  # noqa: E731
	text = os.path.join(here, "mlp.tpf")

	rc, _, err = run(a.tpfuse, "optimize", text, "-O0", "-o", w("mlp.onnx"))
	if not expect(rc == 0, "the MLP converts to ONNX (%s)" % err.strip()):
		return 1
	rc, _, err = run(a.tpfuse, "shard", w("mlp.onnx"), "-w", "2", "-o", w("ref{rank}.onnx"))
	expect(rc == 0, "tpfuse shard -w 2 (%s)" % err.strip())
	for r in (0, 1):
		rc, out, err = run(a.tpfuse, "optimize", w("mlp.onnx"), "--passes", "shard",
				   "--world-size", "2", "--rank", str(r), "--verify-each", "--stats",
				   "--print-after-all", w("dumps%d" % r), "-o", w("pass%d.onnx" % r))
		expect(rc == 0 and not err, "--passes shard --rank %d --verify-each: exit %d %s" %
		       (r, rc, err.strip()))
		with open(w("pass%d.onnx" % r), "rb") as f, open(w("ref%d.onnx" % r), "rb") as g:
			expect(f.read() == g.read(), "rank %d: the pass writes tpfuse shard's bytes" % r)
		stats = {tuple(line.split()[:2]): line.split()[2] for line in out.splitlines()
			 if line.startswith("shard ")}
		expect(stats.get(("shard", "split-columns")) == "1" and
		       stats.get(("shard", "split-rows")) == "1" and
		       stats.get(("shard", "allreduce")) == "1", "rank %d: the counters %s" % (r, stats))
		dump = w("dumps%d" % r, "01-shard.txt")
		ok = os.path.exists(dump)
		if expect(ok, "rank %d: --print-after-all writes 01-shard.txt" % r):
			with open(dump) as f:
				txt = f.read()
			expect('metadata "tp_rank" "%d"' % r in txt and "com.microsoft.AllReduce(" in txt,
			       "rank %d: the dump after the pass is the rank's graph" % r)
	rc, _, err = run(a.tpfuse, "optimize", w("mlp.onnx"), "--passes", "shard", "-o", w("x.onnx"))
	expect(rc == 1 and "shard: the pass needs the world size (--rank and --world-size)" in err,
	       "without a world size: exit 1 and why (exit %d: %s)" % (rc, err.strip()))
	print("%d failure(s)" % len(failures))
	return 1 if failures else 0


if __name__ == "__main__":
	sys.exit(main())
