#!/usr/bin/env python3
"""A profile per decode step from `bench-decode --trace` (CUPTI kernel
timeline of back-to-back replays of one plan).

The records of the N replays are put in start order and cut into N steps of
equal length (every step launches the same kernels; a trace where that does
not hold is refused).  Within a step every record gets

  dur    its own start to end on the GPU
  own    the part of it after everything launched before it had ended (the
         time the step spends on it alone; a programmatic dependent that
         starts early and waits is charged only from its predecessor's end)
  idle   the time before it in which nothing ran (launch gaps)

so that the owns and idles of a step add up to the step's length.  Printed:
the step's length, the median step kernel by kernel, and the kernels grouped
by name and grid with their mean time per step.

  bench/decode_trace.py TRACE.jsonl [--step median|N] [--skip N] [--positions] [--json OUT] [--top K]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys


class TraceError(Exception):
    pass


def load(path: str) -> tuple[dict, list[dict]]:
    header, recs = None, []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    o = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError("%s:%d: not JSON (%s)" % (path, n, e.msg))
                if not isinstance(o, dict):
                    raise TraceError("%s:%d: not a JSON object" % (path, n))
                if "trace" in o:
                    header = o
                    continue
                for k in ("kind", "name", "start_ns", "end_ns"):
                    if k not in o:
                        raise TraceError("%s:%d: record without '%s'" % (path, n, k))
                if not (isinstance(o["start_ns"], int) and isinstance(o["end_ns"], int)) or o["end_ns"] < o["start_ns"]:
                    raise TraceError("%s:%d: start_ns/end_ns are not an interval" % (path, n))
                recs.append(o)
    except OSError as e:
        raise TraceError("%s: %s" % (path, e.strerror))
    if header is None:
        raise TraceError("%s: no bench-decode trace header (a line with \"trace\")" % path)
    replays = header.get("replays")
    if not isinstance(replays, int) or replays < 1:
        raise TraceError("%s: the header has no replay count" % path)
    if not recs:
        raise TraceError("%s: the trace has no records" % path)
    return header, recs


_demangled: dict[str, str] = {}


def short_names(names: list[str]) -> dict[str, str]:
    """Mangled kernel names to 'kernel<args>' (c++filt when present)."""
    pending = sorted({n for n in names if n not in _demangled})
    if pending:
        out = pending
        tool = shutil.which("c++filt")
        if tool:
            try:
                r = subprocess.run([tool], input="\n".join(pending) + "\n", capture_output=True, text=True, timeout=30)
                lines = r.stdout.splitlines()
                if r.returncode == 0 and len(lines) == len(pending):
                    out = lines
            except (OSError, subprocess.SubprocessError):
                pass
        for m, d in zip(pending, out):
            d = d.replace("(anonymous namespace)::", "")
            d = re.sub(r"^void ", "", d)
            # drop the parameter list, keep template arguments
            depth, cut = 0, len(d)
            for i, ch in enumerate(d):
                if ch == "<":
                    depth += 1
                elif ch == ">":
                    depth -= 1
                elif ch == "(" and depth == 0:
                    cut = i
                    break
            d = d[:cut]
            d = re.sub(r"^[A-Za-z_][A-Za-z_0-9]*::", "", d)  # one leading namespace (tpfc::, ...)
            _demangled[m] = d or m
    return {n: _demangled[n] for n in names}


def step_records(recs: list[dict], n: int) -> tuple[list[dict], int]:
    """The records of the replayed steps: when any record is a CUDA graph
    node, the graph nodes; then, of the rest, none at the start or end of
    the timeline that happened fewer than n times (a copy before or after
    the replays, such as the session's error check at the end).  A record
    of that kind between the steps stays, and makes the steps unequal.
    Also how many were left out."""
    inside = [r for r in recs if r.get("graph", 0)]
    kept = sorted(inside if inside else recs, key=lambda r: (r["start_ns"], r["end_ns"]))
    count: dict[tuple, int] = {}
    key = lambda r: (r["kind"], r["name"], r.get("bytes", 0), r.get("graph_node", 0))
    for r in kept:
        count[key(r)] = count.get(key(r), 0) + 1
    lo, hi = 0, len(kept)
    while lo < hi and count[key(kept[lo])] < n:
        lo += 1
    while hi > lo and count[key(kept[hi - 1])] < n:
        hi -= 1
    return kept[lo:hi], len(recs) - (hi - lo)


def steps_of(header: dict, recs: list[dict]) -> list[list[dict]]:
    n = header["replays"]
    recs = sorted(recs, key=lambda r: (r["start_ns"], r["end_ns"]))
    if len(recs) % n:
        raise TraceError("%d records do not split into %d equal steps" % (len(recs), n))
    k = len(recs) // n
    steps = [recs[i * k:(i + 1) * k] for i in range(n)]
    key = lambda step: sorted((r["kind"], r["name"], r.get("graph_node", 0)) for r in step)
    first = key(steps[0])
    for i, s in enumerate(steps[1:], 1):
        if key(s) != first:
            raise TraceError("step %d does not launch the same kernels as step 0 (records of different steps interleave?)" % i)
    return steps


def attribute(steps: list[list[dict]]) -> list[dict]:
    """Per step: its length and each record's dur / own / idle (us)."""
    out = []
    frontier = steps[0][0]["start_ns"]
    for i, s in enumerate(steps):
        t0 = s[0]["start_ns"]
        nxt = steps[i + 1][0]["start_ns"] if i + 1 < len(steps) else max(r["end_ns"] for r in s)
        rows = []
        idle_before = max(0, t0 - frontier) if i else 0
        frontier = max(frontier, t0) if i else t0
        for j, r in enumerate(s):
            idle = max(0, r["start_ns"] - frontier)
            own = max(0, r["end_ns"] - max(r["start_ns"], frontier))
            frontier = max(frontier, r["end_ns"])
            rows.append({"index": j, "kind": r["kind"], "name": r["name"], "grid": r.get("grid"), "block": r.get("block"),
                         "regs": r.get("regs"), "dur_us": (r["end_ns"] - r["start_ns"]) / 1e3,
                         "own_us": own / 1e3, "idle_us": (idle if j else idle_before) / 1e3})
        out.append({"step": i, "length_us": (nxt - t0) / 1e3, "rows": rows})
    return out


def grid_text(g) -> str:
    if not g:
        return "-"
    g = [x for x in g]
    while len(g) > 1 and g[-1] == 1:
        g.pop()
    return "x".join(str(x) for x in g)


def group(prof: list[dict], names: dict[str, str]) -> list[dict]:
    groups: dict[tuple, dict] = {}
    n = len(prof)
    for st in prof:
        for r in st["rows"]:
            label = names.get(r["name"], r["name"]) if r["kind"] == "kernel" else r["kind"]
            key = (label, grid_text(r["grid"]) if r["kind"] == "kernel" else "-")
            g = groups.setdefault(key, {"name": key[0], "grid": key[1], "count": 0, "dur_us": 0.0, "own_us": 0.0, "idle_us": 0.0})
            g["count"] += 1
            g["dur_us"] += r["dur_us"]
            g["own_us"] += r["own_us"]
            g["idle_us"] += r["idle_us"]
    rows = []
    for g in groups.values():
        rows.append({"name": g["name"], "grid": g["grid"], "per_step": g["count"] / n, "dur_us": g["dur_us"] / n,
                     "own_us": g["own_us"] / n, "idle_before_us": g["idle_us"] / n})
    rows.sort(key=lambda g: -(g["own_us"] + g["idle_before_us"]))
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="a bench-decode --trace file (one rank)")
    ap.add_argument("--step", default="median", help="the step listed kernel by kernel: median (default) or its index")
    ap.add_argument("--skip", type=int, default=1, help="steps left out of the means at the start (default 1); "
                    "the last step is always left out, and one step is always kept")
    ap.add_argument("--positions", action="store_true",
                    help="also list every kernel of a step by its position, mean over the steps of the means")
    ap.add_argument("--top", type=int, default=0, help="list only the K largest groups")
    ap.add_argument("--json", help="write the profile (steps and groups) to this file")
    a = ap.parse_args(argv)
    try:
        if a.skip < 0:
            raise TraceError("--skip %d: expected a count of steps, 0 or more" % a.skip)
        header, recs = load(a.trace)
        recs, outside = step_records(recs, header["replays"])
        steps = steps_of(header, recs)
    except TraceError as e:
        print("decode_trace.py: %s" % e, file=sys.stderr)
        return 1
    prof = attribute(steps)
    # the last step has no next start: its length ends at its last kernel,
    # so it is left out of the means when there are others; at least one
    # step stays
    last = len(prof) - 1 if len(prof) > 1 else len(prof)
    kept = prof[min(a.skip, last - 1):last]
    names = short_names([r["name"] for r in recs if r["kind"] == "kernel"])
    lengths = [p["length_us"] for p in kept]
    med = statistics.median(lengths)
    if a.step == "median":
        pick = min(kept, key=lambda p: (abs(p["length_us"] - med), p["step"]))
    else:
        try:
            if int(a.step) < 0:
                raise IndexError
            pick = prof[int(a.step)]
        except (ValueError, IndexError):
            print("decode_trace.py: --step %s: not median or a step index below %d" % (a.step, len(prof)), file=sys.stderr)
            return 1
    groups = group(kept, names)
    print("# %s, %s, %s, rank %s of %s: %d replays, %d records a step; %.2f us a step on the host's clock while "
          "tracing (with CUPTI's work before and after the replays)"
          % (header.get("variant", "?"), header.get("label", ""), header.get("mode", "?"), header.get("rank", "?"),
             header.get("world", "?"), len(prof), len(steps[0]), header.get("us_per_step", float("nan"))))
    if outside:
        print("# %d record%s outside the replayed steps left out" % (outside, "" if outside == 1 else "s"))
    print("# step length (first start to the next step's first start), steps %d..%d: median %.2f us, min %.2f, max %.2f"
          % (kept[0]["step"], kept[-1]["step"], med, min(lengths), max(lengths)))
    own = sum(r["own_us"] for r in pick["rows"])
    idle = sum(r["idle_us"] for r in pick["rows"])
    print("\n## step %d: %.2f us (kernels alone %.2f, idle %.2f)" % (pick["step"], pick["length_us"], own, idle))
    print("%4s  %-52s %8s %6s %5s %8s %8s %8s" % ("#", "kernel", "grid", "block", "regs", "dur", "own", "idle"))
    for r in pick["rows"]:
        label = names.get(r["name"], r["name"]) if r["kind"] == "kernel" else r["kind"]
        print("%4d  %-52s %8s %6s %5s %8.2f %8.2f %8.2f" % (r["index"], label[:52], grid_text(r["grid"]) if r["kind"] == "kernel" else "-",
                                                          grid_text(r["block"]) if r["kind"] == "kernel" else "-",
                                                          r["regs"] if r["regs"] is not None else "-", r["dur_us"], r["own_us"], r["idle_us"]))
    shown = groups[:a.top] if a.top > 0 else groups
    total = statistics.mean(lengths)
    print("\n## by kernel and grid, mean over steps %d..%d (%.2f us a step)" % (kept[0]["step"], kept[-1]["step"], total))
    print("%-52s %8s %6s %9s %9s %9s %7s" % ("kernel", "grid", "a step", "dur", "own", "idle", "share"))
    for g in shown:
        print("%-52s %8s %6.2g %9.2f %9.2f %9.2f %6.1f%%" % (g["name"][:52], g["grid"], g["per_step"], g["dur_us"], g["own_us"],
                                                          g["idle_before_us"], 100.0 * (g["own_us"] + g["idle_before_us"]) / total))
    positions = []
    for j, r in enumerate(kept[0]["rows"]):
        positions.append({"index": j, "name": names.get(r["name"], r["name"]) if r["kind"] == "kernel" else r["kind"],
                          "grid": grid_text(r["grid"]) if r["kind"] == "kernel" else "-",
                          "dur_us": statistics.mean(p["rows"][j]["dur_us"] for p in kept),
                          "own_us": statistics.mean(p["rows"][j]["own_us"] for p in kept),
                          "idle_us": statistics.mean(p["rows"][j]["idle_us"] for p in kept)})
    if a.positions:
        print("\n## by position in the step, mean over steps %d..%d" % (kept[0]["step"], kept[-1]["step"]))
        print("%4s  %-52s %8s %8s %8s %8s" % ("#", "kernel", "grid", "dur", "own", "idle"))
        for q in positions:
            print("%4d  %-52s %8s %8.2f %8.2f %8.2f" % (q["index"], q["name"][:52], q["grid"], q["dur_us"], q["own_us"],
                                                     q["idle_us"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"header": header, "step_lengths_us": [p["length_us"] for p in prof], "listed_step": pick,
                       "groups": groups, "positions": positions, "names": names}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
