#!/usr/bin/env python3
"""Per-kernel table of an Nsight Compute CSV (ncu --csv --metrics
gpu__time_duration.sum,dram__bytes_read.sum,...): one line a kernel launch,
in launch order, with its time in microseconds, the DRAM bytes it read and
their rate, grid size and registers when those metrics were asked for.

    python3 bench/ncu_kernels.py PROFILE.csv [--first N] [--sum]

--sum adds the total time of each kernel name over the listed launches."""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys


def rows(path: str) -> list[tuple[int, str, dict[str, str]]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        raise SystemExit("%s: no ncu CSV table (a line starting with \"ID\")" % path)
    launches: dict[int, tuple[str, dict[str, str]]] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        try:
            i = int(r["ID"])
        except (KeyError, ValueError):
            continue
        name, metrics = launches.setdefault(i, (r.get("Kernel Name", "?"), {}))
        metrics[r.get("Metric Name", "")] = r.get("Metric Value", "")
    return [(i, n, m) for i, (n, m) in sorted(launches.items())]


def number(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def short(name: str) -> str:
    """The kernel's name without the namespace and argument list."""
    name = re.sub(r"\(.*$", "", name.replace("(anonymous namespace)::", "").replace("<unnamed>::", ""))
    return re.sub(r"^void ", "", name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--first", type=int, default=0, help="only the first N launches")
    ap.add_argument("--sum", action="store_true", help="totals per kernel name")
    a = ap.parse_args(argv)
    table = rows(a.csv)
    if a.first > 0:
        table = table[: a.first]
    print("%4s  %-58s %9s %10s %8s %6s %5s" % ("id", "kernel", "us", "DRAM MB", "TB/s", "grid", "regs"))
    totals: dict[str, float] = {}
    for i, name, m in table:
        ns = number(m.get("gpu__time_duration.sum"))
        rd = number(m.get("dram__bytes_read.sum"))
        us = ns / 1000 if ns is not None else None
        rate = rd / ns / 1000 if rd is not None and ns else None
        k = short(name)
        if us is not None:
            totals[k] = totals.get(k, 0.0) + us
        print("%4d  %-58s %9s %10s %8s %6s %5s" % (
            i, k[:58], "%.1f" % us if us is not None else "-", "%.1f" % (rd / 1e6) if rd is not None else "-",
            "%.2f" % rate if rate is not None else "-", m.get("launch__grid_size", "-"),
            m.get("launch__registers_per_thread", "-")))
    if a.sum:
        print()
        for k, t in sorted(totals.items(), key=lambda kv: -kv[1]):
            print("%9.1f us  %s" % (t, k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
