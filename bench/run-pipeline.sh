#!/usr/bin/env bash
# The default pass pipeline on synthetic dense decoders of 100, 1,000 and
# 10,000 layers (bench/gen_synthetic.py, one rank of TP=2, weights in a
# sparse external file that is never read): nodes, import and pipeline time
# (best of 3), AllReduce+norm fusions, peak RSS.  Time should grow about
# linearly with the layer count.
#   bench/run-pipeline.sh            # LAYERS="100 1000 10000"
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench-env.sh" bench-pipeline pipeline "100 1000 10000"
[ -x "$bench" ] || { echo "run-pipeline.sh: $bench not built" >&2; exit 1; }
mkdir -p "$work"
printf '%7s %8s %8s %10s %10s %8s %8s %10s\n' layers nodes after import_ms pass_ms fused rss_mib us/layer
for l in "${layers[@]}"; do
	m=$work/dense-$l.onnx
	[ -f "$m" ] || "$py" bench/gen_synthetic.py --layers "$l" --hidden 256 --sparse --out "$m" >/dev/null
	read -r nb na ti tp fu rss < <("$bench" "$m" --repeat 3)
	printf '%7d %8d %8d %10.1f %10.1f %8d %8d %10.2f\n' "$l" "$nb" "$na" "$ti" "$tp" "$fu" "$rss" \
		"$(echo "$tp * 1000 / $l" | bc -l)"
done
