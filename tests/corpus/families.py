#!/usr/bin/env python3
"""Where tpfuse stands per model family: every family of the export corpus
(tests/corpus: model x exporter), of tests/shard/arch (tiny single-device
exports of Hugging Face architectures) and the Mamba-2 hybrids
(tests/fixtures/mamba2: NemotronH, Falcon-H1), run from the committed
fixtures (no torch needed).

For every family and W in 1, 2, 4 it takes the rank models
  corpus   the committed float32 export for W (`export`), else `tpfuse shard`
           of the family's float32 W = 1 export (`shard`), else none (-);
  arch, Mamba-2
           model.onnx at W = 1, `tpfuse shard -w W` of it for W > 1;
runs them (`mpirun -np W tpfuse run --optimize --verify`; tpfuse alone at
W = 1) on test_data_set_0 and compares rank 0's logits with the reference
output_0.pb: torch's float32 logits of the unsharded model (corpus,
Mamba-2), onnxruntime's of the single-device export (arch, whose generator
checks those against torch).  Tolerances: atol = rtol = 1e-4 (the corpus'
float32 bound, status.py's FP32_TOL), atol 1e-4 + rtol 1e-3 (arch and
Mamba-2).

Also, at W = 2: rank 0's share of the weight bytes (float initializers),
against the single-device model where there is one (else the union of the
ranks' initializers, identical ones counted once), and the fusions
`tpfuse optimize --stats --rank 0 --world-size 2` fires on rank 0 (non-zero
counters of the fusion and canonicalization passes).

  families.py [--tpfuse build/cli/tpfuse] [--only SUBSTR[,..]] [--work DIR]
              [--markdown FILE]

--markdown FILE replaces the section between the `families` markers of
FILE (tests/corpus/STATUS.md), or puts it after the title when FILE has
none.  Exit 1 when a family that runs does not match its reference at some
W; 0 otherwise.  Needs onnx and numpy (the project's .venv), mpirun.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
	import numpy as np
	import onnx
	from onnx import numpy_helper
except ImportError as e:
	print("%s: skipped (needs onnx and numpy)" % e)
	sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ARCH = os.path.join(ROOT, "tests", "shard", "arch")
MAMBA2 = os.path.join(ROOT, "tests", "fixtures", "mamba2")
WORLDS = (1, 2, 4)
CORPUS_TOL = (1e-4, 1e-4)
ARCH_TOL = (1e-4, 1e-3)
BEGIN, END = "<!-- families: begin -->", "<!-- families: end -->"
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
# the counters shown, by pass: a short name per pattern (else its own)
SHORT = {"allreduce-residual-rmsnorm": "ar+res+norm", "allreduce-rmsnorm": "ar+norm",
	 "allreduce-layernorm": "ar+layernorm", "sharded-rmsnorm": "sharded-norm",
	 "qk-pairs-merged": "qk-pairs", "sigmoid-gate": "gate", "groups-merged": "merged-matmuls",
	 "allgather-last-axis": "allgather-last", "allreduce-residual-layernorm": "ar+res+layernorm",
	 "allreduce-shared-residual-rmsnorm": "ar+shared+res+norm",
	 "allreduce-bias-residual-rmsnorm": "ar+bias+res+norm"}
SHOWN_PASSES = re.compile(r"^(fuse-|canonicalize-allgather$|merge-parallel-matmuls$|coalesce-)")
SKIP_COUNTERS = {"matmuls-merged", "shape-through-norm", "shape-through-allgather"}


def mpi_env():
	env = dict(os.environ)
	env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
		   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
	return env


def sh(cmd, timeout=300):
	try:
		p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())
		return p.returncode, p.stdout + p.stderr
	except subprocess.TimeoutExpired:
		return -1, "timed out after %d s" % timeout


def last_error(text):
	lines = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
	if not lines:
		lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
	return (lines[0] if lines else "failed")[:160]


def load_tensor(path):
	t = onnx.TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return numpy_helper.to_array(t)


def weights(path):
	"""{name: bytes} of a model's float initializers."""
	m = onnx.load(path)
	return {t.name: numpy_helper.to_array(t).tobytes() for t in m.graph.initializer
		if t.data_type in FLOATS}


# ------------------------------------------------------------------ families

def corpus_families(only):
	"""{family: {W: folder}} of the float32 corpus folders, by model-exporter."""
	fams = {}
	for mp in sorted(glob.glob(os.path.join(HERE, "*", "manifest.json"))):
		folder = os.path.dirname(mp)
		with open(mp) as f:
			man = json.load(f)
		if man.get("dtype") != "fp32":
			continue
		name = re.sub(r"-fp32-w\d+$", "", os.path.basename(folder))
		if only and not any(s in name for s in only):
			continue
		fams.setdefault(name, {})[man["world_size"]] = folder
	return fams


