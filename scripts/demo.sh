#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs tpfuse's main job on a bundled example:
#   1. writes a Llama-style dense tensor-parallel model for world size 2
#      (examples/tpmodels.py: one ONNX file per rank + the unsharded model)
#   2. `tpfuse optimize` on rank 0 with --dump-before/--dump-after/--stats
#   3. shows the statistics and the diff of the two dumps
# Everything it writes goes to out/demo/ (or $DEMO_OUT).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
out=${DEMO_OUT:-out/demo}

./scripts/setup.sh

py=.venv/bin/python
tpfuse=$build_dir/cli/tpfuse
rm -rf "$out"
mkdir -p "$out"

echo
echo "==> example models: examples/tpmodels.py dense --world-size 2"
"$py" examples/tpmodels.py dense --world-size 2 --out "$out/models"
model=$out/models/dense.rank0.onnx

echo
echo "==> tpfuse check $model"
"$tpfuse" check "$model"

echo
echo "==> tpfuse optimize (rank 0 of 2)"
echo "    $tpfuse optimize $model -o $out/dense.rank0.opt.onnx --dump-before $out/before.txt --dump-after $out/after.txt --stats"
"$tpfuse" optimize "$model" -o "$out/dense.rank0.opt.onnx" \
	--dump-before "$out/before.txt" --dump-after "$out/after.txt" --stats

echo
echo "==> diff -u $out/before.txt $out/after.txt"
diff -u "$out/before.txt" "$out/after.txt" || true

count_nodes() { "$py" -c 'import onnx,sys; print(len(onnx.load(sys.argv[1], load_external_data=False).graph.node))' "$1"; }
echo
echo "==> rank 0: $(count_nodes "$model") nodes before, $(count_nodes "$out/dense.rank0.opt.onnx") after"
echo "    optimized model: $out/dense.rank0.opt.onnx (open it in Netron, or 'tpfuse dump' it)"
"$tpfuse" check "$out/dense.rank0.opt.onnx"
