#!/usr/bin/env python3
"""PyTorch peer of bench-decode: the same per-rank ONNX models, the same
weights, executed by PyTorch on the GPUs with torch.distributed (NCCL) for
the collectives, eagerly, as a captured CUDA graph, and compiled
(torch.compile) then captured as a CUDA graph.

The model is run by a small interpreter that maps every node of the rank's
ONNX graph to PyTorch operations once (constants on the GPU, shapes
resolved), so the computation is exactly the graph tpfuse runs: bf16
matmuls through cuBLAS, norms in float32 rounded once, one all_reduce per
com.microsoft.AllReduce.  Inputs (hidden state, KV cache) are random and
stay on the GPU; the time per decode step is the wall time of N steps
divided by N after a synchronize (slowest rank).

  python3 bench/torch_decode_peer.py --model 'DIR/dense.rank{rank}.onnx' \
          --label batch=8 --iters 200 --warmup 20 [--world-size 2] \
          [--modes eager,cuda-graph,compile] [--compile-mode default] [--timeout S]

Prints one JSON line per mode on rank 0 as soon as that mode is measured.
Modes:
  eager       the interpreter's step, launched op by op from Python
  cuda-graph  one step captured with torch.cuda.graph, replayed
  compile     the step through torch.compile (dynamic=False, fullgraph;
              the all-reduces as torch.distributed._functional_collectives
              so that Dynamo traces them into the graph): with
              --compile-mode default or max-autotune-no-cudagraphs the
              compiled step is captured with torch.cuda.graph like
              cuda-graph; with reduce-overhead or max-autotune Inductor's
              own CUDA graphs replay it (inputs and weights marked static,
              so nothing is copied in per step).  A full graph that does
              not compile is tried again with graph breaks allowed, a
              capture that fails is reported and the compiled step timed
              without it; a compile that fails altogether gives a row with
              "error" (the reason) instead of us_per_step, and the other
              modes' rows stand.
--device cpu runs the ranks on the CPU with gloo (eager and compile,
without CUDA graphs): a check of the interpreter and of the compile path
on a machine without GPUs, not a benchmark.
--timeout S bounds the whole run: rows not out by then are missing (the
exit status says so) and the workers are stopped.  No network is used
(nothing is downloaded); NVLink multicast stays off (NCCL_NVLS_ENABLE=0 is
set before NCCL starts).
"""
import argparse
import json
import os
import signal
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def torch_dtype(torch, t):
    return {
        TensorProto.FLOAT: torch.float32,
        TensorProto.FLOAT16: torch.float16,
        TensorProto.BFLOAT16: torch.bfloat16,
        TensorProto.DOUBLE: torch.float64,
        TensorProto.INT64: torch.int64,
        TensorProto.INT32: torch.int32,
        TensorProto.BOOL: torch.bool,
        TensorProto.FLOAT8E4M3FN: torch.float8_e4m3fn,
    }[t]


def to_torch(torch, init, device):
    a = numpy_helper.to_array(init)
    if init.data_type == TensorProto.BFLOAT16:
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(torch.bfloat16)
    elif init.data_type == TensorProto.FLOAT8E4M3FN:
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.uint8).copy()).view(torch.float8_e4m3fn)
    else:
        t = torch.from_numpy(np.array(a, copy=True))
    return t.to(device), a


