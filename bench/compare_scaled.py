"""Findings of a long trace against a slice of it, scaled: are they the same findings?

Both reports are `zym analyze --format json` outputs of traces made by `replicate_trace.py`
from one trace (``--small-copies`` and ``--large-copies`` copies). Each finding of either
report is matched by (rule, site); for each, the large report's count, cost and saving are
divided by the small one's, against the ratio of copies. Prints one row per finding and exits
1 when a finding is in one report only, or a ratio is off by more than ``--tolerance``.

    python bench/compare_scaled.py SMALL.json LARGE.json --small-copies 52 --large-copies 520
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def findings(path: Path) -> dict[tuple[str, str], dict]:
    try:
        report = json.loads(path.read_text())
        return {(f["rule_id"], f["site"]): f for f in report["findings"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"compare_scaled: {path}: not a `zym analyze --format json` report "
              f"({type(e).__name__}: {e})", file=sys.stderr)
        sys.exit(2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("small", type=Path)
    ap.add_argument("large", type=Path)
    ap.add_argument("--small-copies", type=int, required=True)
    ap.add_argument("--large-copies", type=int, required=True)
    ap.add_argument("--tolerance", type=float, default=0.05, help="relative, default 0.05")
    ap.add_argument("--fixed-count", action="append", default=["utilization.low-utilization"],
                    help="a rule whose count does not grow with the trace (the utilization "
                         "rule counts the window's fixed number of sub-windows)")
    args = ap.parse_args()
    a, b = findings(args.small), findings(args.large)
    want = args.large_copies / args.small_copies
    bad = 0
    print(f"expected ratio {want:g}; rows: rule, site, then large/small for count, cost, saving")
    for key in sorted(set(a) | set(b), key=lambda k: -(b.get(k) or a.get(k))["cost_ns"]):
        fa, fb = a.get(key), b.get(key)
        if fa is None or fb is None:
            print(f"ONLY IN {'large' if fa is None else 'small'}: {key[0]} {key[1]}")
            bad += 1
            continue
        ratios = []
        for field in ("occurrence_count", "cost_ns", "saving_ns"):
            x, y = fa.get(field) or 0, fb.get(field) or 0
            expect = 1.0 if field == "occurrence_count" and key[0] in args.fixed_count else want
            r = (y / x) if x else (1.0 * expect if y == 0 else float("inf"))
            ok = abs(r / expect - 1) <= args.tolerance if x else y == 0
            bad += not ok
            ratios.append(f"{r:8.3f}{'' if ok else '!'}")
        print(f"{key[0]:36s} {key[1][:40]:40s} {' '.join(ratios)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
