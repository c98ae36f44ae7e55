#!/usr/bin/env bash
# Token generation on one GPU, in one call on the GPU machine:
#   1. the model: bench/gen_kv_model.py writes a Llama-3-8B-shaped model
#      with KV-cache I/O (TPF_GEN_LAYERS layers, default 4; 32 is the full
#      depth), bfloat16, random weights;
#   2. correctness: the torch model's 32 greedy tokens for a 16-token prompt
#      against `tpfuse generate --backend cuda --cuda-graph`'s, and the
#      prompt's last logits of `tpfuse run --optimize` and of torch in the
#      model's dtype, each against torch in float32 on the same weights
#      (the bound: twice torch's own error in the model's dtype); where the
#      tokens part, the same check at that step (the prompt and the tokens
#      before it as one prefill);
#   3. generation: a prompt of TPF_GEN_PROMPT tokens (default 896) and 256
#      new tokens at each batch of TPF_GEN_BATCHES (default "1 8"), the cache
#      in place with a CUDA graph, then the cache copied from step to step
#      (--no-in-place, a plan per length) at batch 1: time to first token,
#      decode tokens/s, step latency p50/p99, plans built; the in-place
#      rows after one untimed generation (--warmup 1: their plans and graph
#      built then), the copied row cold (its 256 plans outgrow the
#      session's 8 either way);
#   4. the decode step alone: bench-decode on the same in-place graph at the
#      generation's middle context (prompt + 128), CUDA graph replays with
#      the inputs uploaded once, compiled as generate compiles it (the cache
#      in place, next_token on the device): what a step costs the device, to set the
#      generation's p50 step against (their ratio is the loop's overhead:
#      input upload, token download).
# Each part prints how long it took.  Results: OUTDIR/generate.jsonl (one
# JSON object a row) and OUTDIR/generate-summary.txt.
#
# Usage: bench/gpu/run-generate.sh BUILDDIR OUTDIR
#   TPF_GEN_LAYERS, TPF_GEN_PROMPT, TPF_GEN_NEW (default 256), TPF_GEN_BATCHES
#   TPF_GEN_WORK   where the model goes (default $TMPDIR/tpfuse-generate)
#   TPF_GEN_MODEL_ARGS  more gen_kv_model.py options (other sizes)
#   TPF_GEN_BACKEND     cuda (default) or cpu (a check of the script itself)
set -uo pipefail
build=${1:?usage: run-generate.sh BUILDDIR OUTDIR}
out=${2:?usage: run-generate.sh BUILDDIR OUTDIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ -f "$build/gpu-env.sh" ] && . "$build/gpu-env.sh"
export NCCL_NVLS_ENABLE=0
layers=${TPF_GEN_LAYERS:-4}
prompt=${TPF_GEN_PROMPT:-896}
new=${TPF_GEN_NEW:-256}
batches=${TPF_GEN_BATCHES:-1 8}
backend=${TPF_GEN_BACKEND:-cuda}
margs=(${TPF_GEN_MODEL_ARGS:-})
graph=(--cuda-graph)
[ "$backend" = cuda ] || graph=()
work=${TPF_GEN_WORK:-${TMPDIR:-/tmp}/tpfuse-generate}
mkdir -p "$out" "$work"
rows=$out/generate.jsonl
: >"$rows"
tpfuse=$build/cli/tpfuse
py=${PYTHON:-python3}
model=$work/llama3-8b-l$layers/model.onnx
mkdir -p "$(dirname "$model")"
stamp() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(stamp)" 'BEGIN { printf "%.1f", b - a }'; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/device: /'

t=$(stamp)
if [ ! -f "$model" ]; then
	"$py" "$root/bench/gen_kv_model.py" "$model" --layers "$layers" "${margs[@]}" || { echo "model export failed" >&2; exit 1; }
fi
echo "model: $layers layers, $(du -sh "$(dirname "$model")" | cut -f1), written in $(took "$t") s"

# 2. the torch model's greedy tokens against tpfuse's
t=$(stamp)
short=$(seq 11 26 | paste -sd,)
pre=$work/prefill
rm -rf "$pre" "$pre-out"
want=$("$py" "$root/bench/gen_kv_model.py" "$model" --layers "$layers" "${margs[@]}" --tokens "$short" --new 32 \
	--save-prefill "$pre" | tail -1)