def single_families(only):
	"""[(kind, family, folder)] of the single-device fixtures."""
	out = []
	for kind, base in (("arch", ARCH), ("Mamba-2", MAMBA2)):
		for mp in sorted(glob.glob(os.path.join(base, "*", "model.onnx"))):
			name = os.path.basename(os.path.dirname(mp))
			if not only or any(s in name for s in only):
				out.append((kind, name, os.path.dirname(mp)))
	return out


# ------------------------------------------------------------------ steps

def shard(tpfuse, model, world, out):
	"""The rank pattern of `tpfuse shard model -w world`, or (None, why)."""
	os.makedirs(out, exist_ok=True)
	pattern = os.path.join(out, "m.rank{rank}.onnx")
	rc, text = sh([tpfuse, "shard", model, "-w", str(world), "-o", pattern])
	return (pattern, None) if rc == 0 else (None, "shard: " + last_error(text))


def run_ranks(tpfuse, pattern, world, data, out, tol):
	"""(max abs error of rank 0's logits, None) or (error or None, why)."""
	res = os.path.join(out, "out{rank}")
	cmd = [tpfuse, "run", pattern, "--inputs", data, "--optimize", "--verify", "--outputs", res,
	       "--quiet"]
	if world > 1:
		cmd = ["mpirun", "-np", str(world)] + cmd
	rc, text = sh(cmd)
	if rc:
		return None, "run: " + last_error(text)
	got = load_tensor(os.path.join(res.replace("{rank}", "0"), "output_0.pb")).astype(np.float64)
	want = load_tensor(os.path.join(data, "output_0.pb")).astype(np.float64)
	if got.shape != want.shape:
		return None, "logits of shape %s, want %s" % (list(got.shape), list(want.shape))
	err = np.abs(got - want)
	if (err > tol[0] + tol[1] * np.abs(want)).any():
		return float(err.max()), "logits differ"
	return float(err.max()), None


def fusions(tpfuse, rank0, out):
	"""'name count, ..' of the non-zero fusion counters of rank 0 at W = 2."""
	rc, text = sh([tpfuse, "optimize", rank0, "-o", os.path.join(out, "opt.onnx"), "--stats",
		       "--rank", "0", "--world-size", "2"])
	if rc:
		return "optimize: " + last_error(text)
	parts, norms = [], 0
	for line in text.splitlines():
		f = line.split()
		if len(f) != 3 or not f[2].isdigit() or not int(f[2]):
			continue
		if f[0] == "canonicalize-rmsnorm" and f[1] != "cast-rmsnorm-cast":
			norms += int(f[2])
		elif SHOWN_PASSES.match(f[0]) and f[1] not in SKIP_COUNTERS:
			parts.append("%s %s" % (SHORT.get(f[1], f[1]), f[2]))
	return ", ".join(parts + (["norms %d" % norms] if norms else [])) or "-"


def share(pattern, world, single):
	"""Rank 0's share of the weight bytes at W = `world`."""
	ranks = [weights(pattern.replace("{rank}", str(r))) for r in range(world)]
	if single:
		total = sum(len(b) for b in weights(single).values())
	else:
		union = {}
		for w in ranks:
			for n, b in w.items():
				union.setdefault((n, b), len(b))
		total = sum(union.values())
	return sum(len(b) for b in ranks[0].values()) / total if total else None


def family_row(tpfuse, kind, name, sources, single, data_of, tol, work):
	"""One table row.  sources: {W: ('export', rank pattern) | ('shard', model)};
	a model taken as it is at W = 1.  Each W gets (text, error, why)."""
	row = {"kind": kind, "family": name, "w": {}, "share": None, "fusions": "", "worst": None}
	for w in WORLDS:
		out = os.path.join(work, name, "w%d" % w)
		shutil.rmtree(out, ignore_errors=True)
		os.makedirs(out)
		if w not in sources:
			row["w"][w] = ("-", None, None)
			continue
		how, path = sources[w]
		pattern, why, err = path, None, None
		if how == "shard" and w > 1:
			pattern, why = shard(tpfuse, path, w, out)
		if pattern:
			err, why = run_ranks(tpfuse, pattern, w, data_of(w), out, tol)
		note = " (shard)" if kind == "corpus" and how == "shard" and w > 1 else ""
		row["w"][w] = (("no" if why else "yes") + note, err, why)
		if err is not None:
			row["worst"] = max(row["worst"] or 0.0, err)
		if w == 2 and pattern:
			row["share"] = share(pattern, 2, single)
			row["fusions"] = fusions(tpfuse, pattern.replace("{rank}", "0"), out)
	return row


