#!/usr/bin/env bash
# Fuzzes each libFuzzer target of tests/fuzz for a given time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 seconds, every target)
#
# Configures build-fuzz/ (clang, -Dfuzz=enabled, AddressSanitizer +
# UndefinedBehaviorSanitizer) when it is missing, builds, then runs each
# target for SECONDS on a working copy of its seed corpus
# (tests/fuzz/corpus/TARGET plus tests/fuzz/regressions/TARGET).
#
# A finding (crash, leak, UBSan report, timeout, out-of-memory) leaves its
# input in build-fuzz/findings/TARGET/ and makes the script exit 1.  To keep
# it as a regression test once fixed:
#     cp build-fuzz/findings/TARGET/crash-... tests/fuzz/regressions/TARGET/NAME
#
# Environment: BUILD_DIR (default build-fuzz), FUZZ_JOBS (parallel fuzzing
# jobs per target, default 1), FUZZ_SEED (libFuzzer's random seed; unset: a
# new one each run), FUZZ_ARGS (extra libFuzzer flags), NINJA_ARGS (extra
# ninja arguments, such as -j2).
#
# FUZZ_SEED fixes libFuzzer's random choices, not the run: coverage, paths
# that depend on addresses (pointer-keyed tables, address-space
# randomization) and the machine's speed make two runs of one seed part, so
# CI (which sets one) can find what a run here has not.  tests/fuzz/README.md
# says what to run before a commit.
# Needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
build_dir=${BUILD_DIR:-build-fuzz}
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	targets=(model builder tensor session strategy shard text)
fi

say() { printf '==> %s\n' "$*"; }

case $seconds in
'' | *[!0-9]*)
	echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
	exit 2
	;;
esac

if ! command -v clang >/dev/null 2>&1; then
	echo "fuzz.sh: clang is not installed" >&2
	exit 1
fi
if [ ! -f "$build_dir/build.ninja" ]; then
	say "configuring $build_dir/ (clang, -Dfuzz=enabled, ASan+UBSan)"
	CC=clang meson setup "$build_dir" -Dfuzz=enabled \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dcuda=disabled -Dnccl=disabled -Dmpi=disabled
fi
say "building $build_dir/"
ninja -C "$build_dir" ${NINJA_ARGS:-} $(printf 'tests/fuzz/fuzz-%s ' "${targets[@]}")

export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

status=0
for t in "${targets[@]}"; do
	exe=$build_dir/tests/fuzz/fuzz-$t
	work=$build_dir/fuzz-corpus/$t
	findings=$build_dir/findings/$t
	log=$build_dir/fuzz-$t.log
	mkdir -p "$work" "$findings"
	for src in "$root/tests/fuzz/corpus/$t" "$root/tests/fuzz/regressions/$t"; do
		if [ -d "$src" ] && [ -n "$(ls -A "$src")" ]; then
			cp -n "$src"/* "$work"/
		fi
	done
	max_len=32768
	[ "$t" = builder ] && max_len=1024
	opts=()
	if [ -n "${FUZZ_SEED:-}" ]; then
		opts=(-seed="$FUZZ_SEED")
	fi
	if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
		# libFuzzer then writes one log per job into the current folder
		opts+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
	fi
	say "fuzzing $t for $seconds s (log: $log)"
	stamp=$build_dir/findings/.start-$t
	touch "$stamp"
	rc=0
	# shellcheck disable=SC2086
	"$exe" -max_total_time="$seconds" -max_len=$max_len -timeout=20 -rss_limit_mb=3072 \
		"${opts[@]}" -print_final_stats=1 -artifact_prefix="$findings/" ${FUZZ_ARGS:-} \
		"$work" >"$log" 2>&1 || rc=$?
	for jl in fuzz-[0-9]*.log; do
		if [ -f "$jl" ]; then
			cat "$jl" >>"$log"
			rm -f "$jl"
		fi
	done
	execs=$(awk '/^stat::number_of_executed_units:/ { n += $2 } END { print n + 0 }' "$log")
	found=$(find "$findings" -type f -newer "$stamp" | wc -l)
	echo "$t: exit $rc, $execs executions, $found new finding(s) in $findings"
	if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
		tail -n 40 "$log"
		status=1
	fi
done
exit $status
