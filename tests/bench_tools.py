#!/usr/bin/env python3
"""The benchmark helpers that read stored results: bench/ncu_kernels.py on a
committed Nsight Compute profile (launch order, times, DRAM rates, totals)
and on input that is not a profile (a clear error, no traceback);
bench/decode_trace.py on a made-up kernel timeline whose profile is known
(a dependent that starts early, a launch gap, a memcpy) and on traces it
must refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "bench", "ncu_kernels.py")
TRACE_TOOL = os.path.join(ROOT, "bench", "decode_trace.py")
PROFILE = os.path.join(ROOT, "bench", "results", "decode-llama3-8b-2xH100-run3", "ncu-b8.csv")


def run(*args: str, tool: str = TOOL) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True, timeout=60)


GEMV = "_ZN12_GLOBAL__N_111gemv_kernelI13__nv_bfloat16Li1ELi4ELi1EEEvNS_10GemvParamsE"


def write_trace(path: str, steps: int, late: int = -1, drop: int = -1, rename: int = -1, stray: bool = False) -> None:
    """A step of 30 us: a GEMV 0-10 us, a short kernel inside it 2-6 us
    (another stream: own time 0), a one-block kernel launched as the GEMV's
    dependent 8-20 us (own time 10: it waits 2 us for the GEMV), nothing for
    2 us, a memcpy 22-25 us, the next step at 30 us (an idle 5 us); step
    `late` starts 4 us late, record `drop` is left out, step `rename`'s
    one-block kernel has another name, `stray` adds a 4-byte copy after
    the last step.  No graph ids (an eager run's records)."""
    header = {"trace": "bench-decode", "rank": 0, "world": 2, "mode": "eager", "variant": "fused",
              "label": "batch=1", "replays": steps, "us_per_step": 30.0}
    recs = []
    for i in range(steps):
        b = i * 30000 + (4000 if i == late else 0)
        recs += [
            {"kind": "kernel", "name": GEMV, "start_ns": b, "end_ns": b + 10000, "grid": [96, 1, 1],
             "block": [256, 1, 1], "regs": 123},
            {"kind": "kernel", "name": "_Z5smallPf", "start_ns": b + 2000, "end_ns": b + 6000, "grid": [2, 1, 1],
             "block": [32, 1, 1], "regs": 16},
            {"kind": "kernel", "name": "_Z11norm_kernelPf" if i != rename else "_Z11other_kernelPf",
             "start_ns": b + 8000, "end_ns": b + 20000, "grid": [1, 1, 1], "block": [512, 1, 1], "regs": 64},
            {"kind": "memcpy", "name": "memcpy", "start_ns": b + 22000, "end_ns": b + 25000, "bytes": 64},
        ]
    if stray:
        recs.append({"kind": "memcpy", "name": "memcpy", "start_ns": steps * 30000 + 9000,
                     "end_ns": steps * 30000 + 9500, "bytes": 4})
    if drop >= 0:
        del recs[drop]
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for r in reversed(recs):  # the tool sorts by start
            f.write(json.dumps(r) + "\n")


def load_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def check_trace_tool(check) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        write_trace(trace, 5, late=3, stray=True)
        out_json = os.path.join(tmp, "profile.json")
        r = run(trace, "--json", out_json, tool=TRACE_TOOL)
        check(r.returncode == 0, "decode_trace.py exits 0 on a 5-step trace: %r" % r.stderr)
        check("1 record outside the replayed steps left out" in r.stdout,
              "the copy after the last step is left out and said so: %r" % r.stdout.splitlines()[:2])
        prof = load_json(out_json)
        lengths = prof.get("step_lengths_us", [])
        check(lengths == [30.0, 30.0, 34.0, 26.0, 25.0], "steps are cut at every 4 records: 30 us each but for "
              "the one before the late step (34), the late one (26) and the last (its last kernel's end): %r" % lengths)
        rows = prof.get("listed_step", {}).get("rows", [])
        got = [(r["kind"], round(r["dur_us"], 3), round(r["own_us"], 3), round(r["idle_us"], 3)) for r in rows]
        check(got == [("kernel", 10.0, 10.0, 5.0), ("kernel", 4.0, 0.0, 0.0), ("kernel", 12.0, 10.0, 0.0),
                      ("memcpy", 3.0, 3.0, 2.0)],
              "the listed step: GEMV own 10 after an idle 5, the kernel inside it own 0, the dependent own 10 of "
              "its 12, the memcpy own 3 after an idle 2: %r" % got)
        step = prof.get("listed_step", {})
        check(abs(sum(r["own_us"] + r["idle_us"] for r in rows) - step.get("length_us", -1)) < 1e-9,
              "a step's own and idle times add up to its length")
        groups = {(g["name"], g["grid"]): g for g in prof.get("groups", [])}
        gemv = next((g for (n, grid), g in groups.items() if "gemv_kernel" in n and grid == "96"), None)
        check(gemv is not None and abs(gemv["own_us"] - 10.0) < 1e-9 and abs(gemv["per_step"] - 1.0) < 1e-9,
              "the GEMV's group (grid 96): once a step, 10 us own: %r" % sorted(groups))
        # steps 1..3 are in the means (step 0 skipped, the last left out): the idle before the GEMV is
        # 5, 5 and 9 us (step 3 is the late one)
        check(gemv is not None and abs(gemv["idle_before_us"] - 19.0 / 3) < 1e-9,
              "the idle before each step's first kernel is charged to it (5, 5, 9 us): %r"
              % (gemv and gemv["idle_before_us"]))
        pos = prof.get("positions", [])
        check(len(pos) == 4 and abs(pos[0]["idle_us"] - 19.0 / 3) < 1e-9 and abs(pos[2]["own_us"] - 10.0) < 1e-9,
              "positions: the mean of each place in the step over steps 1..3: %r" % pos[:1])
        r = run(trace, "--positions", "--step", "2", tool=TRACE_TOOL)
        check(r.returncode == 0 and "## step 2: 34.00 us" in r.stdout and "## by position" in r.stdout,
              "--step 2 lists that step, --positions the means by position")
        r = run(trace, "--skip", "0", "--json", out_json, tool=TRACE_TOOL)
        check(r.returncode == 0 and "steps 0..3" in r.stdout, "--skip 0 keeps step 0 in the means")
        for bad_opt, what in ((["--skip", "-1"], "--skip -1"), (["--step", "-1"], "--step -1"),
                              (["--step", "5"], "--step 5")):
            r = run(trace, *bad_opt, tool=TRACE_TOOL)
            check(r.returncode == 1 and what in r.stderr and "Traceback" not in r.stderr,
                  "%s is refused: %r" % (what, r.stderr.strip()))

        bad = os.path.join(tmp, "bad.jsonl")
        write_trace(bad, 4, drop=5)
        r = run(bad, tool=TRACE_TOOL)
        check(r.returncode == 1 and "do not split into 4 equal steps" in r.stderr and "Traceback" not in r.stderr,
              "a trace with a record missing inside a step is refused: %r" % r.stderr.strip())
        write_trace(bad, 4, rename=2)
        r = run(bad, tool=TRACE_TOOL)
        check(r.returncode == 1 and "step 2 does not launch the same kernels" in r.stderr,
              "a step that launches another kernel is refused: %r" % r.stderr.strip())
        with open(bad, "w") as f:
            f.write('{"kind": "kernel", "name": "k", "start_ns": 0, "end_ns": 5}\n')
        r = run(bad, tool=TRACE_TOOL)
        check(r.returncode == 1 and "no bench-decode trace header" in r.stderr,
              "a file without the header is refused: %r" % r.stderr.strip())
        with open(bad, "w") as f:
            f.write('{"trace": "bench-decode", "replays": 1}\n{"kind": "kernel", "name": "k", "start_ns": 9, "end_ns": 5}\n')
        r = run(bad, tool=TRACE_TOOL)
        check(r.returncode == 1 and "bad.jsonl:2: start_ns/end_ns are not an interval" in r.stderr,
              "a record ending before it starts is refused with its line: %r" % r.stderr.strip())


STORED_TRACE = os.path.join(ROOT, "bench", "results", "decode-llama3-8b-2xH100-run14", "trace-b1.rank0.jsonl")


def check_stored_trace(check) -> None:
    """The committed batch-1 timeline (2x H100, 20 replays of the fused
    graph): its profile is the one docs/benchmarks.md quotes."""
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "b1.json")
        r = run(STORED_TRACE, "--json", out_json, tool=TRACE_TOOL)
        check(r.returncode == 0, "decode_trace.py exits 0 on the stored batch-1 trace: %r" % r.stderr)
        check("1 record outside the replayed steps left out" in r.stdout,
              "the one copy outside the graph is left out and said so")
        try:
            with open(out_json) as f:
                prof = json.load(f)
        except (OSError, ValueError):
            prof = {}
        lengths = prof.get("step_lengths_us", [])
        rows = prof.get("listed_step", {}).get("rows", [])
        check(len(lengths) == 20 and len(rows) == 33, "20 steps of 33 kernels: %d, %d" % (len(lengths), len(rows)))
        check("median 405.83 us" in r.stdout, "the median step is 405.83 us: %r" % r.stdout.splitlines()[2:3])
        groups = {(g["name"], g["grid"]): g for g in prof.get("groups", [])}
        gate_up = next((g for (n, grid), g in groups.items() if "gemv_kernel" in n and grid == "448"), None)
        check(gate_up is not None and gate_up["per_step"] == 4 and abs(gate_up["own_us"] - 166.10) < 0.01,
              "the gate/up GEMVs (448 blocks): 4 a step, 166.10 us of it: %r" % (gate_up and gate_up["own_us"]))
        ar = next((g for (n, grid), g in groups.items() if "arnorm_oneshot_kernel" in n), None)
        check(ar is not None and ar["per_step"] == 8 and abs(ar["own_us"] - 36.03) < 0.01,
              "the 8 fused all-reduces + norms: 36.03 us a step: %r" % (ar and ar["own_us"]))


