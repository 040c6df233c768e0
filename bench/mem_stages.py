"""Memory by stage of `zym analyze` in one process (RSS and its high-water mark, VmHWM, after
each stage; tracemalloc does not see Arrow/polars buffers). Rules on unless ``--no-rules``.

    python bench/mem_stages.py CAPTURE.parquet [--no-rules]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from zym.schemas.memory import resident_mb


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("input", type=Path)
    p.add_argument("--no-rules", action="store_true")
    args = p.parse_args()
    t0 = time.perf_counter()

    def say(stage: str) -> None:
        rss, hwm = resident_mb()
        print(f"{time.perf_counter() - t0:7.2f} s  RSS {rss:7.0f} MB  HWM {hwm:7.0f} MB  {stage}",
              flush=True)

    from zym.analysis.callpath import build_call_paths, stack_nodes
    from zym.analysis.export.summary import build_report
    from zym.analysis.facts import Facts
    from zym.analysis.load import load_capture
    from zym.analysis.phases import find_phases
    from zym.analysis.report import Analysis, counts_events, recorded_events_ns
    say("imports")
    data = load_capture(args.input)
    say("load")
    nodes = stack_nodes(data.frames, data.stacks)
    facts = Facts(data, nodes)
    _ = facts.calls
    say("Facts.calls")
    _ = facts.gpu
    say("Facts.gpu")
    recorded = recorded_events_ns(data, facts) if counts_events(data.meta) else None
    say("profiler's events")
    phases = find_phases(facts.calls, facts.gpu, nodes, data.span_table, facts.window)
    say("phases")
    a = Analysis(data, facts, build_call_paths(facts), phases, facts, "steady",
                 recorded_ns=recorded)
    say("call paths")
    _ = a.timeline
    say("timeline")
    findings = None
    if not args.no_rules:
        from zym.rules import evaluate, load_packs
        findings = evaluate(a, load_packs(()), ())
        say("rules")
    build_report(a, findings, None, 5, None)
    say("report")


if __name__ == "__main__":
    main()
