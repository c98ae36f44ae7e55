#!/usr/bin/env python3
"""Where tpfuse stands on the export corpus (tests/corpus/*/manifest.json).

For every model folder:

  check     tpfuse check on every rank file
  optimize  tpfuse optimize --stats --rank r --world-size W on every rank;
            rank 0's fusion counters against the manifest's expected_fusions
  run       mpirun -np W tpfuse run 'model.rank{rank}.onnx'
            --inputs test_data_set_0 --optimize --verify --outputs ...;
            rank 0's logits against test_data_set_0/output_0.pb (the
            unsharded float32 torch model) within the manifest's tolerance

The runtime names only the first op it refuses, so the op types of every
model are also probed one by one: a one-node model cut out of a corpus model
(its constant inputs kept, the others graph inputs of the inferred types,
unknown dims set to 1) goes through `tpfuse plan --random-inputs`; an op is
"refused" when the plan says it is not supported by the runtime (or has no
kernel for it).

Prints a table (Markdown with --markdown FILE) and the op inventory, then a
last line 'N passed, N failed, N skipped'.  Exit 1 when a model evaluated
fails a step or its fusion counts differ from the manifest; 0 otherwise.

  status.py [--tpfuse build/cli/tpfuse] [--corpus tests/corpus]
            [--only SUBSTR[,SUBSTR..]] [--world-sizes 1,2,4] [--runnable-only]
            [--no-run] [--known-failures FILE] [--quick] [--list]
            [--markdown FILE] [--keep DIR] [--timeout S]

Float32 folders are checked at atol = rtol = 1e-4 (FP32_TOL; the
manifest's 1e-3 is the generator's bound; measured at most 7.6e-6), float16
and bfloat16 folders at the manifest's tolerance.

--runnable-only evaluates only the models none of whose op types the
runtime refuses, and counts a run the runtime refuses as unsupported (exit
4) as skipped when everything before it passed.
--fusions-informative reports fusion counts that differ from the manifest
without failing.
--known-failures FILE (the CI form, with tests/corpus/known-failures.txt):
a model listed there that fails is reported as a known failure with the
listed reason and does not fail; a listed model that passes is reported as
'fixed, remove it from FILE' (still exit 0); a model not listed that fails
fails.  --quick skips the op probes and runs check and optimize on rank 0
only (the run with --optimize --verify still optimizes every rank);
--world-sizes 1,2 selects folders by W; --list prints the selected folders
and the commands the run step would start, and runs nothing.
Needs onnx and numpy (the project's .venv), mpirun for W > 1; never torch.
"""
import argparse
import collections
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

try:
	import numpy as np
	import onnx
	from onnx import helper, numpy_helper, shape_inference
except ImportError as e:  # the CI form exits "skipped" without them
	if __name__ == "__main__":
		print("%s: skipped (needs onnx and numpy)" % e)
		sys.exit(77)
	raise

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MS = "com.microsoft"
FUSION_PASSES = ("fuse-allreduce-rmsnorm", "fuse-sharded-rmsnorm", "fuse-sigmoid-gate")
SHORT = {"allreduce-residual-rmsnorm": "ar+res+norm", "allreduce-rmsnorm": "ar+norm",
	 "sharded-rmsnorm": "sharded", "qk-pairs-merged": "qk-pairs", "sigmoid-gate": "gate"}
REFUSED_RE = re.compile(r"op (\S+) is not supported by the runtime|no \w+ kernel for (this op|dtype \w+)"
			r"|runtime cannot run \d+ nodes? of this model")
# the runtime's list of what it cannot run: "  Conv (f32): 1 node, the first ..."
REFUSED_LINE_RE = re.compile(r"^\s+(?:([\w.]+)::)?(\w+) \((\w+)\): \d+ nodes?,", re.M)
# float32 logits against the unsharded torch model: both sum in another
# order only; measured at most 7.6e-6 over the corpus (STATUS.md), so 1e-4
# keeps a margin of 10 and catches a real error the manifest's 1e-3 would pass
FP32_TOL = 1e-4