got=$("$tpfuse" generate "$model" --backend "$backend" "${graph[@]}" --prompt-ids "$short" --max-new-tokens 32 --json)
# the prompt's logits from one forward call of the same compiled model
"$tpfuse" run "$model" --optimize --backend "$backend" --inputs "$pre" --outputs "$pre-out" >/dev/null ||
	echo "tpfuse run of the prefill failed" >&2
# logits_check LABEL PREFILL_DIR TPFUSE_OUT_DIR TPFUSE_TOKEN: a prompt's last
# logits, tpfuse's and torch's in the model's dtype, against float32 torch
# on the same weights; the bound is what the dtype costs torch.  Prints
# the result and a JSON object (its last line).
logits_check() {
	"$py" - "$@" <<'PY'
import json, os, sys
import numpy as np
label, pre, out, token = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    import onnx
    from onnx import numpy_helper
    t = onnx.load_tensor(os.path.join(out, "output_0.pb"))
    arr = numpy_helper.to_array(t)
    if t.data_type == onnx.TensorProto.BFLOAT16 and arr.dtype == np.uint16:
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    tpf = arr.astype(np.float32)[0, -1]
    tor = np.load(os.path.join(pre, "torch_logits.npy"))
    ref = np.load(os.path.join(pre, "ref_logits.npy"))
    top = np.sort(ref)[-2:]
    e_tpf, e_tor = float(np.abs(tpf - ref).max()), float(np.abs(tor - ref).max())
    res = {"tpfuse_max_err": e_tpf, "torch_max_err": e_tor, "ref_top2_margin": float(top[1] - top[0]),
           "within_bound": e_tpf <= 2 * e_tor, "token": {"ref": int(ref.argmax()), "torch": int(tor.argmax()),
           "tpfuse_run": int(tpf.argmax()), "tpfuse_generate": token}}
    print("%s logits against float32 torch: tpfuse max err %.4g, torch (same dtype) %.4g: %s; "
          "float32 top-2 margin %.4g; token float32 %d, torch %d, tpfuse run %d, tpfuse generate %d"
          % (label, e_tpf, e_tor, "within 2x" if e_tpf <= 2 * e_tor else "OUTSIDE 2x", top[1] - top[0],
             ref.argmax(), tor.argmax(), tpf.argmax(), token))
except Exception as e:  # the token row stays
    res = {"error": str(e)}
    print("%s logits check failed: %s" % (label, e))
print(json.dumps(res))
PY
}
first=$(logits_check "first step's" "$pre" "$pre-out" "$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"][0][0])' "$got")")
echo "$first" | head -n -1
# where the tokens part: the same check at that step (the prompt and the
# tokens both sides chose before it as one prefill; TPF_GEN_CHECK_STEP
# forces a step, for a check of the script itself)
k=$("$py" -c 'import json, os, sys
w, g = json.loads(sys.argv[1])["tokens"], json.loads(sys.argv[2])["tokens"][0]
k = next((i for i, (a, b) in enumerate(zip(w, g)) if a != b), len(w))
print(os.environ.get("TPF_GEN_CHECK_STEP") or k)' "$want" "$got")
step='{}'
if [ "$k" -gt 0 ] && [ "$k" -lt 32 ]; then
	ctx="$short,$("$py" -c 'import json,sys; print(",".join(map(str, json.loads(sys.argv[1])["tokens"][:int(sys.argv[2])])))' "$want" "$k")"
	rm -rf "$pre-$k" "$pre-$k-out"
	"$py" "$root/bench/gen_kv_model.py" "$model" --layers "$layers" "${margs[@]}" --tokens "$ctx" --new 1 \
		--save-prefill "$pre-$k" >/dev/null &&
		"$tpfuse" run "$model" --optimize --backend "$backend" --inputs "$pre-$k" --outputs "$pre-$k-out" >/dev/null ||
		echo "the prefill of step $k's context failed" >&2
	tok=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"][0][int(sys.argv[2])])' "$got" "$k")
	res=$(logits_check "step $k's (where the tokens part)" "$pre-$k" "$pre-$k-out" "$tok")
	echo "$res" | head -n -1
	step=$(echo "$res" | tail -1)
fi
"$py" - "$want" "$got" "$rows" "$(echo "$first" | tail -1)" "$step" "$k" <<'PY'
import json, sys
want = json.loads(sys.argv[1])["tokens"]
got = json.loads(sys.argv[2])["tokens"][0]
same = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), len(want))
row = {"part": "tokens", "torch": want, "tpfuse": got, "first_difference": same, "equal": want == got,
       "logits": json.loads(sys.argv[4])}
