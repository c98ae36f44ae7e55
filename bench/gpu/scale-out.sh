#!/usr/bin/env bash
# The checks and measurements at one rank a GPU on a machine with 4 or 8
# GPUs (or 2: the same at TP=2, plus the -w8 corpus at 8 ranks sharing
# them), in two calls that each end within BUDGET seconds (default 570):
#
#   A  build (scripts/gpu-build.sh, once), test-gpu-nccl at N ranks, the
#      fused-kernel benchmarks with the PyTorch peer in the same call
#      (bench/gpu/run.sh), `tpfuse tune` (its table against the built-in rows)
#   B  the export corpus at W=N and the example models at world N, through
#      NCCL, eager and under CUDA graphs (gpu_corpus.py, gpu_models.py), and
#      the decode step at TP=N against the PyTorch peer (run-decode.sh)
#
# Usage: bench/gpu/scale-out.sh A|B OUTDIR [PEERS_SCRIPT]
#   N is the GPU count (nvidia-smi -L).  Each step runs under `timeout` for
#   what is left of BUDGET and is skipped with less than 30 s left;
#   OUTDIR/timings.txt has each step's exit status and seconds, OUTDIR/NAME.txt
#   its output.  PEERS_SCRIPT: the PyTorch peer of bench/gpu/run.sh.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
phase=${1:?A or B} out=${2:?OUTDIR} peers=${3:-}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
left() { echo $((${BUDGET:-570} - ($(date +%s) - t0))); }
n=$(nvidia-smi -L | wc -l)
echo "phase $phase, $n GPUs"
nvidia-smi -L
nvidia-smi topo -m | head -$((n + 2))
step() {
	local name=$1 lim=$2 l
	shift 2
	l=$(left)
	if [ "$l" -lt 30 ]; then
		echo "$name skipped ($l s left)" | tee -a "$out/timings.txt"
		return
	fi
	[ "$lim" -gt "$l" ] && lim=$l
	local s
	s=$(date +%s)
	timeout "$lim" "$@" >"$out/$name.txt" 2>&1
	echo "$name rc=$? $(($(date +%s) - s)) s" | tee -a "$out/timings.txt"
	tail -4 "$out/$name.txt"
}
mp=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH)
if [ ! -x build-gpu/cli/tpfuse ]; then
	step build 400 scripts/gpu-build.sh build-gpu cli/tpfuse tests/mpi/tpf-run tests/gpu/test-gpu-nccl \
		tests/gpu/test-gpu-kernels bench/bench-decode
fi
# shellcheck disable=SC1091
. build-gpu/gpu-env.sh
case $phase in
A)
	step nccl 60 "${mp[@]}" -np "$n" build-gpu/tests/gpu/test-gpu-nccl
	if [ "$n" -lt 8 ]; then
		step corpus8-mpi 90 python3 tests/gpu/gpu_corpus.py --tpfuse build-gpu/cli/tpfuse --world 8 \
			--comm mpi --work "${TMPDIR:-/tmp}/tpf-scale-out-corpus8"
	fi
	if [ -n "$peers" ]; then
		step bench 300 bench/gpu/run.sh "$out/bench" "$peers" ar_norm
	else
		step bench 300 bench/gpu/run.sh "$out/bench"
	fi
	step tune 200 "${mp[@]}" -np "$n" build-gpu/cli/tpfuse tune -o "$out/strategy.txt"
	;;
B)
	step corpus 250 python3 tests/gpu/gpu_corpus.py --tpfuse build-gpu/cli/tpfuse --world "$n" \
		--work "${TMPDIR:-/tmp}/tpf-scale-out-corpus"
	step models 260 python3 tests/gpu/gpu_models.py --tpf-run build-gpu/tests/mpi/tpf-run --world "$n" \
		--work "${TMPDIR:-/tmp}/tpf-scale-out-models"
	TPF_BENCH_WORLD=$n TPF_BENCH_TORCH_MODES=eager,cuda-graph step decode 200 \
		bench/gpu/run-decode.sh build-gpu "$out/decode" "1 8"
	;;
*)
	echo "usage: bench/gpu/scale-out.sh A|B OUTDIR [PEERS_SCRIPT]" >&2
	exit 2
	;;
esac
cat "$out/timings.txt"
