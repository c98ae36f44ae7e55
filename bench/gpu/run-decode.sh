#!/usr/bin/env bash
# Decode step of the dense example at TP=2 (TPF_BENCH_WORLD: another tensor-
# parallel size, one rank a GPU), in one run on the GPU machine,
# batch 1, 8 and 64, each eager and as a CUDA graph:
#   unfused-nccl  tpfuse, the unfused graph, every all-reduce through NCCL
#   unfused       tpfuse, the unfused graph (all-reduces one-shot where they fit)
#   fused         tpfuse, the default pipeline's graph (fused AR + norm kernels)
#   torch         the PyTorch peer (same ONNX weights, torch.distributed NCCL),
#                 eager, CUDA graph, and torch.compile + CUDA graph (mode
#                 "compile"; a compile that fails is reported, the rest stands)
# With TPF_BENCH_FP8=1 also the dense_fp8 example: FP8 operands dequantized
# before bf16 GEMMs, FP8 GEMMs on the codes, and fused.
# Before the timings: every GPU's device-to-device copy bandwidth (1 GiB)
# and, per batch, the per-rank bytes of weights and KV cache a step reads;
# bench/decode_report.py adds the roofline (bytes / bandwidth) and each
# time's multiple of it to the rows and prints the summary.
# Needs a build from scripts/gpu-build.sh.
#
# Usage: bench/gpu/run-decode.sh BUILDDIR OUTDIR [BATCHES]
#   TPF_BENCH_PRESET  model sizes (default dense-small):
#     dense-small  4 layers, hidden 2048, 16 heads / 8 KV heads of 128,
#                  ffn 5632, KV cache of 256 tokens, bf16; 200 timed steps
#                  after 20 warm-up steps
#     llama3-8b    Llama-3-8B layer shapes: 4 layers, hidden 4096, 32 heads /
#                  8 KV heads of 128, ffn 14336, KV cache of 1024 tokens,
#                  bf16 (weights from --tiled-weights); 100 timed steps after
#                  10 warm-up steps; the models go to $TMPDIR/tpfuse-decode-
#                  llama3-8b and are deleted after their batch
#   TPF_BENCH_SIZE    tpmodels.py size options instead of the preset's
#   TPF_BENCH_ITERS, TPF_BENCH_WARMUP   timed and warm-up steps
#   TPF_BENCH_TORCH_MODES   the peer's modes (default eager,cuda-graph,compile)
#   TPF_BENCH_COMPILE_MODE  torch.compile mode (default: default, then
#                           torch.cuda.graph capture)
#   TPF_BENCH_PEER_ARGS     more torch_decode_peer.py options
#   TPF_BENCH_WORK    folder for the generated models (dense-small: OUTDIR)
#   TPF_BENCH_KEEP_MODELS=1 keeps them (llama3-8b: 1.75 GB per batch)
#   TPF_BENCH_FP8=1   adds the dense_fp8 example
#   TPF_BENCH_WORLD   ranks (default 2): the models are split that many ways
#                     and both tpfuse and the peer run that many processes
#   TPF_BENCH_TRACE=1  after each batch's fused timing, the kernel timeline
#                     of 20 more replays of its CUDA graph (bench-decode
#                     --trace, CUPTI; every rank) and its profile per step:
#                     OUTDIR/trace-bB.rankR.jsonl and OUTDIR/trace-bB.txt
#                     (bench/decode_trace.py, rank 0); needs libcupti on
#                     LD_LIBRARY_PATH (the CUDA toolkit's)
#   TPF_BENCH_PROFILE=1  after each batch's timings, an Nsight Compute
#                     profile of the fused graph, eager, on rank 0 (80 kernel
#                     launches after the first 400, no cache flush):
#                     OUTDIR/ncu-bB.csv and its table OUTDIR/ncu-bB.txt
#                     (bench/ncu_kernels.py --sum); needs ncu in PATH
#   TPF_BENCH_BUDGET  seconds the whole run may take (llama3-8b: 540, else
#                     0: no limit): each step runs under `timeout` for at
#                     most what is left, one with too little left is skipped,
#                     and the summary is still printed
# Writes OUTDIR/device.txt, OUTDIR/decode.jsonl (one JSON object per line:
# config, copy-bandwidth, roofline and timing rows), OUTDIR/summary.txt
# (the report), OUTDIR/bandwidth.log and per batch B the logs
# OUTDIR/models-bB.gen-FAMILY.log and OUTDIR/models-bB.torch.log.
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
batches=${3:-1 8 64}
preset=${TPF_BENCH_PRESET:-dense-small}
case $preset in
dense-small)
	psize="--layers 4 --hidden 2048 --heads 16 --kv-heads 8 --head-dim 128 --ffn 5632 --past 256"
	piters=200 pwarmup=20 pgen="--ranks-only" pkeep=1 ptimeout=300 pbudget=0 pwork=$out ;;
