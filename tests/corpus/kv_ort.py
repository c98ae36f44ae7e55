#!/usr/bin/env python3
"""Greedy generation with onnxruntime on a KV-cache export (tests/corpus/kv/).

The I/O convention (Hugging Face Hub exports by torch.onnx and Optimum,
onnxruntime-genai):

  inputs   input_ids                   int64 [batch, sequence]
           attention_mask              int64 [batch, past_sequence + sequence]
           position_ids                int64 [batch, sequence]
           past_key_values.{i}.key     [batch, kv_heads, past_sequence, head_dim]
           past_key_values.{i}.value   (the same)
  outputs  logits                      [batch, sequence, vocab]
           present.{i}.key             [batch, kv_heads, past_sequence + sequence, head_dim]
           present.{i}.value           (the same)

The greedy loop: a prefill with empty pasts (past_sequence 0), then one step
per new token, each feeding the presents back as the next pasts, the argmax
of the last position's logits as the next input id and the mask grown by a
one.  Position ids are those transformers' generate() derives from the
mask: cumsum(attention_mask) - 1, 0 at padding.  The suppressed token ids
(the EOS token, as generate()'s min_new_tokens does) never win the argmax.

Needs onnxruntime and numpy only.
"""
import re

import numpy as np

PAST_RE = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def session(path, threads=1):
	import onnxruntime as ort
	so = ort.SessionOptions()
	so.intra_op_num_threads = threads
	so.inter_op_num_threads = 1
	so.log_severity_level = 3
	return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def past_names(sess):
	"""The past inputs in graph order, checked against the convention."""
	names = [i.name for i in sess.get_inputs()]
	if names[:3] != ["input_ids", "attention_mask", "position_ids"]:
		raise ValueError("inputs do not start with input_ids, attention_mask, position_ids: %s" % names[:3])
	past = names[3:]
	for n, name in enumerate(past):
		want = "past_key_values.%d.%s" % (n // 2, ("key", "value")[n % 2])
		if name != want:
			raise ValueError("input %d is %s, not %s" % (n + 3, name, want))
	outs = [o.name for o in sess.get_outputs()]
	want = ["logits"] + [p.replace("past_key_values.", "present.") for p in past]
	if outs != want:
		raise ValueError("outputs are %s, not %s" % (outs, want))
	return past


def empty_pasts(sess, batch):
	"""Pasts of length 0 (a prefill), shaped and typed from the graph's inputs."""
	feeds = {}
	for i in sess.get_inputs()[3:]:
		shape = i.shape
		if not (isinstance(shape[1], int) and isinstance(shape[3], int)):
			raise ValueError("%s: kv_heads and head_dim must be static, got %s" % (i.name, shape))
		if i.type not in ORT_TYPES:
			raise ValueError("%s: no numpy type for %s" % (i.name, i.type))
		feeds[i.name] = np.zeros((batch, shape[1], 0, shape[3]), ORT_TYPES[i.type])
	return feeds


def position_ids(mask, seq):
	"""transformers' generate(): cumsum(mask) - 1, 0 at padding; the last seq columns."""
	pos = np.cumsum(mask, axis=-1) - 1
	pos[mask == 0] = 0
	return pos[:, -seq:].astype(np.int64)


def step_feeds(ids, mask, pasts):
	feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64),
		 "position_ids": position_ids(mask, ids.shape[1])}
	feeds.update(pasts)
	return feeds


def greedy(sess, prompt_ids, prompt_mask, new_tokens, suppress=()):
	"""Generated ids [batch, new_tokens] of the greedy loop (module doc)."""
	past = past_names(sess)
	ids = np.asarray(prompt_ids, np.int64)
	mask = np.asarray(prompt_mask, np.int64)
	pasts = empty_pasts(sess, ids.shape[0])
	out = []
	for _ in range(new_tokens):
		res = sess.run(None, step_feeds(ids, mask, pasts))
		last = res[0][:, -1, :].astype(np.float32)
		for t in suppress:
			last[:, t] = -np.inf
		nxt = np.argmax(last, axis=-1).astype(np.int64)
		out.append(nxt)
		pasts = dict(zip(past, res[1:]))
		ids = nxt[:, None]
		mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
	return np.stack(out, axis=1)
