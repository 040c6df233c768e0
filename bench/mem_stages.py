"""Time and memory by stage of `zym analyze` in one process, the stages as the CLI runs them
(``analyze``'s load with names as codes and unread columns left out, ``analyze_data``), but
one after another: the timeline is built before the rules, not beside them on a thread.
RSS and its high-water mark (VmHWM) after each stage (tracemalloc does not see Arrow/polars
buffers); each relation the rules build, its rows and the RSS after it. Rules on unless
``--no-rules``.

    python bench/mem_stages.py CAPTURE.parquet|TRACE.json.gz [--no-rules] [--memory-budget 1G]
"""
from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

from zym.schemas.memory import resident_mb


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("input", type=Path)
    p.add_argument("--no-rules", action="store_true")
    p.add_argument("--memory-budget", help="as zym analyze's (e.g. 1G): a capture past it "
                   "is sampled (the stage 'load' then includes the sampling)")
    args = p.parse_args()
    t0 = time.perf_counter()

    def say(stage: str) -> None:
        rss, hwm = resident_mb()
        print(f"{time.perf_counter() - t0:7.2f} s  RSS {rss:7.0f} MB  HWM {hwm:7.0f} MB  {stage}",
              flush=True)

    from zym.analysis.export.summary import build_report
    from zym.analysis.load import UNREAD, api_codes, load_capture
    from zym.analysis.report import analyze_data
    from zym.rules import engine
    say("imports")
    budget = None
    if args.memory_budget:
        from zym.capture.kineto_stream import parse_size

        budget = parse_size(args.memory_budget)
    data = api_codes(load_capture(args.input, None, codes=True, skip=UNREAD, budget=budget))
    say("load")
    analysis = analyze_data(data, "steady")
    say("analyze_data")
    _ = analysis.timeline
    say("timeline")
    findings = None
    if not args.no_rules:
        from zym.rules import evaluate, load_packs

        rel = analysis.relations
        build, rank = rel.materialize, engine.rank

        def materialize(name, *more, **kw):
            t = time.perf_counter()
            frame = build(name, *more, **kw)
            rss, hwm = resident_mb()
            print(f"          relation {name}: {time.perf_counter() - t:.2f} s, "
                  f"{frame.height:,} rows, RSS {rss} MB, HWM {hwm} MB", flush=True)
            return frame

        def ranked(*more, **kw):
            say("rules evaluated")
            return rank(*more, **kw)

        rel.materialize, engine.rank = materialize, ranked
        findings = evaluate(analysis, load_packs(()), ())
        say("rules ranked")
    report = build_report(analysis, findings, None, 5, None)
    say("report")
    json.dump(report, io.StringIO(), indent=1)
    say("json")


if __name__ == "__main__":
    main()