class Program:
    """The rank's graph as a list of closures over a value table."""

    def __init__(self, torch, dist, path, device):
        self.torch, self.dist, self.device = torch, dist, device
        self.functional = False
        m = onnx.load(path)
        g = m.graph
        self.consts, self.host = {}, {}
        for init in g.initializer:
            self.consts[init.name], self.host[init.name] = to_torch(torch, init, device)
        self.inputs = [(i.name, i.type.tensor_type.elem_type,
                        [d.dim_value for d in i.type.tensor_type.shape.dim])
                       for i in g.input if i.name not in self.consts]
        self.outputs = [o.name for o in g.output]
        self.nodes = list(g.node)
        self.steps = [self.compile(n) for n in self.nodes]

    def functional_steps(self):
        """The steps with functional collectives (for torch.compile)."""
        self.functional = True
        try:
            return [self.compile(n) for n in self.nodes]
        finally:
            self.functional = False

    def ints(self, name):
        return [int(v) for v in np.array(self.host[name]).reshape(-1)]

    def compile(self, n):
        torch, F = self.torch, self.torch.nn.functional
        at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        ins, outs, op = list(n.input), list(n.output), n.op_type

        def norm(x, gamma, eps, axis=-1):
            xf = x.float()
            dims = tuple(range(axis % x.dim(), x.dim()))
            inv = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + eps)
            return (xf * inv * gamma.float()).to(x.dtype), inv

        if op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op]
            return lambda v: v.__setitem__(outs[0], f(v[ins[0]], v[ins[1]]))
        if op == "Pow":
            return lambda v: v.__setitem__(outs[0], torch.pow(v[ins[0]], v[ins[1]]))
        if op in ("Sigmoid", "Sqrt", "Reciprocal", "Neg", "Relu", "Exp", "Tanh"):
            f = {"Sigmoid": torch.sigmoid, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal,
                 "Neg": torch.neg, "Relu": torch.relu, "Exp": torch.exp, "Tanh": torch.tanh}[op]
            return lambda v: v.__setitem__(outs[0], f(v[ins[0]]))
        if op == "MatMul":
            return lambda v: v.__setitem__(outs[0], torch.matmul(v[ins[0]], v[ins[1]]))
        if op == "Cast":
            dt = torch_dtype(torch, at["to"])
            return lambda v: v.__setitem__(outs[0], v[ins[0]].to(dt))
        if op == "Reshape":
            shape = self.ints(ins[1])

            def reshape(v):
                x = v[ins[0]]
                s = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
                v[outs[0]] = x.reshape(s)
            return reshape
        if op in ("Unsqueeze", "Squeeze"):
            axes = self.ints(ins[1]) if len(ins) > 1 and ins[1] else list(at.get("axes", []))

            def sq(v):
                x = v[ins[0]]
                for a in sorted(axes) if op == "Unsqueeze" else sorted(axes, reverse=True):
                    x = x.unsqueeze(a) if op == "Unsqueeze" else x.squeeze(a)
                v[outs[0]] = x
            return sq
        if op == "Concat":
            return lambda v: v.__setitem__(outs[0], torch.cat([v[i] for i in ins], dim=at["axis"]))
        if op == "Transpose":
            perm = list(at["perm"])
            return lambda v: v.__setitem__(outs[0], v[ins[0]].permute(perm).contiguous())
        if op == "Softmax":
            ax = at.get("axis", -1)
            return lambda v: v.__setitem__(outs[0], torch.softmax(v[ins[0]], dim=ax))
        if op == "ReduceMean" or op == "ReduceSum":
            axes = self.ints(ins[1]) if len(ins) > 1 and ins[1] else list(at.get("axes", []))
            keep = bool(at.get("keepdims", 1))
            f = torch.mean if op == "ReduceMean" else torch.sum

            def red(v):
                x = v[ins[0]]
                v[outs[0]] = f(x, dim=tuple(axes) if axes else tuple(range(x.dim())), keepdim=keep)
            return red
        if op in ("RMSNormalization", "SimplifiedLayerNormalization"):
            eps, axis = at.get("epsilon", 1e-5), at.get("axis", -1)

            def rms(v):
                y, inv = norm(v[ins[0]], v[ins[1]], eps, axis)
                v[outs[0]] = y
                if len(outs) > 1 and outs[1]:
                    v[outs[1]] = inv
            return rms
        if op == "SkipSimplifiedLayerNormalization":
            eps = at.get("epsilon", 1e-12)

            def skip(v):
                s = v[ins[0]] + v[ins[1]]
                if len(ins) > 3 and ins[3]:
                    s = s + v[ins[3]]
                y, inv = norm(s, v[ins[2]], eps)
                v[outs[0]] = y
                if len(outs) > 3 and outs[3]:
                    v[outs[3]] = s
            return skip
        if op in ("AllReduce", "AllGather") and self.functional:
            import torch.distributed._functional_collectives as funcol
            group = self.dist.group.WORLD
            if op == "AllReduce":
                return lambda v: v.__setitem__(outs[0], funcol.all_reduce(v[ins[0]], "sum", group))
            axis = at.get("axis", 0)
            return lambda v: v.__setitem__(
                outs[0], funcol.all_gather_tensor(v[ins[0]].contiguous(), axis, group))
        if op == "AllReduce":
            dist = self.dist

            def allreduce(v):
                t = v[ins[0]].clone()
                dist.all_reduce(t)
                v[outs[0]] = t
            return allreduce
        if op == "AllGather":
            dist, world = self.dist, self.dist.get_world_size()
            axis = at.get("axis", 0)

            def allgather(v):
                x = v[ins[0]].contiguous()
                parts = [torch.empty_like(x) for _ in range(world)]
                dist.all_gather(parts, x)
                v[outs[0]] = torch.cat(parts, dim=axis)
            return allgather
        if op == "Slice":
            st, en = self.ints(ins[1]), self.ints(ins[2])
            ax = self.ints(ins[3]) if len(ins) > 3 and ins[3] else list(range(len(st)))
            sp = self.ints(ins[4]) if len(ins) > 4 and ins[4] else [1] * len(st)

            def slc(v):
                x = v[ins[0]]
                idx = [slice(None)] * x.dim()
                for s, e, a, p in zip(st, en, ax, sp):
                    idx[a] = slice(s, min(e, x.shape[a]), p)
                v[outs[0]] = x[tuple(idx)].contiguous()
            return slc
        if op == "Split":
            axis = at.get("axis", 0)
            sizes = self.ints(ins[1]) if len(ins) > 1 and ins[1] else None

            def split(v):
                x = v[ins[0]]
                parts = torch.split(x, sizes, dim=axis) if sizes else torch.chunk(x, len(outs), dim=axis)
                for o, t in zip(outs, parts):
                    v[o] = t.contiguous()
            return split
        if op in ("QuantizeLinear", "DequantizeLinear"):
            def qdq(v):
                x, s = v[ins[0]], v[ins[1]]
                if op == "QuantizeLinear":
                    v[outs[0]] = (x.float() / s.float()).clamp(-448, 448).to(torch.float8_e4m3fn)
                else:
                    v[outs[0]] = (x.float() * s.float()).to(s.dtype)
            return qdq
        raise NotImplementedError(f"{n.domain}::{op} is not mapped to PyTorch")

    def random_inputs(self, seed):
        g = self.torch.Generator(device="cpu").manual_seed(seed)
        feeds = {}
        for name, et, dims in self.inputs:
            dt = torch_dtype(self.torch, et)
            feeds[name] = (self.torch.rand(dims, generator=g) * 2 - 1).to(dt).to(self.device)
        return feeds

    def run(self, feeds, steps=None):
        v = dict(self.consts)
        v.update(feeds)
        for s in self.steps if steps is None else steps:
            s(v)
        return [v[o] for o in self.outputs]


