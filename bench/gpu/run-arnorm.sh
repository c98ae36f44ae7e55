#!/usr/bin/env bash
# Builds and runs the all-reduce + add + RMSNorm benchmark on a machine with
# GPUs (CUDA, NCCL and Open MPI installed), then the PyTorch peer on the same
# GPUs.  Usage: bench/gpu/run-arnorm.sh OUTDIR [PEERS_SCRIPT]
set -euo pipefail
out=${1:-out}
peers=${2:-}
mkdir -p "$out" build-gpu
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ngpu=$(nvidia-smi -L | wc -l)
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Iir -Ikernels/cuda \
	$(mpicxx --showme:compile) bench/bench-arnorm.cu kernels/cuda/ar-norm.cu ir/diag.c ir/dtype.c \
	-o build-gpu/bench-arnorm $(mpicxx --showme:link) -lnccl
mpirun --allow-run-as-root --oversubscribe -np "$ngpu" -x NCCL_NVLS_ENABLE \
	build-gpu/bench-arnorm --json "$out/tpfuse-arnorm.json" | tee "$out/tpfuse-arnorm.txt"
if [ -n "$peers" ]; then
	python3 "$peers" --out "$out/torch-peers.json" --cases ar_norm 2>&1 | grep -v Warning | tee "$out/torch-peers.txt"
fi
