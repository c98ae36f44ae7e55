#!/usr/bin/env bash
# Runs COMMAND when this machine has at least N GPUs, else exits 77
# (skipped): the tests at world sizes above 2 (gpu-*-w4).
#
# Usage: need-gpus.sh N COMMAND [ARGS...]
set -u
n=${1:?usage: need-gpus.sh N COMMAND [ARGS...]}
shift
have=0
if command -v nvidia-smi >/dev/null 2>&1; then
	have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if [ "$have" -lt "$n" ]; then
	echo "$have GPU(s), $n needed: skipped"
	exit 77
fi
exec "$@"
