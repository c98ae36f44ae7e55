#!/usr/bin/env python3
"""Checks the KV-cache exports of the corpus (tests/corpus/kv/*/manifest.json)
with onnxruntime, without torch.

For every folder:

  prefill   test_data_set_0 (empty pasts) through onnxruntime: logits and
            presents against the stored float32 torch outputs, at the
            positions the manifest's test_data says to compare
  decode    test_data_set_1 (the prefill's presents as pasts), the same
  greedy    kv_ort.greedy (prefill, then one step per new token feeding the
            presents back) on every case of reference_tokens.json: the ids
            must equal transformers' generate() exactly where the manifest
            says greedy_exact (the float32 folders); otherwise the number of
            equal tokens is reported

Float32 folders are held to atol = rtol = 1e-4 (measured errors about 2e-6),
float16 to the manifest's tolerance.  A folder whose dtype onnxruntime's CPU
build cannot run (bfloat16) is skipped when the manifest records that the
generator could not run it either.

Prints one line per folder and ends with 'N passed, N failed, N skipped';
exit 1 when a folder fails, 77 (skipped) without onnxruntime.

  kv_check.py [--corpus tests/corpus/kv] [--only SUBSTR[,SUBSTR..]] [--threads N]
"""
import argparse
import glob
import json
import os
import sys
import time

try:
	import numpy as np
	from onnx import TensorProto, numpy_helper
	import onnxruntime  # noqa: F401
except ImportError as e:
	if __name__ == "__main__":
		print("%s: skipped (needs onnx, onnxruntime and numpy)" % e)
		sys.exit(77)
	raise

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kv_ort  # noqa: E402

FP32_TOL = 1e-4


def load_pb(path):
	t = TensorProto()
	with open(path, "rb") as f:
		t.ParseFromString(f.read())
	return numpy_helper.to_array(t)


def tolerance(man):
	atol, rtol = man["tolerance"]["atol"], man["tolerance"]["rtol"]
	if man["dtype"] == "fp32":
		atol, rtol = min(atol, FP32_TOL), min(rtol, FP32_TOL)
	return atol, rtol


def compare(got, want, keep, atol, rtol):
	"""(max abs error, ok) over the positions keep selects (broadcast)."""
	got = np.asarray(got, np.float32)
	want = np.asarray(want, np.float32)
	if got.shape != want.shape:
		return float("inf"), False
	keep = np.broadcast_to(keep, got.shape)
	err = np.abs(got - want)[keep]
	bound = (atol + rtol * np.abs(want))[keep]
	return float(err.max()), bool((err <= bound).all())


def check_set(sess, folder, ts, atol, rtol):
	"""Runs one test set; [(what, max error, ok)]."""
	feeds = {i["name"]: load_pb(os.path.join(folder, i["file"])) for i in ts["inputs"]}
	names = [o["name"] for o in ts["outputs"]]
	got = sess.run(names, feeds)
	mask = feeds["attention_mask"].astype(bool)          # [batch, total]
	seq = feeds["input_ids"].shape[1]
	out = []
	for o, g in zip(ts["outputs"], got):
		want = load_pb(os.path.join(folder, o["file"]))
		if o["name"] == "logits":
			# prefill: the query positions the mask keeps; decode: every one
			keep = mask[:, -seq:, None] if ts["step"] == "prefill" else np.ones((1, 1, 1), bool)
		else:
			keep = mask[:, None, :, None]
		err, ok = compare(g, want, keep, atol, rtol)
		out.append((o["name"], err, ok))
	return out


def check_folder(folder, man, threads):
	"""(status, detail): status 'pass', 'fail' or 'skip'."""
	ort_check = man["checks"].get("onnxruntime", "")
	try:
		sess = kv_ort.session(os.path.join(folder, man["models"][0]), threads)
		kv_ort.past_names(sess)
	except Exception as e:  # noqa: BLE001
		if str(ort_check).startswith("not run"):
			return "skip", "onnxruntime cannot load it (%s)" % str(e).splitlines()[0][:100]
		return "fail", "load: %s" % str(e).splitlines()[0][:200]
	atol, rtol = tolerance(man)
	parts, ok_all = [], True
	for ts in man["test_data"]:
		try:
			res = check_set(sess, folder, ts, atol, rtol)
		except Exception as e:  # noqa: BLE001
			if str(ort_check).startswith("not run"):
				return "skip", "onnxruntime cannot run it (%s)" % str(e).splitlines()[0][:100]
			return "fail", "%s: %s" % (ts["step"], str(e).splitlines()[0][:200])
		worst = max(e for _, e, _ in res)
		bad = [n for n, _, ok in res if not ok]
		ok_all &= not bad
		parts.append("%s %.2g%s" % (ts["step"], worst, (" FAIL " + ",".join(bad)) if bad else ""))
	with open(os.path.join(folder, man["reference_tokens"])) as f:
		ref = json.load(f)
	equal = total = 0
	exact = True
	for case in ref["cases"]:
		want = np.array(case["generated_ids"], np.int64)
		got = kv_ort.greedy(sess, case["input_ids"], case["attention_mask"], want.shape[1],
				    suppress=ref["suppressed_token_ids"])
		equal += int((got == want).sum())
		total += want.size
		exact &= bool(np.array_equal(got, want))
	parts.append("greedy %d/%d tokens%s" % (equal, total, "" if exact else " differ"))
	if man.get("greedy_exact") and not exact:
		ok_all = False
	return ("pass" if ok_all else "fail"), ", ".join(parts)


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--corpus", default=os.path.join(HERE, "kv"))
	ap.add_argument("--only", default="")
	ap.add_argument("--threads", type=int, default=1)
	a = ap.parse_args(argv)
	counts = {"pass": 0, "fail": 0, "skip": 0}
	t0 = time.time()
	mps = sorted(glob.glob(os.path.join(a.corpus, "*", "manifest.json")))
	if not mps:
		print("no KV-cache folders under %s" % a.corpus)
		return 1
	for mp in mps:
		folder = os.path.dirname(mp)
		name = os.path.basename(folder)
		if a.only and not any(s in name for s in a.only.split(",")):
			continue
		with open(mp) as f:
			man = json.load(f)
		t = time.time()
		status, detail = check_folder(folder, man, a.threads)
		counts[status] += 1
		print("%-4s %s: %s (%.1f s)" % (status, name, detail, time.time() - t), flush=True)
	print("%d passed, %d failed, %d skipped (%.0f s)" % (counts["pass"], counts["fail"], counts["skip"],
							 time.time() - t0))
	return 1 if counts["fail"] else 0


if __name__ == "__main__":
	sys.exit(main())
