#!/usr/bin/env python3
"""The plan's GEMM lowerings, checked on `tpfuse plan` (no GPU needed).

Transposed operands: every MatMul whose second operand is a Transpose
swapping the last two axes (attention's K^T) becomes an
ai.tpfuse.MatMulTransB of the Transpose's input (the lowering pipeline the
command runs before planning, passes/lower.c) that runs as one matmul-bt
step, and the Transpose is not run (after the default pipeline there are
none left on the dense example: fuse-attention takes those products into
Attention).

FP8 GEMMs:
`tpfuse plan` of the dense_fp8 example (CPU backend, and CUDA where the
build has it; no GPU needed) must run every MatMul of two FP8 E4M3 dequantizations
with known per-tensor scales and a weight whose K and N are multiples of 16
as an ai.tpfuse.MatMulFp8 (the lowering pipeline, passes/lower.c) whose
one matmul-fp8 step runs on the codes, with no DequantizeLinear step left for
them; MatMuls that do not qualify (K or N not a multiple of 16) keep their
dequantizations.  With TPF_FP8_GEMM=0 every product dequantizes first.

Packed weights: with TPF_GEMV_TILED=16 or 32 every MatMul of a known
2-D weight runs as a matmul-tiled step on a copy of the weight packed in
column tiles, on the CPU backend too, and a packed GatedActivation of such
a product, lowered with it into an ai.tpfuse.GatedMatMul (lower-gated-matmul),
runs as one gated-matmul-tiled step (with TPF_GEMV_GATED=0 the two nodes'
two steps; unpacked, the GatedMatMul's product phase, then its activation);
the outputs of `tpfuse run` are then the
same bytes as without packing (plain and --optimize).  With
TPF_GEMV_TILED=0, and by default on the CPU, no product is packed; on the
CUDA backend (where built) the one-row products are packed by default.

Coalesced all-to-all: in the plan of the gdn_a2a example (coalesce-alltoall
writes Pack -> AllToAll -> Unpack, which the session may run as one grouped
exchange from the Pack's inputs straight into the Unpack's outputs), no
Unpack output's buffer shares a byte with a Pack input's buffer.

Usage: plan_lowering.py --tpfuse EXE --work DIR
Exit 77 (skipped) when onnx is missing.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def expected(model_path):
    """(fp8 MatMuls, activation DequantizeLinear nodes that must still run)."""
    import onnx
    g = onnx.load(model_path, load_external_data=False).graph
    inits = {i.name: list(i.dims) for i in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    users = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)

    def dq(name, weight):
        n = prod.get(name)
        if not n or n.op_type != "DequantizeLinear":
            return False
        if weight:
            d = inits.get(n.input[0])
            return d is not None and len(d) == 2 and d[0] % 16 == 0 and d[1] % 16 == 0
        return True

    fp8 = {id(n) for n in g.node
           if n.op_type == "MatMul" and dq(n.input[0], False) and dq(n.input[1], True)}
    kept = 0
    for n in g.node:
        if n.op_type != "DequantizeLinear":
            continue
        # (a weight's dequantization of known codes is folded on the host
        # when it is small: not a step either way)
        if n.input[0] not in inits and not all(id(u) in fp8 for u in users.get(n.output[0], [])):
            kept += 1
    return len(fp8), kept


def plan(tpfuse, model, backend, extra=(), env=None):
    p = subprocess.run([tpfuse, "plan", model, "--random-inputs", "1", "--backend", backend,
                        "--rank", "0", "--world-size", "2", *extra],
                       capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if p.returncode:
        raise SystemExit(f"tpfuse plan failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    # the products lowered to ai.tpfuse.MatMulFp8 (passes/lower.c), each one
    # matmul-fp8 kernel step on the codes
    fp8 = len(re.findall(r"::MatMulFp8\)", p.stdout))
    if fp8 != len(re.findall(r"\.matmul-fp8 ", p.stdout)):
        raise SystemExit(f"MatMulFp8 steps that do not run matmul-fp8:\n{p.stdout}")
    return (fp8,
            len(re.findall(r"\(DequantizeLinear\)", p.stdout)), p.stdout)


def a2a_overlaps(text):
    """Pairs (Pack input, Unpack output) of one Pack -> AllToAll -> Unpack run
    of a printed plan whose buffers share bytes, and the number of runs."""
    bufs = {m.group(1): (int(m.group(2)), int(m.group(2)) + int(m.group(3)))
            for m in re.finditer(r"^  (b\d+) +offset +(\d+) size +(\d+) live", text, re.M)}
    lines = text.splitlines()
    bad, runs, pack_in = [], 0, None
    for i, line in enumerate(lines):
        if i + 1 >= len(lines) or not re.match(r"^  #\d+ ", line):
            continue
        ops = lines[i + 1]
        ins, _, outs = ops.partition(" -> ")
        if "(ai.tpfuse::Pack)" in line:
            pack_in = re.findall(r"@(b\d+)", ins)
        elif "(ai.tpfuse::Unpack)" in line and pack_in is not None:
            runs += 1
            for o in re.findall(r"@(b\d+)", outs):
                for x in pack_in:
                    (a0, a1), (b0, b1) = bufs[x], bufs[o]
                    if a0 < b1 and b0 < a1:
                        bad.append(f"{x}/{o}")
            pack_in = None
    return bad, runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("onnx not installed: skipped")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    failures = []
    backends = None

    def check(label, got, want):
        ok = got == want
        print(f"{'PASS' if ok else 'FAIL'} {label}: {got} (expected {want})")
        if not ok:
            failures.append(label)

    for tag, sizes in (("default", []), ("ffn40", ["--ffn", "40"])):
        out = os.path.join(a.work, tag)
        gen = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tpmodels.py"),
                              "dense_fp8", "--world-size", "2", "--out", out, *sizes],
                             capture_output=True, text=True)
        if gen.returncode:
            print(gen.stdout + gen.stderr)
            return 1
        model = os.path.join(out, "dense_fp8.rank0.onnx")
        n_fp8, n_kept = expected(model)
        if tag == "default" and n_fp8 == 0:
            failures.append("the example has no FP8 MatMul to lower")
        if backends is None:
            # a build with the CUDA backend plans for it without a GPU
            probe = subprocess.run([a.tpfuse, "plan", model, "--random-inputs", "1",
                                    "--backend", "cuda"], capture_output=True, text=True)
            backends = ["cpu"] + ([] if "no cuda kernel" in probe.stderr else ["cuda"])
            print("backends:", ", ".join(backends))
        for backend in backends:
            fp8, dq, _ = plan(a.tpfuse, model, backend)
            check(f"{tag} {backend}: fp8-gemm steps", fp8, n_fp8)
            check(f"{tag} {backend}: DequantizeLinear steps left", dq, n_kept)
            # the default pipeline merges sibling projections (q/k/v,
            # gate/up): the optimized model's own products are the ones
            # that must lower
            opt = os.path.join(out, "dense_fp8.opt.rank0.onnx")
            o = subprocess.run([a.tpfuse, "optimize", model, "-o", opt], capture_output=True,
                               text=True)
            if o.returncode:
                raise SystemExit(f"tpfuse optimize failed:\n{o.stdout}{o.stderr}")
            o_fp8, o_kept = expected(opt)
            if tag == "default" and not 0 < o_fp8 < n_fp8:
                failures.append(f"the optimized example has {o_fp8} FP8 MatMuls; expected the "
                                f"merged projections, fewer than {n_fp8}")
            fp8, dq, _ = plan(a.tpfuse, model, backend, ["--optimize"])
            check(f"{tag} {backend} --optimize: fp8-gemm steps", fp8, o_fp8)
            check(f"{tag} {backend} --optimize: DequantizeLinear steps left", dq, o_kept)
            fp8, _, _ = plan(a.tpfuse, model, backend, env={"TPF_FP8_GEMM": "0"})
            check(f"{tag} {backend} TPF_FP8_GEMM=0: fp8-gemm steps", fp8, 0)
    # transposed operands, on the dense example
    out = os.path.join(a.work, "dense")
    gen = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tpmodels.py"), "dense",
                          "--world-size", "2", "--out", out], capture_output=True, text=True)
    if gen.returncode:
        print(gen.stdout + gen.stderr)
        return 1
    import onnx
    model = os.path.join(out, "dense.rank0.onnx")
    g = onnx.load(model, load_external_data=False).graph
    prod = {o: n for n in g.node for o in n.output}

    def swaps_last_two(n):
        perm = next((list(x.ints) for x in n.attribute if x.name == "perm"), None)
        r = len(perm or [])
        return r >= 2 and perm == list(range(r - 2)) + [r - 1, r - 2]

    n_bt = sum(1 for n in g.node if n.op_type == "MatMul" and n.input[1] in prod
               and prod[n.input[1]].op_type == "Transpose" and swaps_last_two(prod[n.input[1]]))
    n_tr = sum(1 for n in g.node if n.op_type == "Transpose")
    if n_bt == 0:
        failures.append("the dense example has no MatMul of a transposed operand")
    for backend in backends or ["cpu"]:
        for extra, env in (([], None), (["--optimize"], None), ([], {"TPF_FP8_GEMM": "0"})):
            p = subprocess.run([a.tpfuse, "plan", model, "--random-inputs", "1", "--backend", backend,
                                "--rank", "0", "--world-size", "2", *extra], capture_output=True,
                               text=True, env=dict(os.environ, **(env or {})))
            label = f"dense {backend} {' '.join(extra)}{' TPF_FP8_GEMM=0' if env else ''}".strip()
            if p.returncode:
                print(p.stdout + p.stderr)
                failures.append(label)
                continue
            # --optimize: fuse-attention takes every K^T product into Attention
            want_bt = 0 if "--optimize" in extra else n_bt
            check(f"{label}: matmul-bt steps",
                  len(re.findall(r"cpu\.matmul-bt|cuda\.matmul-bt", p.stdout)), want_bt)
            check(f"{label}: MatMulTransB steps", len(re.findall(r"::MatMulTransB\)", p.stdout)), want_bt)
            check(f"{label}: Transpose steps left", len(re.findall(r"\(Transpose\)", p.stdout)),
                  n_tr - n_bt)
    # packed weights, on a one-rank bf16 decode model (one row, K >= 256)
    out = os.path.join(a.work, "tiled")
    gen = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tpmodels.py"), "dense",
                          "--world-size", "1", "--out", out, "--dtype", "bfloat16", "--batch", "1",
                          "--past", "8", "--hidden", "512", "--ffn", "1024", "--heads", "8",
                          "--kv-heads", "4", "--head-dim", "64"], capture_output=True, text=True)
    if gen.returncode:
        print(gen.stdout + gen.stderr)
        return 1
    model = os.path.join(out, "dense.rank0.onnx")
    opt = os.path.join(out, "dense.opt.rank0.onnx")
    o = subprocess.run([a.tpfuse, "optimize", model, "-o", opt], capture_output=True, text=True)
    if o.returncode:
        raise SystemExit(f"tpfuse optimize failed:\n{o.stdout}{o.stderr}")

    def weight_products(path):
        g = onnx.load(path, load_external_data=False).graph
        inits = {i.name: list(i.dims) for i in g.initializer}
        return sum(1 for n in g.node if n.op_type == "MatMul" and len(inits.get(n.input[1], [])) == 2)

    n_w, n_wo = weight_products(model), weight_products(opt)
    if n_w == 0 or n_wo == 0:
        failures.append("the decode model has no MatMul of a 2-D weight")

    g_opt = onnx.load(opt, load_external_data=False).graph
    n_gated = sum(1 for n in g_opt.node if n.op_type == "GatedActivation"
                  and any(x.name == "packed" and x.i == 1 for x in n.attribute))
    if n_gated == 0:
        failures.append("the optimized decode model has no packed GatedActivation")

    def tiled_plan(backend, extra, env, what=r"\[matmul-tiled\]"):
        p = subprocess.run([a.tpfuse, "plan", model, "--random-inputs", "1", "--backend", backend, *extra],
                           capture_output=True, text=True, env=dict(os.environ, **env))
        if p.returncode:
            raise SystemExit(f"tpfuse plan failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        return len(re.findall(what, p.stdout))

    for backend in backends or ["cpu"]:
        for extra, want in (([], n_w), (["--optimize"], n_wo)):
            lab = f"decode {backend} {' '.join(extra)}".strip()
            # the packed GatedActivation and its MatMul, one GatedMatMul:
            # one matmul-tiled step, and no gated-activation step (only
            # the optimized model has GatedActivation nodes)
            fold = n_gated
            for tw in ("16", "32"):
                env = {"TPF_GEMV_TILED": tw}
                check(f"{lab} TPF_GEMV_TILED={tw}: matmul-tiled steps", tiled_plan(backend, extra, env), want)
                if not extra:
                    continue
                check(f"{lab} TPF_GEMV_TILED={tw}: gated-matmul-tiled steps",
                      tiled_plan(backend, extra, env, r"\.gated-matmul-tiled "), fold)
                check(f"{lab} TPF_GEMV_TILED={tw}: gated-activation steps left",
                      tiled_plan(backend, extra, env, r"\.gated-activation "), 0)
                check(f"{lab} TPF_GEMV_TILED={tw}: GatedMatMul steps",
                      tiled_plan(backend, extra, env, r"::GatedMatMul\) \[matmul-tiled\]"), fold)
                env["TPF_GEMV_GATED"] = "0"
                check(f"{lab} TPF_GEMV_TILED={tw} TPF_GEMV_GATED=0: gated-matmul-tiled steps",
                      tiled_plan(backend, extra, env, r"\.gated-matmul-tiled "), 0)
                check(f"{lab} TPF_GEMV_TILED={tw} TPF_GEMV_GATED=0: gated-activation steps",
                      tiled_plan(backend, extra, env, r"\.gated-activation "), fold)
            check(f"{lab} TPF_GEMV_TILED=0: matmul-tiled steps",
                  tiled_plan(backend, extra, {"TPF_GEMV_TILED": "0"}), 0)
            if extra:
                check(f"{lab} TPF_GEMV_TILED=0: GatedMatMul product steps",
                      tiled_plan(backend, extra, {"TPF_GEMV_TILED": "0"}, r"::GatedMatMul\) \[product\]"), fold)
            check(f"{lab} default: matmul-tiled steps", tiled_plan(backend, extra, {}),
                  want if backend == "cuda" else 0)
    base_env = {k: v for k, v in os.environ.items() if k not in ("TPF_GEMV_TILED", "TPF_GEMV_GATED")}
    for extra in ([], ["--optimize"]):
        outs = {}
        for tw in ("0", "16", "32"):
            # (TPF_GEMV_TILED=0 also runs the GatedActivation unfolded)
            d = os.path.join(out, f"out{tw}{'-opt' if extra else ''}")
            r = subprocess.run([a.tpfuse, "run", model, "--random-inputs", "3", "--outputs", d, "--quiet", *extra],
                               capture_output=True, text=True, env=dict(base_env, TPF_GEMV_TILED=tw))
            if r.returncode:
                raise SystemExit(f"tpfuse run failed ({r.returncode}):\n{r.stdout}{r.stderr}")
            outs[tw] = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}
        for tw in ("16", "32"):
            same = outs[tw] == outs["0"] and len(outs["0"]) > 0
            check(f"decode cpu {' '.join(extra)} TPF_GEMV_TILED={tw}: outputs equal unpacked ones".replace("  ", " "),
                  same, True)
    # coalesced all-to-all: the grouped exchange's send and receive buffers
    a2a_model = os.path.join(ROOT, "tests", "fuzz", "corpus", "model", "example_gdn_a2a.rank0.onnx")
    for backend in backends or ["cpu"]:
        _, _, text = plan(a.tpfuse, a2a_model, backend, ["--optimize"])
        bad, runs = a2a_overlaps(text)
        check(f"gdn_a2a {backend} --optimize: Pack -> AllToAll -> Unpack runs", runs, 2)
        check(f"gdn_a2a {backend} --optimize: Unpack outputs sharing bytes with Pack inputs",
              ", ".join(bad) or "none", "none")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
