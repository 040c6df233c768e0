"""Two `zym analyze --format json` reports of the same workload compared as shares of their
windows: a capture against a sample of it (`--memory-budget`), or against a slice of it.

Windows of different lengths say the same where each finding's cost and saving take the same
share of its window. Printed: the windows, the findings and sites of each, every fix's saving
together, each GPU's busy share, per rule (findings, summed cost and saving as % of the
window), then per finding (rule, site) its saving, cost and occurrences in each; where the
second report gives each saving's two halves (a sample replayed in two halves:
``saving_halves_ns``), each finding's halves as % of the window, and how many of the first
report's savings lie between them.

    python bench/compare_findings.py WHOLE.json SAMPLED.json
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import fail  # bench/: the script's folder


def read(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
        if not isinstance(report["gpu"]["window_ns"], int) or not isinstance(
                report["findings"], list):
            raise TypeError("no window or findings")
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: not a zym analyze JSON report ({e})")
    return report


def halves(report: dict) -> dict:
    """Per (rule, site) its saving's two halves as % of the window, where the report has
    them."""
    window = report["gpu"]["window_ns"] or 1
    return {(f["rule_id"], f["site"]): tuple(100 * h / window for h in f["saving_halves_ns"])
            for f in report["findings"] if f.get("saving_halves_ns")}


def within(a: float, pair: tuple[float, float], slack: float = 0.0005) -> bool:
    """``a`` between the two halves (to half a thousandth of a point: the rounding)."""
    return min(pair) - slack <= a <= max(pair) + slack


def shares(report: dict) -> tuple[dict, dict]:
    """Per rule [findings, cost %, saving %]; per (rule, site) (saving %, cost %, count)."""
    window = report["gpu"]["window_ns"] or 1
    per_rule: dict = defaultdict(lambda: [0, 0.0, 0.0])
    per_site = {}
    for f in report["findings"]:
        cost, saving = 100 * (f["cost_ns"] or 0) / window, 100 * (f["saving_ns"] or 0) / window
        rule = per_rule[f["rule_id"]]
        rule[0] += 1
        rule[1] += cost
        rule[2] += saving
        per_site[(f["rule_id"], f["site"])] = (saving, cost, f["occurrence_count"])
    return per_rule, per_site


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = p.parse_args()
    a, b = read(args.a), read(args.b)
    (ra, sa), (rb, sb) = shares(a), shares(b)
    wa, wb = a["gpu"]["window_ns"], b["gpu"]["window_ns"]
    sites_a, sites_b = {k[1] for k in sa}, {k[1] for k in sb}
    print(f"windows {wa / 1e9:.2f} s and {wb / 1e9:.2f} s ({wb / wa:.3f}); findings "
          f"{len(a['findings'])} and {len(b['findings'])}; sites {len(sites_a)} and "
          f"{len(sites_b)}, {len(sites_a & sites_b)} in both")
    together = [100 * ((r.get("fixes_together") or {}).get("saving_ns") or 0) / w
                for r, w in ((a, wa), (b, wb))]
    print(f"every fix together saves {together[0]:.2f}% and {together[1]:.2f}% of the window")
    busy = [[d["busy_pct"] for d in r["gpu"]["devices"]] for r in (a, b)]
    print(f"GPU busy % {busy[0]} and {busy[1]}")
    print("\nper rule: findings | cost, % of the window | saving, % of the window")
    for rule in sorted(set(ra) | set(rb)):
        x, y = ra.get(rule, [0, 0.0, 0.0]), rb.get(rule, [0, 0.0, 0.0])
        print(f"{rule:36} {x[0]:4d} {y[0]:4d} | {x[1]:8.3f} {y[1]:8.3f} | {x[2]:7.3f} {y[2]:7.3f}")
    print("\nper finding: saving %, cost %, occurrences (— where the report has none)")

    def cell(v: tuple | None) -> str:
        return "—" if v is None else f"{v[0]:7.3f} {v[1]:7.3f} {v[2]:>9,}"
    hb = halves(b)
    for key in sorted(set(sa) | set(sb), key=str):
        h = hb.get(key)
        both = "" if h is None else (f" | halves {h[0]:7.3f} {h[1]:7.3f}"
                                     + (" (within)" if key in sa and within(sa[key][0], h) else ""))
        print(f"{key[0][:32]:32} {str(key[1])[:40]:40} | {cell(sa.get(key)):>27} | "
              f"{cell(sb.get(key)):>27}{both}")
    if hb:
        common = [k for k in hb if k in sa]
        inside = sum(within(sa[k][0], hb[k]) for k in common)
        gaps = sorted(abs(sb[k][0] - sa[k][0]) for k in common)
        apart = sorted(abs(hb[k][0] - hb[k][1]) for k in common)
        covered = sum(abs(sb[k][0] - sa[k][0]) <= abs(hb[k][0] - hb[k][1]) + 0.0005
                      for k in common)
        print(f"\nthe first report's saving lies between the second's halves for {inside} of "
              f"{len(common)} findings; the second's saving is within the halves' difference of "
              f"the first's for {covered} of {len(common)}; points of the window, median (max): "
              f"|difference| of the savings {gaps[len(gaps) // 2] if gaps else 0:.3f} "
              f"({gaps[-1] if gaps else 0:.3f}), of the halves "
              f"{apart[len(apart) // 2] if apart else 0:.3f} ({apart[-1] if apart else 0:.3f})")


if __name__ == "__main__":
    main()