def tolerance(man):
	"""(atol, rtol) for a folder's logits: the manifest's, float32 tightened to FP32_TOL."""
	tol = man["tolerance"]
	atol, rtol = tol["atol"], tol["rtol"]
	if man.get("dtype") == "fp32":
		atol, rtol = min(atol, FP32_TOL), min(rtol, FP32_TOL)
	return atol, rtol


def read_known_failures(path):
	"""{folder name: reason} from a known-failures file: 'NAME  reason' per
	line, '#' comments and blank lines ignored."""
	known = collections.OrderedDict()
	if not path:
		return known
	with open(path) as f:
		for line in f:
			line = line.split("#", 1)[0].strip()
			if not line:
				continue
			parts = line.split(None, 1)
			known[parts[0]] = parts[1].strip() if len(parts) > 1 else "(no reason given)"
	return known


def load_folders(corpus, only="", world_sizes=None):
	"""[(folder, manifest)] of the complete folders, sorted by name."""
	folders = []
	for mp in sorted(glob.glob(os.path.join(corpus, "*", "manifest.json"))):
		folder = os.path.dirname(mp)
		if only and not any(s in os.path.basename(folder) for s in only.split(",")):
			continue
		with open(mp) as f:
			man = json.load(f)
		if world_sizes and man["world_size"] not in world_sizes:
			continue
		folders.append((folder, man))
	return folders


def run_command(tpfuse, man, out_dir, extra, timeout):
	"""The argv that runs a folder's ranks (from inside the folder): mpirun
	-np W for W > 1, tpfuse alone for W = 1."""
	w = man["world_size"]
	cmd = [tpfuse, "run", "model.rank{rank}.onnx", "--inputs", "test_data_set_0",
	       "--outputs", os.path.join(out_dir, "rank{rank}"), "--quiet",
	       "--timeout", str(min(timeout, 120))] + list(extra)
	if w > 1:
		cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(w)] + cmd
	return cmd


def compare_logits(folder, man, out_dir):
	"""(ok, max abs error, message) of rank 0's logits against the stored torch outputs."""
	got = load_tensor(os.path.join(out_dir, "rank0", "output_0.pb")).astype(np.float32)
	want = load_tensor(os.path.join(folder, man["outputs"][0]["file"])).astype(np.float32)
	if got.shape != want.shape:
		return False, None, "shape %s, want %s" % (list(got.shape), list(want.shape))
	atol, rtol = tolerance(man)
	err = float(np.abs(got - want).max())
	okv = bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want)))
	return okv, err, "ok" if okv else "MISMATCH (atol %g rtol %g)" % (atol, rtol)


def mpi_env():
	env = dict(os.environ)
	env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
		   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
	return env


def sh(cmd, timeout, cwd=None, env=None):
	try:
		p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
		return p.returncode, p.stdout, p.stderr
	except subprocess.TimeoutExpired:
		return -1, "", "timed out after %d s" % timeout


def first_error(text):
	lines = text.splitlines()
	for i, line in enumerate(lines):
		if "error:" in line:
			msg = line.split("error:", 1)[1].strip()
			if msg.endswith(":"):      # a list follows on indented lines
				more = []
				for nxt in lines[i + 1:]:
					if not nxt.startswith("  "):
						break
					more.append(nxt.strip())
				msg += " " + "; ".join(more)
			return msg
	lines = [ln for ln in text.splitlines() if ln.strip()]
	return lines[0].strip() if lines else ""


def load_tensor(path):
	t = onnx.TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return numpy_helper.to_array(t)


def op_key(domain, op_type):
	return "%s::%s" % (domain or "ai.onnx", op_type)


# ------------------------------------------------------------------ op probes


def _type_of(vi):
	tt = vi.type.tensor_type
	if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
		return None
	dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
	return tt.elem_type, dims


