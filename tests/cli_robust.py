#!/usr/bin/env python3
"""The tpfuse command on hostile input: every refusal is clear, has the
exit code docs/cli.md gives it, and comes before any large allocation or
blocking call.

    cli_robust.py --tpfuse TPFUSE --work DIR

  - text models (.tpf): empty names, external data locations (`..`,
    absolute, empty, missing, inside the folder), tensors given by size
    only asking for more than a text model may;
  - `shard`: shape arithmetic at the ends of int64 (no crash, the same
    split), a model `check` rejects (exit 1);
  - named pipes where a file is read (strategy table, input_N.pb, .tpf):
    refused at once, exit 3, under mpirun too;
  - `run --random-inputs` with a plan far larger than memory: refused before
    the inputs are made;
  - `--dim` values and names, an empty input_0.pb, TPF_STRATEGY_TABLE that
    names no file.

Exit status: 0 all passed, 1 a failure, 77 (skipped) without the onnx package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

import needs_onnx  # noqa: F401 (first: exits 77, skipped, without onnx)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

failures: list[str] = []
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
ENV.pop("TPF_STRATEGY_TABLE", None)


def expect(cond, what, log=""):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        if log:
            print(log[-3000:])
        failures.append(what)
    return cond


def tpfuse(*args, timeout=60, env=None):
    """(exit code, stdout + stderr, seconds); a run past `timeout` is killed
    and reported as exit code None."""
    t0 = time.monotonic()
    try:
        p = subprocess.run([TPFUSE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env or ENV, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, str(e.output or ""), time.monotonic() - t0
    return p.returncode, p.stdout, time.monotonic() - t0


def peak_kib(args):
    """(exit code, stdout + stderr, peak resident KiB) of one tpfuse run."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.execve(TPFUSE, [TPFUSE, *args], ENV)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace"), ru.ru_maxrss


def save(m, path):
    m.ir_version = 9
    onnx.save(m, path)
    return path


