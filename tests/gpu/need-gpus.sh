#!/usr/bin/env bash
# Runs COMMAND when this machine has at least N GPUs, else exits 77
# (skipped): the tests at world sizes above 2 (gpu-*-w4).
#
# Usage: need-gpus.sh N COMMAND [ARGS...]
set -u
n=${1:?usage: need-gpus.sh N COMMAND [ARGS...]}
shift
case $n in
'' | *[!0-9]*) echo "need-gpus.sh: N must be a number, not '$n'" >&2; exit 2 ;;
esac
have=0
if command -v nvidia-smi >/dev/null 2>&1; then
	have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
# CUDA_VISIBLE_DEVICES narrows what the ranks can use
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
	vis=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
	[ "$vis" -lt "$have" ] && have=$vis
fi
if [ "$have" -lt "$n" ]; then
	echo "$have GPU(s), $n needed: skipped"
	exit 77
fi
exec "$@"
