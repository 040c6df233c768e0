"""Does a trace's own dispatch speed say how much torch.profiler slowed it? For each kept
torch.profiler trace whose service was also timed without the profiler (as
``deflation_check.py`` finds them): the median ``aten::empty`` span of the trace (an op with
no GPU work: the host's per-op CPU time under the profiler), its ratio ``s`` to ``REF_NS``
(clipped at 1), and zym's unfixed replay without the recording's cost per step against the
measured request, as zym computes it and with one of two corrections:

* ``events``: each recorded event's cost (``KINETO_NS_PER_EVENT``) times ``s`` (the
  profiler's own work runs on the same, slower CPU);
* ``cpu``: the trace's CPU time (gaps and calls' own time, after the events' cost is taken
  out) divided by ``s`` (the whole process ran slower under the profiler).

    python bench/whatif/dispatch_speed.py events|cpu [REF_NS] [OUT.json]

An experiment for the deflation (docs/benchmarks.md, "Fiftieth round"), not a zym feature:
it edits a built timeline's arrays in place. zym now reads each trace's speed itself (the
fifty-first round); this script turns that off (its reference past any span) to measure both
corrections from the same start as when it was written.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
SPECS_EXTRA = [f"{HERE}/results/h100-blind6=ctseg=2,cliptag=4,mottrack=4"]


def within(logs: list[float], limit: float) -> int:
    return sum(math.exp(x) - 1 <= limit for x in logs)


def main() -> int:
    import numpy as np
    import polars as pl
    from deflation_check import DEFAULT, timed_traces
    from zym.analysis import analyze, replay
    from zym.analysis.replay import Fix

    try:
        how = sys.argv[1]
        ref = float(sys.argv[2]) if len(sys.argv) > 2 else 3100.0
        if how not in ("events", "cpu") or not ref > 0:
            raise ValueError
    except (IndexError, ValueError):
        print("dispatch_speed: usage: dispatch_speed.py events|cpu [REF_NS > 0] [OUT.json]",
              file=sys.stderr)
        return 2
    replay.KINETO_SPEED_REF_NS = 10**12   # zym's own speed scaling off (see the doc)
    rows, before, after = [], [], []
    for folder, w, trace, measured in timed_traces(DEFAULT + SPECS_EXTRA, "dispatch_speed"):
        a = analyze(trace)
        steps = a.steps_in_window()
        n = steps.count if steps is not None else 1
        tl = a.timeline
        r0 = tl.fidelity["uninstrumented_ns"] / n / 1e6 / measured
        spans = a.data.span_table
        empties = a.facts.nodes.filter(pl.col("name") == "aten::empty")["stack_id"]
        durs = spans.collect(spans.lazy().filter(pl.col("stack_id").is_in(empties.implode()))
                             .select("dur_ns"))["dur_ns"]
        empty = durs.median() if len(durs) else None
        s = max(empty / ref, 1.0) if empty else 1.0
        if s > 1.0:
            oh = tl.overhead_ns
            if how == "events":
                tl.overhead_ns = (oh * s).astype(np.int64)
            else:
                tl.gap = (oh + np.clip(tl.gap - oh, 0, None) / s).astype(np.int64)
                tl.intrinsic = (tl.intrinsic / s).astype(np.int64)
            for k in ("_base", "baseline", "_base_state"):
                tl.__dict__.pop(k, None)
        end = tl.replay(Fix(), incremental=False).end_ns
        r1 = (end - tl.w0 + tl.trailing_ns) / n / 1e6 / measured
        before.append(abs(math.log(r0)))
        after.append(abs(math.log(r1)))
        rows.append({"folder": folder.name, "workload": w, "empty_ns": empty, "s": s,
                     "replayed_over_measured": r0, "corrected_over_measured": r1})
        print(f"{folder.name:14s} {w:12s} aten::empty {empty or 0:7.0f} ns  s {s:4.2f}  "
              f"replay/measured {r0:5.2f} -> {r1:5.2f}", flush=True)
    summary = {"how": how, "ref_ns": ref, "traces": len(rows),
               "median_abs_log": [statistics.median(before), statistics.median(after)],
               "within_15": [within(before, 0.15), within(after, 0.15)],
               "within_30": [within(before, 0.30), within(after, 0.30)]}
    print(json.dumps(summary))
    if len(sys.argv) > 3:
        out = Path(sys.argv[3])
        tmp = out.with_name(out.name + ".part")
        tmp.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
        tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