def mlp(path, overflow=False, bad=False):
    """x[batch,16] @ w1[16,32] -> Relu -> @ w2[32,16]; with `overflow`, an int64
    shape computation at the ends of the type (Div and Mod of -2^63 by -1,
    2^62 * 4); with `bad`, an Add whose operands cannot broadcast."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w2"], ["z" if bad else "y"], name="down")]
    inits = [numpy_helper.from_array(np.full((16, 32), 0.5, np.float32), "w1"),
             numpy_helper.from_array(np.full((32, 16), 0.25, np.float32), "w2")]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, ["batch", 16])]
    if overflow:
        inits += [numpy_helper.from_array(np.array([-2**63], np.int64), "lowest"),
                  numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
                  numpy_helper.from_array(np.array([2**62], np.int64), "quarter"),
                  numpy_helper.from_array(np.array([4], np.int64), "four")]
        nodes += [helper.make_node("Div", ["lowest", "minus_one"], ["dv"], name="div"),
                  helper.make_node("Mod", ["lowest", "minus_one"], ["md"], name="mod"),
                  helper.make_node("Mul", ["quarter", "four"], ["ml"], name="mul"),
                  helper.make_node("Concat", ["dv", "md", "ml"], ["cat"], name="cat", axis=0)]
        outs.append(helper.make_tensor_value_info("cat", T.INT64, [3]))
    if bad:
        inits.append(numpy_helper.from_array(np.ones((3,), np.float32), "b"))
        nodes.append(helper.make_node("Add", ["z", "b"], ["y"], name="bad_add"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 16])],
                          outs, inits)
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def stats_of(text):
    return {line[:22].strip(): line[22:].strip() for line in text.splitlines() if line[:2] != "tp"}


def text_models(work):
    os.makedirs(os.path.join(work, "tpf"))
    src = mlp(os.path.join(work, "tpf", "mlp.onnx"))
    tpf = os.path.join(work, "tpf", "mlp.tpf")
    rc, log, _ = tpfuse("dump", src, "-o", tpf)
    expect(rc == 0, "dump writes the text model", log)
    with open(tpf) as f:
        text = f.read()

    def opt(name, body):
        path = os.path.join(work, "tpf", name + ".tpf")
        out = os.path.join(work, "tpf", name + ".out.onnx")
        with open(path, "w") as f:
            f.write(body)
        rc, log, _ = tpfuse("optimize", path, "-o", out)
        return rc, log, out

    # empty names: the ONNX importer refuses them, so must the text reader
    for what, old in (("input", '"x"'), ("initializer", '"w1"'), ("output", '"y"')):
        rc, log, out = opt("empty_" + what, text.replace(old, '""', 1))
        expect(rc == 1 and "an empty name" in log and not os.path.exists(out),
               f".tpf with an empty {what} name: optimize exits 1 naming it, writes nothing ({rc})", log)

    # external data: resolved in the text file's folder, as the importer does
    with open(os.path.join(work, "tpf", "w1.bin"), "wb") as f:
        f.write(np.full((16, 32), 0.75, np.float32).tobytes())
    ext = text.replace('"w1" (2048 bytes)', '"w1" (2048 bytes, external "w1.bin" offset 0)', 1)
    expect(ext != text, "the text model has an initializer to make external")
    rc, log, out = opt("ext_ok", ext)
    ok = rc == 0
    if ok:
        back = onnx.load(out)
        w1 = [numpy_helper.to_array(t) for t in back.graph.initializer if t.name == "w1"]
        ok = len(w1) == 1 and np.all(w1[0] == 0.75)
        rc2, log2, _ = tpfuse("check", out)
        ok = ok and rc2 == 0
        log += log2
    expect(ok, ".tpf with external data beside it: optimize writes its weights, check accepts the result",
           log)
    # a decoy beside the output must not become the weights
    for loc, code, words in (("../w1.bin", 1, "contains a '..' component"),
                             (os.path.join(work, "tpf", "w1.bin"), 1, "is an absolute path"),
                             ("", 1, "is empty"),
                             ("missing.bin", 3, "is missing")):
        body = ext.replace('"w1.bin"', '"%s"' % loc, 1)
        name = "ext_%d" % len(loc)
        outdir = os.path.join(work, "tpf", name + ".d")
        os.makedirs(outdir, exist_ok=True)
        with open(os.path.join(outdir, "missing.bin"), "wb") as f:
            f.write(b"\1" * 4096)
        path = os.path.join(work, "tpf", name + ".tpf")
        with open(path, "w") as f:
            f.write(body)
        out = os.path.join(outdir, "o.onnx")
        rc, log, _ = tpfuse("optimize", path, "-o", out)
        expect(rc == code and words in log and not os.path.exists(out),
               f".tpf with external location {loc!r}: optimize exits {code} ({words}), writes nothing ({rc})",
               log)

    # tensors given by size only: bounded in all, not only one by one
    inits = "".join('  init %%%d: f32[16777216] "z%d" (67108864 bytes)\n' % (i, i) for i in range(5))
    big = 'ir_version 9\nopset "" 18\ngraph "g" {\n' + inits + \
          "  %5 = Concat(%0, %1, %2, %3, %4) {axis=0} : f32[83886080]  # cat\n" \
          '  output %5: f32[83886080] "y"\n}\n'
    rc, log, out = opt("zeros", big)
    expect(rc == 1 and "in all" in log and not os.path.exists(out),
           f"a {len(big)}-byte .tpf asking for 320 MiB of zeros is refused (exit 1), nothing written ({rc})",
           log)


def shard_checks(work):
    d = os.path.join(work, "shard")
    os.makedirs(d)
    plain = mlp(os.path.join(d, "mlp.onnx"))
    ovf = mlp(os.path.join(d, "ovf.onnx"), overflow=True)
    rc, log0, _ = tpfuse("shard", plain, "-w", "2", "-o", os.path.join(d, "p.{rank}.onnx"), "--stats")
    rc1, log1, _ = tpfuse("shard", ovf, "-w", "2", "-o", os.path.join(d, "o.{rank}.onnx"), "--stats")
    s0, s1 = stats_of(log0), stats_of(log1)
    expect(rc == 0 and rc1 == 0 and s1.get("column-parallel") == s0.get("column-parallel") == "1" and
           s1.get("row-parallel") == "1",
           f"shard: Div/Mod of -2^63 by -1 and 2^62 * 4 in a shape computation: exit 0, the same split ({rc1})",
           log0 + log1)
    for cmd in (["check", ovf], ["optimize", ovf, "-o", os.path.join(d, "ovf.opt.onnx")]):
        rc, log, _ = tpfuse(*cmd)
        expect(rc == 0, f"{cmd[0]} accepts the model with int64 shape arithmetic at the ends ({rc})", log)

    bad = mlp(os.path.join(d, "bad.onnx"), bad=True)
    rc_check, log_check, _ = tpfuse("check", bad)
    rc, log, _ = tpfuse("shard", bad, "-w", "2", "-o", os.path.join(d, "b.{rank}.onnx"))
    expect(rc_check == 1 and rc == 1 and "cannot broadcast" in log and
           not os.path.exists(os.path.join(d, "b.0.onnx")),
           f"shard refuses a model check rejects: exit 1 like check, the reason named ({rc_check}, {rc})",
           log_check + log)


def fifo_checks(work):
    d = os.path.join(work, "fifo")
    os.makedirs(d)
    model = mlp(os.path.join(d, "mlp.onnx"))
    table = os.path.join(d, "table.fifo")
    os.mkfifo(table)
    rc, log, secs = tpfuse("run", model, "--random-inputs", "1", "--strategy-table", table, timeout=30)
    expect(rc == 3 and "not a regular file" in log,
           f"--strategy-table naming a named pipe: exit 3 at once ({rc}, {secs:.1f} s)", log)
    inputs = os.path.join(d, "inputs")
    os.makedirs(inputs)
    os.mkfifo(os.path.join(inputs, "input_0.pb"))
    rc, log, secs = tpfuse("run", model, "--inputs", inputs, timeout=30)
    expect(rc == 3 and "not a regular file" in log,
           f"input_0.pb a named pipe: exit 3 at once ({rc}, {secs:.1f} s)", log)
    tpf = os.path.join(d, "model.tpf")
    os.mkfifo(tpf)
    for cmd in (["check", tpf], ["optimize", tpf, "-o", os.path.join(d, "o.onnx")]):
        rc, log, secs = tpfuse(*cmd, timeout=30)
        expect(rc == 3 and "not a regular file" in log,
               f"{cmd[0]} of a .tpf that is a named pipe: exit 3 at once ({rc}, {secs:.1f} s)", log)
    env = dict(ENV, TPF_STRATEGY_TABLE=table)
    rc, log, secs = tpfuse("env", timeout=30, env=env)
    expect(rc == 1 and "TPF_STRATEGY_TABLE" in log and "not a regular file" in log,
           f"TPF_STRATEGY_TABLE naming a named pipe: env exits 1 naming it ({rc})", log)
    if shutil.which("mpirun"):
        t0 = time.monotonic()
        try:
            p = subprocess.run(["mpirun", "-np", "2", TPFUSE, "run", model, "--random-inputs", "1",
                                "--strategy-table", table], capture_output=True, text=True, env=ENV,
                               timeout=120)
            rc, log = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, log = None, str(e)
        expect(rc not in (0, None) and "not a regular file" in log,
               f"under mpirun -np 2, a named-pipe strategy table stops every rank ({rc}, "
               f"{time.monotonic() - t0:.1f} s)", log)


def input_checks(work):
    d = os.path.join(work, "inputs")
    os.makedirs(d)
    model = mlp(os.path.join(d, "mlp.onnx"))
    empty = os.path.join(d, "empty")
    os.makedirs(empty)
    open(os.path.join(empty, "input_0.pb"), "wb").close()
    rc, log, _ = tpfuse("run", model, "--inputs", empty)
    expect(rc == 1 and "empty file" in log and "dtype 0" not in log,
           f"an empty input_0.pb: exit 1, 'empty file' ({rc})", log)

    for value, words in (("=5", "needs NAME=VALUE"), ("zzz=3", "no input of"), ("batch=abc", "not a whole number"),
                         ("batch=-1", "at least 1"), ("batch=0", "at least 1"), ("batch", "needs NAME=VALUE")):
        for cmd in ("run", "plan"):
            rc, log, _ = tpfuse(cmd, model, "--random-inputs", "1", "--dim", value)
            errors = [ln for ln in log.splitlines() if ": error: " in ln]
            expect(rc == 2 and len(errors) == 1 and words in errors[0],
                   f"{cmd} --dim {value}: usage error (2), one message ({words}) ({rc}, {len(errors)})", log)
    rc, log, _ = tpfuse("run", model, "--random-inputs", "1", "--dim", "batch=3", "--dim", "batch=4")
    expect(rc == 2 and "already given" in log, f"--dim given twice for one name: usage error ({rc})", log)
    rc, log, _ = tpfuse("run", model, "--random-inputs", "1", "--dim", "batch=3")
    expect(rc == 0 and "f32[3,16]" in log, f"--dim batch=3 still runs ({rc})", log)

    # x f32[seq, 4] and x @ x^T: 320 MB of inputs, a plan of 1.6 PB
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["xt"], name="t"),
                           helper.make_node("MatMul", ["x", "xt"], ["y"], name="mm")], "square",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["seq", 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    square = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]),
                  os.path.join(d, "square.onnx"))
    # what the command itself takes (its libraries: a CUDA build maps cuBLAS),
    # from the same model at a small size
    _, _, base = peak_kib(["run", square, "--random-inputs", "1", "--dim", "seq=4"])
    rc, log, kib = peak_kib(["run", square, "--random-inputs", "1", "--dim", "seq=20000000"])
    expect(rc == 1 and "the plan's buffers" in log and kib - base < 150 * 1024,
           f"run --random-inputs with a plan far beyond memory: refused before the 320 MB of inputs "
           f"are made (exit {rc}, peak {kib // 1024} MiB, {base // 1024} MiB at seq=4)", log)
    rc, log, kib = peak_kib(["plan", square, "--dim", "seq=20000000"])
    expect(rc == 0 and "1600000640000000" in log.replace(",", "") and kib - base < 150 * 1024,
           f"plan of that model shows the plan without making its 320 MB of inputs (exit {rc}, "
           f"peak {kib // 1024} MiB, {base // 1024} MiB at seq=4)", log)

    env = dict(ENV, TPF_STRATEGY_TABLE=os.path.join(d, "nonexistent.txt"))
    rc_env, log_env, _ = tpfuse("env", env=env)
    rc_run, log_run, _ = tpfuse("run", model, "--random-inputs", "1", env=env)
    expect(rc_env == 1 and rc_run == 1 and "No such file" in log_env and "No such file" in log_run,
           f"TPF_STRATEGY_TABLE naming no file: env and run both exit 1 naming it ({rc_env}, {rc_run})",
           log_env + log_run)


def main():
    global TPFUSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    TPFUSE = os.path.abspath(a.tpfuse)
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    text_models(work)
    shard_checks(work)
    fifo_checks(work)
    input_checks(work)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