def probe_model(model, node):
	"""A one-node model running `node` of `model`, or None if an input's type
	is unknown."""
	g = model.graph
	inits = {t.name: t for t in g.initializer}
	consts = {}
	for n in g.node:
		if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
			for a in n.attribute:
				if a.name == "value":
					consts[n.output[0]] = a.t
	vis = {v.name: v for v in list(g.value_info) + list(g.input) + list(g.output)}
	new_inits, new_inputs = [], []
	for name in node.input:
		if not name or name in [i.name for i in new_inputs] or name in [t.name for t in new_inits]:
			continue
		if name in inits:
			new_inits.append(inits[name])
		elif name in consts:
			t = onnx.TensorProto()
			t.CopyFrom(consts[name])
			t.name = name
			new_inits.append(t)
		else:
			vi = vis.get(name)
			ty = _type_of(vi) if vi is not None else None
			if ty is None:
				return None
			new_inputs.append(helper.make_tensor_value_info(name, ty[0], ty[1]))
	outs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
		for o in node.output if o]
	n2 = onnx.NodeProto()
	n2.CopyFrom(node)
	graph = helper.make_graph([n2], "probe", new_inputs, outs, new_inits)
	m = helper.make_model(graph, opset_imports=list(model.opset_import))
	m.ir_version = model.ir_version
	return m


def probe_ops(tpfuse, folders, workdir, timeout):
	"""{op key: (status, detail)} with status 'runs', 'refused' or 'unknown'."""
	result = {}
	todo = collections.OrderedDict()
	for folder, man in folders:
		for key in man["op_counts"]:
			todo.setdefault(key, []).append((folder, man))
	for key, where in todo.items():
		status, detail = "unknown", "no probe could be built"
		for folder, man in where[:4]:
			path = os.path.join(folder, "model.rank0.onnx")
			model = onnx.load(path)
			try:
				model = shape_inference.infer_shapes(model)
			except Exception:  # noqa: BLE001
				pass
			nodes = [n for n in model.graph.node if op_key(n.domain, n.op_type) == key]
			for node in nodes[:3]:
				pm = probe_model(model, node)
				if pm is None:
					continue
				p = os.path.join(workdir, "probe.onnx")
				onnx.save(pm, p)
				w = str(man["world_size"])
				rc, out, err = sh([tpfuse, "plan", p, "--random-inputs", "0", "--rank", "0",
						   "--world-size", w], timeout)
				text = out + err
				if rc == 0:
					status, detail = "runs", ""
					break
				if REFUSED_RE.search(text):
					status, detail = "refused", first_error(text)
					break
				status, detail = "accepted", "probe stopped elsewhere: " + first_error(text)
			if status in ("runs", "refused"):
				break
		result[key] = (status, detail)
	return result


# ------------------------------------------------------------------ one model


def parse_stats(text):
	stats = {}
	for line in text.splitlines():
		parts = line.split()
		if len(parts) == 3 and parts[2].lstrip("-").isdigit():
			stats.setdefault(parts[0], {})[parts[1]] = int(parts[2])
	return stats


def fusion_compare(expected, stats):
	"""[(short name, got, want)] for every expected fusion counter."""
	rows = []
	for p in FUSION_PASSES:
		for c, want in expected.get(p, {}).items():
			got = stats.get(p, {}).get(c)
			rows.append((SHORT.get(c, c), got, want))
	# cast-rmsnorm-cast rewrites a norm already counted (its Casts go in)
	norms = sum(v for k, v in stats.get("canonicalize-rmsnorm", {}).items()
		    if k != "cast-rmsnorm-cast") if stats else None
	rows.append(("norms", norms, expected.get("rmsnorm")))
	return rows