llama3-8b)
	psize="--layers 4 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 --ffn 14336 --past 1024"
	piters=100 pwarmup=10 pgen="--ranks-only --tiled-weights" pkeep=0 ptimeout=240 pbudget=540
	pwork=${TMPDIR:-/tmp}/tpfuse-decode-llama3-8b ;;
*)
	echo "run-decode.sh: unknown TPF_BENCH_PRESET '$preset' (dense-small, llama3-8b)" >&2
	exit 2 ;;
esac
size=${TPF_BENCH_SIZE:-$psize}
iters=${TPF_BENCH_ITERS:-$piters}
warmup=${TPF_BENCH_WARMUP:-$pwarmup}
torch_modes=${TPF_BENCH_TORCH_MODES:-eager,cuda-graph,compile}
compile_mode=${TPF_BENCH_COMPILE_MODE:-default}
read -r -a peer_args <<<"${TPF_BENCH_PEER_ARGS:-}"
keep=${TPF_BENCH_KEEP_MODELS:-$pkeep}
world=${TPF_BENCH_WORLD:-2}
budget=${TPF_BENCH_BUDGET:-$pbudget}
mkdir -p "$out"
work=${TPF_BENCH_WORK:-$pwork}
mkdir -p "$work"
# shellcheck source=/dev/null
[ -f "$build/gpu-env.sh" ] && . "$build/gpu-env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
t0=$(date +%s)
say() { echo "==> [$(($(date +%s) - t0)) s] $*"; }
# limit SECONDS: SECONDS, or what is left of the budget when that is less
limit() {
	local left=$((budget - ($(date +%s) - t0)))
	[ "$left" -gt 0 ] || left=1
	if [ "$budget" -gt 0 ] && [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
nvidia-smi -L | tee "$out/device.txt"
# what torch.compile needs besides torch: Triton, a C compiler and Python.h
python3 - >> "$out/device.txt" 2>&1 <<'PY' || true
import importlib.metadata as md, os, shutil, sys, sysconfig
def ver(p):
    try:
        return md.version(p)
    except md.PackageNotFoundError:
        return None
inc = sysconfig.get_paths()["include"]
print("python %s, torch %s, triton %s, onnx %s; gcc %s; Python.h %s"
      % (sys.version.split()[0], ver("torch"), ver("triton"), ver("onnx"), shutil.which("gcc"),
         "found" if os.path.exists(os.path.join(inc, "Python.h")) else "missing in " + inc))
PY
res="$out/decode.jsonl"
: > "$res"
python3 - "$preset" "$size" "$iters" "$warmup" "$batches" "$torch_modes" "$compile_mode" "$world" >> "$res" <<'PY'
import json, sys
k = ("preset", "size", "iters", "warmup", "batches", "torch_modes", "compile_mode", "world")
row = dict(zip(k, sys.argv[1:]))
row["iters"], row["warmup"], row["world"] = int(row["iters"]), int(row["warmup"]), int(row["world"])
print(json.dumps({"impl": "config", **row}))
PY

# Every batch's models, generated in parallel before anything is timed,
# each followed by its per-rank byte count (decode_roofline.py bytes).
gen() { # FAMILY BATCH: models into $work/models-bBATCH, logs into $out
	local fam=$1 b=$2 dir=$work/models-b$2 lg=$out/models-b$2
	# shellcheck disable=SC2086
	timeout "$(limit 300)" python3 "$here/../examples/tpmodels.py" "$fam" --world-size "$world" --out "$dir" \
		--dtype bfloat16 --batch "$b" $size $pgen > "$lg.gen-$fam.log" 2>&1 &&
		python3 "$here/decode_roofline.py" bytes "$dir/$fam.rank{rank}.onnx" --label "batch=$b" --world-size "$world" \
			--model-name "$fam" > "$lg.roofline-$fam.jsonl" 2>> "$lg.gen-$fam.log"
}
say "generating the models ($preset: $size)"
pids=()
for b in $batches; do
	dir=$work/models-b$b
	mkdir -p "$dir"
	rm -f "$dir"/*.onnx # a killed run's
	gen dense "$b" &
	pids+=($!)
	if [ -n "${TPF_BENCH_FP8:-}" ]; then
		gen dense_fp8 "$b" &
		pids+=($!)
	fi
done
# the GPUs' copy bandwidth meanwhile (the generators use the CPUs only)
python3 "$here/decode_roofline.py" bandwidth --mib 1024 >> "$res" 2> "$out/bandwidth.log" ||
	echo "copy bandwidth: not measured (see $out/bandwidth.log)"
gen_failed=0
for p in "${pids[@]}"; do
	wait "$p" || gen_failed=1
done
[ "$gen_failed" = 0 ] || echo "model generation failed for some batch (see $out/models-b*.gen-*.log)"
say "models ready"

fits() { # WHAT MAX MIN: sets lim, the seconds a step may take (at most MAX);
	# status 1 and a line saying WHAT was skipped when fewer than MIN are left
	lim=$(limit "$2")
	[ "$lim" -ge "$3" ] && return 0
	echo "$1: skipped (${lim} s of the budget left)"
	return 1
}
td() { # tpfuse decode: MODEL LABEL [bench-decode options]
	local model=$1 label=$2 lim
	shift 2
	fits "bench-decode $label $*" 300 20 || return 0
	timeout --kill-after=10 "$lim" mpirun --allow-run-as-root -np "$world" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
		"$build/bench/bench-decode" "$model" --backend cuda --iters "$iters" --warmup "$warmup" \
		--label "$label" "$@" | tee -a "$res" ||
		echo "bench-decode $model $label $*: failed (exit ${PIPESTATUS[0]})"
}
prof() { # BATCH MODEL: the Nsight Compute profile of TPF_BENCH_PROFILE=1
	local b=$1 model=$2 lim
	command -v ncu >/dev/null || { echo "profile batch=$b: no ncu in PATH"; return; }
	fits "profile batch=$b" 150 30 || return 0
	say "batch $b: Nsight Compute profile (rank 0)"
	# shellcheck disable=SC2016
	timeout --kill-after=10 "$lim" mpirun --allow-run-as-root -np "$world" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
		bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec ncu --cache-control none --launch-skip 400 \
			--launch-count 80 --csv --metrics \
			gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread "$@"
		else exec "$@"; fi' _ "$build/bench/bench-decode" "$model" --backend cuda --iters 20 --warmup 5 \
		--optimize --no-graph > "$out/ncu-b$b.csv" 2>&1 &&
		python3 "$here/ncu_kernels.py" "$out/ncu-b$b.csv" --sum > "$out/ncu-b$b.txt" ||
		echo "profile batch=$b: failed (see $out/ncu-b$b.csv)"
}
trace() { # BATCH MODEL: the kernel timeline of TPF_BENCH_TRACE=1 (a separate run: tracing slows it)
	local b=$1 model=$2 lim
	fits "trace batch=$b" 120 20 || return 0
	say "batch $b: kernel timeline of the fused graph"
	timeout --kill-after=10 "$lim" mpirun --allow-run-as-root -np "$world" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
		"$build/bench/bench-decode" "$model" --backend cuda --iters 20 --warmup "$warmup" --optimize \
		--label "batch=$b" --variant fused-traced --trace "$out/trace-b$b.rank{rank}.jsonl" --trace-steps 20 \
		> "$out/trace-b$b.log" 2>&1 &&
		python3 "$here/decode_trace.py" "$out/trace-b$b.rank0.jsonl" > "$out/trace-b$b.txt" ||
		echo "trace batch=$b: failed (see $out/trace-b$b.log)"
}
# tpfuse first (every batch), then the PyTorch peer: what a budget cuts
# short is the peer's last batches, and the compile mode before the others
for b in $batches; do
	dir=$work/models-b$b
	cat "$out/models-b$b.roofline-dense.jsonl" >> "$res" 2>/dev/null || true
	if [ -f "$dir/dense.rank0.onnx" ]; then
		say "batch $b: tpfuse"
		m="$dir/dense.rank{rank}.onnx"
		td "$m" "batch=$b" --no-oneshot --variant unfused-nccl
		td "$m" "batch=$b"
		td "$m" "batch=$b" --optimize
		[ "${TPF_BENCH_TRACE:-}" = 1 ] && trace "$b" "$m"
	else
		echo "batch $b: no model (see $out/models-b$b.gen-dense.log)"
	fi
	if [ -n "${TPF_BENCH_FP8:-}" ]; then
		cat "$out/models-b$b.roofline-dense_fp8.jsonl" >> "$res" 2>/dev/null || true
		m8="$dir/dense_fp8.rank{rank}.onnx"
		td "$m8" "batch=$b" --no-fp8-gemm --variant fp8-dequant
		td "$m8" "batch=$b" --variant fp8-gemm
		td "$m8" "batch=$b" --optimize --variant fp8-fused
	fi
done
n_after=$(echo "$batches" | wc -w)
for b in $batches; do
	dir=$work/models-b$b
	n_after=$((n_after - 1))
	lim=$ptimeout
	left=$((budget - ($(date +%s) - t0) - 60 * n_after)) # 60 s kept for each later batch
	if [ "$budget" -gt 0 ] && [ "$left" -lt "$lim" ]; then lim=$left; fi
	if [ ! -f "$dir/dense.rank0.onnx" ]; then
		echo "torch peer batch=$b: no model"
	elif [ "$lim" -lt 60 ]; then
		echo "torch peer batch=$b: skipped (${lim} s of the budget for it)"
	else
		say "batch $b: PyTorch peer ($torch_modes, at most $lim s)"
		timeout --kill-after=15 "$lim" python3 "$here/torch_decode_peer.py" --model "$dir/dense.rank{rank}.onnx" \
			--iters "$iters" --warmup "$warmup" --label "batch=$b" --modes "$torch_modes" \
			--compile-mode "$compile_mode" --timeout $((lim - 30)) --port $((29511 + b)) --world-size "$world" \
			"${peer_args[@]}" 2>"$out/models-b$b.torch.log" | tee -a "$res" ||
			echo "torch peer batch=$b: exit ${PIPESTATUS[0]} (see $out/models-b$b.torch.log)"
	fi
	[ "${TPF_BENCH_PROFILE:-}" = 1 ] && [ -f "$dir/dense.rank0.onnx" ] && prof "$b" "$dir/dense.rank{rank}.onnx"
	rm -f "$dir"/*.full.onnx
	[ "$keep" = 1 ] || { rm -f "$dir"/*.onnx && rmdir "$dir" 2>/dev/null; } || true
done
say "done; summary"
python3 "$here/decode_report.py" "$res" --annotate | tee "$out/summary.txt"
