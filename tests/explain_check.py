#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""--explain is never silent about a collective left unfused.

Every rank model of the export corpus (tests/corpus/*/manifest.json) and of
the example families (examples/tpmodels.py at world sizes 1, 2 and 4) goes
through `tpfuse optimize --explain --dump-after` with the default pipeline.
Every com.microsoft AllReduce and AllGather left in the optimized graph
(main graph, subgraphs and function bodies alike) must have an `unfused:`
line of --explain naming it (`at node 'NAME' (com.microsoft::OP)`); the test
fails listing each one that has none.

Self-check: the same comparison with the `unfused:` lines taken away must
report every collective left, or the check could not see a silent miss
(there are some to see: vocab-parallel LM heads gather their logits).

Usage: explain_check.py --tpfuse PATH [--no-examples] [--only SUBSTRING]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COLLECTIVES = ("AllReduce", "AllGather")
# "  %7 = com.microsoft.AllReduce(%3) : f32[2,8]  # name [pass/pattern]"
NODE_RE = re.compile(r"= com\.microsoft\.(%s)\(.*?(?:  # (.*))?$" % "|".join(COLLECTIVES))
UNFUSED_RE = re.compile(r"^unfused: \S+ at node '(.*?)' \(com\.microsoft::(%s)\)" % "|".join(COLLECTIVES))


def corpus_models():
	"""(label, path) of every rank model of every corpus folder."""
	out = []
	cdir = os.path.join(HERE, "corpus")
	for name in sorted(os.listdir(cdir)):
		man = os.path.join(cdir, name, "manifest.json")
		if not os.path.isfile(man):
			continue
		with open(man) as f:
			models = json.load(f).get("models", [])
		for m in models:
			out.append(("corpus/%s/%s" % (name, m), os.path.join(cdir, name, m)))
	return out


def example_models(work, python):
	"""Generates the example families at W = 1, 2, 4 into work."""
	out = []
	gen = os.path.join(ROOT, "examples", "tpmodels.py")
	for w in (1, 2, 4):
		d = os.path.join(work, "w%d" % w)
		p = subprocess.run([python, gen, "all", "--world-size", str(w), "--out", d],
				   capture_output=True, text=True)
		if p.returncode != 0:
			sys.stdout.write(p.stdout + p.stderr)
			raise SystemExit("explain_check: examples/tpmodels.py failed at W = %d" % w)
		for name in sorted(os.listdir(d)):
			if name.endswith(".onnx") and ".rank" in name:
				out.append(("examples/w%d/%s" % (w, name), os.path.join(d, name)))
	return out


def collectives_left(dump):
	"""Counter of (name, op) of the collectives in a text dump."""
	left = collections.Counter()
	for line in dump.splitlines():
		m = NODE_RE.search(line)
		if not m:
			continue
		comment = m.group(2) or ""
		name = comment.split(" [")[0].strip()
		left[(name, m.group(1))] += 1
	return left


def explained(explain):
	got = collections.Counter()
	for line in explain.splitlines():
		m = UNFUSED_RE.match(line)
		if m:
			got[(m.group(1), m.group(2))] += 1
	return got


def silent(left, got):
	"""The collectives of `left` without a line in `got`."""
	return [(k, n - got.get(k, 0)) for k, n in sorted(left.items()) if n > got.get(k, 0)]


def check(tpfuse, label, path, work):
	dump = os.path.join(work, "after.txt")
	out = os.path.join(work, "opt.onnx")
	p = subprocess.run([tpfuse, "optimize", path, "-o", out, "--explain", "--dump-after", dump],
			   capture_output=True, text=True)
	if p.returncode != 0:
		return "optimize failed (exit %d): %s" % (p.returncode, p.stderr.strip()[-500:]), 0
	with open(dump) as f:
		text = f.read()
	left = collectives_left(text)
	missing = silent(left, explained(p.stderr))
	if missing:
		return "; ".join("%s '%s'%s has no 'unfused:' line" % (op, name, " x%d" % n if n > 1 else "")
				 for (name, op), n in missing), sum(left.values())
	# self-check: without the lines, every collective left is reported
	if left and not silent(left, collections.Counter()):
		return "self-check: the comparison did not notice missing lines", sum(left.values())
	return None, sum(left.values())


def main(argv=None):
	ap = argparse.ArgumentParser()
	ap.add_argument("--tpfuse", required=True)
	ap.add_argument("--no-examples", action="store_true")
	ap.add_argument("--only", help="models whose label holds this")
	a = ap.parse_args(argv)
	python = os.environ.get("TPF_PYTHON") or sys.executable
	base = os.environ.get("TPF_TEST_TMP") or None
	if base:
		os.makedirs(base, exist_ok=True)
	fails, n_models, n_left = [], 0, 0
	with tempfile.TemporaryDirectory(prefix="explain-check-", dir=base) as work:
		models = corpus_models()
		if not a.no_examples:
			p = subprocess.run([python, "-c", "import onnx"], capture_output=True)
			if p.returncode == 0:
				models += example_models(os.path.join(work, "examples"), python)
			else:
				print("explain_check: no onnx package for %s: the examples are left out" % python)
		for label, path in models:
			if a.only and a.only not in label:
				continue
			n_models += 1
			why, left = check(a.tpfuse, label, path, work)
			n_left += left
			if why:
				fails.append((label, why))
				print("FAIL %s: %s" % (label, why))
	print("%d models, %d collectives left unfused, %d models with one that has no --explain line"
	      % (n_models, n_left, len(fails)))
	if n_models == 0:
		print("explain_check: no models")
		return 1
	if n_left == 0:
		# the self-check needs something to see
		print("explain_check: no collective is left anywhere: the check saw nothing")
		return 1
	return 1 if fails else 0


if __name__ == "__main__":
	sys.exit(main())
