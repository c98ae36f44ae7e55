#!/usr/bin/env python3
"""One fusion's effect on generation: `tpfuse generate` of a KV-cache model at
W ranks with the default pipeline and with the pipeline minus the fusion's
passes (`--without`), at each batch, side by side in one run.

  fusion_generate.py MODEL --fusion PASS[,PASS] [--world W] [--batches 1,8,64,256]
                     [--prompt 64] [--new 64] [--backend cpu|cuda] [--repeat 2]
                     [--tpfuse PATH] [--mpirun PATH] [--work DIR] [--out ROWS.jsonl]
                     [--label NAME] [--claim TEXT]

MODEL is a single-device model with KV-cache I/O (docs/generate.md); at W > 1
`tpfuse shard` makes its rank models first (WORK/m.rank{rank}.onnx) and every
generation runs under `MPIRUN -np W`.  The fusion's counters come from
`tpfuse optimize --stats` on rank 0's model: a fusion that matches nothing
there is reported and not timed.  Each batch runs B random prompts of
--prompt ids (the same file for both sides) for --new tokens, greedy, with
`--warmup 1` (on CUDA with `--cuda-graph`), --repeat times per side in
alternating order; a row keeps each side's best decode tokens/s, its time to
first token and step p50, and whether both sides gave the same tokens (float32
on the CPU: they should; bfloat16 on a GPU may part where two logits tie).
One JSON object a row to --out and a table on stdout: on/off = decode
tokens/s with the fusion / without; p50 o/o the same from the median steps
(steadier over a short run).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys


def run(cmd, what):
	p = subprocess.run(cmd, capture_output=True, text=True)
	if p.returncode:
		raise RuntimeError("%s: exit %d: %s" % (what, p.returncode, (p.stderr or p.stdout).strip()[-600:]))
	return p.stdout


def counters(tpfuse, model, world, passes, work):
	"""{pass: matches} of the default pipeline's --stats on rank 0's model."""
	cmd = [tpfuse, "optimize", model, "-o", os.path.join(work, "stats.onnx"), "--passes", "default", "--stats"]
	if world > 1:
		cmd += ["--rank", "0", "--world-size", str(world)]
	out = run(cmd, "tpfuse optimize --stats")
	got = {p: 0 for p in passes}
	for line in out.splitlines():
		f = line.split()
		if len(f) == 3 and f[0] in got and re.fullmatch(r"\d+", f[2]):
			got[f[0]] += int(f[2])
	return got


def vocab_of(model):
	"""The embedding table's rows (ids below it), or 1000 without onnx."""
	try:
		import onnx
	except ImportError:
		return 1000
	g = onnx.load(model, load_external_data=False).graph
	embeds = [t for t in g.initializer if len(t.dims) == 2 and "embed" in t.name]
	return int(embeds[0].dims[0]) if embeds else 1000


def generate(a, model, prompts, without):
	cmd = ([a.mpirun, "-np", str(a.world)] if a.world > 1 else []) + [
		a.tpfuse, "generate", model, "--prompts", prompts, "--max-new-tokens", str(a.new),
		"--backend", a.backend, "--warmup", "1", "--json"]
	if a.backend == "cuda":
		cmd.append("--cuda-graph")
	if without:
		cmd += ["--without", without]
	out = run(cmd, "tpfuse generate%s" % (" --without " + without if without else ""))
	return json.loads(out.strip().splitlines()[-1])


