#!/usr/bin/env python3
"""`tpfuse generate` on the KV-cache exports (tests/corpus/kv/*/, docs/generate.md).

  greedy     every float32 folder: 32 new tokens of the left-padded batch
             and of each prompt alone equal reference_tokens.json exactly
             (its suppressed ids passed as --suppress), with --json
  sampling   --temperature/--top-k/--top-p with a seed: two runs give the
             same tokens, another seed is allowed to differ; --eos stops
  ranks      (--mpirun) the same under mpirun -np 2: every rank runs the
             loop on the model (no collectives), the ranks' tokens agree
             (the command compares them) and rank 0 prints the reference;
             ranks whose models give other tokens fail (with the onnx
             package, to write such a model)
  profile    --profile: a table per plan (the prefill's input shapes, the
             decode step's), its steps' times adding up to the plan's,
             the tokens unchanged; on standard error with --json; refused
             with --cuda-graph
  refusals   a model without KV-cache I/O, a past without its present,
             token ids outside the vocabulary (prompt or suppressed), every id
             suppressed, an empty prompt, bad options:
             a message and the exit code

Needs only the standard library (the refusal models are written by
tpfuse's text reader and `tpfuse optimize -O0`).

Exit status: 0 all passed, 1 a failure.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
failures: list[str] = []
checks = 0


def expect(cond, what):
	global checks
	checks += 1
	if not cond:
		failures.append(what)
		print("FAIL: " + what, flush=True)


LAUNCH: list[str] = []  # mpirun -np 2, with --mpirun


def run(tpfuse, *args, env=None):
	p = subprocess.run([*LAUNCH, tpfuse, "generate", *args], capture_output=True, text=True,
			   timeout=300, env=env)
	return p.returncode, p.stdout, p.stderr


def ids_arg(row):
	return ",".join(str(t) for t in row)


def unpadded(ids, mask):
	return [t for t, m in zip(ids, mask) if m]


# The ways to run a model: its cache in place (the default: one plan for
# the prefill, one for every decode step), copied from step to step, and
# as exported (no fusions).
MODES = {"in-place": [], "copied": ["--no-in-place"], "as-exported": ["--no-optimize"],
	 "chunked": ["--prefill-chunk", "3"],
	 "without-fusions": ["--without", "fuse-swiglu,fuse-rotary-embedding,cse"],
	 # kv-cache-in-place rewrites the fused Attention: without it the cache is copied
	 "without-attention": ["--without", "fuse-attention"]}


def greedy(tpfuse, folder, mode="in-place"):
	ref = json.load(open(os.path.join(folder, "reference_tokens.json")))
	model = os.path.join(folder, "model.onnx")
	name = os.path.basename(folder)
	suppress = ["--suppress", ids_arg(ref["suppressed_token_ids"])] if ref["suppressed_token_ids"] else []
	for case in ref["cases"]:
		prompts = []
		for ids, mask in zip(case["input_ids"], case["attention_mask"]):
			prompts += ["--prompt-ids", ids_arg(unpadded(ids, mask))]
		want = case["generated_ids"]
		rc, out, err = run(tpfuse, model, *prompts, "--max-new-tokens", str(len(want[0])),
				   *suppress, "--json", *MODES[mode])
		what = "%s %s (%s)" % (name, case["name"], mode)
		if rc:
			expect(False, "%s: exit %d: %s" % (what, rc, err.strip()))
			continue
		got = json.loads(out)
		expect(got["tokens"] == want, "%s: tokens %s, reference %s" % (what, got["tokens"], want))
		st = got["stats"]
		expect(st["steps"] == len(want[0]) and st["plans_built"] >= 1,
		       "%s: stats %s" % (what, st))
		longest = max(len(unpadded(i, m)) for i, m in zip(case["input_ids"], case["attention_mask"]))
		expect(st["graphs_captured"] == 0 and st["peak_rss_bytes"] > 0 and st["device_bytes"] >= st["cache_bytes"],
		       "%s: memory and graphs (CPU: none): %s" % (what, st))
		if mode in ("in-place", "without-fusions"):
			expect(st["cache_in_place"] and st["plans_built"] == 2 and st["prefill_calls"] == 1 and
			       st["cache_length"] == longest + len(want[0]) and st["cache_bytes"] > 0,
			       "%s: in place, one plan for the prefill and one for every decode step: %s" % (what, st))
		elif mode == "chunked":
			expect(st["cache_in_place"] and st["prefill_calls"] == (longest + 2) // 3 and
			       st["plans_built"] <= 3, "%s: the prompt in calls of 3: %s" % (what, st))
		else:
			expect(not st["cache_in_place"] and st["plans_built"] > 2,
			       "%s: the cache copied, a plan per length: %s" % (what, st))


def sampling(tpfuse, model):
	args = [model, "--prompt-ids", "26,35,35,86,75,17,20", "--prompt-ids", "45 59 54 14",
		"--max-new-tokens", "12", "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9"]
	outs = [run(tpfuse, *args, "--seed", "7") for _ in range(2)]
	expect(outs[0][0] == 0 and outs[0][1] == outs[1][1] and outs[0][1].count("prompt") == 2,
	       "sampling with --seed 7: two runs differ or fail: %r / %r" % (outs[0], outs[1]))
	rc, other, _ = run(tpfuse, *args, "--seed", "8")
	expect(rc == 0 and other.count("prompt") == 2, "sampling with --seed 8 failed")
	# a high temperature over the whole vocabulary: the seed decides
	hot = [model, "--prompt-ids", "1,2,3", "--max-new-tokens", "16", "--temperature", "5"]
	a, b = run(tpfuse, *hot, "--seed", "1")[1], run(tpfuse, *hot, "--seed", "2")[1]
	expect(a != b, "--temperature 5: seeds 1 and 2 gave the same 16 tokens: %r" % a)
	# --eos: the sequence stops after its first EOS id; greedy prompt 0 starts 65 109
	rc, out, _ = run(tpfuse, model, "--prompt-ids", "26,35,35,86,75,17,20", "--prompt-ids",
			 "45,59,54,14", "--eos", "109", "--suppress", "2")
	expect(rc == 0 and out.splitlines()[0] == "prompt 0: 65 109",
	       "--eos 109: %r" % out)
	rc, out, _ = run(tpfuse, model, "--prompt-ids", "1,2", "--max-new-tokens", "3", "--stats")
	expect(rc == 0 and "time to first token" in out and "plans built" in out and "p99" in out,
	       "--stats: %r" % out)
	# --warmup: the same tokens again; the timed generation builds no plan
	# (the session's two, the prefill's and the decode step's, stay)
	args = [model, "--prompt-ids", "26,35,35,86,75,17,20", "--prompt-ids", "45,59,54,14", "--json"]
	(rc0, cold, _), (rc1, warm, _) = run(tpfuse, *args), run(tpfuse, *args, "--warmup", "2")
	if rc0 == 0 and rc1 == 0:
		cold, warm = json.loads(cold), json.loads(warm)
		expect(cold["tokens"] == warm["tokens"] and warm["stats"]["plans_built"] == 2 and
		       warm["stats"]["steps"] == cold["stats"]["steps"] and warm["stats"]["prefill_calls"] == 1,
		       "--warmup 2: %r against %r" % (warm, cold))
	else:
		expect(False, "--warmup 2: exit %d / %d" % (rc0, rc1))


# A graph of the convention whose present is not its past extended; the
# variants below break the pairing.
TOY = """\
ir_version 10
opset "" 18
graph "g" {
  input %0: i64[batch,sequence] "input_ids"
  input %1: i64[batch,total] "attention_mask"
  input %2: f32[batch,4,past,16] "past_key_values.0.key"
  init %3: i64[1] "axes" = [2]
  %4 = Cast(%0) {to=1} : f32[batch,sequence]
  %5 = Unsqueeze(%4, %3) : f32[batch,sequence,1]
  %6 = Concat(%2, %2) {axis=2} : f32[batch,4,total,16]
  output %5: f32[batch,sequence,1] "logits"
  output %6: f32[batch,4,total,16] "present.0.key"
}
"""


def text_model(tpfuse, work, name, text):
	src = os.path.join(work, name + ".tpf")
	dst = os.path.join(work, name + ".onnx")
	with open(src, "w") as f:
		f.write(text)
	p = subprocess.run([tpfuse, "optimize", src, "-o", dst, "-O0"], capture_output=True, text=True)
	return dst if p.returncode == 0 else None


def prefill_memory(tpfuse, model):
	"""A prompt whose plan's memory does not fit (TPF_MEMORY_LIMIT) runs in
	halved chunks, giving the tokens of the whole prompt; the command says
	so.  --prefill-chunk needs the cache in place."""
	prompt = ",".join(str(3 + i % 100) for i in range(64))
	args = [model, "--prompt-ids", prompt, "--max-new-tokens", "6", "--suppress", "2", "--json"]
	rc, out, err = run(tpfuse, *args)
	whole = json.loads(out) if rc == 0 else None
	env = dict(os.environ, TPF_MEMORY_LIMIT="60000")
	rc2, out2, err2 = run(tpfuse, *args, env=env)
	small = json.loads(out2) if rc2 == 0 else None
	expect(whole and small and whole["stats"]["prefill_calls"] == 1 and small["stats"]["prefill_calls"] > 1
	       and small["tokens"] == whole["tokens"],
	       "a prefill within TPF_MEMORY_LIMIT: exit %d/%d, %s / %s %s" % (rc, rc2, out, out2, err2))
	rc, _, err = run(tpfuse, model, "--prompt-ids", "1,2", "--prefill-chunk", "1", "--no-in-place")
	expect(rc == 4 and "a prefill in chunks needs the cache in place" in err,
	       "--prefill-chunk without the cache in place: exit %d, %r" % (rc, err))


def profile(tpfuse, model):
	"""--profile: one table a plan, headed by the inputs it was built for;
	the kernels' shares add up to the plan's time; tokens as without it."""
	import re
	args = [model, "--prompt-ids", "5,6,7,8,9,10", "--max-new-tokens", "5", "--suppress", "2"]
	rc0, plain, _ = run(tpfuse, *args)
	rc, out, err = run(tpfuse, *args, "--profile", "--warmup", "1")
	tables = re.split(r"\n(?=plan \d+ of \d+: )", out)
	expect(rc0 == 0 and rc == 0 and tables[0].strip() == plain.strip(),
	       "--profile: the tokens first, as without it: exit %d/%d, %r / %r %s" % (rc0, rc, plain, out, err))
	heads = re.findall(r"^plan (\d+) of (\d+): (.*)$", out, re.M)
	expect([h[:2] for h in heads] == [("1", "2"), ("2", "2")] and "input_ids:i64[1,6]" in heads[0][2]
	       and "input_ids:i64[1,1]" in heads[1][2] and "past_sequence_length:i64[1]" in heads[1][2],
	       "--profile: the prefill's plan, then the decode step's, by their inputs: %r" % heads)
	# runs: the prefill's second (its first is left out), 4 decode steps x 2 - 1
	runs = [int(r) for r in re.findall(r"^profile: [0-9.]+ ms of device time per run \((\d+) runs", out, re.M)]
	expect(runs == [1, 7], "--profile: timed runs per plan %r, want [1, 7]: %s" % (runs, out))
	for t in tables[1:]:
		total = re.search(r"^profile: ([0-9.]+) ms", t, re.M)
		shares = [float(x) for x in re.findall(r"^  \S+ +\d+ +([0-9.]+) +[0-9.]+%$", t, re.M)]
		expect(total and shares and abs(sum(shares) - float(total.group(1))) <= 1e-3 + 1e-3 * len(shares)
		       and "cpu.matmul" in t and "slowest steps:" in t,
		       "--profile: the kernels' times add up to the plan's: %s" % t)
	rc, out, err = run(tpfuse, *args, "--profile", "--json")
	try:
		tokens = json.loads(out)["tokens"]
	except ValueError:
		tokens = None
	expect(rc == 0 and tokens and "plan 2 of 2: input_ids:i64[1,1]" in err and "plan " not in out,
	       "--profile --json: JSON on standard output, the tables on standard error: %r %r" % (out, err))
	rc, _, err = run(tpfuse, *args, "--profile", "--cuda-graph")
	expect(rc == 2 and "--profile times the steps of eager runs: not with --cuda-graph" in err,
	       "--profile with --cuda-graph: exit %d, %r" % (rc, err))


def refusals(tpfuse, model, work):
	def refused(args, code, text, what):
		rc, _, err = run(tpfuse, *args)
		expect(rc == code and text in err, "%s: exit %d (want %d), %r" % (what, rc, code, err))

	refused([model, "--prompt-ids", "1,2,128"], 1, "token id 128 is outside the vocabulary",
		"a token id past the vocabulary")
	refused([model, "--prompt-ids", "1,-2"], 2, "--prompt-ids needs token ids", "a negative id")
	refused([model, "--prompt-ids", ""], 2, "--prompt-ids needs token ids", "an empty prompt")
	refused([model, "--prompt-ids", ", ,"], 2, "--prompt-ids needs token ids", "a prompt of commas")
	refused([model], 2, "no prompt", "no prompt")
	refused(["--prompt-ids", "1"], 2, "no MODEL", "no model")
	refused([model, "--prompt-ids", "1", "--max-new-tokens", "0"], 2, "--max-new-tokens needs",
		"--max-new-tokens 0")
	refused([model, "--prompt-ids", "1", "--top-p", "1.5"], 2, "--top-p needs", "--top-p 1.5")
	refused([model, "--prompt-ids", "1", "--seed", "-1"], 2, "--seed needs", "--seed -1")
	refused([model, "--prompt-ids", "1", "--backend", "tpu"], 2, "--backend must be", "--backend tpu")
	refused([model, "--prompt-ids", "1", "--eos"], 2, "--eos needs a value", "--eos alone")
	refused([model, "--prompt-ids", "1", "--frobnicate"], 2, "unknown option", "an unknown option")
	refused([model, "--prompt-ids", "1", "--without", "no-such-pass"], 2, "--without: unknown pass 'no-such-pass'",
		"--without an unknown pass")
	refused([model, "--prompt-ids", "1", "--without", "fuse-swiglu,,cse"], 2, "--without needs pass names",
		"--without with an empty name")
	refused([model, "--prompt-ids", "1", "--without", "lower-gated-matmul"], 1,
		"the names before it do not run pass 'lower-gated-matmul'", "--without a pass the pipeline does not run")
	refused([model, "--prompt-ids", "1", "--suppress", "1,5000"], 1,
		"suppressed token id 5000 is outside the vocabulary (0 to", "a suppressed id outside the vocabulary")
	refused([model, "--prompt-ids", "1", "--suppress", ",".join(str(i) for i in range(128))], 1,
		"the suppressed ids are the whole vocabulary", "every id suppressed")
	refused([model, "--prompts", os.path.join(work, "missing.txt")], 3, "cannot read", "a missing --prompts")
	refused([os.path.join(work, "missing.onnx"), "--prompt-ids", "1"], 3, "", "a missing model")
	bad = os.path.join(work, "bad-prompts.txt")
	with open(bad, "w") as f:
		f.write("1 2 3\n4,x\n")
	refused([model, "--prompts", bad], 2, "bad-prompts.txt:2: not token ids", "a bad --prompts line")
	good = os.path.join(work, "prompts.txt")
	with open(good, "w") as f:
		f.write("26, 35, 35, 86, 75, 17, 20\n\n45 59 54 14\n")
	rc, out, _ = run(tpfuse, model, "--prompts", good, "--max-new-tokens", "2", "--suppress", "2")
	expect(rc == 0 and out == "prompt 0: 65 109\nprompt 1: 47 51\n", "--prompts FILE: %r" % out)
	variants = (
		("toy", TOY, "output 'present.0.key' is not the past 'past_key_values.0.key' extended by 1"),
		("no-present", TOY.replace('"present.0.key"', '"present.0.value"'),
		 "input 'past_key_values.0.key' has no present output"),
		("no-kv", TOY.replace('"past_key_values.0.key"', '"token_type_ids"'),
		 "input 'token_type_ids' is not a KV-cache model input"),
		("no-logits", TOY.replace('"logits"', '"scores"'), "the model has no output 'logits'"))
	for name, text, msg in variants:
		path = text_model(tpfuse, work, name, text)
		if not path:
			expect(False, "%s: could not write the model" % name)
			continue
		refused([path, "--prompt-ids", "0"], 1, msg, name)


def disagreeing_ranks(tpfuse, model, work):
	"""Rank 1's model with the embedding rows reversed (same structure, other
	tokens): the ranks' token check fails.  Needs the onnx package (else not
	run)."""
	try:
		import onnx
		from onnx import numpy_helper
	except ImportError:
		print("disagreeing ranks: not run (no onnx package)")
		return
	m = onnx.load(model)
	for t in m.graph.initializer:
		if t.name.endswith("embed_tokens.weight"):
			t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t)[::-1].copy(), t.name))
	onnx.save(onnx.load(model), os.path.join(work, "m.rank0.onnx"))
	onnx.save(m, os.path.join(work, "m.rank1.onnx"))
	rc, _, err = run(tpfuse, os.path.join(work, "m.rank{rank}.onnx"), "--prompt-ids", "1,2,3",
			 "--max-new-tokens", "4")
	expect(rc == 1 and "rank 0: error: ranks disagree on the generated tokens" in err,
	       "ranks with other weights: exit %d, %r" % (rc, err))


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", "tpfuse"))
	ap.add_argument("--work", default=os.path.join(os.environ.get("TPF_TEST_TMP", "/tmp"), "generate-check"))
	ap.add_argument("--corpus", default=os.path.join(HERE, "corpus", "kv"))
	ap.add_argument("--mpirun", help="run every command under MPIRUN -np 2 (two folders, sampling)")
	a = ap.parse_args(argv)
	os.makedirs(a.work, exist_ok=True)
	llama = os.path.join(a.corpus, "llama-dynamo-kv-fp32-w1", "model.onnx")
	if a.mpirun:
		LAUNCH[:] = [a.mpirun, "-np", "2"]
		for name in ("llama-dynamo-kv-fp32-w1", "qwen2moe-torchscript-kv-fp32-w1"):
			greedy(a.tpfuse, os.path.join(a.corpus, name))
		sampling(a.tpfuse, llama)
		disagreeing_ranks(a.tpfuse, llama, a.work)
		print("%d checks, %d failed" % (checks, len(failures)))
		return 1 if failures else 0
	folders = sorted(f for f in glob.glob(os.path.join(a.corpus, "*-fp32-w1")) if os.path.isdir(f))
	expect(len(folders) >= 16, "float32 folders under %s: %d" % (a.corpus, len(folders)))
	for folder in folders:
		for mode in MODES:
			greedy(a.tpfuse, folder, mode)
	sampling(a.tpfuse, llama)
	prefill_memory(a.tpfuse, llama)
	profile(a.tpfuse, llama)
	refusals(a.tpfuse, llama, a.work)
	print("%d checks, %d failed" % (checks, len(failures)))
	return 1 if failures else 0


if __name__ == "__main__":
	sys.exit(main())
