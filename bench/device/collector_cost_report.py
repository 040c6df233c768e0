"""Tables for docs/benchmarks.md from bench/device/cupti_cost.py results.

    python bench/device/collector_cost_report.py [RESULTS_DIR]

Per result file: each arm's median per launch (micro) or per request (workloads), and each
CUPTI configuration's paired cost: the median over rounds of (arm - ``off``) in the same round
(the arms of a round run back to back in one process), with its 25th-75th percentiles.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "h200" / "collector-cost"


def unit(doc: dict) -> tuple[float, str]:
    """Seconds of a pass -> the figure's unit (µs a launch, or ms a request)."""
    w = doc["workload"]
    if w.startswith("micro"):
        return 1e6 / int(w.partition(":")[2] or 3000), "µs/launch"
    return 1e3 / doc["requests_per_pass"], "ms/request"


def rows(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    k, u = unit(doc)
    arms = doc["pass_s"]
    out = []
    for arm, ts in arms.items():
        med = statistics.median(ts) * k
        cell = f"{med:.2f} {u}"
        if arm != "off" and "off" in arms:
            d = [(a - b) * k for a, b in zip(ts, arms["off"])]
            q = statistics.quantiles(d, n=4)
            cell += f", vs off {statistics.median(d):+.2f} ({q[0]:+.2f} to {q[2]:+.2f})"
        out.append(f"| {path.parent.name}/{path.stem} | {arm} | {cell} |")
    return out


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    print("| run | arm | median; paired difference from `off` (p25 to p75) |")
    print("|---|---|---|")
    for p in sorted(root.rglob("*.json")):
        if "pass_s" in json.loads(p.read_text()):
            print("\n".join(rows(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
