#!/usr/bin/env python3
"""Summary of a decode benchmark run (bench/gpu/run-decode.sh's decode.jsonl).

  decode_report.py OUT/decode.jsonl [--annotate] [--bandwidth GBPS]

decode.jsonl holds one JSON object per line (other lines are skipped):
  {"impl": "config", ...}          the run's preset, sizes, iterations
  {"impl": "copy-bandwidth", ...}  decode_roofline.py bandwidth, one per GPU
  {"impl": "roofline", ...}        decode_roofline.py bytes, one per batch
                                   label and model (dense, dense_fp8)
  {"impl": "tpfuse", ...}          bench-decode, one per variant and mode
  {"impl": "torch", ...}           torch_decode_peer.py, one per mode
                                   (eager, cuda-graph, compile)

The roofline of a batch is its per-rank bytes read per step (weights + KV
cache) divided by the lowest GPU's copy bandwidth (or --bandwidth, in GB/s
of bytes read + written).  --annotate rewrites the file with roofline_us,
x_roofline (us_per_step / roofline_us), bytes_per_step and copy_gbps
added to every timed row (and roofline_us to the roofline rows).  Prints
the time per step of every implementation and mode with its multiple of
the roofline, the ratios between them, and the figures issue 15 sets
targets for.
"""
import argparse
import json
import os
import sys

TPFUSE = ("unfused-nccl", "unfused", "fused")
FP8 = ("fp8-dequant", "fp8-gemm", "fp8-fused")


def load(path):
    """(every line, each either its JSON object or its text; the objects)"""
    lines, rows = [], []
    with open(path) as f:
        for line in f:
            obj = None
            if line.strip().startswith("{"):
                try:
                    obj = json.loads(line)
                except ValueError:
                    pass
            if isinstance(obj, dict):
                rows.append(obj)
                lines.append(obj)
            else:
                lines.append(line.rstrip("\n"))
    return lines, rows


def model_of(row):
    return "dense_fp8" if str(row.get("variant", "")).startswith("fp8") else "dense"


def label_key(label):
    try:
        return (0, int(str(label).split("=")[-1]))
    except ValueError:
        return (1, str(label))


class Run:
    def __init__(self, rows, bandwidth=None):
        self.rows = rows
        self.config = next((r for r in rows if r.get("impl") == "config"), {})
        self.gpus = [r for r in rows if r.get("impl") == "copy-bandwidth" and r.get("copy_gbps")]
        if bandwidth:
            self.gbps, self.bw_from = bandwidth, "--bandwidth"
        elif self.gpus:
            low = min(self.gpus, key=lambda r: r["copy_gbps"])
            self.gbps, self.bw_from = low["copy_gbps"], "GPU%s" % low.get("gpu", "?")
        else:
            self.gbps, self.bw_from = None, None
        self.roof = {(r.get("label"), r.get("model", "dense")): r
                     for r in rows if r.get("impl") == "roofline"}
        self.timed = [r for r in rows if r.get("impl") in ("tpfuse", "torch")]
        self.labels = sorted({r.get("label", "") for r in self.timed} |
                             {k[0] for k in self.roof}, key=label_key)

    def roofline_us(self, label, model="dense"):
        r = self.roof.get((label, model))
        if not r or not self.gbps:
            return None
        return r["bytes_per_step"] / (self.gbps * 1e3)  # bytes / (GB/s) in us

    def find(self, label, impl, variant, mode):
        for r in self.timed:
            if (r.get("label") == label and r.get("impl") == impl and r.get("mode") == mode
                    and r.get("variant", "torch") == variant):
                return r
        return None

    def us(self, label, impl, variant, mode):
        r = self.find(label, impl, variant, mode)
        return r.get("us_per_step") if r else None

    def annotate(self):
        for r in self.rows:
            if r.get("impl") == "roofline":
                rl = self.roofline_us(r.get("label"), r.get("model", "dense"))
                if rl:
                    r["roofline_us"] = round(rl, 2)
                    r["copy_gbps"] = self.gbps
            elif r.get("impl") in ("tpfuse", "torch") and r.get("us_per_step"):
                rl = self.roofline_us(r.get("label"), model_of(r))
                if rl:
                    r["bytes_per_step"] = self.roof[(r.get("label"), model_of(r))]["bytes_per_step"]
                    r["copy_gbps"] = self.gbps
                    r["roofline_us"] = round(rl, 2)
                    r["x_roofline"] = round(r["us_per_step"] / rl, 3)


def cell(us, rl, width):
    if us is None:
        return "%*s" % (width, "-")
    text = "%.1f" % us
    if rl:
        text += " (%.2fx)" % (us / rl)
    return "%*s" % (width, text)


