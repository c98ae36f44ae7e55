#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs tpfuse's main job on a bundled example:
#   1. writes a Llama-style dense tensor-parallel model for world size 2
#      (examples/tpmodels.py: one ONNX file per rank + the unsharded model)
#   2. `tpfuse optimize` on rank 0 with --dump-before/--dump-after/--stats
#   3. shows the statistics and the diff of the two dumps
#   4. runs both ranks under `mpirun -np 2` with `tpfuse run --optimize
#      --verify`: each rank runs the unfused and the fused graph on the
#      example's inputs and compares every output
#   5. generates tokens at world size 2: `tpfuse shard` splits a committed
#      KV-cache export (a small Llama, tests/corpus/kv/) into two rank
#      models, and `mpirun -np 2 tpfuse generate` runs them with the cache
#      in place; the tokens are transformers' own (reference_tokens.json)
# Everything it writes goes to out/demo/ (or $DEMO_OUT).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
out=${DEMO_OUT:-out/demo}

# only what the demo runs: the command (not the tests or the CUDA benchmarks)
./scripts/setup.sh cli/tpfuse

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

# Open MPI refuses root without these, and 2 ranks may exceed the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
echo
echo "==> both ranks, fused against unfused: mpirun -np 2 tpfuse run --optimize --verify"
echo "    mpirun --oversubscribe -np 2 $tpfuse run '$out/models/dense.rank{rank}.onnx' --inputs '$out/models/dense_data/rank{rank}' --optimize --verify --quiet"
status=0
mpirun --allow-run-as-root --oversubscribe -np 2 "$tpfuse" run "$out/models/dense.rank{rank}.onnx" \
	--inputs "$out/models/dense_data/rank{rank}" --optimize --verify --quiet >"$out/verify.txt" 2>&1 || status=$?
sort "$out/verify.txt"
checked=$(grep -c '^verify: .*: ok \[rank' "$out/verify.txt" || true)
echo
if [ "$status" -eq 0 ] && [ "$checked" -gt 0 ]; then
	echo "==> ok: on both ranks the fused graph's outputs match the unfused graph's ($checked outputs checked, $out/verify.txt)"
else
	echo "==> FAILED: the fused graph's outputs do not match the unfused graph's (tpfuse run exit $status, $out/verify.txt)"
	exit 1
fi

kv=tests/corpus/kv/llama-dynamo-kv-fp32-w1
echo
echo "==> tpfuse shard $kv/model.onnx --world-size 2 -o '$out/kv/llama.rank{rank}.onnx'"
"$tpfuse" shard "$kv/model.onnx" --world-size 2 -o "$out/kv/llama.rank{rank}.onnx"
prompt=26,35,35,86,75,17,20
echo
echo "==> both ranks generate: mpirun -np 2 tpfuse generate '$out/kv/llama.rank{rank}.onnx' --prompt-ids $prompt --max-new-tokens 32 --suppress 2 --stats"
mpirun --allow-run-as-root --oversubscribe -np 2 "$tpfuse" generate "$out/kv/llama.rank{rank}.onnx" \
	--prompt-ids "$prompt" --max-new-tokens 32 --suppress 2 --stats | tee "$out/generate.txt"
want=$("$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join(map(str, next(c for c in r["cases"] if c["name"] == "prompt0")["generated_ids"][0])))' "$kv/reference_tokens.json")
got=$(sed -n 's/^prompt 0: //p' "$out/generate.txt")
if [ "$got" = "$want" ]; then
	echo "==> ok: two ranks generated transformers' 32 tokens"
else
	echo "==> FAILED: the ranks generated '$got', transformers '$want'"
	exit 1
fi
