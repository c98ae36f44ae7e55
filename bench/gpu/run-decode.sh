#!/usr/bin/env bash
# Decode step of the dense example at TP=2, in one run on the GPU machine,
# batch 1, 8 and 64, each eager and as a CUDA graph:
#   unfused-nccl  tpfuse, the unfused graph, every all-reduce through NCCL
#   unfused       tpfuse, the unfused graph (all-reduces one-shot where they fit)
#   fused         tpfuse, the default pipeline's graph (fused AR + norm kernels)
#   torch         the PyTorch peer (same ONNX weights, torch.distributed NCCL)
# With TPF_BENCH_FP8=1 also the dense_fp8 example: FP8 operands dequantized
# before bf16 GEMMs, FP8 GEMMs on the codes, and fused.
# Needs a build from scripts/gpu-build.sh.
#
# Usage: bench/gpu/run-decode.sh BUILDDIR OUTDIR [BATCHES]
#   model size: TPF_BENCH_SIZE (default below: 4 layers, hidden 2048,
#   16 heads / 8 KV heads of 128, ffn 5632, KV cache of 256 tokens, bf16)
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
batches=${3:-1 8 64}
size=${TPF_BENCH_SIZE:---layers 4 --hidden 2048 --heads 16 --kv-heads 8 --head-dim 128 --ffn 5632 --past 256}
iters=${TPF_BENCH_ITERS:-200}
mkdir -p "$out"
[ -f "$build/gpu-env.sh" ] && . "$build/gpu-env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi -L | tee "$out/device.txt"
res="$out/decode.jsonl"
: > "$res"
td() { # tpfuse decode: MODEL LABEL [bench-decode options]
	local model=$1 label=$2
	shift 2
	mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
		"$build/bench/bench-decode" "$model" --backend cuda --iters "$iters" --warmup 20 \
		--label "$label" "$@" | tee -a "$res"
}
for b in $batches; do
	dir=$out/models-b$b
	# shellcheck disable=SC2086
	python3 examples/tpmodels.py dense --world-size 2 --out "$dir" --dtype bfloat16 --batch "$b" $size \
		> "$dir.gen.log" 2>&1
	m="$dir/dense.rank{rank}.onnx"
	td "$m" "batch=$b" --no-oneshot --variant unfused-nccl
	td "$m" "batch=$b"
	td "$m" "batch=$b" --optimize
	python3 bench/torch_decode_peer.py --model "$m" --iters "$iters" \
		--warmup 20 --label "batch=$b" 2>"$dir.torch.log" | tee -a "$res"
	if [ -n "${TPF_BENCH_FP8:-}" ]; then
		# shellcheck disable=SC2086
		python3 examples/tpmodels.py dense_fp8 --world-size 2 --out "$dir" --dtype bfloat16 --batch "$b" \
			$size > "$dir.gen8.log" 2>&1
		m8="$dir/dense_fp8.rank{rank}.onnx"
		td "$m8" "batch=$b" --no-fp8-gemm --variant fp8-dequant
		td "$m8" "batch=$b" --variant fp8-gemm
		td "$m8" "batch=$b" --optimize --variant fp8-fused
	fi
	rm -f "$dir"/*.full.onnx
done
python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
labels = sorted({r["label"] for r in rows}, key=lambda s: int(s.split("=")[1]))
def get(lab, impl, variant, mode):
    for r in rows:
        if (r["label"] == lab and r["impl"] == impl and r.get("variant", variant) == variant
                and r["mode"] == mode):
            return r["us_per_step"]
    return None
cols = [("tpfuse", "unfused-nccl"), ("tpfuse", "unfused"), ("tpfuse", "fused"), ("torch", "torch")]
variants8 = [v for v in ("fp8-dequant", "fp8-gemm", "fp8-fused") if any(r.get("variant") == v for r in rows)]
cols += [("tpfuse", v) for v in variants8]
for mode in ("eager", "cuda-graph"):
    print(f"\n{mode} (us per decode step, slowest rank)")
    print("%-10s" % "" + "".join("%15s" % v for _, v in cols))
    for lab in labels:
        vals = [get(lab, i, v, mode) for i, v in cols]
        print("%-10s" % lab + "".join("%15s" % ("%.1f" % x if x else "-") for x in vals))
print("\ntime ratios a/b, CUDA graph (> 1: b is faster)")
for lab in labels:
    t = get(lab, "torch", "torch", "cuda-graph")
    u = get(lab, "tpfuse", "unfused", "cuda-graph")
    n = get(lab, "tpfuse", "unfused-nccl", "cuda-graph")
    f = get(lab, "tpfuse", "fused", "cuda-graph")
    parts = []
    if t and n: parts.append("torch/unfused-nccl %.2fx" % (t / n))
    if t and u: parts.append("torch/unfused %.2fx" % (t / u))
    if t and f: parts.append("torch/fused %.2fx" % (t / f))
    if n and f: parts.append("unfused-nccl/fused %.2fx" % (n / f))
    d8, g8 = get(lab, "tpfuse", "fp8-dequant", "cuda-graph"), get(lab, "tpfuse", "fp8-gemm", "cuda-graph")
    if d8 and g8: parts.append("fp8 dequant/gemm %.2fx" % (d8 / g8))
    print("%-10s %s" % (lab, ", ".join(parts)))
PY
