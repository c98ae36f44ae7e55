#!/usr/bin/env bash
# Finds a CUDA accuracy fault on a Llama-shaped model (one call on the GPU
# machine): builds, writes a TPF_DIAG_LAYERS-layer model (default 1) and a
# 16-token prefill with torch's logits (the model's dtype and float32), then
#   - the prefill's last logits of `tpfuse run --optimize` on cpu and cuda,
#     and on cuda under each knob of TPF_DIAG_KNOBS, against float32 torch;
#   - scripts/backend-diff.py (no passes): the first node where cpu and cuda part.
# Usage: bench/gpu/diag-logits.sh BUILDDIR OUTDIR
set -uo pipefail
build=${1:?}; out=${2:?}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ -f "$build/gpu-env.sh" ] && . "$build/gpu-env.sh"
export NCCL_NVLS_ENABLE=0
layers=${TPF_DIAG_LAYERS:-1}
py=${PYTHON:-python3}
work=${TPF_DIAG_WORK:-/tmp/tpf-diag}
mkdir -p "$out" "$work"
model=$work/m$layers/model.onnx
pre=$work/pre$layers
margs=(${TPF_DIAG_MODEL_ARGS:-})
if [ ! -f "$model" ]; then
	"$py" "$root/bench/gen_kv_model.py" "$model" --layers "$layers" "${margs[@]}" || exit 1
fi
if [ ! -d "$pre" ]; then
	"$py" "$root/bench/gen_kv_model.py" "$model" --layers "$layers" "${margs[@]}" --tokens "$(seq 11 26 | paste -sd,)" \
		--new 4 --save-prefill "$pre" || exit 1
fi
cmp() { # label outdir
	"$py" - "$1" "$2" "$pre" <<'PY'
import os, sys
import numpy as np, onnx
from onnx import numpy_helper
t = onnx.load_tensor(os.path.join(sys.argv[2], "output_0.pb"))
a = numpy_helper.to_array(t)
if t.data_type == onnx.TensorProto.BFLOAT16 and a.dtype == np.uint16:
    a = (a.astype(np.uint32) << 16).view(np.float32)
a = a.astype(np.float32)[0, -1]
ref = np.load(os.path.join(sys.argv[3], "ref_logits.npy"))
tor = np.load(os.path.join(sys.argv[3], "torch_logits.npy"))
print("%-40s max err %.4g (torch same dtype %.4g), argmax %d (ref %d, torch %d)" % (sys.argv[1],
      np.abs(a - ref).max(), np.abs(tor - ref).max(), a.argmax(), ref.argmax(), tor.argmax()))
PY
}
run() { # label backend [env...]
	local label=$1 be=$2; shift 2
	rm -rf "$work/o"
	env "$@" "$build/cli/tpfuse" run "$model" --optimize --backend "$be" --inputs "$pre" --outputs "$work/o" \
		>/dev/null 2>"$work/err" || { echo "$label: failed: $(tail -3 "$work/err")"; return; }
	cmp "$label" "$work/o"
}
run cpu cpu
run cuda cuda
for k in ${TPF_DIAG_KNOBS:-}; do run "cuda $k" cuda "$k"; done
if [ "${TPF_DIAG_BACKEND_DIFF:-1}" = 1 ]; then
	"$py" "$root/scripts/backend-diff.py" "$model" "$pre" --tpfuse "$build/cli/tpfuse" --top 12 2>&1 | tail -14
fi
