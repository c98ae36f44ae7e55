#!/usr/bin/env bash
# Builds and runs tpfuse's fused-kernel benchmarks on a machine with GPUs
# (CUDA, NCCL and Open MPI installed), then the PyTorch peer on the same GPUs
# in the same call.  Usage: bench/gpu/run.sh OUTDIR [PEERS_SCRIPT [CASES]]
#   CASES for the peer: ar_norm,sharded_qk,a2a,sigmoid_gate (default: all)
set -euo pipefail
out=${1:-out}
peers=${2:-}
cases=${3:-ar_norm,sharded_qk,a2a,sigmoid_gate}
mkdir -p "$out" build-gpu
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ngpu=$(nvidia-smi -L | wc -l)
flags=(-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Iir -Ikernels -Ikernels/cuda $(mpicxx --showme:compile))
libs=($(mpicxx --showme:link) -lnccl)
common=(kernels/cuda/ar-norm.cu kernels/cuda/ar-peer.cu kernels/cuda/a2a.cu kernels/cuda/fused-misc.cu kernels/env.c ir/diag.c ir/dtype.c)
nvcc "${flags[@]}" bench/bench-arnorm.cu "${common[@]}" -o build-gpu/bench-arnorm "${libs[@]}" &
nvcc "${flags[@]}" bench/bench-fusions.cu "${common[@]}" -o build-gpu/bench-fusions "${libs[@]}" &
wait
run() { mpirun --allow-run-as-root --oversubscribe -np "$ngpu" -x NCCL_NVLS_ENABLE "$@"; }
run build-gpu/bench-arnorm --json "$out/tpfuse-arnorm.json" | tee "$out/tpfuse-arnorm.txt"
run build-gpu/bench-fusions --json "$out/tpfuse-fusions.json" | tee "$out/tpfuse-fusions.txt"
if [ -n "$peers" ]; then
	python3 "$peers" --out "$out/torch-peers.json" --cases "$cases" 2>&1 | grep -v -i warn | tee "$out/torch-peers.txt"
fi
