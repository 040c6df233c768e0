"""Every Kineto trace kept in the repo's results and tests: its `zym analyze` report from the
trace (spans held in memory) against the report of its capture with the spans read from the
file in slices of ``--rows`` file rows (default 2,000: most traces are then read in many
slices). One line per trace: spans, slices, SAME or the first keys that differ.

    python bench/same_report_spans.py [--rows 2000] [TRACE ...] > out.txt
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def traces() -> list[Path]:
    found = sorted((REPO / "sample_traces").glob("*.json.gz"))
    for folder in ("bench/whatif/results", "bench/diff/results", "bench/native/results",
                   "tests/importer/public_traces"):
        found += sorted(p for p in (REPO / folder).rglob("*.json.gz")
                        if "execution_trace" not in p.name)
    return found


def report(path: Path) -> dict:
    from zym.analysis.export.summary import build_report
    from zym.analysis.report import analyze
    from zym.rules import evaluate, load_packs

    a = analyze(path)
    out = build_report(a, evaluate(a, load_packs(()), ()), None, 5, None)
    out["capture"].pop("source", None)
    return json.loads(json.dumps(out, default=str))


def differences(a, b, path: str = "") -> list[str]:
    if type(a) is not type(b):
        return [path or "/"]
    if isinstance(a, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{path}/{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path} (length)"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def one(trace: Path, rows: int) -> str:
    from zym.analysis.load import SpanTable
    from zym.capture.kineto import import_kineto
    from zym.schemas.io import open_capture

    with tempfile.TemporaryDirectory() as work:
        capture = Path(work) / "c.parquet"
        import_kineto(trace, capture, force=True)
        cap = open_capture(capture)
        spans = cap.rows("span")
        slices = sum(1 for _ in cap.slices("span", rows=rows))
        want = report(trace)
        SpanTable.PART_ROWS = rows
        got = report(capture)
    diff = differences(want, got)
    return (f"{trace.relative_to(REPO)} spans={spans} slices={slices} "
            + ("SAME" if not diff else "DIFFERENT " + " ".join(diff[:5])))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="*", type=Path)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:  # a fresh process per trace: nothing carried from one analysis to the next
        print(one(args.traces[0].resolve(), args.rows), flush=True)
        return
    for trace in args.traces or traces():
        run = subprocess.run([sys.executable, __file__, "--one", "--rows", str(args.rows),
                              str(trace)], check=False, capture_output=True, text=True)
        print(run.stdout.strip() or f"{trace}: FAILED {run.stderr.strip().splitlines()[-1:]}",
              flush=True)


if __name__ == "__main__":
    main()
