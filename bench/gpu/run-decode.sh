#!/usr/bin/env bash
# Decode step of the dense example at TP=2: tpfuse (unfused graph, eager and
# CUDA graph) against the PyTorch peer (same ONNX weights, torch.distributed
# NCCL, eager and CUDA graph), batch 1, 8 and 64, in one call on the GPU
# machine.  Needs a build from scripts/gpu-build.sh.
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
for b in $batches; do
	dir=$out/models-b$b
	# shellcheck disable=SC2086
	python3 examples/tpmodels.py dense --world-size 2 --out "$dir" --dtype bfloat16 --batch "$b" $size \
		> "$dir.gen.log" 2>&1
	mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
		"$build/bench/bench-decode" "$dir/dense.rank{rank}.onnx" --backend cuda \
		--iters "$iters" --warmup 20 --label "batch=$b" | tee -a "$res"
	python3 bench/torch_decode_peer.py --model "$dir/dense.rank{rank}.onnx" --iters "$iters" \
		--warmup 20 --label "batch=$b" 2>"$dir.torch.log" | tee -a "$res"
	rm -f "$dir"/*.full.onnx
done
python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
labels = sorted({r["label"] for r in rows}, key=lambda s: int(s.split("=")[1]))
print("%-10s %14s %14s %14s %14s" % ("", "tpfuse eager", "tpfuse graph", "torch eager", "torch graph"))
for lab in labels:
    def get(impl, mode):
        for r in rows:
            if r["label"] == lab and r["impl"] == impl and r["mode"] == mode:
                return "%.1f us" % r["us_per_step"]
        return "-"
    print("%-10s %14s %14s %14s %14s" % (lab, get("tpfuse", "eager"), get("tpfuse", "cuda-graph"),
                                         get("torch", "eager"), get("torch", "cuda-graph")))
PY