if json.loads(sys.argv[5]):
    row["logits_at_step"] = {"step": int(sys.argv[6]), **json.loads(sys.argv[5])}
print("tokens: %s (the first %d of 32 equal)" % ("equal" if want == got else "differ", same))
open(sys.argv[3], "a").write(json.dumps(row) + "\n")
PY
echo "tokens checked in $(took "$t") s"

# 3. generation
prompts() { # N prompts of $prompt ids each
	"$py" -c "import random,sys
r = random.Random(5)
for _ in range(int(sys.argv[1])): print(','.join(str(r.randrange(3, 100)) for _ in range($prompt)))" "$1"
}
for b in $batches; do
	prompts "$b" >"$work/prompts-b$b.txt"
	for mode in in-place copied; do
		[ "$mode" = copied ] && [ "$b" != 1 ] && continue
		extra=("${graph[@]}" --warmup 1)
		[ "$mode" = copied ] && extra=(--no-in-place)
		t=$(stamp)
		res=$("$tpfuse" generate "$model" --backend "$backend" "${extra[@]}" --prompts "$work/prompts-b$b.txt" \
			--max-new-tokens "$new" --json) || { echo "generate batch $b $mode failed" >&2; continue; }
		"$py" - "$res" "$b" "$mode" "$rows" <<'PY'
import json, sys
st = json.loads(sys.argv[1])["stats"]
row = {"part": "generate", "batch": int(sys.argv[2]), "cache": sys.argv[3], **st}
print("generate batch %s, cache %s: ttft %.2f ms, decode %.1f tokens/s, step p50 %.3f ms p99 %.3f ms, "
      "%d plans, CUDA graphs captured %d, replayed %d (both generations)"
      % (sys.argv[2], sys.argv[3], st["ttft_ms"], st["decode_tokens_per_s"], st["step_p50_ms"],
	 st["step_p99_ms"], st["plans_built"], st["graphs_captured"], st["graph_replays"]))
open(sys.argv[4], "a").write(json.dumps(row) + "\n")
PY
		echo "  ($(took "$t") s)"
	done
	# 4. the device step alone at the middle context
	t=$(stamp)
	"$build/bench/bench-decode" "$model" --backend "$backend" --passes default,kv-cache-in-place,cleanup,last-position-logits,greedy-next-token \
		--dim batch="$b" --dim sequence=1 --dim max_sequence=$((prompt + new)) --fill attention_mask=1 \
		--fill past_sequence_length=$((prompt + new / 2)) --iters 100 --warmup 10 \
		--label "batch=$b" --variant in-place | tee -a "$rows"
	echo "  bench-decode batch $b ($(took "$t") s)"
done

"$py" - "$rows" <<'PY' | tee "$out/generate-summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
gen = {(r["batch"], r["cache"]): r for r in rows if r.get("part") == "generate"}
dev = {}
for r in rows:  # the CUDA graph's replays where there are some, else the eager ones
	if r.get("impl") == "tpfuse" and (r.get("mode") == "cuda-graph" or r["label"] not in dev):
		dev[r["label"]] = r
print("batch  cache     ttft_ms  tokens/s  step_p50_ms  device_step_ms  p50/device  captured")
for (b, c), r in sorted(gen.items()):
	d = dev.get("batch=%d" % b)
	dms = d["us_per_step"] / 1e3 if d else float("nan")
	print("%5d  %-8s %8.2f %9.1f %12.3f %15.3f %11.3f %9d" % (b, c, r["ttft_ms"], r["decode_tokens_per_s"],
								r["step_p50_ms"], dms, r["step_p50_ms"] / dms,
								r["graphs_captured"]))
PY
