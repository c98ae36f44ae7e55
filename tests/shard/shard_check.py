#!/usr/bin/env python3
"""`tpfuse shard` end to end: single-device models into W rank graphs.

For every case (an example family's unsharded model from
examples/tpmodels.py, or a world-size-1 folder of the export corpus) and
every world size W:

  1. tpfuse shard MODEL --world-size W -o 'OUT/m.rank{rank}.onnx' --explain
  2. every rank graph passes onnx.checker and carries tp_rank/tp_world_size
  3. the ranks run under mpirun (tpfuse run --optimize --verify) and match
     the reference: an example's per-rank expected outputs, the corpus's
     unsharded float32 torch logits (within the manifest's tolerance).
     Where the CPU runtime refuses an op, the ranks run in onnxruntime with
     the collectives computed between runs (tests/corpus/ort_ranks.py).
  4. the default pipeline (tpfuse optimize --stats, rank 0) fuses what the
     manifest expects of the exported TP model (its `expected_fusions`),
     and the rank graph has as many AllReduce and AllGather nodes as the
     exported twin (the example's rank model, the corpus's -wW folder or,
     without one, its -w2 folder's counts).  With --vocab-parallel the
     embeddings are split too: one AllReduce more than the twin, and at
     least the fusions the manifest expects (the embedding's reduction may
     fuse with the first norm).

Prints one line per case; --markdown FILE writes the comparison table.
Exit status 1 when any case fails.

Usage:
  shard_check.py --tpfuse build/cli/tpfuse [--examples dense,hybrid,...]
                 [--corpus llama-torchscript-fp32-w1,...|all] [--world-sizes 2,4]
                 [--backend cpu|cuda] [--vocab-parallel] [--work DIR] [--markdown FILE]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "tests", "corpus"))
sys.path.insert(0, os.path.join(ROOT, "tests", "mpi"))
from compare import compare, self_check  # noqa: E402

# examples with FP8 QDQ inside, and the float32 bound of their CUDA runs
QUANTIZED = {"dense_fp8"}
GPU_QUANT_TOL = 1e-3

EXAMPLES = ["dense", "dense_fp8", "hybrid", "minimax_qk", "qwen_moe", "gdn_a2a"]
# The exported twin of gdn_a2a is context-parallel (AllToAll between
# context and head parallelism); sharding its single-device model gives
# head parallelism instead, so its twin's counts are not the reference.
DIFFERENT_LAYOUT = {"gdn_a2a": "its exported ranks are context-parallel (AllToAll); "
		    "tpfuse shard gives head parallelism"}

MPI_ENV = {
	"OMPI_ALLOW_RUN_AS_ROOT": "1",
	"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"OMPI_MCA_rmaps_base_oversubscribe": "1",
	"OMPI_MCA_btl_vader_single_copy_mechanism": "none",
	"NCCL_NVLS_ENABLE": "0",  # NVLink multicast stays off (shared GPUs)
}


def read_pb(path):
	t = onnx.TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return t.name, numpy_helper.to_array(t)


def run(cmd, env=None, timeout=600):
	e = dict(os.environ)
	e.update(MPI_ENV)
	if env:
		e.update(env)
	return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


# ------------------------------------------------------------------ counts

def op_counts(path):
	m = onnx.load(path, load_external_data=False)
	c = {"nodes": len(m.graph.node), "AllReduce": 0, "AllGather": 0, "AllToAll": 0}
	for n in m.graph.node:
		if n.domain == "com.microsoft" and n.op_type in c:
			c[n.op_type] += 1
	return c


def fusion_stats(tpfuse, path, work):
	r = run([tpfuse, "optimize", path, "-o", os.path.join(work, "opt.onnx"), "--stats"])
	if r.returncode:
		raise RuntimeError("optimize failed: " + r.stderr.strip()[-400:])
	st = {}
	for line in r.stdout.splitlines():
		parts = line.split()
		if len(parts) == 3:
			st[parts[0] + "." + parts[1]] = int(parts[2])
	canon = sum(v for k, v in st.items() if k.startswith("canonicalize-rmsnorm."))
	return {
		"norms": canon,
		"ar+norm": st.get("fuse-allreduce-rmsnorm.allreduce-residual-rmsnorm", 0) +
		st.get("fuse-allreduce-rmsnorm.allreduce-rmsnorm", 0),
		"+fp8": st.get("fuse-allreduce-rmsnorm-quant.fp8", 0),
		"sharded": st.get("fuse-sharded-rmsnorm.sharded-rmsnorm", 0),
		"qk-pairs": st.get("fuse-sharded-rmsnorm.qk-pairs-merged", 0),
		"gate": st.get("fuse-sigmoid-gate.sigmoid-gate", 0),
		"a2a-removed": st.get("coalesce-alltoall.alltoall-removed", 0),
	}


def expected_fusions(man):
	"""The manifest's expected fusions in fusion_stats' keys."""
	e = man["expected_fusions"]
	if "fuse-allreduce-rmsnorm" in e:  # the corpus's manifests
		ar = e["fuse-allreduce-rmsnorm"]
		sh = e.get("fuse-sharded-rmsnorm", {})
		return {"norms": e.get("rmsnorm", 0),
			"ar+norm": ar.get("allreduce-residual-rmsnorm", 0) + ar.get("allreduce-rmsnorm", 0),
			"sharded": sh.get("sharded-rmsnorm", 0), "qk-pairs": sh.get("qk-pairs-merged", 0),
			"gate": e.get("fuse-sigmoid-gate", {}).get("sigmoid-gate", 0)}
	return {"ar+norm": e.get("allreduce_rmsnorm", 0),
		"+fp8": e.get("allreduce_rmsnorm_followed_by_fp8_quant", 0),
		"sharded": e.get("sharded_rmsnorm", 0), "qk-pairs": e.get("sharded_rmsnorm_qk_pairs", 0),
		"gate": e.get("sigmoid_gate", 0)}


def fmt_fusions(d):
	return ", ".join("%s %d" % (k, v) for k, v in d.items() if v) or "none"


# ------------------------------------------------------------------ checks

def check_ranks(paths, world):
	try:
		import tpmodels
		tpmodels.register_ort_schemas()
	except Exception:  # noqa: BLE001  (the contrib schemas only help the checker)
		pass
	for r, p in enumerate(paths):
		onnx.checker.check_model(p)
		m = onnx.load(p, load_external_data=False)
		meta = {x.key: x.value for x in m.metadata_props}
		if meta.get("tp_rank") != str(r) or meta.get("tp_world_size") != str(world):
			raise RuntimeError("%s: metadata tp_rank=%s tp_world_size=%s" %
					   (p, meta.get("tp_rank"), meta.get("tp_world_size")))


def compare_dir(got_dir, want_dir, atol, rtol, bound=True):
	"""Max abs error of got_dir's outputs against want_dir's; raises on a
	value beyond atol + rtol * |want| (unless bound is False: the caller
	judges with another rule)."""
	worst = 0.0
	for f in sorted(os.listdir(want_dir)):
		if not f.startswith("output_"):
			continue
		name, want = read_pb(os.path.join(want_dir, f))
		_, got = read_pb(os.path.join(got_dir, f))
		want = want.astype(np.float64)
		got = got.astype(np.float64)
		if got.shape != want.shape:
			raise RuntimeError("output '%s': shape %s, expected %s" % (name, got.shape, want.shape))
		err = np.abs(got - want)
		worst = max(worst, float(err.max()) if err.size else 0.0)
		if bound and (err > atol + rtol * np.abs(want)).any():
			raise RuntimeError("output '%s': max abs error %.3g beyond %.3g + %.3g*|ref|" %
					   (name, float(err.max()), atol, rtol))
	return worst


def run_mpi(tpfuse, pattern, inputs, world, work, backend):
	out = os.path.join(work, "out{rank}")
	cmd = ["mpirun", "-np", str(world), tpfuse, "run", pattern, "--inputs", inputs, "--optimize",
	       "--verify", "--outputs", out, "--quiet"]
	if backend != "cpu":
		cmd += ["--backend", backend]
	r = run(cmd)
	return r.returncode, (r.stdout + r.stderr)[-1500:], out


def run_ort(pattern, world, feeds):
	import ort_ranks
	return ort_ranks.run_ranks([pattern.replace("{rank}", str(r)) for r in range(world)], feeds)


# ------------------------------------------------------------------ cases

class Case:
	def __init__(self, name, model, world, ref_dir, man, twin_counts, twin_fusions, kind):
		self.name, self.model, self.world = name, model, world
		self.ref_dir, self.man, self.kind = ref_dir, man, kind
		self.twin_counts, self.twin_fusions = twin_counts, twin_fusions


def example_cases(tpfuse, families, worlds, work):
	py = sys.executable
	cases = []
	for w in worlds:
		gen = os.path.join(work, "examples-w%d" % w)
		if not os.path.exists(os.path.join(gen, "done")):
			os.makedirs(gen, exist_ok=True)
			r = run([py, os.path.join(ROOT, "examples", "tpmodels.py"), "all", "--world-size", str(w),
				 "--out", gen, "--dtype", "float32"])
			if r.returncode:
				raise RuntimeError("tpmodels.py failed: " + r.stderr[-500:])
			open(os.path.join(gen, "done"), "w").close()
		for f in families:
			with open(os.path.join(gen, f + "_data", "manifest.json")) as fh:
				man = json.load(fh)
			twin = os.path.join(gen, f + ".rank0.onnx")
			cases.append(Case(f, os.path.join(gen, f + ".full.onnx"), w, os.path.join(gen, f + "_data"),
					  man, op_counts(twin), fusion_stats(tpfuse, twin, gen), "example"))
	return cases


def corpus_cases(tpfuse, names, worlds, work):
	corpus = os.path.join(ROOT, "tests", "corpus")
	if names == ["all"]:
		names = sorted(d for d in os.listdir(corpus) if d.endswith("-w1") and
			       os.path.exists(os.path.join(corpus, d, "manifest.json")))
	cases = []
	for n in names:
		folder = os.path.join(corpus, n)
		with open(os.path.join(folder, "manifest.json")) as fh:
			man = json.load(fh)
		for w in worlds:
			base = n[:-len("-w1")]
			twin_dir = next((os.path.join(corpus, base + s) for s in ("-w%d" % w, "-w2")
					 if os.path.exists(os.path.join(corpus, base + s, "manifest.json"))), None)
			tc = tf = None
			if twin_dir:
				tc = op_counts(os.path.join(twin_dir, "model.rank0.onnx"))
				if twin_dir.endswith("-w%d" % w):
					tf = fusion_stats(tpfuse, os.path.join(twin_dir, "model.rank0.onnx"), work)
				else:
					tc["note"] = "twin counts from %s" % os.path.basename(twin_dir)
			cases.append(Case(n, os.path.join(folder, "model.rank0.onnx"), w, folder, man, tc, tf,
					  "corpus"))
	return cases


def check_case(tpfuse, c, work, backend, vocab=False):
	"""A result dict; 'fail' holds the reasons (empty: passed)."""
	res = {"case": c.name, "world": c.world, "fail": [], "err": None, "how": ""}
	out = os.path.join(work, "%s-w%d%s" % (c.name, c.world, "-vocab" if vocab else ""))
	shutil.rmtree(out, ignore_errors=True)
	os.makedirs(out)
	pattern = os.path.join(out, "m.rank{rank}.onnx")
	r = run([tpfuse, "shard", c.model, "--world-size", str(c.world), "-o", pattern, "--explain"] +
		(["--vocab-parallel-embedding"] if vocab else []))
	with open(os.path.join(out, "explain.txt"), "w") as fh:
		fh.write(r.stderr)
	if r.returncode:
		res["fail"].append("shard exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
		return res
	paths = [pattern.replace("{rank}", str(i)) for i in range(c.world)]
	try:
		check_ranks(paths, c.world)
	except Exception as e:  # noqa: BLE001
		res["fail"].append("checker: %s" % str(e).splitlines()[0][:300])
	res["mine"] = op_counts(paths[0])
	res["twin"] = c.twin_counts
	# numerics
	if c.kind == "example":
		inputs = os.path.join(c.ref_dir, "rank{rank}")
		atol = rtol = 1e-4
	else:
		inputs = os.path.join(c.ref_dir, "test_data_set_0")
		tol = c.man.get("tolerance", {})
		atol, rtol = tol.get("atol", 1e-3), tol.get("rtol", 1e-3)
	rc, log, outs = (None, "", None)
	if shutil.which("mpirun"):
		rc, log, outs = run_mpi(tpfuse, pattern, inputs, c.world, out, backend)
	try:
		if rc == 0:
			res["how"] = "mpirun" + ("" if backend == "cpu" else " " + backend)
			errs = []
			# FP8 QDQ inside the graph on the GPU: its FP8 GEMMs keep fewer
			# accumulator bits, and a value on an fp8 rounding boundary moves
			# one step in the next quantization: tests/mpi/compare.py's
			# quantized rule at the GPU bound (as tests/gpu/gpu_models.py)
			quant = c.kind == "example" and backend != "cpu" and c.name in QUANTIZED
			for r_ in range(c.world if c.kind == "example" else 1):
				ref = os.path.join(c.ref_dir, "rank%d" % r_) if c.kind == "example" else inputs
				got = outs.replace("{rank}", str(r_))
				errs.append(compare_dir(got, ref, atol, rtol, bound=not quant))
				if quant and not (compare(got, ref, GPU_QUANT_TOL, GPU_QUANT_TOL, quiet=True, quantized=True)
						  and self_check(got, ref, GPU_QUANT_TOL, GPU_QUANT_TOL, quantized=True)):
					raise RuntimeError("rank %d: outside the quantized bound (tests/mpi/compare.py)" % r_)
			res["err"] = max(errs)
		elif c.kind == "corpus" and (rc is None or rc == 4):
			feeds = {}
			for i in c.man["inputs"]:
				feeds[i["name"]] = read_pb(os.path.join(c.ref_dir, i["file"]))[1]
			got = run_ort(pattern, c.world, feeds).astype(np.float64)
			want = read_pb(os.path.join(c.ref_dir, c.man["outputs"][0]["file"]))[1].astype(np.float64)
			err = np.abs(got - want)
			res["err"] = float(err.max())
			res["how"] = "onnxruntime (the CPU runtime refuses an op)" if rc == 4 else "onnxruntime"
			if (err > atol + rtol * np.abs(want)).any():
				res["fail"].append("logits: max abs error %.3g" % res["err"])
		else:
			res["fail"].append("run exit %s: %s" % (rc, log.strip()[-400:]))
	except Exception as e:  # noqa: BLE001
		res["fail"].append(str(e).splitlines()[0][:300])
	# fusions and collectives
	try:
		res["fusions"] = fusion_stats(tpfuse, paths[0], out)
	except Exception as e:  # noqa: BLE001
		res["fail"].append(str(e))
		return res
	res["expected"] = expected_fusions(c.man)
	res["twin_fusions"] = c.twin_fusions
	res["layout"] = DIFFERENT_LAYOUT.get(c.name)
	if not res["layout"]:
		for k, v in res["expected"].items():
			if k == "norms" and c.kind == "example":
				continue
			got = res["fusions"].get(k, 0)
			if got != v and not (vocab and got > v):
				res["fail"].append("fusion %s: %d, the manifest expects %d" % (k, got, v))
		if c.twin_counts:
			for k in ("AllReduce", "AllGather"):
				want = c.twin_counts[k] + (1 if vocab and k == "AllReduce" else 0)
				if res["mine"][k] != want:
					res["fail"].append("%d %s, the exported twin has %d%s" %
							   (res["mine"][k], k, c.twin_counts[k],
							    " (+1 for the embedding)" if vocab else ""))
	return res


def line(res):
	m, t = res.get("mine"), res.get("twin")
	s = "%-34s W=%d  " % (res["case"], res["world"])
	if m:
		s += "nodes %d" % m["nodes"]
		if t:
			s += "/%d" % t["nodes"]
		s += "  AR %d  AG %d" % (m["AllReduce"], m["AllGather"])
		if t:
			s += " (twin %d, %d)" % (t["AllReduce"], t["AllGather"])
	if res.get("err") is not None:
		s += "  max err %.2g" % res["err"]
	if res.get("fusions"):
		s += "  fusions: %s" % fmt_fusions(res["fusions"])
	s += "  " + ("ok" if not res["fail"] else "FAIL: " + "; ".join(res["fail"]))
	return s


def markdown(results, path):
	rows = ["| model | W | nodes (sharded / twin) | AllReduce | AllGather | fusions (sharded) | "
		"fusions (twin) | max err vs reference | run | result |",
		"| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | --- | --- |"]
	for r in results:
		m, t = r.get("mine") or {}, r.get("twin") or {}
		nodes = "%s / %s" % (m.get("nodes", "?"), t.get("nodes", "-"))
		ar = "%s / %s" % (m.get("AllReduce", "?"), t.get("AllReduce", "-"))
		ag = "%s / %s" % (m.get("AllGather", "?"), t.get("AllGather", "-"))
		tf = fmt_fusions(r["twin_fusions"]) if r.get("twin_fusions") else "-"
		note = r.get("layout") or (t.get("note") if t else "") or ""
		rows.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
			r["case"], r["world"], nodes, ar, ag, fmt_fusions(r.get("fusions") or {}), tf,
			"%.2g" % r["err"] if r.get("err") is not None else "-", r.get("how", ""),
			("ok" if not r["fail"] else "FAIL: " + "; ".join(r["fail"])) + (" (%s)" % note if note else "")))
	with open(path, "w") as fh:
		fh.write("\n".join(rows) + "\n")


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
	ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", "tpfuse"))
	ap.add_argument("--examples", default="", help="families, or 'all'")
	ap.add_argument("--corpus", default="", help="world-size-1 folders, or 'all'")
	ap.add_argument("--world-sizes", default="2,4")
	ap.add_argument("--backend", default="cpu")
	ap.add_argument("--vocab-parallel", action="store_true",
			help="split the embeddings over the vocabulary too")
	ap.add_argument("--work", default="")
	ap.add_argument("--markdown", default="")
	a = ap.parse_args(argv)
	worlds = [int(x) for x in a.world_sizes.split(",") if x]
	work = a.work or tempfile.mkdtemp(prefix="tpf-shard-")
	os.makedirs(work, exist_ok=True)
	cases = []
	if a.examples:
		fams = EXAMPLES if a.examples == "all" else a.examples.split(",")
		cases += example_cases(a.tpfuse, fams, worlds, work)
	if a.corpus:
		cases += corpus_cases(a.tpfuse, a.corpus.split(","), worlds, work)
	if not cases:
		ap.error("nothing to check: give --examples and/or --corpus")
	results = []
	for c in cases:
		res = check_case(a.tpfuse, c, work, a.backend, a.vocab_parallel)
		results.append(res)
		print(line(res), flush=True)
	if a.markdown:
		markdown(results, a.markdown)
	failed = sum(1 for r in results if r["fail"])
	print("%d cases, %d failed" % (len(results), failed))
	if not a.work:
		shutil.rmtree(work, ignore_errors=True)
	return 1 if failed else 0


if __name__ == "__main__":
	sys.exit(main())
