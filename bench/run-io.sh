#!/usr/bin/env bash
# Import + verify + export of synthetic dense decoders (bench/gen_synthetic.py),
# 100 and 1,000 layers, hidden 256 and 1024, weights in external data.
# Prints one table row per model and mode:
#   full  weights mmap'ed and written again to the output's external data file
#   refs  external data not loaded: references kept (the graph alone)
#
#   bench/run-io.sh                     # LAYERS="100 1000" HIDDENS="256 1024"
#   LAYERS="100 1000 10000" HIDDENS=256 bench/run-io.sh
#
# Needs a build (scripts/setup.sh, or BUILD_DIR=...) and the onnx package
# (.venv/bin/python, else python3).  Models are cached in .bench/io/ (or
# $BENCH_DIR); the weights are written as sparse files, so the 1024-wide,
# 1,000-layer model takes ~7 GiB of address space but little disk until
# export writes its copy (deleted after each row).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
bench=$build_dir/bench/bench-io
work=${BENCH_DIR:-.bench/io}
py=.venv/bin/python
[ -x "$py" ] || py=python3
read -r -a layers <<<"${LAYERS:-100 1000}"
read -r -a hiddens <<<"${HIDDENS:-256 1024}"

if [ ! -x "$bench" ]; then
	echo "run-io.sh: $bench not built (run scripts/setup.sh or set BUILD_DIR)" >&2
	exit 1
fi
mkdir -p "$work/out"

rows=()
for h in "${hiddens[@]}"; do
	for l in "${layers[@]}"; do
		model=$work/syn-l$l-h$h.onnx
		if [ ! -f "$model" ] || [ ! -f "$model.data" ]; then
			"$py" bench/gen_synthetic.py --layers "$l" --hidden "$h" --sparse --out "$model" >&2
		fi
		data_bytes=$(stat -c %s "$model.data")
		repeat=${REPEAT:-3}
		# Large exports write gigabytes: once is enough.
		if [ "$data_bytes" -gt $((2 * 1024 * 1024 * 1024)) ]; then repeat=1; fi
		for mode in full refs; do
			extra=()
			[ "$mode" = refs ] && extra=(--references-only)
			echo "bench-io $model ($mode, best of $repeat)" >&2
			line=$("$bench" "$model" -o "$work/out/out.onnx" --repeat "$repeat" "${extra[@]}" \
				--csv "$l,$h,$mode")
			rm -f "$work/out/out.onnx" "$work/out/out.onnx.data"
			rows+=("$line")
		done
	done
done

printf '\n%-6s %-6s %-4s %7s %9s %8s %8s %8s %8s %10s %10s\n' layers hidden mode nodes \
	"weights" "load" "verify" "save" "total" "peak RSS" "peak anon"
printf '%-6s %-6s %-4s %7s %9s %8s %8s %8s %8s %10s %10s\n' "" "" "" "" MiB ms ms ms ms MiB MiB
for r in "${rows[@]}"; do
	IFS=, read -r l h mode nodes inits wmib load verify infer save total rss anon <<<"$r"
	printf '%-6s %-6s %-4s %7s %9s %8s %8s %8s %8s %10s %10s\n' "$l" "$h" "$mode" "$nodes" \
		"$wmib" "$load" "$verify" "$save" "$total" "$rss" "$anon"
done
