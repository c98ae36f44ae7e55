#!/usr/bin/env python3
"""The benchmark helpers that read stored results: bench/ncu_kernels.py on a
committed Nsight Compute profile (launch order, times, DRAM rates, totals)
and on input that is not a profile (a clear error, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "bench", "ncu_kernels.py")
PROFILE = os.path.join(ROOT, "bench", "results", "decode-llama3-8b-2xH100-run3", "ncu-b8.csv")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60)


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
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
