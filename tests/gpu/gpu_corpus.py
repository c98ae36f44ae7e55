#!/usr/bin/env python3
"""The export corpus's W = 2 (or --world W) folders on the CUDA backend (NCCL ranks).

For every tests/corpus/*-wW/ folder (torch.onnx exports of small HF models,
tests/corpus/README.md), under `mpirun -np W`:

  eager  tpfuse run 'model.rank{rank}.onnx' --inputs test_data_set_0
         --backend cuda --optimize --verify         (fused == unfused on the GPU)
  graph  the same with --cuda-graph --iters 3, without --verify (the plan
         captured into a CUDA graph on the second run and replayed)

and rank 0's logits of each against the stored outputs (the unsharded
float32 torch model) within tests/corpus/status.py's bounds: float32 within
1e-4 (atol and rtol; the GPU's fp32 GEMMs run without TF32), float16 and
bfloat16 within the manifest's tolerance.  The logits are replicated (every
rank holds all of them after the last all-gather): every rank's must be
bit-identical to rank 0's (the collectives sum in the same order on every
rank).

Folders listed in tests/gpu/corpus-known-failures.txt (the CUDA backend's
known failures; tests/corpus/known-failures.txt is the CPU backend's) that
fail are reported with their reason and do not fail the test; a listed
folder that passes is reported as fixed; any other failure fails the test.
Measured on 2x H100: all 32 W = 2 folders pass, eager and graph, float32
within 6.7e-6 of the torch outputs (the CPU backend's known failures
included: float16/bfloat16 gemma2, minimax_m2 torchscript fp16, qwen3_next),
in 2 min 22 s.

With --comm mpi both modes take `tpfuse run --comm mpi` (collectives on
GPU memory through host memory and MPI; ranks share the GPUs there are, so
the -w4 folders run on 2 GPUs), and graph becomes repeat: --iters 3
without --cuda-graph (no CUDA graph can capture those collectives).

Usage: gpu_corpus.py --tpfuse EXE [--world W] [--comm mpi] [--work DIR]
                     [--only SUBSTR,..] [--list]
--list prints the folders and the commands, starts nothing, needs no GPU
(suite corpus runs it so that this script is loaded on every CI machine).
Exit 77 (skipped) when there is no mpirun or fewer than W GPUs (without
--comm mpi: one GPU).
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "corpus"))
try:
    import status  # noqa: E402  (tests/corpus/status.py)
except ImportError as e:
    print("%s: skipped (tests/corpus/status.py needs onnx and numpy)" % e)
    sys.exit(77)

KNOWN = [os.path.join(HERE, "corpus-known-failures.txt")]
MODES = (("eager", ["--backend", "cuda", "--optimize", "--verify"]),
         ("graph", ["--backend", "cuda", "--optimize", "--cuda-graph", "--iters", "3"]))


def modes(comm):
    """MODES for the communicator: under mpi no CUDA graph, --comm mpi."""
    if comm == "nccl":
        return MODES
    return tuple(("repeat" if m == "graph" else m, [x for x in extra if x != "--cuda-graph"] + ["--comm", comm])
                 for m, extra in MODES)


def command(tpfuse, man, out_dir, extra, timeout):
    cmd = status.run_command(tpfuse, man, out_dir, extra, timeout)
    # NVLink multicast (NVLS) off, as every GPU test of the project
    i = cmd.index("-np")
    return cmd[:i] + ["-x", "NCCL_NVLS_ENABLE=0"] + cmd[i:]


def ranks_differ(out_dir, world):
    """The output files whose bytes differ between rank 0 and another rank."""
    bad = []
    r0 = os.path.join(out_dir, "rank0")
    for f in sorted(os.listdir(r0)) if os.path.isdir(r0) else []:
        with open(os.path.join(r0, f), "rb") as x:
            want = x.read()
        for r in range(1, world):
            p = os.path.join(out_dir, "rank%d" % r, f)
            if not os.path.exists(p) or open(p, "rb").read() != want:
                bad.append("%s of rank %d" % (f, r))
    return ", ".join(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tpfuse", default=os.environ.get("TPFUSE", os.path.join(ROOT, "build", "cli", "tpfuse")))
    ap.add_argument("--work", default="")
    ap.add_argument("--only", default="", help="comma list of substrings of folder names")
    ap.add_argument("--known-failures", action="append",
                    help="FILE of 'FOLDER reason' lines (default: %s)" % ", ".join(
                        os.path.relpath(k, ROOT) for k in KNOWN))
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--world", type=int, default=2, help="world size: the -wW folders")
    ap.add_argument("--comm", choices=["nccl", "mpi"], default="nccl",
                    help="tpfuse run --comm (mpi: ranks share the GPUs)")
    ap.add_argument("--list", action="store_true", help="print the folders and commands, run nothing")
    a = ap.parse_args()
    a.tpfuse = os.path.abspath(a.tpfuse)
    known = {}
    for path in a.known_failures or [k for k in KNOWN if os.path.exists(k)]:
        known.update(status.read_known_failures(path))
    folders = status.load_folders(os.path.join(ROOT, "tests", "corpus"), a.only, [a.world])
    if a.list:
        for folder, man in folders:
            name = os.path.basename(folder)
            print("%s (%s)%s" % (name, man["dtype"],
                                 "  known failure: " + known[name] if name in known else ""))
            for mode, extra in modes(a.comm):
                print("    %-5s cd %s && %s" % (mode, os.path.relpath(folder), shlex.join(
                    command(a.tpfuse, man, "OUT", extra, a.timeout))))
        print("%d folders, %d runs" % (len(folders), len(folders) * len(modes(a.comm))))
        return 0 if folders else 1
    if not shutil.which("mpirun") or not shutil.which("nvidia-smi"):
        print("mpirun or nvidia-smi not found: skipped")
        return 77
    ngpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")
    need = 1 if a.comm == "mpi" else max(2, a.world)
    if ngpu < need:
        print("%d GPU(s), %d needed: skipped" % (ngpu, need))
        return 77
    if not os.path.exists(a.tpfuse):
        print("tpfuse not found at %s (--tpfuse)" % a.tpfuse)
        return 77
    work = a.work or tempfile.mkdtemp(prefix="tpf-gpu-corpus-")
    env = dict(status.mpi_env(), NCCL_NVLS_ENABLE="0")
    passed = failed = known_failed = 0
    for folder, man in folders:
        name = os.path.basename(folder)
        notes, errs = [], []
        for mode, extra in modes(a.comm):
            out_dir = os.path.join(work, name, mode)
            shutil.rmtree(out_dir, ignore_errors=True)
            cmd = command(a.tpfuse, man, out_dir, extra, a.timeout)
            rc, out, err = status.sh(cmd, a.timeout * 2, cwd=folder, env=env)
            if rc != 0:
                notes.append("%s: exit %d: %s" % (mode, rc, status.first_error(out + err)))
                continue
            ok, e, msg = status.compare_logits(folder, man, out_dir)
            errs.append("%s %s" % (mode, "?" if e is None else "%.2g" % e))
            if not ok:
                notes.append("%s: logits %s" % (mode, msg))
            differ = ranks_differ(out_dir, man["world_size"])
            if differ:
                notes.append("%s: replicated outputs not bit-identical across ranks: %s" % (mode, differ))
        what = "; ".join(notes)[:400]
        if name in known:
            if notes:
                print("%s: known failure: %s (%s)" % (name, known[name], what), flush=True)
                known_failed += 1
            else:
                print("%s: ok (max err %s): fixed, remove it from the known failures" % (
                    name, ", ".join(errs)), flush=True)
                passed += 1
        elif notes:
            print("%s: FAIL (%s)" % (name, what), flush=True)
            failed += 1
        else:
            print("%s: ok (max err %s)" % (name, ", ".join(errs)), flush=True)
            passed += 1
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed, %d known failures" % (passed, failed, known_failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
