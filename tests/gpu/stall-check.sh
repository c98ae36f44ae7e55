#!/usr/bin/env bash
# gpu-nccl-stall: a collective that one rank skips must end in the NCCL
# communicator's own timeout, and that rank must then end the whole job.
#
# Runs `mpirun -np 2 TEST_GPU_NCCL --stall`: the last rank skips an
# allreduce and sleeps far longer than DEADLINE_S (default 45), so only the
# other rank's abort can end the job in time.  Passes only when all of these
# hold:
#   - the job ends before DEADLINE_S (`timeout` ends a hang: exit 124 fails);
#   - mpirun exits 3: the waiting rank's tpf_comm_abort after an error that
#     came in time (1 would be a late error, anything else another failure);
#   - the output holds the timeout's own message (the device's "did not
#     finish within 8 s" or the communicator's "timed out after 8 s") and
#     the test's "PASS: stalled allreduce failed after" line, and the
#     stalled rank reported that it skipped the allreduce.
# With MODE --stall-peer the skipped calls are peer-memory all-reduces
# (one-shot and two-shot kernels) and a peer-memory all-to-all: the
# messages are the kernels' own ("waited more than 3 s", one for each) and
# the timeouts are theirs.
# Exit 77 (skipped) when the program skips (no GPU, fewer than 2 GPUs).
#
# Usage: stall-check.sh TEST_GPU_NCCL [DEADLINE_S [MODE]]
set -u
exe=${1:?usage: stall-check.sh TEST_GPU_NCCL [DEADLINE_S [MODE]]}
deadline=${2:-45}
mode=${3:---stall}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
t0=$(date +%s.%N)
timeout --kill-after=10 "$deadline" mpirun --allow-run-as-root --oversubscribe -np 2 \
	-x NCCL_NVLS_ENABLE=0 "$exe" "$mode" >"$log" 2>&1
rc=$?
elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cat "$log"
echo "---- mpirun exit status $rc after $elapsed s (deadline $deadline s)"
if [ "$rc" = 77 ]; then
	echo "skipped"
	exit 77
fi
fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	bad "the job outlived the ${deadline} s deadline: the stalled allreduce was not ended by the timeout and an abort"
elif [ "$rc" != 3 ]; then
	bad "exit status $rc; the abort after an in-time error exits 3"
fi
if [ "$mode" = --stall-peer ]; then
	grep -q "skipping peer-memory all-reduces and an all-to-all" "$log" ||
		bad "the stalled rank never reported skipping the calls"
	grep -q "waited more than 3 s for another rank's data" "$log" ||
		bad "no all-reduce timeout message (\"waited more than 3 s for another rank's data\")"
	grep -q "peer-memory all-to-all waited more than 3 s for another rank's pieces" "$log" ||
		bad "no all-to-all timeout message (\"waited more than 3 s for another rank's pieces\")"
	grep -q "PASS: stalled peer-memory all-reduce and all-to-all failed after" "$log" ||
		bad "the waiting rank did not report an in-time failure"
else
	grep -q "skipping an allreduce" "$log" || bad "the stalled rank never reported skipping the allreduce"
	grep -Eq "did not finish within 8 s|timed out after 8 s" "$log" ||
		bad "no timeout message (\"did not finish within 8 s\" or \"timed out after 8 s\")"
	grep -q "PASS: stalled allreduce failed after" "$log" || bad "the waiting rank did not report an in-time failure"
fi
[ "$fail" = 0 ] && echo "PASS: the stalled allreduce ended the job by its timeout in $elapsed s"
exit "$fail"
