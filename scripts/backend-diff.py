#!/usr/bin/env python3
"""Finds where two backends part: runs MODEL on both (tpfuse run, the model
as given, no passes) with every node output made a graph output, and prints
the nodes in graph order whose outputs differ beyond a bound, first
divergence first.

  backend-diff.py MODEL INPUT_DIR [--tpfuse PATH] [--a cpu] [--b cuda]
                  [--rtol 0.02] [--atol 0.02] [--work DIR] [--top 20]

INPUT_DIR holds input_N.pb (ONNX test data, as `tpfuse run --inputs`
takes).  The model's weights stay in their external data files: the
rewritten graph is written next to MODEL's folder (as MODEL.alloutputs.onnx,
or in --work with links to the data).  An output differs when
|a - b| > atol + rtol * |a| somewhere; the report names the node, its op,
the output and the largest difference.  Needs onnx and numpy.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def as_float(t):
	a = numpy_helper.to_array(t)
	if t.data_type == onnx.TensorProto.BFLOAT16 and a.dtype == np.uint16:
		a = (a.astype(np.uint32) << 16).view(np.float32)
	if a.dtype.kind in "fcbiu":
		return a.astype(np.float64)
	return a.astype(np.float32).astype(np.float64)


def main():
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("model")
	ap.add_argument("inputs")
	ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", "tpfuse"))
	ap.add_argument("--a", default="cpu")
	ap.add_argument("--b", default="cuda")
	ap.add_argument("--rtol", type=float, default=0.02)
	ap.add_argument("--atol", type=float, default=0.02)
	ap.add_argument("--top", type=int, default=20)
	a = ap.parse_args()
	m = onnx.load(a.model, load_external_data=False)
	known = {o.name for o in m.graph.output}
	order = []  # (node index, node, output name)
	for i, n in enumerate(m.graph.node):
		for o in n.output:
			if o and o not in known:
				m.graph.output.append(onnx.ValueInfoProto(name=o))
				known.add(o)
			if o:
				order.append((i, n, o))
	path = a.model + ".alloutputs.onnx"
	onnx.save(m, path)
	names = [o.name for o in m.graph.output]
	outs = {}
	for be in (a.a, a.b):
		d = "%s.out-%s" % (path, be)
		r = subprocess.run([a.tpfuse, "run", path, "--backend", be, "--inputs", a.inputs, "--outputs", d],
				   capture_output=True, text=True)
		if r.returncode:
			print("tpfuse run --backend %s failed (%d): %s" % (be, r.returncode, r.stderr.strip()[-2000:]))
			return 1
		outs[be] = d
	shown = 0
	for i, n, o in order:
		k = names.index(o)
		ta = onnx.load_tensor(os.path.join(outs[a.a], "output_%d.pb" % k))
		tb = onnx.load_tensor(os.path.join(outs[a.b], "output_%d.pb" % k))
		x, y = as_float(ta), as_float(tb)
		if x.shape != y.shape:
			print("#%d %s (%s) -> %s: shapes %s / %s" % (i, n.name, n.op_type, o, x.shape, y.shape))
			shown += 1
			continue
		if not x.size:
			continue
		fin = np.isfinite(x) & np.isfinite(y)
		diff = np.where(fin, np.abs(x - y), np.where(x == y, 0.0, np.inf))
		bad = diff > a.atol + a.rtol * np.abs(np.where(fin, x, 0))
		if bad.any():
			j = int(np.argmax(diff))
			print("#%d %s (%s) -> %s %s: %d of %d differ, largest %.4g at %s (%s %.6g, %s %.6g)"
			      % (i, n.name, n.op_type, o, x.shape, int(bad.sum()), x.size, float(diff.flat[j]),
				 np.unravel_index(j, x.shape), a.a, float(x.flat[j]), a.b, float(y.flat[j])))
			shown += 1
			if shown >= a.top:
				break
	print("%d node outputs compared; %s" % (len(order), "%d differ (shown)" % shown if shown else "none differs"))
	return 1 if shown else 0


if __name__ == "__main__":
	sys.exit(main())
