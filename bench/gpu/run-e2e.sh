#!/usr/bin/env bash
# End-to-end generation on one GPU, tpfuse against PyTorch (transformers) on
# the same weights, in one call on the GPU machine (or several: TPF_E2E_PARTS):
#   model   bench/gen_kv_model.py writes Llama-3-8B's shapes at full depth
#           (32 layers, bfloat16, random weights in external data, ~16 GB)
#           with KV-cache I/O, made and exported on the GPU (--init-device);
#   tpfuse  `tpfuse generate --json` (the cache in place, CUDA graphs): time
#           to first token at each PROMPTxBATCH of TPF_E2E_TTFT (one new
#           token), decode tokens/s at each batch of TPF_E2E_BATCHES from
#           each context of TPF_E2E_CONTEXTS (TPF_E2E_NEW new tokens), with
#           the model's load time, the session's device bytes and
#           nvidia-smi's peak memory while it ran;
#   peer    bench/torch_generate_peer.py: the ONNX initializers in a
#           transformers LlamaForCausalLM, `generate` eager (SDPA, dynamic
#           cache) and with its static cache and compiled step, on the same
#           prompts, warmed up before it is timed;
#   profile `tpfuse generate --profile` (eager, no graph) at each
#           PROMPTxBATCH:NEW of TPF_E2E_PROFILE: the device time per kernel
#           and the slowest steps of the prefill's plan and of the decode
#           step's, into OUTDIR/profile-PROMPTxBATCH.txt;
# and in every call that has a part to time, the device-to-device copy rate
# (TPF_E2E_COPY_MB, torch), for each decode row's memory roofline: weights
# and KV cache read per step (at the decode's mean context) at that rate.
# Rows that would not fit TPF_E2E_MEM_GB GiB (weights + KV cache + 2) are
# skipped with the reason; rows that would not end before the time budget
# (TPF_E2E_BUDGET seconds from the start, estimated from the rows before)
# are skipped and say so.  Each part prints how long it took.
# Results: OUTDIR/e2e.jsonl (every row, also kept in TPF_E2E_WORK so that
# parts run in separate calls on the same machine add up) and
# OUTDIR/e2e-summary.txt (the table).
#
# Usage: bench/gpu/run-e2e.sh BUILDDIR OUTDIR
#   TPF_E2E_PARTS     default "model tpfuse peer profile" (model: written when
#                     missing)
#   TPF_E2E_BACKEND   cuda (default) or cpu (a check of the script itself)
#   TPF_E2E_LAYERS (32), TPF_E2E_DTYPE (bf16; fp8: the bfloat16 model's FP8
#                     form, bench/fp8_kv_model.py, tpfuse only), TPF_E2E_MODEL_ARGS (more
#                     gen_kv_model.py options: --hidden 64 --heads 4 ...)
#   TPF_E2E_TTFT      default "128x1 2048x1 8192x1 2048x8"
#   TPF_E2E_CONTEXTS  default "1024 8192"; TPF_E2E_BATCHES default "1 8 64"
#   TPF_E2E_NEW       default 256
#   TPF_E2E_PEER_MODES  default "eager,compile"
#   TPF_E2E_PROFILE   default "2048x1:2 1024x1:16 1024x8:16"
#   TPF_E2E_MEM_GB (78), TPF_E2E_BUDGET (570), TPF_E2E_COPY_MB (4096)
#   TPF_E2E_WORK      the model, prompts and rows (default $TMPDIR/tpfuse-e2e)
set -uo pipefail
build=${1:?usage: run-e2e.sh BUILDDIR OUTDIR}
out=${2:?usage: run-e2e.sh BUILDDIR OUTDIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091
[ -f "$build/gpu-env.sh" ] && . "$build/gpu-env.sh"
start=$(date +%s)
parts=" ${TPF_E2E_PARTS:-model tpfuse peer profile} "
backend=${TPF_E2E_BACKEND:-cuda}
layers=${TPF_E2E_LAYERS:-32}
dtype=${TPF_E2E_DTYPE:-bf16}
read -r -a margs <<<"${TPF_E2E_MODEL_ARGS:-}"
ttft=${TPF_E2E_TTFT:-128x1 2048x1 8192x1 2048x8}
contexts=${TPF_E2E_CONTEXTS:-1024 8192}
batches=${TPF_E2E_BATCHES:-1 8 64}
new=${TPF_E2E_NEW:-256}
modes=${TPF_E2E_PEER_MODES:-eager,compile}
profile=${TPF_E2E_PROFILE:-2048x1:2 1024x1:16 1024x8:16}
mem_gb=${TPF_E2E_MEM_GB:-78}
budget=${TPF_E2E_BUDGET:-570}
copy_mb=${TPF_E2E_COPY_MB:-4096}
work=${TPF_E2E_WORK:-${TMPDIR:-/tmp}/tpfuse-e2e}
deadline=$((start + budget))
graph=(--cuda-graph)
device=cuda
if [ "$backend" != cuda ]; then graph=(); device=cpu; fi
tpfuse=$build/cli/tpfuse
py=${PYTHON:-python3}
name=llama3-8b-l$layers-$dtype
[ ${#margs[@]} -gt 0 ] && name=$name-$(echo "${margs[*]}" | md5sum | cut -c1-8)
model=$work/$name/model.onnx
# the prompts, the planned rows and every row measured, apart from another model's
data=$work/$name.rows
rows=$data/rows.jsonl
mkdir -p "$out" "$data"
touch "$rows"
stamp() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(stamp)" 'BEGIN { printf "%.1f", b - a }'; }
left() { echo $((deadline - $(date +%s))); }
has() { [[ $parts == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/device: /'
echo "parts:$parts backend $backend, budget $budget s"

# -- the model
t=$(stamp)
if [ ! -f "$model" ]; then
	if ! has model; then
		echo "no model at $model: run the part \"model\" first" >&2
		exit 1
	fi
	# written aside, then moved: a call cut short leaves no model behind
	tmp=$(dirname "$model").part
	rm -rf "$tmp"
	if [ "$dtype" = fp8 ]; then
		# the bfloat16 model at opset 19, then its FP8 form (weights as
		# E4M3 codes, static Q/DQ on every projection's input)
		"$py" "$root/bench/gen_kv_model.py" "$tmp/bf16/model.onnx" --layers "$layers" --dtype bf16 \
			--opset 19 --init-device "$device" "${margs[@]}" &&
			"$py" "$root/bench/fp8_kv_model.py" "$tmp/bf16/model.onnx" "$tmp/model.onnx" &&
			rm -rf "$tmp/bf16" || { echo "model export failed" >&2; exit 1; }
	else
		"$py" "$root/bench/gen_kv_model.py" "$tmp/model.onnx" --layers "$layers" --dtype "$dtype" \
			--init-device "$device" "${margs[@]}" || { echo "model export failed" >&2; exit 1; }
	fi
	mv "$tmp" "$(dirname "$model")"
	echo "model: $layers layers, $(du -sh "$(dirname "$model")" | cut -f1), written in $(took "$t") s"
else
	echo "model: $model ($(du -sh "$(dirname "$model")" | cut -f1)) is there"
fi

# -- the rows (the prompts written once, the same for both sides) and the
# -- copy rate of this call's device
t=$(stamp)
"$py" - "$model" "$data" "$mem_gb" "$ttft" "$contexts" "$batches" "$new" "$profile" <<'PY' || exit 1
import json, math, os, random, sys
import onnx
model, data, mem_gb, ttft, contexts, batches, new, profile = sys.argv[1:]
g = onnx.load(model, load_external_data=False).graph
size = {1: 4, 10: 2, 16: 2, 17: 1}  # float, float16, bfloat16, FP8 E4M3
weights = sum(size.get(t.data_type, 4) * int(math.prod(t.dims)) for t in g.initializer)
pasts = [i for i in g.input if i.name.startswith("past_key_values.")]
dims = [d.dim_value for d in pasts[0].type.tensor_type.shape.dim]
kv_tok = len(pasts) * dims[1] * dims[3] * size.get(pasts[0].type.tensor_type.elem_type, 4)  # a position, all layers
vocab = next(t for t in g.initializer if t.name == "embed.weight").dims[0]  # prompts' ids below 32000
plan = [("ttft", int(b), int(p), 1) for p, b in (x.split("x") for x in ttft.split())]
plan += [("decode", int(b), int(c), int(new)) for c in contexts.split() for b in batches.split()]
profiled = [("profile", int(b), int(p), int(n)) for p, b, n in (x.replace(":", "x").split("x") for x in profile.split())]
rows = []
for kind, b, p, n in plan + profiled:
    path = os.path.join(data, "prompts-%dx%d.txt" % (p, b))
    if not os.path.exists(path):
        r = random.Random(p * 1000 + b)
        with open(path, "w") as f:
            for _ in range(b):
                f.write(",".join(str(r.randrange(3, min(vocab, 32000))) for _ in range(p)) + "\n")
    need = weights + b * (p + n) * kv_tok + (2 << 30)
    row = {"kind": kind, "batch": b, "prompt": p, "new": n, "prompts": path, "need_bytes": need}
    if need > float(mem_gb) * (1 << 30):
        row["skipped"] = "needs %.1f GiB (weights %.1f + KV cache %.1f + 2), over %s GiB" % (
            need / 2**30, weights / 2**30, b * (p + n) * kv_tok / 2**30, mem_gb)
        print("row %s batch %d prompt %d: skipped, %s" % (kind, b, p, row["skipped"]))
    (rows if kind != "profile" else []).append(row)
json.dump(rows, open(os.path.join(data, "rows.json"), "w"), indent=1)
embed = next(t for t in g.initializer if t.name == "embed.weight")
json.dump({"weights_bytes": weights, "embed_bytes": size.get(embed.data_type, 4) * int(math.prod(embed.dims)),
           "kv_bytes_per_position": kv_tok}, open(os.path.join(data, "shapes.json"), "w"))
PY
# replaces this part's earlier rows (a part run again)
drop() {
	"$py" - "$rows" "$1" <<'PY'
import json, sys
keep = [l for l in open(sys.argv[1]) if l.strip() and not json.loads(l).get("impl", "").startswith(sys.argv[2])]
open(sys.argv[1], "w").writelines(keep)
PY
}
if has tpfuse || has peer; then
	drop copy
	"$py" - "$device" "$copy_mb" "$rows" <<'PY'
import json, sys, time
import torch
dev, mb = sys.argv[1], int(sys.argv[2])
src = torch.ones(mb << 20, dtype=torch.uint8, device=dev)
dst = torch.empty_like(src)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
best = float("inf")
for i in range(8):
    sync()
    t = time.perf_counter()
    dst.copy_(src)
    sync()
    if i >= 2:  # clocks up first
        best = min(best, time.perf_counter() - t)
row = {"impl": "copy", "device": dev, "bytes": mb << 20, "ms": round(best * 1e3, 3),
       "copy_gbps": round(2 * (mb << 20) / best / 1e9, 1)}  # read and written
print("copy rate: %s MB device to device in %.3f ms, %.1f GB/s read + written" % (mb, row["ms"], row["copy_gbps"]))
open(sys.argv[3], "a").write(json.dumps(row) + "\n")
PY
fi
echo "rows planned, copy rate measured in $(took "$t") s"

# -- tpfuse
record() { # KIND BATCH PROMPT NEW SECONDS SMI_PEAK_MIB JSON|-ERROR
	"$py" - "$rows" "$@" <<'PY'
import json, sys
f, kind, b, p, n, sec, smi, res = sys.argv[1:]
row = {"part": "e2e", "impl": "tpfuse", "kind": kind, "batch": int(b), "prompt": int(p), "new": int(n), "seconds": float(sec)}
try:
    out = json.loads(res) if not res.startswith("-") else None
except ValueError:
    out, res = None, "-not JSON: " + res[:300]
if out is None:
    row["error"] = res[1:]
else:
    row.update(out["stats"])
    row["tokens0"] = out["tokens"][0][:16]
if smi:
    row["smi_peak_bytes"] = int(smi) << 20
open(f, "a").write(json.dumps(row) + "\n")
if "error" in row:
    print("tpfuse %s batch %s prompt %s: %s" % (kind, b, p, row["error"]))
else:
    print("tpfuse %s batch %s prompt %s: load %.0f ms, ttft %.2f ms, decode %.1f tokens/s, device %.2f GB%s (%s s)" % (
        kind, b, p, row["load_ms"], row["ttft_ms"], row["decode_tokens_per_s"], row["device_bytes"] / 1e9,
        ", nvidia-smi peak %.2f GB" % (row["smi_peak_bytes"] / 1e9) if smi else "", sec))
PY
}
if has tpfuse; then
	t=$(stamp)
	drop tpfuse
	est=0
	while IFS=$'\t' read -r kind b p n file skip; do
		if [ -n "$skip" ]; then
			record "$kind" "$b" "$p" "$n" 0 "" "-skipped: $skip"
			continue
		fi
		if [ $(($(left) - est)) -le 0 ]; then
			record "$kind" "$b" "$p" "$n" 0 "" "-skipped: the time budget (about $est s a row, $(left) s left)"
			continue
		fi
		smi=""
		smi_file=$data/smi.txt
		nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$smi_file" 2>/dev/null &
		smi_pid=$!
		r=$(stamp)
		res=$(timeout "$(left)" "$tpfuse" generate "$model" --backend "$backend" "${graph[@]}" --warmup 1 \
			--prompts "$file" --max-new-tokens "$n" --json 2>"$data/tpfuse.err") || res="-failed: $(tail -c 300 "$data/tpfuse.err")"
		sec=$(took "$r")
		kill "$smi_pid" 2>/dev/null
		wait "$smi_pid" 2>/dev/null
		smi=$(sort -n "$smi_file" 2>/dev/null | tail -1)
		record "$kind" "$b" "$p" "$n" "$sec" "$smi" "$res"
		est=$(awk -v a="$sec" -v b="$est" 'BEGIN { printf "%d", (a > b ? a + 1 : b) }')
	done < <("$py" -c 'import json, sys
for r in json.load(open(sys.argv[1])):
    print("\t".join(str(r.get(k, "")) for k in ("kind", "batch", "prompt", "new", "prompts", "skipped")))' "$data/rows.json")
	echo "tpfuse rows in $(took "$t") s"
fi

# -- the PyTorch peer
if has peer && [ "$dtype" = fp8 ]; then
	echo "the peer: no FP8 path here (its rows are the bfloat16 model's: TPF_E2E_DTYPE=bf16)"
elif has peer; then
	t=$(stamp)
	for m in ${modes//,/ }; do drop "torch-$m"; done
	"$py" -c 'import json, sys
rows = json.load(open(sys.argv[1]))
json.dump([r for r in rows if "skipped" not in r], open(sys.argv[2], "w"))
for mode in sys.argv[3].split(","):
    with open(sys.argv[4], "a") as f:
        for r in rows:
            if "skipped" in r:
                f.write(json.dumps({"part": "e2e", "impl": "torch-" + mode, "kind": r["kind"], "batch": r["batch"],
                                    "prompt": r["prompt"], "new": r["new"], "error": "skipped: " + r["skipped"]}) + "\n")' \
		"$data/rows.json" "$data/peer-rows.json" "$modes" "$rows"
	if [ "$(left)" -gt 0 ]; then
		timeout "$(left)" "$py" "$root/bench/torch_generate_peer.py" "$model" --rows "$data/peer-rows.json" \
			--modes "$modes" --device "$device" --deadline "$deadline" --out "$rows" ||
			echo "the peer failed or ran out of time (rows so far kept)" >&2
	else
		echo "the peer: no time left in the budget" >&2
	fi
	# the rows the peer did not reach
	"$py" -c 'import json, sys
done = {(r.get("impl"), r.get("kind"), r.get("batch"), r.get("prompt")) for r in map(json.loads, open(sys.argv[3]))}
with open(sys.argv[3], "a") as f:
    for mode in sys.argv[2].split(","):
        for r in json.load(open(sys.argv[1])):
            if ("torch-" + mode, r["kind"], r["batch"], r["prompt"]) not in done:
                f.write(json.dumps({"part": "e2e", "impl": "torch-" + mode, "kind": r["kind"], "batch": r["batch"],
                                    "prompt": r["prompt"], "new": r["new"],
                                    "error": "skipped: the peer stopped first (the time budget)"}) + "\n")' \
		"$data/peer-rows.json" "$modes" "$rows"
	echo "peer rows in $(took "$t") s"
fi

# -- the profile: each plan's device time per kernel, eager (no graph)
if has profile; then
	t=$(stamp)
	for spec in $profile; do
		pb=${spec%%:*}
		n=${spec##*:}
		if [ "$(left)" -le 0 ]; then
			echo "profile $pb: skipped, no time left in the budget"
			continue
		fi
		r=$(stamp)
		f=$out/profile-$pb.txt
		timeout "$(left)" "$tpfuse" generate "$model" --backend "$backend" --warmup 1 --stats --profile \
			--prompts "$data/prompts-$pb.txt" --max-new-tokens "$n" >"$f" 2>"$data/profile.err" ||
			echo "profile $pb failed: $(tail -c 300 "$data/profile.err")" >>"$f"
		echo "profile $pb ($n new tokens): $(grep -c '^plan ' "$f") plans timed, $(took "$r") s -> $f"
		grep -E '^(plan |profile: |time to first|step latency)' "$f" | sed 's/^/  /'
	done
	echo "profiles in $(took "$t") s"
fi

# -- the summary (every row in the work folder: parts of earlier calls too)
cp "$rows" "$out/e2e.jsonl"
"$py" - "$out/e2e.jsonl" "$data/shapes.json" "$modes" <<'PY' | tee "$out/e2e-summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
shapes = json.load(open(sys.argv[2]))
peers = ["torch-" + m for m in sys.argv[3].split(",")]  # and those of earlier calls
peers += sorted({r["impl"] for r in rows if r.get("impl", "").startswith("torch-")} - set(peers))
copy = next((r for r in reversed(rows) if r.get("impl") == "copy"), None)
# the DRAM traffic a second: a copy's reads and writes together, the rate a
# step's reads of the weights and cache go at (decode_report.py's too)
rate = copy["copy_gbps"] * 1e9 if copy else 0
last = {}
for r in rows:
    if r.get("part") in (None, "e2e") and "kind" in r:
        last[(r["impl"], r["kind"], r["batch"], r["prompt"])] = r
keys = sorted({k[1:] for k in last}, key=lambda k: (k[0] != "ttft", k[2] if k[0] == "decode" else 0, k[1], k[2]))
def value(r, kind):
    if r is None:
        return None, "-"
    if "error" in r or "skipped" in r:
        return None, "skip" if "skipped" in (r.get("error", "") + r.get("skipped", "")) else "error"
    v = r.get("ttft_ms" if kind == "ttft" else "decode_tokens_per_s")
    return v, "%.2f" % v if kind == "ttft" else "%.1f" % v
head = "%-22s %10s" % ("row", "tpfuse") + "".join(" %14s %9s" % (p, "tpf/" + p.split("-")[1]) for p in peers)
head += " %10s %8s %10s" % ("roofline", "tpf/roof", "tpf@p50")
print("ttft_ms (lower is better) and decode tokens/s (higher is better); ratio = tpfuse / peer")
print("copy rate: %s" % ("%.1f GB/s read + written, %s MB on %s" % (copy["copy_gbps"], copy["bytes"] >> 20,
      copy["device"]) if copy else "not measured"))
print(head)
for kind, b, p in keys:
    tr = last.get(("tpfuse", kind, b, p))
    tv, ts = value(tr, kind)
    name = ("ttft %dx%d" % (p, b)) if kind == "ttft" else ("decode ctx %d b%d" % (p, b))
    line = "%-22s %10s" % (name, ts)
    for peer in peers:
        pv, ps = value(last.get((peer, kind, b, p)), kind)
        line += " %14s %9s" % (ps, "%.3f" % (tv / pv) if tv and pv else "-")
    if kind == "decode":
        n = (tr or {}).get("new") or 0
        step = shapes["weights_bytes"] - shapes["embed_bytes"] + b * (p + n / 2) * shapes["kv_bytes_per_position"]
        roof = b * rate / step if rate else 0
        line += " %10s %8s" % ("%.1f" % roof if roof else "-", "%.3f" % (tv / roof) if tv and roof else "-")
        p50 = (tr or {}).get("step_p50_ms")  # the steady step, without the first steps' plans and capture
        line += " %10s" % ("%.1f" % (b * 1e3 / p50) if p50 else "-")
    print(line)
for (impl, kind, b, p), r in sorted(last.items()):
    why = r.get("error") or r.get("skipped")
    if why:
        print("  %s %s batch %d prompt %d: %s" % (impl, kind, b, p, why))
tp = [r for k, r in last.items() if k[0] == "tpfuse" and "load_ms" in r]
if tp:
    print("tpfuse: model load %.0f ms (median of %d runs), device bytes at most %.2f GB%s" % (
        sorted(r["load_ms"] for r in tp)[len(tp) // 2], len(tp), max(r["device_bytes"] for r in tp) / 1e9,
        ", nvidia-smi peak %.2f GB" % (max(r.get("smi_peak_bytes", 0) for r in tp) / 1e9)
        if any("smi_peak_bytes" in r for r in tp) else ""))
for peer in peers:
    pr = [r for k, r in last.items() if k[0] == peer and "device_peak_bytes" in r]
    if pr:
        print("%s: device peak (torch allocator) at most %.2f GB" % (peer, max(r["device_peak_bytes"] for r in pr) / 1e9))
for kind, b, p in keys:  # greedy tokens of the first sequence, both sides (bf16 ties may part them)
    a = (last.get(("tpfuse", kind, b, p)) or {}).get("tokens0")
    for peer in peers:
        c = (last.get((peer, kind, b, p)) or {}).get("tokens0")
        if a and c and kind == "decode":
            same = next((i for i, (x, y) in enumerate(zip(a, c)) if x != y), min(len(a), len(c)))
            print("  tokens, decode ctx %d b%d, tpfuse and %s: the first %d of %d equal" % (p, b, peer, same, len(c)))
PY
echo "total $(( $(date +%s) - start )) s"