def first_line(e):
    text = ("%s: %s" % (type(e).__name__, e)).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def compiled_mode(torch, prog, feeds, a, timed, say, sync):
    """The compile mode: (us per step, details) or (None, details with "error")."""
    cg_modes = ("reduce-overhead", "max-autotune")
    mode = None if a.compile_mode == "default" else a.compile_mode
    steps = prog.functional_steps()
    info = {"compile_mode": a.compile_mode}
    if a.compile_mode in cg_modes:
        for t in list(prog.consts.values()) + list(feeds.values()):
            torch._dynamo.mark_static_address(t)
    fn = None
    notes = []
    for fullgraph in (True, False):
        try:
            torch._dynamo.reset()
            cand = torch.compile(lambda f: prog.run(f, steps), mode=mode, fullgraph=fullgraph,
                                 dynamic=False)
            t0 = time.perf_counter()
            for _ in range(3):  # compiles on the first call
                cand(feeds)
            sync()
            info["compile_s"] = round(time.perf_counter() - t0, 1)
            info["fullgraph"] = fullgraph
            fn = cand
            break
        except Exception as e:  # noqa: BLE001 (any failure: report it, keep the others)
            notes.append("fullgraph=%s: %s" % (fullgraph, first_line(e)))
            say("torch.compile failed (fullgraph=%s): %s" % (fullgraph, first_line(e)))
    if notes:
        info["compile_notes"] = notes
    if fn is None:
        info["error"] = "torch.compile failed: " + "; ".join(notes)
        return None, info
    say("compiled in %.1f s (fullgraph=%s)" % (info["compile_s"], info["fullgraph"]))
    if a.compile_mode in cg_modes:
        info["cuda_graph"] = "inductor"
        return timed(lambda: fn(feeds)), info
    if prog.device.type != "cuda":
        info["cuda_graph"] = None
        return timed(lambda: fn(feeds)), info
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(feeds)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(feeds)
        info["cuda_graph"] = "torch.cuda.graph"
        return timed(graph.replay), info
    except Exception as e:  # noqa: BLE001
        say("capture of the compiled step failed, timing it without a graph: %s" % first_line(e))
        sync()
        info["cuda_graph"] = None
        info["capture_error"] = first_line(e)
        return timed(lambda: fn(feeds)), info


