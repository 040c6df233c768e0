"""Per CUDA call, what each side of `zym capture` added to a service's passes on the H200:
reads ``parts-*.json`` (bench/whatif/device_overhead_parts.sh: whole processes, arms alternated
in rounds) and the round-1 raw captures' metadata (``raw-meta/W-Z*.meta.json``: the CUDA calls
the capture saw, and its own cost estimate), prints one row per workload and arm.

    python bench/whatif/capture_cost_report.py [bench/whatif/results/h200-capture-cost]

A pair is an arm's run and the plain run (P) of the same round; its figure is (the arm's median
pass - P's median pass) / CUDA calls a pass, where calls a pass = the capture's calls / (timed
passes + the warm-up pass): the warm-up's extra calls (planning, first launches) make it a
little high, so the figures a little low.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "h200-capture-cost"


def rows(results: Path) -> list[dict]:
    out = []
    for parts in sorted(results.glob("parts-*.json")):
        runs = json.loads(parts.read_text())
        med = {(r["workload"], r["arm"], r["round"]): statistics.median(r["pass_s"]) * 1e3
               for r in runs.values()}
        passes = {r["workload"]: len(r["pass_s"]) for r in runs.values()}
        for w in sorted({k[0] for k in med}):
            metas = sorted(results.glob(f"raw-meta/{w}-Z*.meta.json"))
            if not metas:
                continue
            meta = json.loads(metas[0].read_text())["extra"]
            calls = meta["calls_seen"] / (passes[w] + 1)
            est = meta.get("capture_cost", {}).get("added_ns_per_call")
            for arm in sorted({k[1] for k in med if k[0] == w} - {"P"}):
                d = [(med[(w, arm, r)] - med[(w, "P", r)]) * 1e6 / calls
                     for (w2, a, r) in med if w2 == w and a == arm and (w, "P", r) in med]
                out.append({"file": parts.name, "workload": w, "arm": arm, "pairs": len(d),
                            "calls_per_pass": round(calls),
                            "plain_ms": round(statistics.median(
                                v for k, v in med.items() if k[:2] == (w, "P")), 1),
                            "arm_ms": round(statistics.median(
                                v for k, v in med.items() if k[:2] == (w, arm)), 1),
                            "added_ns_per_call_median": round(statistics.median(d)),
                            "min": round(min(d)), "max": round(max(d)),
                            "probes_estimate_ns": est})
    return out


def main() -> int:
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    for r in rows(results):
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