def main():
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("model")
	ap.add_argument("--fusion", required=True, help="the fusion's passes, comma-separated")
	ap.add_argument("--world", type=int, default=2)
	ap.add_argument("--batches", default="1,8,64,256")
	ap.add_argument("--prompt", type=int, default=64)
	ap.add_argument("--new", type=int, default=64)
	ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
	ap.add_argument("--repeat", type=int, default=2)
	ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", "tpfuse"))
	ap.add_argument("--mpirun", default="mpirun")
	ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpfuse-fusion-generate"))
	ap.add_argument("--out", default=None)
	ap.add_argument("--label", default=None, help="the stack's name in the rows (default: the model's folder)")
	ap.add_argument("--claim", default="", help="the production figure the row is set against")
	a = ap.parse_args()
	os.makedirs(a.work, exist_ok=True)
	label = a.label or os.path.basename(os.path.dirname(os.path.abspath(a.model)))
	model = a.model
	if a.world > 1:
		model = os.path.join(a.work, "m.rank{rank}.onnx")
		run([a.tpfuse, "shard", a.model, "--world-size", str(a.world), "-o", model], "tpfuse shard")
	rank0 = model.replace("{rank}", "0")
	passes = [p for p in a.fusion.split(",") if p]
	matches = counters(a.tpfuse, rank0, a.world, passes, a.work)
	rows = []
	head = {"stack": label, "fusion": a.fusion, "world": a.world, "backend": a.backend, "claim": a.claim,
		"matches": matches}
	if not sum(matches.values()):
		rows.append(dict(head, error="the fusion matches nothing in rank 0's model (%s)" % matches))
	vocab = vocab_of(a.model)
	for b in (int(x) for x in a.batches.split(",") if x) if not rows else ():
		r = random.Random(b * 7919 + a.prompt)
		prompts = os.path.join(a.work, "prompts-%dx%d.txt" % (a.prompt, b))
		with open(prompts, "w") as f:
			for _ in range(b):
				f.write(",".join(str(r.randrange(3, min(vocab, 32000))) for _ in range(a.prompt)) + "\n")
		best = {}
		row = dict(head, batch=b, prompt=a.prompt, new=a.new)
		try:
			for i in range(a.repeat):
				for side in (("on", "off") if i % 2 == 0 else ("off", "on")):
					res = generate(a, model, prompts, None if side == "on" else a.fusion)
					st = res["stats"]
					if side not in best or st["decode_tokens_per_s"] > best[side]["stats"]["decode_tokens_per_s"]:
						best[side] = res
			for side in ("on", "off"):
				st = best[side]["stats"]
				row[side] = {k: st[k] for k in ("decode_tokens_per_s", "ttft_ms", "step_p50_ms", "graphs_captured")}
			row["ratio"] = row["on"]["decode_tokens_per_s"] / row["off"]["decode_tokens_per_s"]
			# the median step's: steadier than the mean over a short run
			row["ratio_p50"] = row["off"]["step_p50_ms"] / row["on"]["step_p50_ms"]
			row["tokens_equal"] = best["on"]["tokens"] == best["off"]["tokens"]
		except (RuntimeError, ValueError, KeyError) as e:
			row["error"] = str(e)
		rows.append(row)
		print(json.dumps(row), file=sys.stderr)
	if a.out:
		with open(a.out, "a") as f:
			for row in rows:
				f.write(json.dumps(row) + "\n")
	print("%s: %s at W=%d on %s (matches in rank 0: %s)%s" % (
		label, a.fusion, a.world, a.backend, ", ".join("%s %d" % kv for kv in matches.items()),
		"; claim: " + a.claim if a.claim else ""))
	print("%6s %12s %12s %8s %10s %10s %8s %7s" % ("batch", "on tok/s", "off tok/s", "on/off", "on p50 ms",
							  "off p50 ms", "p50 o/o", "tokens"))
	bad = 0
	for row in rows:
		if "error" in row:
			print("%6s  %s" % (row.get("batch", "-"), row["error"]))
			bad += 1
			continue
		print("%6d %12.1f %12.1f %8.3f %10.3f %10.3f %8.3f %7s" % (
			row["batch"], row["on"]["decode_tokens_per_s"], row["off"]["decode_tokens_per_s"], row["ratio"],
			row["on"]["step_p50_ms"], row["off"]["step_p50_ms"], row["ratio_p50"],
			"same" if row["tokens_equal"] else "differ"))
	return 1 if bad else 0


if __name__ == "__main__":
	sys.exit(main())
