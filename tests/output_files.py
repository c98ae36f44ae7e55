#!/usr/bin/env python3
"""No output replaces an input or another output; outputs are whole or absent.

    output_files.py --tpfuse TPFUSE --work DIR [--ranks]

Each refused command must exit 2 (docs/cli.md), name both files, leave every
input byte-identical and write nothing (no output, no temporary file):

  - optimize whose OUT.data is the input's data file (the input renamed
    away from m.onnx), OUT spelled as a symbolic link, a hard link or
    './'; a --dump-before/--dump-after or `dump -o` naming the model or
    its data file (also through a symbolic link); two dumps into one file;
    an input or a dump named NN-NAME.txt in the --print-after-all folder;
  - shard: rank 0's data file the input's, './ORIG' and './m{rank}.onnx'
    spellings of the input, a hard link, two ranks resolving to one file
    ('{rank}/../m.onnx');
  - run --outputs into the --inputs folder (reference outputs there), a
    hard link of an input file, the strategy table; with --ranks (suite
    mpi), two ranks resolving to one folder ('{rank}/../o', mpirun -np 2).

Failed writes leave nothing: optimize -o FOLDER (no FOLDER.data), a write
past RLIMIT_FSIZE (a full disk) for optimize, shard, dump and run --outputs
(the old files kept, no temporary files), dump -o /dev/full; shard creates
the missing folders of OUT.

Exit status: 0 passed, 1 failed, 77 skipped (no onnx).
"""
import argparse
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys

import needs_onnx  # noqa: F401 (first: exits 77, skipped, without onnx)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

failures = []


def check(cond, what, log=""):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        if log:
            print(log)
        failures.append(what)


def tpfuse(*args, fsize=None, cwd=None):
    def limit():
        # a full disk: writes past `fsize` bytes fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    p = subprocess.run([TPFUSE, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                       preexec_fn=limit if fsize is not None else None)
    return p.returncode, p.stdout + p.stderr