def main() -> int:
    failures = 0

    def check(ok: bool, what: str) -> None:
        nonlocal failures
        print(("ok   " if ok else "FAIL ") + what)
        failures += 0 if ok else 1

    r = run(PROFILE, "--first", "10", "--sum")
    check(r.returncode == 0, "ncu_kernels.py exits 0 on the stored batch-8 profile")
    lines = r.stdout.splitlines()
    launches = [l for l in lines[1:] if l[:4].strip().isdigit()]
    check(len(launches) == 10, "--first 10 lists 10 launches (got %d)" % len(launches))
    # launch 7 is the gate/up projection: 117.4 MB in 51.7 us on the tensor-core GEMV
    row = next((l for l in launches if l.split()[0] == "7"), "")
    f = row.split()
    check(row.startswith("   7  gemv_mma_kernel<__nv_bfloat16, 4, 8, 0>"), "launch 7 is the 64-column GEMV: %r" % row)
    check(len(f) >= 6 and f[-5] == "51.7" and f[-4] == "117.4" and f[-3] == "2.27",
          "its time, DRAM bytes and rate are 51.7 us, 117.4 MB, 2.27 TB/s: %r" % row)
    totals = [l for l in lines if l.endswith("gemv_mma_kernel<__nv_bfloat16, 2, 16, 0>")]
    check(len(totals) == 1 and totals[0].split()[0] == "62.6",
          "--sum adds the three 32-column GEMV launches (18.18 + 12.96 + 31.49 us): %r" % totals)
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as t:
        t.write("not a profile\n")
    try:
        r = run(t.name)
    finally:
        os.unlink(t.name)
    check(r.returncode != 0 and "no ncu CSV table" in r.stderr and "Traceback" not in r.stderr,
          "a file without a profile table is refused with a message: %r" % r.stderr.strip())
    check_trace_tool(check)
    check_stored_trace(check)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