def evaluate(folder, man, args, workdir, refused_ops):
	name = os.path.basename(folder)
	w = man["world_size"]
	row = {"model": name, "nodes": man["nodes"], "W": w, "ok": True, "notes": []}
	row["refused"] = sorted(k for k in man["op_counts"] if refused_ops.get(k, ("",))[0] == "refused")
	ranks = [os.path.join(folder, "model.rank%d.onnx" % r) for r in range(1 if args.quick else w)]
	# check
	bad = []
	for p in ranks:
		rc, out, err = sh([args.tpfuse, "check", p], args.timeout)
		if rc != 0:
			bad.append("rank %s: %s" % (p[-6], first_error(out + err)))
	row["check"] = "ok" if not bad else "FAIL"
	if bad:
		row["ok"] = False
		row["notes"].append("check " + bad[0])
	# optimize
	stats0 = None
	opt_fail = []
	for r, p in enumerate(ranks):
		rc, out, err = sh([args.tpfuse, "optimize", p, "-o", os.path.join(workdir, "opt.rank%d.onnx" % r),
				   "--stats", "--rank", str(r), "--world-size", str(w)], args.timeout)
		if rc != 0:
			opt_fail.append("rank %d: %s" % (r, first_error(out + err)))
		elif r == 0:
			stats0 = parse_stats(out)
	row["optimize"] = "ok" if not opt_fail else "FAIL"
	if opt_fail:
		row["ok"] = False
		row["notes"].append("optimize " + opt_fail[0])
	fus = fusion_compare(man["expected_fusions"], stats0 or {})
	row["fusions"] = fus
	row["fusions_ok"] = stats0 is not None and all(g == wnt for _, g, wnt in fus)
	if stats0 is not None and not row["fusions_ok"] and not args.fusions_informative:
		row["ok"] = False
		row["notes"].append("fusions " + fmt_fusions(fus))
	# run
	row["run"], row["err"] = "-", None
	if args.no_run:
		return row
	out_dir = os.path.join(workdir, "out")
	shutil.rmtree(out_dir, ignore_errors=True)
	if w > 1 and not shutil.which("mpirun"):
		row["run"] = "skipped (no mpirun)"
		return row
	cmd = run_command(args.tpfuse, man, out_dir, ["--optimize", "--verify"], args.timeout)
	rc, out, err = sh(cmd, args.timeout * 2, cwd=folder, env=mpi_env())
	text = out + err
	for dom, op, dt in REFUSED_LINE_RE.findall(text):
		key = op_key(dom, op)
		if key not in row["refused"]:
			row["refused"].append(key)
	if rc != 0:
		row["ok"] = False
		msg = first_error(text)
		msg = re.sub(r"^tpfuse: rank \d+: error: ", "", msg)
		if rc == 4:
			row["unsupported"] = True
		if rc == 5:
			row["run"] = "verify mismatch (exit 5)"
		else:
			row["run"] = "exit %d" % rc
		row["notes"].append("run: " + msg)
		return row
	okv, row["err"], row["run"] = compare_logits(folder, man, out_dir)
	if not okv:
		row["ok"] = False
		row["notes"].append("logits: %s%s" % (row["run"], "" if row["err"] is None else
						     ", off by %.3g" % row["err"]))
	return row


# -------------------------------------------------------------------- report


def fmt_fusions(fus):
	parts = []
	for n, g, w in fus:
		if w == 0 and (g == 0 or g is None) and n != "norms":
			continue
		mark = "" if g == w else " ✗"
		parts.append("%s %s/%s%s" % (n, "?" if g is None else g, w, mark))
	return ", ".join(parts)


def table(rows):
	out = ["| model | nodes | check | optimize | fusions (got/expected) | ops the runtime cannot run | run | max err |",
	       "| --- | ---: | --- | --- | --- | --- | --- | ---: |"]
	for r in rows:
		if r.get("skipped"):
			out.append("| %s | %d | | | | %s | skipped | |" % (r["model"], r["nodes"],
								      ", ".join(x.split("::")[1] for x in r["refused"])))
			continue
		out.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
			r["model"], r["nodes"], r["check"], r["optimize"], fmt_fusions(r["fusions"]),
			", ".join(x.split("::")[1] if x.startswith("ai.onnx") else x for x in r["refused"]) or "-",
			r["run"], "" if r["err"] is None else "%.2g" % r["err"]))
	return "\n".join(out)