def snapshot(folder):
    """{relative path: sha256 or 'dir' or 'link -> target'} of everything under folder."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder)
            if os.path.islink(p):
                out[rel] = "link -> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_model(path, location, shape=(64, 64)):
    """y = x @ W, W external in `location` (next to path)."""
    w = numpy_helper.from_array(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7,
                                "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, shape[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, shape[1]])],
                          [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, path, save_as_external_data=True, location=location, size_threshold=0)


def fresh(work, name):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def refused(d, args, what, must_name=(), cwd=None):
    """The command exits 2 naming must_name, and d is exactly as before."""
    before = snapshot(d)
    rc, log = tpfuse(*args, cwd=cwd or d)
    check(rc == 2, "%s: exit 2 (got %d)" % (what, rc), log)
    for n in must_name:
        check(n in log, "%s: the error names '%s'" % (what, n), log)
    after = snapshot(d)
    check(after == before, "%s: every file as it was, nothing written" % what,
          "before %s\nafter  %s" % (before, after))


def no_temporaries(d, what):
    left = [p for p in snapshot(d) if os.path.basename(p).startswith(".tpfuse-")]
    check(not left, "%s: no temporary file left" % what, str(left))


def test_optimize(work):
    d = fresh(work, "optimize")
    make_model(os.path.join(d, "m.onnx"), "m.onnx.data")
    os.rename(os.path.join(d, "m.onnx"), os.path.join(d, "orig.onnx"))
    # 1: OUT.data would replace the data file orig.onnx reads
    refused(d, ["optimize", "orig.onnx", "-o", "m.onnx"], "optimize -o m.onnx (its data file)",
            ["m.onnx.data"])
    refused(d, ["optimize", "orig.onnx", "-o", "./m.onnx.data"], "optimize -o ./m.onnx.data",
            ["./m.onnx.data"])
    # 2: every spelling of the input
    os.symlink("orig.onnx", os.path.join(d, "link.onnx"))
    os.link(os.path.join(d, "orig.onnx"), os.path.join(d, "hard.onnx"))
    os.symlink("m.onnx.data", os.path.join(d, "data-link"))
    os.makedirs(os.path.join(d, "sub"))
    for out in ["orig.onnx", "./orig.onnx", "sub/../orig.onnx", "link.onnx", "hard.onnx",
                os.path.join(d, "orig.onnx")]:
        refused(d, ["optimize", "orig.onnx", "-o", out], "optimize -o %s" % out, [out])
    refused(d, ["optimize", "link.onnx", "-o", "hard.onnx"], "optimize link.onnx -o hard.onnx")
    # 3: dumps over the model or its data
    for opt in ["--dump-before", "--dump-after"]:
        for target in ["orig.onnx", "./m.onnx.data", "data-link", "hard.onnx"]:
            refused(d, ["optimize", "orig.onnx", "-o", "new.onnx", opt, target],
                    "optimize %s %s" % (opt, target), [target])
    refused(d, ["optimize", "orig.onnx", "-o", "new.onnx", "--dump-after", "new.onnx"],
            "optimize --dump-after OUT", ["--dump-after"])
    refused(d, ["optimize", "orig.onnx", "-o", "new.onnx", "--dump-after", "new.onnx.data"],
            "optimize --dump-after OUT.data", ["new.onnx.data"])
    refused(d, ["optimize", "orig.onnx", "-o", "new.onnx", "--dump-before", "d.txt",
                "--dump-after", "./d.txt"], "optimize: both dumps into one file", ["./d.txt"])
    for target in ["orig.onnx", "m.onnx.data", "./m.onnx.data", "data-link", "sub/../orig.onnx"]:
        refused(d, ["dump", "orig.onnx", "-o", target], "dump -o %s" % target, [target])
    # --print-after-all writes DIR/NN-PASS.txt
    rc, log = tpfuse("dump", "orig.onnx", "-o", "sub/00-input.txt", cwd=d)
    check(rc == 0, "dump -o sub/00-input.txt", log)
    # a text model reads its external data from its own folder
    shutil.copy(os.path.join(d, "m.onnx.data"), os.path.join(d, "sub", "m.onnx.data"))
    refused(d, ["optimize", "sub/00-input.txt", "-o", "new2.onnx", "--print-after-all", "sub"],
            "optimize DIR/00-input.txt --print-after-all DIR", ["sub/00-input.txt"])
    refused(d, ["optimize", "orig.onnx", "-o", "new2.onnx", "--print-after-all", "./sub/",
                "--dump-after", "sub/03-dce.txt"],
            "optimize --print-after-all DIR --dump-after DIR/03-dce.txt", ["sub/03-dce.txt"])
    for name in ("00-input.txt", "m.onnx.data"):
        if os.path.exists(os.path.join(d, "sub", name)):
            os.remove(os.path.join(d, "sub", name))
    # what is not refused still works, and the input still loads
    rc, log = tpfuse("optimize", "orig.onnx", "-o", "new.onnx", "--dump-before", "b.txt",
                     "--dump-after", "a.txt", cwd=d)
    check(rc == 0, "optimize -o new.onnx: exit 0", log)
    rc, log = tpfuse("check", "orig.onnx", cwd=d)
    check(rc == 0, "the input still loads", log)
    rc, log = tpfuse("check", "new.onnx", cwd=d)
    check(rc == 0, "the output loads", log)
    no_temporaries(d, "optimize")


def test_shard(work):
    d = fresh(work, "shard")
    make_model(os.path.join(d, "m0.onnx"), "m0.onnx.data")
    # 1: rank 0's data file would be the input's
    shutil.copy(os.path.join(d, "m0.onnx"), os.path.join(d, "orig.onnx"))
    os.remove(os.path.join(d, "m0.onnx"))
    refused(d, ["shard", "orig.onnx", "-w", "2", "-o", "m{rank}.onnx"],
            "shard -o m{rank}.onnx (rank 0's data file)", ["m0.onnx.data"])
    refused(d, ["shard", "orig.onnx", "-w", "1", "-o", "m0.onnx"], "shard -w 1 -o m0.onnx",
            ["m0.onnx.data"])
    # 2: the input under other spellings
    make_model(os.path.join(d, "m1.onnx"), "m1.data")
    os.link(os.path.join(d, "orig.onnx"), os.path.join(d, "hard.onnx"))
    os.symlink("orig.onnx", os.path.join(d, "link.onnx"))
    for out in ["./orig.onnx", "hard.onnx", "link.onnx"]:
        refused(d, ["shard", "orig.onnx", "-w", "1", "-o", out], "shard -w 1 -o %s" % out, [out])
    refused(d, ["shard", "m1.onnx", "-w", "2", "-o", "./m{rank}.onnx"],
            "shard m1.onnx -o ./m{rank}.onnx", ["./m1.onnx"])
    # 5: two ranks, one file
    refused(d, ["shard", "orig.onnx", "-w", "2", "-o", "{rank}/../s.onnx"],
            "shard -o {rank}/../s.onnx", ["0/../s.onnx", "1/../s.onnx"])
    os.makedirs(os.path.join(d, "x"))
    refused(d, ["shard", "orig.onnx", "-w", "2", "-o", "x/../{rank}/../s.onnx"],
            "shard -o x/../{rank}/../s.onnx", ["rank 1's output"])
    # missing folders are created
    rc, log = tpfuse("shard", "orig.onnx", "-w", "2", "-o", "tp/r{rank}/m.onnx", cwd=d)
    check(rc == 0, "shard -o tp/r{rank}/m.onnx: the folders are made, exit 0", log)
    for r in range(2):
        rc, log = tpfuse("check", "tp/r%d/m.onnx" % r, cwd=d)
        check(rc == 0, "shard: rank %d's model in its new folder loads" % r, log)
    # a failing rank leaves no rank's files, nor the folders made for them
    os.makedirs(os.path.join(d, "f1", "m.onnx"))
    before = snapshot(d)
    rc, log = tpfuse("shard", "orig.onnx", "-w", "2", "-o", "f{rank}/m.onnx", cwd=d)
    check(rc == 3, "shard: rank 1's output a folder: exit 3 (got %d)" % rc, log)
    after = snapshot(d)
    check(after == before, "shard: no rank's file or new folder is left when one rank fails",
          str({k: v for k, v in after.items() if k not in before}))
    rc, log = tpfuse("check", "orig.onnx", cwd=d)
    check(rc == 0, "shard: the input still loads", log)
    no_temporaries(d, "shard")


def test_run(work):
    d = fresh(work, "run")
    make_model(os.path.join(d, "m.onnx"), "m.onnx.data", (8, 8))
    data = os.path.join(d, "data")
    os.makedirs(data)
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 7
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x @ w, "y").SerializeToString())
    # 4: the reference outputs of --inputs
    for out in ["data", "./data/", "data/../data"]:
        refused(d, ["run", "m.onnx", "--inputs", "data", "--outputs", out, "--quiet"],
                "run --outputs %s (the --inputs folder)" % out, ["data/output_0.pb"])
    os.makedirs(os.path.join(d, "hl"))
    os.link(os.path.join(data, "input_0.pb"), os.path.join(d, "hl", "output_0.pb"))
    refused(d, ["run", "m.onnx", "--inputs", "data", "--outputs", "hl", "--quiet"],
            "run --outputs: output_0.pb a hard link of an input", ["input_0.pb"])
    os.makedirs(os.path.join(d, "t"))
    with open(os.path.join(d, "t", "output_0.pb"), "w") as f:
        f.write("# a strategy table\n")
    refused(d, ["run", "m.onnx", "--inputs", "data", "--outputs", "t", "--quiet",
                "--strategy-table", "t/output_0.pb"], "run --outputs: the strategy table",
            ["strategy table"])
    rc, log = tpfuse("run", "m.onnx", "--inputs", "data", "--outputs", "out", "--quiet", cwd=d)
    check(rc == 0 and os.path.exists(os.path.join(d, "out", "output_0.pb")),
          "run --outputs out: exit 0, out/output_0.pb written", log)
    no_temporaries(d, "run")


def test_failed_writes(work):
    d = fresh(work, "writes")
    make_model(os.path.join(d, "m.onnx"), "m.onnx.data")
    # 14: -o FOLDER leaves no FOLDER.data
    os.makedirs(os.path.join(d, "F"))
    before = snapshot(d)
    rc, log = tpfuse("optimize", "m.onnx", "-o", "F", cwd=d)
    check(rc == 3 and "F" in log and "folder" in log,
          "optimize -o FOLDER: exit 3 naming it (got %d)" % rc, log)
    check(snapshot(d) == before, "optimize -o FOLDER: nothing written (no F.data)",
          str(snapshot(d)))
    # a model in place; its replacement fails on a full disk: the old stays
    rc, log = tpfuse("optimize", "m.onnx", "-o", "old.onnx", "-O0", cwd=d)
    check(rc == 0, "optimize -o old.onnx", log)
    rc, log = tpfuse("dump", "m.onnx", "-o", "old.txt", cwd=d)
    check(rc == 0, "dump -o old.txt", log)
    os.makedirs(os.path.join(d, "out"))
    rc, log = tpfuse("run", "m.onnx", "--random-inputs", "1", "--outputs", "out", "--quiet", cwd=d)
    check(rc == 0, "run --outputs out", log)
    before = snapshot(d)
    rc, log = tpfuse("optimize", "m.onnx", "-o", "old.onnx", "-O0", fsize=4096, cwd=d)
    check(rc == 3, "optimize on a full disk: exit 3 (got %d)" % rc, log)
    check(snapshot(d) == before, "optimize on a full disk: the old model and data kept, "
          "nothing else", str(snapshot(d)))
    rc, log = tpfuse("optimize", "m.onnx", "-o", "new.onnx", "-O0", fsize=4096, cwd=d)
    check(rc == 3 and snapshot(d) == before,
          "optimize -o new.onnx on a full disk: exit 3, nothing left (got %d)" % rc, log)
    rc, log = tpfuse("shard", "m.onnx", "-w", "2", "-o", "s{rank}.onnx", fsize=4096, cwd=d)
    check(rc == 3 and snapshot(d) == before,
          "shard on a full disk: exit 3, nothing left (got %d)" % rc, log)
    rc, log = tpfuse("dump", "m.onnx", "-o", "old.txt", fsize=64, cwd=d)
    check(rc == 3 and snapshot(d) == before,
          "dump -o on a full disk: exit 3, the old dump kept (got %d)" % rc, log)
    rc, log = tpfuse("dump", "m.onnx", "-o", "new.txt", fsize=64, cwd=d)
    check(rc == 3 and snapshot(d) == before,
          "dump -o new.txt on a full disk: exit 3, nothing left (got %d)" % rc, log)
    rc, log = tpfuse("run", "m.onnx", "--random-inputs", "2", "--outputs", "out", "--quiet",
                     fsize=64, cwd=d)
    check(rc == 3 and snapshot(d) == before,
          "run --outputs on a full disk: exit 3, the old outputs kept (got %d)" % rc, log)
    if os.path.exists("/dev/full"):
        rc, log = tpfuse("dump", "m.onnx", "-o", "/dev/full", cwd=d)
        check(rc == 3 and "/dev/full" in log, "dump -o /dev/full: exit 3 (got %d)" % rc, log)
    rc, log = tpfuse("dump", "m.onnx", "-o", "nowhere/x.txt", cwd=d)
    check(rc == 3 and "nowhere" in log and "does not exist" in log,
          "dump -o into a missing folder: exit 3 naming it (got %d)" % rc, log)
    rc, log = tpfuse("check", "m.onnx", cwd=d)
    check(rc == 0, "the input still loads", log)
    # /dev/stdout redirected to a file: written through, the link left alone
    so_path = os.path.join(d, "so.txt")
    with open(so_path, "w") as so:
        so.write("first\n")
    with open(so_path, "a") as so:
        p = subprocess.run([TPFUSE, "dump", "m.onnx", "-o", "/dev/stdout"], stdout=so,
                           stderr=subprocess.PIPE, text=True, cwd=d, timeout=60)
    with open(so_path) as so:
        text = so.read()
    check(p.returncode == 0 and text.startswith("first\nir_version"),
          "dump -o /dev/stdout >> FILE: appended to FILE", p.stderr + text[:200])
    if os.path.exists("/dev/stdout"):
        check(os.path.islink("/dev/stdout") or not os.path.isfile("/dev/stdout"),
              "dump -o /dev/stdout: /dev/stdout is not replaced by a file")


def test_run_ranks(work):
    """Two ranks whose --outputs resolve to one folder (mpirun -np 2)."""
    d = fresh(work, "run-ranks")
    make_model(os.path.join(d, "m.onnx"), "m.onnx.data", (8, 8))
    data = os.path.join(d, "data")
    os.makedirs(data)
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    before = snapshot(d)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    p = subprocess.run(["mpirun", "-np", "2", TPFUSE, "run", "m.onnx", "--inputs", "data",
                        "--outputs", "{rank}/../o", "--quiet"], capture_output=True,
                       text=True, timeout=120, cwd=d, env=env)
    log = p.stdout + p.stderr
    check(p.returncode == 2 and "rank 0 and rank 1" in log,
          "mpirun -np 2 run --outputs '{rank}/../o': exit 2 (got %d)" % p.returncode, log)
    check(snapshot(d) == before, "run --outputs '{rank}/../o': nothing written",
          str(snapshot(d)))
    p = subprocess.run(["mpirun", "-np", "2", TPFUSE, "run", "m.onnx", "--inputs", "data",
                        "--outputs", "o", "--quiet"], capture_output=True,
                       text=True, timeout=120, cwd=d, env=env)
    check(p.returncode == 0 and all(os.path.exists(os.path.join(d, "o", "rank%d" % r,
                                                                "output_0.pb"))
                                    for r in range(2)),
          "mpirun -np 2 run --outputs o: o/rank0 and o/rank1", p.stdout + p.stderr)


def main():
    global TPFUSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--ranks", action="store_true",
                    help="only the case of two ranks under mpirun -np 2 (suite mpi)")
    args = ap.parse_args()
    TPFUSE = os.path.abspath(args.tpfuse)
    os.makedirs(args.work, exist_ok=True)
    work = os.path.abspath(args.work)
    if args.ranks and not shutil.which("mpirun"):
        print("no mpirun: skipped")
        return 77
    tests = [test_run_ranks] if args.ranks else [test_optimize, test_shard, test_run,
                                                  test_failed_writes]
    for t in tests:
        try:
            t(work)
        except Exception as e:  # a broken input breaks the rest of that group only
            check(False, "%s: stopped by %s: %s" % (t.__name__, type(e).__name__, e))
    if failures:
        print("%d failure(s):" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
