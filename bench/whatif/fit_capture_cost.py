"""How much CPU time a `zym capture` (eBPF + CUPTI, started with the process) adds to each
CUDA call, fitted on services, then checked on what fixes saved.

The analysis takes the recording's cost out of a capture before it replays it
(``capture_overhead``: the probes' cost the capture measures itself, plus CUPTI's per-call
cost from ``analysis/capture_costs.yaml``). For each candidate CUPTI cost this script

1. *fits*: replays every capture's window without the recording (``replay.uninstrumented_ns``
   per step) and compares it with the same workload's baseline measured without any profiler
   (``W.measure.json``: the median pass over its requests), per workload: the ratio, and its
   median over workloads;
2. *checks*: the predicted savings of the fixes measured on those workloads (``compare.py``'s
   rows for the zym captures): predicted / measured, the median and spread of those ratios and
   how many are within ±30%.

The fit uses only the baselines; the check uses only the fixes' paired savings.

    python bench/whatif/fit_capture_cost.py DIR:W=N,... [DIR:W=N,...] --ns 1300,3000,5000 [--json OUT]
    python bench/whatif/fit_capture_cost.py DIR:W=N,... --kineto 1,1.5,2     (torch.profiler traces:
                                                     its per-event costs, times each factor)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def set_cupti_ns(ns: int) -> None:
    """Every analysis from here on takes ``ns`` per call for CUPTI started with the process."""
    from zym.analysis import report

    costs = json.loads(json.dumps(report._cupti_costs()))
    costs["launch"]["ns_per_call"] = ns
    report._cupti_costs = lambda: costs


def set_kineto_scale(k: float) -> None:
    """Every analysis from here on takes torch.profiler's per-event costs times ``k``."""
    from zym.analysis import replay

    base = getattr(replay, "_KINETO_FIT_BASE", None) or dict(replay.KINETO_NS_PER_EVENT)
    replay._KINETO_FIT_BASE = base
    replay.KINETO_NS_PER_EVENT.update({e: int(ns * k) for e, ns in base.items()})


SOURCES = {"zym capture": ("captures", ".parquet"), "torch.profiler": ("kineto", ".trace.json.gz")}


def fidelity(results: Path, requests_of: dict[str, int], source: str) -> dict[str, dict]:
    from zym.analysis import analyze
    from zym.analysis.export.summary import build_report

    out = {}
    for w, n in requests_of.items():
        folder, ext = SOURCES[source]
        cap = results / folder / f"{w}{ext}"
        if not cap.exists():
            continue
        doc = json.loads((results / f"{w}.measure.json").read_text())
        plain = doc["variants"]["base"]["median_s"] * 1e3 / n
        rep = build_report(analyze(cap), None, None)
        steps = (rep["phases"]["steps"] or {}).get("in_window")
        if not steps:
            continue
        un = rep["replay"]["uninstrumented_ns"] / steps / 1e6
        out[w] = {"plain_ms": round(plain, 3), "uninstrumented_ms": round(un, 3),
                  "recorded_ms": round(rep["replay"]["recorded_ns"] / steps / 1e6, 3),
                  "ratio": round(un / plain, 3)}
    return out


def check(results: Path, requests_of: dict[str, int], source: str) -> list[dict]:
    from compare import compare

    rows = [r for r in compare(results, requests_of) if r.source == source]
    return [{"workload": r.workload, "variant": r.variant, "predicted_ms": r.predicted_ms,
             "measured_ms": r.measured_ms, "noise": r.noise, "agrees": r.agrees,
             "ratio": (None if r.predicted_ms is None or r.noise or not r.measured_ms
                       else round(r.predicted_ms / r.measured_ms, 3))} for r in rows]


def summary(fid: dict, rows: list[dict]) -> dict:
    ratios = [v["ratio"] for v in fid.values()]
    pr = sorted(r["ratio"] for r in rows if r["ratio"] is not None)
    q = statistics.quantiles(pr, n=4) if len(pr) >= 2 else pr * 3
    return {"baseline_ratio_median": round(statistics.median(ratios), 3) if ratios else None,
            "baseline_ratio_range": [min(ratios), max(ratios)] if ratios else None,
            "fix_ratio_median": round(statistics.median(pr), 3) if pr else None,
            "fix_ratio_p25_p75": q[::2],
            "fixes_within_30pct": sum(bool(r["agrees"]) for r in rows),
            "fixes": sum(r["agrees"] is not None for r in rows)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sets", nargs="+", help="DIR:W=N,... (a results folder, its workloads and "
                                           "requests per pass)")
    p.add_argument("--ns", default="1300,3000,5000,7000",
                   help="zym capture: CUPTI's ns per call to try")
    p.add_argument("--kineto", default=None,
                   help="torch.profiler instead: factors on its per-event costs to try (1,1.5,2)")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    sets = []
    for s in a.sets:
        d, _, ws = s.partition(":")
        sets.append((Path(d), {w: int(n) for w, n in (x.split("=") for x in ws.split(","))}))
    out = {}
    source = "torch.profiler" if a.kineto else "zym capture"
    for ns in (float(x) if a.kineto else int(x) for x in (a.kineto or a.ns).split(",")):
        (set_kineto_scale if a.kineto else set_cupti_ns)(ns)
        fid, rows = {}, []
        for d, req in sets:
            fid |= {f"{d.name}/{w}": v for w, v in fidelity(d, req, source).items()}
            rows += [r | {"set": d.name} for r in check(d, req, source)]
        out[ns] = {"summary": summary(fid, rows), "baselines": fid, "fixes": rows}
        print(ns, json.dumps(out[ns]["summary"]), flush=True)
        print("   ", {k: v["ratio"] for k, v in fid.items()}, flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
