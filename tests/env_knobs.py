#!/usr/bin/env python3
"""The environment's tuning knobs, end to end (kernels/env.c's table):

    env_knobs.py --tpfuse TPFUSE --source ROOT
    env_knobs.py --bench EXE [--bench EXE ...]

  - every TPF_ variable the library or the command reads (getenv or a
    tpf_env_* reader in ir/, passes/, kernels/, runtime/, cli/) is a knob
    `tpfuse env` lists, and every knob it lists is read somewhere;
  - docs/runtime.md's "Environment" table holds exactly what `tpfuse env`
    prints: the same names, values taken and descriptions, in its order;
  - with every knob well formed, `tpfuse env` exits 0; a malformed one makes
    `tpfuse env`, `tpfuse plan` and `tpfuse run` exit 1 with a message
    naming the variable, its value and what it takes, before any work;
  - --bench: each benchmark that calls kernels directly (bench-arnorm,
    bench-fusions, bench-gemv) exits 2 under a malformed knob, naming it,
    before it touches a GPU (so this runs on machines without one).

Exit status: 0 passed, 1 failed.
"""
import argparse
import os
import re
import subprocess
import sys

failures = []


def check(cond, what, log=""):
    print("ok  " if cond else "FAIL", what)
    if not cond:
        if log:
            print(log)
        failures.append(what)


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("TPF_") or k in ("TPF_TEST_TMP",)}


def listed(tpfuse):
    """(name, what, takes) for each knob, as `tpfuse env` prints them."""
    p = subprocess.run([tpfuse, "env"], capture_output=True, text=True, env=clean_env(), timeout=60)
    check(p.returncode == 0 and not p.stderr, "tpfuse env, nothing set: exit 0, quiet", p.stderr)
    lines = p.stdout.splitlines()
    knobs = []
    for i in range(0, len(lines) - 2, 3):
        name, what, takes = lines[i], lines[i + 1], lines[i + 2]
        ok = re.fullmatch(r"TPF_[A-Z0-9_]+", name) and what.startswith("    ") and takes.startswith("    takes ")
        check(bool(ok), f"tpfuse env: entry at line {i + 1} is NAME / what / takes", "\n".join(lines[i:i + 3]))
        knobs.append((name, what.strip(), takes[len("    takes "):]))
    check(len(lines) == 3 * len(knobs) and len(knobs) >= 19, f"tpfuse env lists {len(knobs)} knobs, 3 lines each")
    return knobs


READ = re.compile(r'\b(?:getenv|tpf_env_switch|tpf_env_int|tpf_env_seconds|tpf_env_text)\s*\(\s*"(TPF_[A-Z0-9_]+)"')


def read_in_sources(root):
    reads = {}
    for top in ("ir", "passes", "kernels", "runtime", "cli"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu", ".cuh")) or f == "env.c":
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    for name in READ.findall(fh.read()):
                        reads.setdefault(name, []).append(os.path.relpath(path, root))
    return reads


def documented(root):
    """The rows of docs/runtime.md's Environment table."""
    with open(os.path.join(root, "docs", "runtime.md"), encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(r"^## Environment\n(.*?)(?=^## )", text, re.S | re.M)
    check(m is not None, "docs/runtime.md has an Environment section")
    rows = []
    for line in (m.group(1) if m else "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else None
        if cells and len(cells) == 3:
            rows.append((cells[0].strip("`"), cells[2], cells[1]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpfuse")
    ap.add_argument("--source")
    ap.add_argument("--bench", action="append", default=[])
    a = ap.parse_args()
    if a.bench:
        for exe in a.bench:
            env = dict(clean_env(), TPF_GEMV="99", OMPI_MCA_ess_singleton_isolated="1")
            p = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=120)
            msg = 'environment variable TPF_GEMV="99": expected a whole number from 0 to 16'
            check(p.returncode == 2 and msg in p.stderr, f"TPF_GEMV=99: {os.path.basename(exe)} exits 2 naming it "
                  f"({p.returncode})", (p.stdout + p.stderr)[-1500:])
        print(f"{len(failures)} failure(s)")
        return 1 if failures else 0
    if not a.tpfuse or not a.source:
        ap.error("--tpfuse and --source, or --bench")

    knobs = listed(a.tpfuse)
    names = [k[0] for k in knobs]
    reads = read_in_sources(a.source)
    for name, where in sorted(reads.items()):
        check(name in names, f"{name} (read in {', '.join(sorted(set(where)))}) is a knob `tpfuse env` lists")
    for name in names:
        check(name in reads, f"knob {name} is read by the library or the command")

    docs = documented(a.source)
    check(docs == knobs, "docs/runtime.md's Environment table is what `tpfuse env` prints",
          "\n".join(f"  docs {d}\n  env  {k}" for d, k in zip(docs, knobs) if d != k) +
          f"\n  ({len(docs)} rows in the docs, {len(knobs)} knobs)")

    model = os.path.join(a.source, "tests", "corpus", "llama-dynamo-fp32-w8", "model.rank0.onnx")
    cases = [
        ("TPF_ONESHOT", "off", "0 or 1"),
        ("TPF_ONESHOT_MAX_BYTES", "64M", "a whole number, 0 or more"),
        ("TPF_GEMV_TILED", "8", "one of 0, 16, 32"),
        ("TPF_PDL", "gemv,fast", "0, 1, 2, all, or a comma-separated list of gemv, copy, gated, attention, combine"),
    ]
    commands = [
        ("env", ["env"]),
        ("plan", ["plan", model, "--rank", "0", "--world-size", "8"]),
        ("run", ["run", model, "--random-inputs", "1"]),
    ]
    for name, value, takes in cases:
        for label, args in commands:
            env = dict(clean_env(), **{name: value})
            p = subprocess.run([a.tpfuse] + args, capture_output=True, text=True, env=env, timeout=120)
            msg = f'environment variable {name}="{value}": expected {takes}'
            check(p.returncode == 1 and msg in p.stderr and "Traceback" not in p.stderr,
                  f"{name}={value}: tpfuse {label} exits 1 naming it ({p.returncode})", p.stderr[-1500:])
    # the same commands with a well-formed value go through
    env = dict(clean_env(), TPF_ONESHOT="0", TPF_GEMV_TILED="16", TPF_PDL="gemv, copy")
    p = subprocess.run([a.tpfuse, "plan", model, "--rank", "0", "--world-size", "8"], capture_output=True,
                       text=True, env=env, timeout=120)
    check(p.returncode == 0 and "memory: arena peak" in p.stdout, "well-formed knobs: tpfuse plan runs",
          p.stderr[-1500:])
    p = subprocess.run([a.tpfuse, "env"], capture_output=True, text=True, env=env, timeout=60)
    check(p.returncode == 0 and 'set here: "16"' in p.stdout and 'set here: "gemv, copy"' in p.stdout,
          "tpfuse env shows the values set here", p.stdout[-800:])

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
