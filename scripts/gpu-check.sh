#!/usr/bin/env bash
# The GPU machine's check, in one call: builds tpfuse with CUDA and NCCL
# (scripts/gpu-build.sh, protobuf-c and cmocka from .deps/), runs
# `meson test --suite gpu`, then the GPU benchmarks: bench/gpu/run.sh (the
# fused kernels, with the PyTorch peer script in the same call when
# .bench/torch_peers.py or $TPF_TORCH_PEERS exists) and
# bench/gpu/run-decode.sh (the decode step against bench/torch_decode_peer.py).
#
# It prints the commit it checks (git rev-parse HEAD, and whether tracked
# files differ from it) first, and again in the summary at the end.  For a
# copy of the tree without its own git metadata (git archive), TPF_COMMIT
# names the commit and TPF_TREE says what the copy holds; TPF_COMMIT wins
# over git.
#
# Results go to $OUT when it is set (the device machine's result folder),
# else to out/gpu-check/: gpu-check.log (everything printed), summary.txt,
# testlog.txt and testlog.json (meson's), bench-results.tar.gz (the
# benchmarks' .json/.jsonl/.txt files).  Bulky work files (generated models)
# stay in BUILDDIR/gpu-check-work/.
#
# Usage: scripts/gpu-check.sh [--no-bench] [--budget S] [--build DIR] [-- MESON-TEST-ARGS...]
#   --no-bench   build and test only
#   --budget S   the whole check should end within S seconds: each benchmark
#                runs under `timeout` for what is left, and one with less
#                than a minute left is skipped (the build and tests always run)
#   --build DIR  build folder (default build-gpu)
# Exit status: 0 when the build, the tests and the benchmarks ran cleanly.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
root=$PWD
bench=1
budget=0
build="build-gpu"
test_args=()
while [ $# -gt 0 ]; do
	case $1 in
	--no-bench) bench=0 ;;
	--budget) budget=${2:?--budget needs seconds}; shift ;;
	--build) build=${2:?--build needs a folder}; shift ;;
	--) shift; test_args=("$@"); break ;;
	*) echo "usage: scripts/gpu-check.sh [--no-bench] [--budget S] [--build DIR] [-- MESON-TEST-ARGS...]" >&2; exit 2 ;;
	esac
	shift
done
out=${OUT:-$root/out/gpu-check}
work=$root/$build/gpu-check-work
mkdir -p "$out"
log=$out/gpu-check.log
: >"$log"
exec > >(tee -a "$log") 2>&1
t_start=$(date +%s)

# git's answer only where this folder is the top of its own checkout (a copy
# placed inside another checkout would report that one's commit)
if [ -z "${TPF_COMMIT:-}" ] && [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$root" ] &&
	commit=$(git rev-parse HEAD 2>/dev/null); then
	changed=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
	if [ "$changed" -eq 0 ]; then
		tree="clean"
	else
		tree="dirty: $changed tracked file(s) differ from the commit"
	fi
else
	commit=${TPF_COMMIT:-unknown}
	tree=${TPF_TREE:-"no git metadata here${TPF_COMMIT:+; commit from TPF_COMMIT}"}
fi
echo "==> gpu-check: commit $commit ($tree)"
device=$(nvidia-smi -L 2>/dev/null || echo "no nvidia-smi")
echo "$device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1

step_names=()
step_status=()
step_secs=()
record() { # NAME STATUS SECONDS
	step_names+=("$1")
	step_status+=("$2")
	step_secs+=("$3")
}

# ---------------------------------------------------------------- build
echo "==> build ($build)"
t=$(date +%s)
if scripts/gpu-build.sh "$build"; then
	record build ok $(($(date +%s) - t))
	built=1
else
	record build FAILED $(($(date +%s) - t))
	built=0
fi

# ---------------------------------------------------------------- tests
tests_summary="not run"
if [ "$built" = 1 ]; then
	# shellcheck disable=SC1091
	. "$build/gpu-env.sh"
	echo "==> meson test --suite gpu ${test_args[*]:-}"
	t=$(date +%s)
	meson test -C "$build" --suite gpu --print-errorlogs "${test_args[@]}"
	trc=$?
	record "gpu tests" "$([ $trc = 0 ] && echo ok || echo "FAILED (exit $trc)")" $(($(date +%s) - t))
	cp "$build/meson-logs/testlog.txt" "$build/meson-logs/testlog.json" "$out/" 2>/dev/null || true
	tests_summary=$(python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
rows = []
try:
    for line in open(sys.argv[1]):
        if line.strip():
            r = json.loads(line)
            rows.append(f"  {r.get('name', '?').split(' / ')[-1].split(':')[-1]:<16} {r.get('result', '?'):<8} {r.get('duration', 0):7.1f} s")
except OSError as e:
    rows.append(f"  no test log: {e}")
print("\n".join(rows))
PY
)
fi

# ---------------------------------------------------------------- benchmarks
# bench_step NAME COMMAND...: runs a benchmark within what is left of the budget
bench_step() {
	local name=$1 left=0 t rc
	shift
	if [ "$budget" -gt 0 ]; then
		left=$((budget - ($(date +%s) - t_start)))
		if [ "$left" -lt 60 ]; then
			record "$name" "skipped (${left} s of the budget left)" 0
			return
		fi
	fi
	echo "==> $name: $*"
	t=$(date +%s)
	if [ "$left" -gt 0 ]; then
		timeout --kill-after=10 "$left" "$@"
	else
		"$@"
	fi
	rc=$?
	case $rc in
	0) record "$name" ok $(($(date +%s) - t)) ;;
	124 | 137) record "$name" "FAILED (stopped at the ${budget} s budget)" $(($(date +%s) - t)) ;;
	*) record "$name" "FAILED (exit $rc)" $(($(date +%s) - t)) ;;
	esac
}
if [ "$built" = 1 ] && [ "$bench" = 1 ]; then
	rm -rf "$work"
	mkdir -p "$work"
	peers=()
	peer_script=${TPF_TORCH_PEERS:-$root/.bench/torch_peers.py}
	[ -f "$peer_script" ] && peers=("$peer_script")
	echo "PyTorch peer of the kernel benchmark: ${peers[*]:-none}"
	bench_step "bench kernels" bench/gpu/run.sh "$work/kernels" "${peers[@]}"
	bench_step "bench decode" bench/gpu/run-decode.sh "$build" "$work/decode"
	(cd "$work" && find . -maxdepth 2 -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.txt' \) -print0 |
		tar -czf "$out/bench-results.tar.gz" --null -T -) || true
elif [ "$bench" = 0 ]; then
	record benchmarks "skipped (--no-bench)" 0
fi

# ---------------------------------------------------------------- summary
status=0
{
	echo "==> gpu-check summary"
	echo "commit:  $commit ($tree)"
	echo "device:  $(echo "$device" | head -1)$([ "$(echo "$device" | wc -l)" -gt 1 ] && echo " (+$(($(echo "$device" | wc -l) - 1)) more)")"
	for i in "${!step_names[@]}"; do
		printf '%-14s %s (%s s)\n' "${step_names[$i]}:" "${step_status[$i]}" "${step_secs[$i]}"
	done
	echo "tests:"
	echo "$tests_summary"
	echo "total:   $(($(date +%s) - t_start)) s; results in $out"
} | tee "$out/summary.txt"
grep -q FAILED "$out/summary.txt" && status=1
exit $status