def inventory(folders, probes):
	ops = collections.OrderedDict()
	for folder, man in folders:
		opsets = man["opsets"]
		for k, c in man["op_counts"].items():
			dom = k.split("::")[0]
			e = ops.setdefault(k, {"count": 0, "models": 0, "opsets": set(), "exporters": set()})
			e["count"] += c
			e["models"] += 1
			e["opsets"].add(opsets.get(dom, 0))
			e["exporters"].add(man["exporter"])
	out = ["| op (domain::type) | opsets | exporters | models | nodes (rank 0) | runtime |",
	       "| --- | --- | --- | ---: | ---: | --- |"]
	for k in sorted(ops, key=lambda k: (probes.get(k, ("unknown",))[0] != "refused", k)):
		e = ops[k]
		st, det = probes.get(k, ("unknown", ""))
		out.append("| %s | %s | %s | %d | %d | %s |" % (
			k, ",".join(str(v) for v in sorted(e["opsets"])), ", ".join(sorted(e["exporters"])),
			e["models"], e["count"], st if st != "accepted" else "accepted (%s)" % det[:80]))
	return "\n".join(out)


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", os.path.join(ROOT, "build", "cli", "tpfuse")))
	ap.add_argument("--corpus", default=HERE)
	ap.add_argument("--only", default="", help="comma list of substrings of folder names")
	ap.add_argument("--runnable-only", action="store_true",
			help="evaluate only models whose op types the runtime accepts")
	ap.add_argument("--no-run", action="store_true", help="check and optimize only")
	ap.add_argument("--fusions-informative", action="store_true",
			help="report fusion counts that differ from the manifest without failing")
	ap.add_argument("--markdown", help="write the tables to FILE")
	ap.add_argument("--keep", help="keep the work files in DIR")
	ap.add_argument("--timeout", type=int, default=120)
	ap.add_argument("--world-sizes", default="", help="comma list of W: only those folders")
	ap.add_argument("--known-failures", help="FILE: 'FOLDER reason' lines; those failing do not fail")
	ap.add_argument("--quick", action="store_true",
			help="no op probes; check and optimize rank 0 only")
	ap.add_argument("--list", action="store_true",
			help="print the selected folders and their run commands, run nothing")
	a = ap.parse_args(argv)
	a.tpfuse = os.path.abspath(a.tpfuse)
	ws = [int(x) for x in a.world_sizes.split(",") if x]
	folders = load_folders(a.corpus, a.only, ws)
	known = read_known_failures(a.known_failures)
	names = {os.path.basename(f) for f, _ in folders}
	all_names = {os.path.basename(f) for f, _ in load_folders(a.corpus)}
	stale = [k for k in known if k not in all_names]
	if stale:
		print("%s lists folders the corpus does not have: %s" % (a.known_failures, ", ".join(stale)))
		return 1
	if a.list:
		for folder, man in folders:
			name = os.path.basename(folder)
			print("%s (W=%d, %s)%s" % (name, man["world_size"], man["dtype"],
						   "  known failure: " + known[name] if name in known else ""))
			print("    cd %s && %s" % (os.path.relpath(folder), shlex.join(
				run_command(a.tpfuse, man, "OUT", ["--optimize", "--verify"], a.timeout))))
		print("%d folders" % len(folders))
		return 0
	if not os.path.exists(a.tpfuse):
		print("tpfuse not found at %s (--tpfuse)" % a.tpfuse)
		return 77
	if not folders:
		print("no model folders")
		return 77
	workdir = a.keep or tempfile.mkdtemp(prefix="tpf-corpus-")
	os.makedirs(workdir, exist_ok=True)
	try:
		probes = {} if a.quick else probe_ops(a.tpfuse, folders, workdir, a.timeout)
		refused = {k for k, v in probes.items() if v[0] == "refused"}
		rows = []
		passed = failed = skipped = known_failed = 0
		fixed = []
		for folder, man in folders:
			name = os.path.basename(folder)
			if a.runnable_only and refused & set(man["op_counts"]):
				rows.append({"model": name, "nodes": man["nodes"], "skipped": True,
					     "refused": sorted(refused & set(man["op_counts"]))})
				skipped += 1
				continue
			wd = os.path.join(workdir, name)
			os.makedirs(wd, exist_ok=True)
			r = evaluate(folder, man, a, wd, probes)
			rows.append(r)
			if a.runnable_only and r.get("unsupported") and r["check"] == "ok" and \
			   r["optimize"] == "ok" and (r["fusions_ok"] or a.fusions_informative):
				print("%s: skipped (the runtime cannot run it)" % name, flush=True)
				skipped += 1
				continue
			why = "" if r["ok"] else " (" + "; ".join(r["notes"])[:300] + ")"
			if name in known and r["ok"]:
				print("%s: ok: fixed, remove it from %s" % (name, a.known_failures), flush=True)
				fixed.append(name)
				passed += 1
			elif name in known:
				print("%s: known failure: %s%s" % (name, known[name], why), flush=True)
				known_failed += 1
			else:
				print("%s: %s%s" % (name, "ok" if r["ok"] else "FAIL", why), flush=True)
				if r["ok"]:
					passed += 1
				else:
					failed += 1
	finally:
		if not a.keep:
			shutil.rmtree(workdir, ignore_errors=True)
	t = table(rows)
	inv = inventory(folders, probes)
	refused_lines = ["- `%s`: %s" % (k, probes[k][1]) for k in sorted(refused)]
	# failures grouped by message (node names and hashes differ per model)
	groups = collections.OrderedDict()
	for r in rows:
		for note in r.get("notes", []):
			key = re.sub(r"node '[^']*'", "node '...'", note)
			key = re.sub(r"[0-9a-f]{16}", "#", key)
			key = re.sub(r"\(rank 0: #.*", "(...)", key)[:200]
			groups.setdefault(key, []).append(r["model"])
	note_lines = ["- %s: %s" % (k, ", ".join(v)) for k, v in groups.items()]
	print()
	print(t)
	if not a.quick:
		print()
		print(inv)
		print()
		print("refused by the runtime (%d op types):" % len(refused))
		print("\n".join(refused_lines))
	if a.markdown:
		with open(a.markdown, "w") as f:
			f.write("# Export corpus status\n\n")
			f.write("Written by `tests/corpus/status.py --markdown tests/corpus/STATUS.md` "
				"(see tests/corpus/README.md).  Fusions: rank 0's `tpfuse optimize --stats` "
				"counters against the manifest (`✗` marks a difference); norms: RMSNorms "
				"canonicalized.  Run: `mpirun -np W tpfuse run --optimize --verify`, rank 0's "
				"logits against the unsharded float32 torch model.  Ops the runtime cannot run: "
				"refused by the one-node probes or named by the run (which lists every "
				"op it cannot run, also ops whose output shape depends on values).\n\n")
			f.write(t + "\n\n## Op types across the corpus\n\n")
			f.write("Runtime: `runs` (a one-node probe plans), `refused` (not supported by the "
				"runtime), `accepted` (known to the runtime; the probe stopped on its "
				"random inputs).\n\n")
			f.write(inv + "\n\n## Refused by the runtime\n\n" + "\n".join(refused_lines) + "\n")
			f.write("\n## Failures by message\n\n" + "\n".join(note_lines) + "\n")
	if fixed:
		print("fixed (they pass now), remove from %s: %s" % (a.known_failures, ", ".join(fixed)))
	if known:
		print("known failures (%s): %d of %d listed failed" % (
			a.known_failures, known_failed, len([k for k in known if k in names])))
	print("%d passed, %d failed, %d skipped%s" % (passed, failed, skipped,
						      ", %d known failures" % known_failed if known else ""))
	return 1 if failed else 0


if __name__ == "__main__":
	sys.exit(main())