# ------------------------------------------------------------------ table

def cell(entry):
	text, err, why = entry
	if text == "-":
		return "-"
	if why and err is None:
		return "no: %s" % why.replace("|", "/")
	return "%s, %.2g" % (text, err) if err is not None else text


def table(rows):
	out = ["| family | source | W = 1 | W = 2 | W = 4 | worst error | rank 0 share at W = 2 | "
	       "fusions at W = 2 (rank 0) |",
	       "| --- | --- | --- | --- | --- | ---: | ---: | --- |"]
	for r in rows:
		out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
			r["family"], r["kind"], cell(r["w"][1]), cell(r["w"][2]), cell(r["w"][4]),
			"-" if r["worst"] is None else "%.2g" % r["worst"],
			"-" if r["share"] is None else "%.2f" % r["share"], r["fusions"] or "-"))
	return "\n".join(out)


SECTION_HEAD = """## Families

Written by `tests/corpus/families.py --markdown tests/corpus/STATUS.md`
(it runs the committed fixtures; no torch).  A row per family: the corpus'
model x exporter (float32 folders: the committed rank export for that W,
`(shard)`: `tpfuse shard` of the family's W = 1 export, `-`: neither),
tests/shard/arch (`arch`: `tpfuse shard` of model.onnx for W > 1)
and the Mamba-2 hybrids (tests/fixtures/mamba2).  W = k: `mpirun -np k
tpfuse run --optimize --verify` matches the reference logits (yes/no, rank
0's max abs error): torch's float32 logits of the unsharded model (corpus,
Mamba-2) or onnxruntime's of the single-device export (arch); `no: ...`
names the step that failed.  Share: rank 0's part of the float weight bytes
at W = 2.  Fusions: the non-zero fusion counters of `tpfuse optimize
--stats` on rank 0 at W = 2 (norms: RMSNorms canonicalized).
"""


def write_markdown(path, text):
	body = "%s\n%s\n%s\n" % (BEGIN, text, END)
	old = open(path).read() if os.path.exists(path) else ""
	if BEGIN in old and END in old:
		new = old[:old.index(BEGIN)] + body + old[old.index(END) + len(END) + 1:]
	else:
		parts = old.split("\n\n", 1)  # after the title
		new = parts[0] + "\n\n" + body + "\n" + parts[1] if len(parts) > 1 else body + old
	with open(path, "w") as f:
		f.write(new)


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", os.path.join(ROOT, "build", "cli", "tpfuse")))
	ap.add_argument("--only", default="", help="comma list of substrings of family names")
	ap.add_argument("--work")
	ap.add_argument("--markdown", help="write the section into FILE")
	a = ap.parse_args(argv)
	only = [s for s in a.only.split(",") if s]
	work = a.work or tempfile.mkdtemp(prefix="families-")
	tpfuse = os.path.abspath(a.tpfuse)
	rows = []
	for name, by_w in sorted(corpus_families(only).items()):
		one = os.path.join(by_w[1], "model.rank0.onnx") if 1 in by_w else None
		sources = {}
		for w in WORLDS:
			if w in by_w:
				sources[w] = ("export", os.path.join(by_w[w], "model.rank{rank}.onnx"))
			elif one:
				sources[w] = ("shard", one)
		data = {w: os.path.join(by_w[w] if w in by_w else by_w.get(1, ""), "test_data_set_0")
			for w in WORLDS}
		rows.append(family_row(tpfuse, "corpus", name, sources, one, data.get, CORPUS_TOL, work))
		print(table(rows[-1:]).splitlines()[-1], flush=True)
	for kind, name, folder in single_families(only):
		model = os.path.join(folder, "model.onnx")
		sources = {w: ("shard", model) for w in WORLDS}
		data = os.path.join(folder, "test_data_set_0")
		rows.append(family_row(tpfuse, kind, name, sources, model, lambda w, d=data: d, ARCH_TOL,
				       work))
		print(table(rows[-1:]).splitlines()[-1], flush=True)
	# status.py's per-folder tables follow the section
	text = SECTION_HEAD + "\n" + table(rows) + "\n\n## Folders"
	if a.markdown:
		write_markdown(a.markdown, text)
	bad = [r["family"] for r in rows if any(e[2] == "logits differ" for e in r["w"].values())]
	print("%d families, %d with logits that differ%s" % (len(rows), len(bad),
							     ": " + ", ".join(bad) if bad else ""))
	return 1 if bad else 0


if __name__ == "__main__":
	sys.exit(main())
