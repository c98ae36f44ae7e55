#!/usr/bin/env bash
# Builds tpfuse with AddressSanitizer and UndefinedBehaviorSanitizer in a
# build folder of its own and runs the whole meson test suite there (every
# suite but gpu), leak checking included.  Any sanitizer report fails the
# test that triggered it.
#
#   scripts/test-sanitizers.sh [MESON-TEST-ARGS...]
#
# Environment:
#   BUILD_DIR          the build folder (default: build-asan)
#   MESON_ARGS         extra `meson setup` arguments for a new build folder
#                      (CUDA and NCCL are disabled: no GPU code is sanitized)
#   TPF_LIMITS_NODES   size of test-limits' huge graphs (default here: 250000,
#                      a quarter of the normal build's 10^6: sanitized code is
#                      about 5x slower and 3x larger)
#   TIMEOUT_MULTIPLIER meson test timeout multiplier (default: 4)
#   NINJA_ARGS         extra ninja arguments (such as -j2)
#
# Uses .venv/bin/python for the onnx suite when scripts/setup.sh made one.
# The last line reads "N passed, N failed, N skipped".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
build_dir=${BUILD_DIR:-build-asan}

say() { printf '==> %s\n' "$*"; }

py_args=()
if [ -x "$root/.venv/bin/python" ]; then
	py_args=(-Dpython="$root/.venv/bin/python")
fi

if [ ! -f "$build_dir/build.ninja" ]; then
	say "configuring $build_dir/ with -Db_sanitize=address,undefined"
	# shellcheck disable=SC2086
	# CUDA code cannot be checked by the host sanitizers (and nvcc does not
	# link sanitized objects): the GPU parts stay out of this build.
	meson setup "$build_dir" -Db_sanitize=address,undefined -Db_lundef=false \
		-Dcuda=disabled -Dnccl=disabled "${py_args[@]}" ${MESON_ARGS:-}
fi
say "building $build_dir/"
ninja -C "$build_dir" ${NINJA_ARGS:-}

# Leaks that belong to Open MPI and its helpers (hwloc, libevent, PMIx), not to
# tpfuse; they show up in every MPI program.
supp=$PWD/$build_dir/lsan-suppressions.txt
cat >"$supp" <<'EOF'
leak:libmpi.so
leak:libopen-pal.so
leak:libopen-rte.so
leak:libpmix.so
leak:libhwloc.so
leak:libevent
leak:mca_
leak:libucp.so
leak:libucs.so
EOF
# Open MPI unloads its plugins (mca_*.so) before exit, so LeakSanitizer can no
# longer name the module of their leaks and the suppressions above cannot
# match.  For the mpi suite a preloaded no-op dlclose keeps them loaded, and
# the slow unwinder follows stacks through glibc (vasprintf) into them.
noclose=$PWD/$build_dir/lsan-noclose.so
if [ ! -f "$noclose" ]; then
	printf 'int dlclose(void *handle)\n{\n\t(void)handle;\n\treturn 0;\n}\n' |
		cc -shared -fPIC -O2 -x c -o "$noclose" -
fi
mpi_asan=detect_leaks=1:verify_asan_link_order=0:fast_unwind_on_malloc=0

export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
export TPF_LIMITS_NODES=${TPF_LIMITS_NODES:-250000}
# Open MPI refuses root without these, and the tests start more ranks than
# this machine may have cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

test_args=(-C "$build_dir" --print-errorlogs --timeout-multiplier "${TIMEOUT_MULTIPLIER:-4}")
log=$build_dir/meson-logs/testlog.json
all_log=$build_dir/meson-logs/testlog-sanitizers.json
status=0
if [ $# -gt 0 ]; then
	say "meson test under ASan+UBSan: $*"
	LD_PRELOAD=$noclose ASAN_OPTIONS=$mpi_asan meson test "${test_args[@]}" "$@" || status=$?
	cp "$log" "$all_log" 2>/dev/null || : >"$all_log"
else
	say "meson test under ASan+UBSan (all suites but gpu and mpi)"
	meson test "${test_args[@]}" --no-suite gpu --no-suite mpi || status=$?
	cp "$log" "$all_log" 2>/dev/null || : >"$all_log"
	if [ -n "$(meson test -C "$build_dir" --list --suite mpi 2>/dev/null | grep ':mpi / ')" ]; then
		say "meson test under ASan+UBSan (suite mpi)"
		LD_PRELOAD=$noclose ASAN_OPTIONS=$mpi_asan \
			meson test "${test_args[@]}" --suite mpi || status=$?
		cat "$log" >>"$all_log" 2>/dev/null || :
	fi
fi

python3 scripts/test-summary.py "$all_log" "failed under sanitizers: "
exit $status
