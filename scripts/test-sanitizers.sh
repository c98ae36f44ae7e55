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
#   TPF_LIMITS_NODES   size of test-limits' huge graphs (default here: 250000,
#                      a quarter of the normal build's 10^6: sanitized code is
#                      about 5x slower and 3x larger)
#   TIMEOUT_MULTIPLIER meson test timeout multiplier (default: 4)
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
	meson setup "$build_dir" -Db_sanitize=address,undefined -Db_lundef=false \
		"${py_args[@]}" ${MESON_ARGS:-}
fi
say "building $build_dir/"
ninja -C "$build_dir"

# Leaks that belong to Open MPI and its helpers (hwloc, libevent, PMIx), not to
# tpfuse; they show up in every MPI program.
supp=$build_dir/lsan-suppressions.txt
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

export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$PWD/$supp:print_suppressions=0
export TPF_LIMITS_NODES=${TPF_LIMITS_NODES:-250000}
# Open MPI refuses root without these, and the tests start more ranks than
# this machine may have cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

say "meson test under ASan+UBSan (all suites but gpu)"
status=0
meson test -C "$build_dir" --no-suite gpu --print-errorlogs \
	--timeout-multiplier "${TIMEOUT_MULTIPLIER:-4}" "$@" || status=$?

python3 - "$build_dir/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
names = []
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    r = json.loads(line)
    res = r.get("result", "")
    if res in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif res == "SKIP":
        skipped += 1
    else:
        failed += 1
        names.append("%s (%s)" % (r.get("name", "?"), res))
for n in names:
    print("failed under sanitizers: " + n)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