def worker(rank, world, a, port, q):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if a.device == "cpu":
        dist.init_process_group("gloo", rank=rank, world_size=world)
        dev = torch.device("cpu")
        sync = (lambda: None)
    else:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        dev = torch.device("cuda", rank)
        sync = torch.cuda.synchronize
    prog = Program(torch, dist, a.model.replace("{rank}", str(rank)), dev)
    feeds = prog.random_inputs(a.seed)
    say = (lambda m: print("rank %d: %s" % (rank, m), file=sys.stderr, flush=True))
    say("model loaded, %d steps" % len(prog.steps))

    def timed(fn):
        for _ in range(a.warmup):
            fn()
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            fn()
        sync()
        us = (time.perf_counter() - t0) / a.iters * 1e6
        t = torch.tensor([us], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    if dev.type == "cuda":
        name = torch.cuda.get_device_name(rank)
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    else:
        name, nccl = "cpu", None

    def report(mode, us, extra=None):
        if rank != 0:
            return
        row = {"impl": "torch", "mode": mode, "label": a.label, "world": world}
        if us is not None:
            row["us_per_step"] = round(us, 2)
        row.update(extra or {})
        row.update(device=name, torch=torch.__version__, nccl=nccl,
                   iters=a.iters, warmup=a.warmup)
        q.put(json.dumps(row))

    modes = a.modes.split(",")
    with torch.inference_mode():
        if "eager" in modes:
            report("eager", timed(lambda: prog.run(feeds)))
            say("eager done")
        if "cuda-graph" in modes and dev.type == "cuda":
            # CUDA graph: warm up on a side stream, capture one step, replay
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    prog.run(feeds)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                prog.run(feeds)
            say("captured")
            report("cuda-graph", timed(graph.replay))
            del graph
            say("cuda graph done")
        if "compile" in modes:
            us, info = compiled_mode(torch, prog, feeds, a, timed, say, sync)
            report("compile", us, info)
            say("compile done" if us is not None else "compile: no time (%s)" % info["error"])
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="per-rank ONNX path with {rank}")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--modes", default="eager,cuda-graph,compile",
                    help="comma-separated: eager, cuda-graph, compile")
    ap.add_argument("--compile-mode", default="default",
                    choices=("default", "reduce-overhead", "max-autotune",
                             "max-autotune-no-cudagraphs"),
                    help="torch.compile mode of the compile mode")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: gloo on the CPU, a check without GPUs (no CUDA graphs)")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds for the whole run (0: no limit)")
    a = ap.parse_args()
    bad_modes = set(a.modes.split(",")) - {"eager", "cuda-graph", "compile"}
    if bad_modes:
        ap.error("unknown mode(s): %s" % ", ".join(sorted(bad_modes)))
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.world_size, a, a.port, q)) for r in range(a.world_size)]
    for p in procs:
        p.start()

    def stop(signum, _frame):  # killed from outside (timeout): take the workers along
        for p in procs:
            if p.is_alive():
                p.kill()
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    import queue
    # Rank 0 sends one line per mode; print them as they come, so that a
    # slow process-group shutdown cannot hold the results back.
    modes = a.modes.split(",")
    want = len(modes) - (a.device == "cpu" and "cuda-graph" in modes)
    got = bad = 0
    deadline = time.monotonic() + a.timeout if a.timeout > 0 else None
    late = False
    while got < want and any(p.is_alive() for p in procs):
        if deadline is not None and time.monotonic() > deadline:
            late = True
            break
        try:
            print(q.get(timeout=1), flush=True)
            got += 1
        except queue.Empty:
            pass
    while got < want:  # rows sent just before the workers ended
        try:
            print(q.get(timeout=1), flush=True)
            got += 1
        except queue.Empty:
            break
    if late:
        print("torch_decode_peer: %d of %d modes measured within --timeout %g s; stopping the workers"
              % (got, want, a.timeout), file=sys.stderr, flush=True)
    for p in procs:
        if late and p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10 if late else 30)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
            bad += 1
        elif p.exitcode:
            bad += 1
    return 1 if bad or got < want else 0


if __name__ == "__main__":
    sys.exit(main())
