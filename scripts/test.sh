#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test suite but gpu (the ones that
# need no GPU: unit, onnx, mpi, python, shard, corpus, conformance, ...).
# Extra arguments go to `meson test`.
# The last line reads "N passed, N failed, N skipped".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}

./scripts/setup.sh

# Open MPI refuses root without these, and the tests start more ranks than
# this machine may have cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

echo "==> meson test (all suites but gpu)"
status=0
meson test -C "$build_dir" --no-suite gpu --print-errorlogs "$@" || status=$?

python3 scripts/test-summary.py "$build_dir/meson-logs/testlog.json"
exit $status
