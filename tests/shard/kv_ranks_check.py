#!/usr/bin/env python3
"""`tpfuse shard` on the KV-cache exports (tests/corpus/kv/*/), run as ranks.

For every folder and world size W:

  1. tpfuse shard MODEL --world-size W -o 'OUT/m.rank{rank}.onnx' --explain
     --stats; in every rank model a layer's past key and value (and their
     presents) are split alike: on the KV-head axis, kv_heads / W each, with
     their metadata entries (tp_split_input:NAME, tp_split_output:NAME)
     whenever W divides the KV heads, else whole (the k/v projections
     stay replicated); the only AllGather is
     the LM head's (norms over all heads excepted, MiniMax-M2's Q/K norms)
  2. mpirun -np W tpfuse generate on the rank models: the greedy tokens of
     every case of reference_tokens.json, exactly, with the cache in place
     (the default), and at the world sizes of step 3 the batch case with
     the cache copied (--no-in-place)
  3. mpirun -np W tpfuse run on the rank models with the single-device
     test_data_set_1 (full caches, which each rank cuts to its part): the
     logits match the single-device expected outputs, each rank's presents
     match its part of the expected presents (positions where attention_mask
     is 1; the manifest's tolerance)

Usage:
  kv_ranks_check.py --tpfuse build/cli/tpfuse [--mpirun mpirun]
                    [--models llama-dynamo,qwen3-torchscript,...|all (default)]
                    [--world-sizes 2,4] [--run-world-sizes 2] [--work DIR]

Exit status: 0 all passed, 1 a failure.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(os.path.dirname(HERE), "corpus", "kv")
MPI_ENV = {
	"OMPI_ALLOW_RUN_AS_ROOT": "1",
	"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"OMPI_MCA_rmaps_base_oversubscribe": "1",
	"OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}
failures = []
checks = 0


def expect(cond, what):
	global checks
	checks += 1
	if not cond:
		failures.append(what)
		print("FAIL: " + what, flush=True)
	return cond


def run(cmd, timeout=300):
	env = dict(os.environ)
	env.update(MPI_ENV)
	p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
	return p.returncode, p.stdout, p.stderr


def read_pb(path):
	t = onnx.TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return numpy_helper.to_array(t)


def split_rule(text):
	"""'axis=A world=W [sections=S1,...]' -> (axis, world, sections)."""
	kv = dict(item.split("=", 1) for item in text.split())
	secs = [int(x) for x in kv["sections"].split(",")] if "sections" in kv else None
	return int(kv["axis"]), int(kv["world"]), secs


def rank_part(full, rule, rank):
	axis, world, secs = rule
	secs = secs or [full.shape[axis]]
	parts, off = [], 0
	for s in secs:
		blk = s // world
		parts.append(np.take(full, range(off + rank * blk, off + (rank + 1) * blk), axis=axis))
		off += s
	return np.concatenate(parts, axis=axis)


def check_rank_models(name, folder, out, world, stats):
	"""Step 1: the caches' splits, their metadata, the collectives."""
	kv_heads = json.load(open(os.path.join(folder, "manifest.json")))["config"]["num_key_value_heads"]
	for r in range(world):
		m = onnx.load(out % r, load_external_data=False)
		meta = {p.key: p.value for p in m.metadata_props}
		expect(meta.get("tp_rank") == str(r) and meta.get("tp_world_size") == str(world),
		       "%s W=%d rank %d: tp_rank/tp_world_size %r" % (name, world, r, meta))
		gathers = sum(n.op_type == "AllGather" for n in m.graph.node)
		norms = stats.get("allgather-inserted", 0) - 1
		expect(gathers == 1 + max(norms, 0) and (norms == 0 or "minimax" in name),
		       "%s W=%d rank %d: %d AllGather nodes (stats %s)" % (name, world, r, gathers, stats))
		heads = {}
		for io, key in ((m.graph.input, "tp_split_input:"), (m.graph.output, "tp_split_output:")):
			for v in io:
				if not (v.name.startswith("past_key_values.") or v.name.startswith("present.")):
					continue
				d = v.type.tensor_type.shape.dim[1].dim_value
				layer = v.name.split(".")[-2]
				heads.setdefault(layer, set()).add(d)
				rule = meta.get(key + v.name)
				if d == kv_heads:
					expect(rule is None, "%s W=%d: whole %s has metadata %r" % (name, world, v.name, rule))
				else:
					expect(d * world == kv_heads and rule is not None and
					       split_rule(rule) == (1, world, [kv_heads]),
					       "%s W=%d: %s has %d heads, metadata %r" % (name, world, v.name, d, rule))
		for layer, ds in heads.items():
			expect(len(ds) == 1, "%s W=%d layer %s: its caches hold %s heads" % (name, world, layer, ds))
			# KV heads that divide by W split, as the k/v projections do
			expect(kv_heads % world or ds == {kv_heads // world},
			       "%s W=%d layer %s: caches of %s heads, not %d" %
			       (name, world, layer, ds, kv_heads // world))
		if r == 0:
			split = sum(1 for k in meta if k.startswith("tp_split_input:"))
			print("%s W=%d: %d of %d caches split, %d AllGather" %
			      (name, world, split, 2 * len(heads), gathers), flush=True)


def generate(tpfuse, mpirun, name, folder, model, world, extra=(), cases=None):
	"""Step 2: the reference's greedy tokens, every case (or the first
	`cases`), with the cache in place (the default) or as `extra` says."""
	ref = json.load(open(os.path.join(folder, "reference_tokens.json")))
	suppress = ["--suppress", ",".join(map(str, ref["suppressed_token_ids"]))] \
		if ref["suppressed_token_ids"] else []
	for case in ref["cases"][:cases]:
		prompts = []
		for ids, mask in zip(case["input_ids"], case["attention_mask"]):
			prompts += ["--prompt-ids", ",".join(str(t) for t, k in zip(ids, mask) if k)]
		want = case["generated_ids"]
		rc, out, err = run([mpirun, "-np", str(world), tpfuse, "generate", model, *prompts,
				    "--max-new-tokens", str(len(want[0])), *suppress, "--json", *extra])
		what = "%s W=%d generate %s%s" % (name, world, case["name"], " " + " ".join(extra) if extra else "")
		if expect(rc == 0, "%s: exit %d: %s" % (what, rc, err.strip()[-600:])):
			got = json.loads(out)["tokens"]
			expect(got == want, "%s: tokens %s, reference %s" % (what, got, want))


def run_decode(tpfuse, mpirun, name, folder, model, out_dir, world):
	"""Step 3: the decode step with the single-device inputs."""
	man = json.load(open(os.path.join(folder, "manifest.json")))
	step = next(s for s in man["test_data"] if s["set"] == "test_data_set_1")
	tol = man["tolerance"]
	data = os.path.join(folder, "test_data_set_1")
	shutil.rmtree(out_dir, ignore_errors=True)
	rc, _, err = run([mpirun, "-np", str(world), tpfuse, "run", model, "--inputs", data,
			  "--outputs", os.path.join(out_dir, "{rank}"), "--quiet"])
	if not expect(rc == 0, "%s W=%d run: exit %d: %s" % (name, world, rc, err.strip()[-600:])):
		return
	mask = read_pb(os.path.join(folder, step["inputs"][1]["file"])).astype(bool)
	for r in range(world):
		meta = {p.key: p.value for p in onnx.load(model.replace("{rank}", str(r)),
							  load_external_data=False).metadata_props}
		for i, o in enumerate(step["outputs"]):
			want = read_pb(os.path.join(folder, o["file"]))
			got = read_pb(os.path.join(out_dir, str(r), "output_%d.pb" % i))
			rule = meta.get("tp_split_output:" + o["name"])
			if rule:
				want = rank_part(want, split_rule(rule), r)
			what = "%s W=%d rank %d output %s" % (name, world, r, o["name"])
			if not expect(got.shape == want.shape, "%s: shape %s, want %s" % (what, got.shape, want.shape)):
				continue
			if o["name"] != "logits":  # presents: the positions the mask keeps
				sel = mask[:, None, :, None] & np.ones(got.shape, bool)
				got, want = got[sel], want[sel]
			err_abs = float(np.max(np.abs(got - want))) if got.size else 0.0
			expect(np.allclose(got, want, atol=tol["atol"], rtol=tol["rtol"]),
			       "%s: max error %g" % (what, err_abs))


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
	ap.add_argument("--tpfuse", required=True)
	ap.add_argument("--mpirun", default="mpirun")
	ap.add_argument("--models", default="all")
	ap.add_argument("--world-sizes", default="2,4")
	ap.add_argument("--run-world-sizes", default="2", help="world sizes of step 3")
	ap.add_argument("--work", default=os.path.join(os.environ.get("TPF_TEST_TMP", "/tmp"), "kv-ranks"))
	a = ap.parse_args(argv)
	if a.models == "all":
		folders = sorted(glob.glob(os.path.join(CORPUS, "*-kv-fp32-w1")))
	else:
		folders = [os.path.join(CORPUS, m + "-kv-fp32-w1") for m in a.models.split(",")]
	runs = [int(w) for w in a.run_world_sizes.split(",") if w]
	for folder in folders:
		name = os.path.basename(folder).replace("-kv-fp32-w1", "")
		for world in (int(w) for w in a.world_sizes.split(",")):
			work = os.path.join(a.work, "%s-w%d" % (name, world))
			shutil.rmtree(work, ignore_errors=True)
			model = os.path.join(work, "m.rank{rank}.onnx")
			rc, out, err = run([a.tpfuse, "shard", os.path.join(folder, "model.onnx"), "-w",
					    str(world), "-o", model, "--explain", "--stats"])
			if not expect(rc == 0, "%s W=%d shard: exit %d: %s" % (name, world, rc, err.strip())):
				continue
			stats = {}
			for line in out.splitlines():
				parts = line.split()
				if len(parts) == 2 and parts[1].isdigit():
					stats[parts[0]] = int(parts[1])
			check_rank_models(name, folder, model.replace("{rank}", "%d"), world, stats)
			generate(a.tpfuse, a.mpirun, name, folder, model, world)
			if world in runs:
				# the cache copied from step to step: the batch case
				generate(a.tpfuse, a.mpirun, name, folder, model, world, ("--no-in-place",), 1)
				run_decode(a.tpfuse, a.mpirun, name, folder, model, os.path.join(work, "out"), world)
	print("%d checks, %d failed" % (checks, len(failures)))
	return 1 if failures else 0


if __name__ == "__main__":
	sys.exit(main())
