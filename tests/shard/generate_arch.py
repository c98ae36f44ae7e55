#!/usr/bin/env python3
"""Generate tests/shard/arch: tiny single-device exports of Hugging Face
architectures for `tpfuse shard` (arch_check.py runs them).

Every family is built from a small config (2 layers, hidden 32, random
init with a fixed seed; nothing is downloaded) with transformers' batched
experts (`experts_implementation="batched_mm"`: an expert's weights are
the rows a Gather picks out of one stacked [E, ...] parameter), exported
with each exporter that takes it, and written as

  tests/shard/arch/<family>-<exporter>/
    model.onnx            initializers inline, node metadata dropped
    test_data_set_0/      input_N.pb (input_ids [2, 8], attention_mask of ones,
                          when the export keeps it) and output_0.pb:
                          the logits onnxruntime computes for model.onnx

Families: MoE (qwen3_moe, mixtral, olmoe, phimoe, gpt_oss, deepseek_v3)
and post-norm (gemma3, exaone4: the norm after o_proj / down_proj).

Usage (torch + transformers + onnxruntime, e.g. the corpus environment):
  generate_arch.py [--families F,..] [--exporters torchscript,dynamo] [--out DIR]
"""
import argparse
import os
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
VOCAB, BATCH, SEQ = 64, 2, 8
COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
	      num_key_value_heads=2, head_dim=8, max_position_embeddings=64, initializer_range=0.2,
	      tie_word_embeddings=False)


def configs():
	import transformers as t
	moe = dict(num_experts_per_tok=2)
	return {
		"qwen3_moe": lambda: t.Qwen3MoeConfig(**COMMON, **moe, intermediate_size=64,
						      moe_intermediate_size=16, num_experts=4,
						      decoder_sparse_step=1, mlp_only_layers=[]),
		"mixtral": lambda: t.MixtralConfig(**COMMON, **moe, intermediate_size=16, num_local_experts=4),
		"olmoe": lambda: t.OlmoeConfig(**COMMON, **moe, intermediate_size=16, num_experts=4),
		"phimoe": lambda: t.PhimoeConfig(**COMMON, **moe, intermediate_size=16, num_local_experts=4),
		"gpt_oss": lambda: t.GptOssConfig(**COMMON, **moe, intermediate_size=16, num_local_experts=4,
						  layer_types=["sliding_attention", "full_attention"],
						  sliding_window=4),
		"deepseek_v3": lambda: t.DeepseekV3Config(
			**{k: v for k, v in COMMON.items() if k not in ("head_dim", "num_key_value_heads")},
			**moe, num_key_value_heads=4,
			intermediate_size=64, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
			n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16,
			qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8, rope_interleave=False),
		"gemma3": lambda: t.Gemma3TextConfig(**COMMON, intermediate_size=64, sliding_window=4,
						     layer_types=["sliding_attention", "full_attention"]),
		"exaone4": lambda: t.Exaone4Config(**COMMON, intermediate_size=64, sliding_window=4,
						   layer_types=["sliding_attention", "full_attention"]),
	}


class Logits:
	def __new__(cls, model):
		import torch

		class W(torch.nn.Module):
			def __init__(self, m):
				super().__init__()
				self.m = m

			def forward(self, input_ids, attention_mask):
				return self.m(input_ids=input_ids, attention_mask=attention_mask,
					      use_cache=False).logits
		return W(model)


def build(family):
	import torch
	import transformers
	torch.manual_seed(SEED)
	cfg = configs()[family]()
	kw = dict(attn_implementation="eager")
	if family in ("qwen3_moe", "mixtral", "olmoe", "phimoe", "gpt_oss", "deepseek_v3"):
		kw["experts_implementation"] = "batched_mm"
	return transformers.AutoModelForCausalLM.from_config(cfg, **kw).eval()


def export(model, exporter, path):
	import torch
	ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED))
	mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
	w = Logits(model)
	with torch.no_grad():
		if exporter == "torchscript":
			torch.onnx.export(w, (ids, mask), path, dynamo=False, opset_version=18,
					  input_names=["input_ids", "attention_mask"], output_names=["logits"],
					  dynamic_axes={k: {0: "batch", 1: "seq"}
							for k in ("input_ids", "attention_mask")})
		else:
			b, s = torch.export.Dim("batch"), torch.export.Dim("seq", min=2)
			torch.onnx.export(w, (ids, mask), path, dynamo=True, opset_version=18,
					  input_names=["input_ids", "attention_mask"], output_names=["logits"],
					  dynamic_shapes={"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}})
	return ids.numpy(), mask.numpy()


def finish(path, feeds, folder):
	"""One file with every initializer inline, no node metadata; the
	onnxruntime outputs as the test data."""
	import onnx
	import onnxruntime as ort
	from onnx import numpy_helper
	m = onnx.load(path)
	for n in m.graph.node:
		del n.metadata_props[:]
		n.doc_string = ""
	del m.graph.value_info[:]
	out = os.path.join(folder, "model.onnx")
	onnx.save(m, out)
	for f in os.listdir(os.path.dirname(path)):
		if f.startswith(os.path.basename(path)):
			os.remove(os.path.join(os.path.dirname(path), f))
	names = [i.name for i in m.graph.input]
	got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(
		None, {k: v for k, v in zip(("input_ids", "attention_mask"), feeds) if k in names})
	d = os.path.join(folder, "test_data_set_0")
	os.makedirs(d, exist_ok=True)
	for k, (name, v) in enumerate(x for x in zip(("input_ids", "attention_mask"), feeds) if x[0] in names):
		with open(os.path.join(d, "input_%d.pb" % k), "wb") as f:
			f.write(numpy_helper.from_array(v, name).SerializeToString())
	with open(os.path.join(d, "output_0.pb"), "wb") as f:
		f.write(numpy_helper.from_array(got[0], "logits").SerializeToString())


def main(argv=None):
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--families", default=",".join(configs()))
	ap.add_argument("--exporters", default="torchscript,dynamo")
	ap.add_argument("--out", default=os.path.join(HERE, "arch"))
	a = ap.parse_args(argv)
	bad = 0
	for fam in a.families.split(","):
		for exp in a.exporters.split(","):
			folder = os.path.join(a.out, "%s-%s" % (fam, exp))
			os.makedirs(folder, exist_ok=True)
			tmp = os.path.join(folder, "export.tmp.onnx")
			try:
				feeds = export(build(fam), exp, tmp)
				finish(tmp, feeds, folder)
				print("%s-%s: written" % (fam, exp))
			except Exception as e:  # noqa: BLE001  (an exporter that refuses a family)
				for f in os.listdir(folder):
					os.remove(os.path.join(folder, f))
				os.rmdir(folder)
				print("%s-%s: not exported: %s" % (fam, exp, str(e).strip().splitlines()[-1][:200]))
				if os.environ.get("GENERATE_ARCH_TRACE"):
					traceback.print_exc()
				bad += 1
	return 0


if __name__ == "__main__":
	sys.exit(main())