def report(run, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    c = run.config
    if c:
        p("preset %s: %s; TP=%s; %s timed steps after %s warm-up steps, slowest rank"
          % (c.get("preset", "?"), c.get("size", "?"), c.get("world", 2), c.get("iters", "?"),
             c.get("warmup", "?")))
    for g in run.gpus:
        p("GPU%s %s: %.1f GB/s (%d MiB device-to-device copy, read + write, %.3f ms)"
          % (g.get("gpu", "?"), g.get("device", "?"), g["copy_gbps"], g.get("bytes", 0) >> 20,
             g.get("ms_per_copy", 0)))
    if run.roof:
        p("\nroofline: per-rank bytes read per decode step (weights + KV cache) / %s"
          % ("%.1f GB/s (%s)" % (run.gbps, run.bw_from) if run.gbps else "no bandwidth measured"))
        p("%-10s %-10s %12s %10s %12s %12s" % ("", "model", "weights MB", "KV MB", "total MB",
                                              "roofline us"))
        for (lab, model), r in sorted(run.roof.items(), key=lambda kv: (label_key(kv[0][0]), kv[0][1])):
            rl = run.roofline_us(lab, model)
            p("%-10s %-10s %12.1f %10.1f %12.1f %12s"
              % (lab, model, r["weight_bytes"] / 1e6, r["kv_bytes"] / 1e6,
                 r["bytes_per_step"] / 1e6, "%.1f" % rl if rl else "-"))

    present = {r.get("variant") for r in run.timed}
    fp8 = [v for v in FP8 if v in present]
    base = [("tpfuse", v, v, None) for v in TPFUSE] + [("torch", "torch", "torch", None)]
    base += [("tpfuse", v, v, None) for v in fp8]
    tables = [("eager", base),
              ("cuda-graph", base[:4] + [("torch", "torch", "torch-compile", "compile")] + base[4:])]
    w = 17
    for mode, cols in tables:
        p("\n%s (us per decode step, slowest rank; x roofline)" % mode)
        p("%-10s" % "" + "".join("%*s" % (w, name) for _, _, name, _ in cols))
        for lab in run.labels:
            vals = []
            for impl, variant, _name, m in cols:
                model = "dense_fp8" if variant.startswith("fp8") else "dense"
                vals.append(cell(run.us(lab, impl, variant, m or mode),
                                 run.roofline_us(lab, model), w))
            p("%-10s" % lab + "".join(vals))
    for r in run.timed:
        if r.get("impl") == "torch" and r.get("mode") == "compile":
            how = []
            if r.get("error"):
                how.append("error: " + r["error"])
            else:
                how.append("mode %s, %s, compiled in %s s" % (
                    r.get("compile_mode", "?"),
                    "fullgraph" if r.get("fullgraph") else "with graph breaks",
                    r.get("compile_s", "?")))
                how.append("replayed by " + (r.get("cuda_graph") or "no CUDA graph ("
                                             + r.get("capture_error", "?") + ")"))
            p("torch-compile %s: %s" % (r.get("label"), "; ".join(how)))

    p("\ntime ratios a/b, CUDA graph (> 1: b is faster)")
    for lab in run.labels:
        g = lambda impl, v, m="cuda-graph": run.us(lab, impl, v, m)  # noqa: E731
        t, tc = g("torch", "torch"), g("torch", "torch", "compile")
        n, u, f = g("tpfuse", "unfused-nccl"), g("tpfuse", "unfused"), g("tpfuse", "fused")
        parts = []
        for a, b, name in ((t, n, "torch/unfused-nccl"), (t, u, "torch/unfused"),
                           (t, f, "torch/fused"), (tc, f, "torch-compile/fused"),
                           (n, f, "unfused-nccl/fused")):
            if a and b:
                parts.append("%s %.2fx" % (name, a / b))
        d8, g8 = g("tpfuse", "fp8-dequant"), g("tpfuse", "fp8-gemm")
        if d8 and g8:
            parts.append("fp8 dequant/gemm %.2fx" % (d8 / g8))
        p("%-10s %s" % (lab, ", ".join(parts) if parts else "-"))

    p("\nissue 15 targets, fused graph under a CUDA graph: x roofline <= 1.3 (batch 1), "
      "<= 1.4 (batch 8); torch/fused >= 1.5x (batch 1, 8); torch-compile/fused > 1 (all)")
    for lab in run.labels:
        f = run.us(lab, "tpfuse", "fused", "cuda-graph")
        if not f:
            continue
        b = label_key(lab)[1]
        parts = []
        rl = run.roofline_us(lab)
        if rl:
            x = f / rl
            lim = {1: 1.3, 8: 1.4}.get(b)
            parts.append("x roofline %.2f%s" % (x, "" if lim is None else
                                                 " (%s)" % ("met" if x <= lim else "not met")))
        t = run.us(lab, "torch", "torch", "cuda-graph")
        if t:
            need = b in (1, 8)
            parts.append("torch/fused %.2fx%s" % (t / f, "" if not need else " (%s)" % (
                "met" if t / f >= 1.5 else "not met")))
        tc = run.us(lab, "torch", "torch", "compile")
        if tc:
            parts.append("torch-compile/fused %.2fx (%s)" % (tc / f, "met" if tc > f else "not met"))
        p("%-10s %s" % (lab, ", ".join(parts)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl")
    ap.add_argument("--annotate", action="store_true",
                    help="rewrite JSONL with the roofline fields added to its rows")
    ap.add_argument("--bandwidth", type=float,
                    help="copy bandwidth in GB/s (read + write) instead of the measured one")
    a = ap.parse_args(argv)
    lines, rows = load(a.jsonl)
    run = Run(rows, a.bandwidth)
    if a.annotate:
        run.annotate()
        tmp = a.jsonl + ".tmp"
        with open(tmp, "w") as f:
            for r in lines:
                f.write((json.dumps(r) if isinstance(r, dict) else r) + "\n")
        os.replace(tmp, a.jsonl)
    report(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
