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
# $BENCH_DIR).  Weights are real random bytes, except for models whose
# weights exceed FULL_MAX_MIB (default 2048): those run in refs mode only and
# their data file is sparse (bench/gen_synthetic.py --sparse), since a full
# export would only measure the disk writing gigabytes.  SPARSE=1 makes every
# data file sparse (fast to generate, but mapped holes cost no memory, so the
# peak RSS of full mode then looks smaller than with real weights).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/bench-env.sh" bench-io io "100 1000"
read -r -a hiddens <<<"${HIDDENS:-256 1024}"

if [ ! -x "$bench" ]; then
	echo "run-io.sh: $bench not built (run scripts/setup.sh or set BUILD_DIR)" >&2
	exit 1
fi
mkdir -p "$work/out"

rows=()
for h in "${hiddens[@]}"; do
	for l in "${layers[@]}"; do
		# Weight bytes per rank (world size 2, bf16, ffn = hidden): 3.5 h^2 x 2 per layer.
		weight_mib=$((l * 7 * h * h / 1024 / 1024))
		modes=(full refs)
		sparse=${SPARSE:-0}
		if [ "$weight_mib" -gt "${FULL_MAX_MIB:-2048}" ]; then
			modes=(refs)
			sparse=1
		fi
		model=$work/syn-l$l-h$h.onnx
		gen=(--layers "$l" --hidden "$h")
		if [ "$sparse" = 1 ]; then
			model=$work/syn-l$l-h$h-sparse.onnx
			gen+=(--sparse)
		fi
		if [ ! -f "$model" ] || [ ! -f "$model.data" ]; then
			gen+=(--out "$model")
			"$py" bench/gen_synthetic.py "${gen[@]}" >&2
		fi
		repeat=${REPEAT:-3}
		for mode in "${modes[@]}"; do
			extra=()
			if [ "$mode" = refs ]; then extra=(--references-only); fi
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
