#!/usr/bin/env python3
"""Coalesced all-to-alls run direct (suite mpi).

coalesce-alltoall turns the gdn_a2a example's AllToAll nodes into
Pack -> one AllToAll -> Unpack; the session runs each such run as one
grouped exchange between the pieces' own buffers (no packing copies) where
the communicator can.  This runs the optimized rank models under
mpirun -np 2 twice, with the direct path (the default) and with
TPF_A2A_DIRECT=0, and requires:
  - the direct run reports its exchanges ("all-to-alls: N coalesced
    exchanges run direct", N >= 1) and the packed run reports none;
  - both runs' outputs are byte-identical on every rank, and --verify
    (against the unoptimized graph) passes in both.

Usage: a2a_direct.py --tpfuse EXE --work DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env=None):
	p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=600)
	return p.returncode, p.stdout


def main():
	ap = argparse.ArgumentParser()
	ap.add_argument("--tpfuse", required=True)
	ap.add_argument("--work", required=True)
	a = ap.parse_args()
	mpirun = shutil.which("mpirun")
	if not mpirun:
		print("no mpirun: skipped")
		return 77
	shutil.rmtree(a.work, ignore_errors=True)
	os.makedirs(a.work)
	rc, log = run([sys.executable, os.path.join(ROOT, "examples", "tpmodels.py"), "gdn_a2a", "--world-size", "2",
		       "--out", a.work])
	if rc:
		print(log)
		print("FAIL: generating the gdn_a2a example")
		return 1
	model = os.path.join(a.work, "gdn_a2a.rank{rank}.onnx")
	inputs = os.path.join(a.work, "gdn_a2a_data", "rank{rank}")
	outs = {}
	fails = 0
	for mode in ("direct", "packed"):
		env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
			   TPF_A2A_DIRECT="1" if mode == "direct" else "0")
		out = os.path.join(a.work, "out-" + mode)
		rc, log = run([mpirun, "--oversubscribe", "-np", "2", "-x", "TPF_A2A_DIRECT", a.tpfuse, "run", model,
			       "--inputs", inputs, "--optimize", "--verify", "--outputs", out], env)
		print("-- %s (exit %d)\n%s" % (mode, rc, log.strip()))
		if rc:
			print("FAIL: %s run exited %d" % (mode, rc))
			fails += 1
			continue
		m = re.search(r"all-to-alls: (\d+) coalesced exchanges? run direct", log)
		n = int(m.group(1)) if m else 0
		if mode == "direct" and n < 1:
			print("FAIL: the direct run reports no direct exchange")
			fails += 1
		if mode == "packed" and n:
			print("FAIL: TPF_A2A_DIRECT=0 still ran %d exchanges direct" % n)
			fails += 1
		outs[mode] = out
	if len(outs) == 2:
		for r in range(2):
			d0, d1 = (os.path.join(outs[k], "rank%d" % r) for k in ("direct", "packed"))
			files = sorted(f for f in os.listdir(d1) if f.endswith(".pb"))
			if not files:
				print("FAIL: rank %d wrote no outputs" % r)
				fails += 1
			for f in files:
				with open(os.path.join(d0, f), "rb") as x, open(os.path.join(d1, f), "rb") as y:
					if x.read() != y.read():
						print("FAIL: rank %d %s differs between the direct and the packed run" % (r, f))
						fails += 1
	print("PASS" if not fails else "%d failure(s)" % fails)
	return 1 if fails else 0


if __name__ == "__main__":
	sys.exit(main())
