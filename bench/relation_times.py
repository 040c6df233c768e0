"""Each rule relation's build, timed in one process: the analysis and the rules run once (to
learn which columns and ``where`` each relation is asked for), then each named relation is
built again ``--runs`` times from scratch (its cached frame and the relations' shared
objects dropped before each), with its wall and CPU seconds and the rise of resident memory
over the build (VmHWM after a reset, less the RSS before).

    python bench/relation_times.py CAPTURE.parquet calls,gpu [--runs 3]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from zym.analysis import analyze
from zym.rules import evaluate, load_packs
from zym.schemas.memory import reset_peak, resident_mb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", type=Path)
    p.add_argument("relations", help="comma-separated: calls,gpu,gaps,steps,windows,paths")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    analysis = analyze(args.input, None, "steady")
    _ = analysis.timeline
    rel = analysis.relations
    asked: dict = {}
    build = rel.materialize

    def recording(name, columns, wheres=None):
        asked.setdefault(name, (set(columns), wheres))
        return build(name, columns, wheres)

    rel.materialize = recording
    evaluate(analysis, load_packs(()), ())
    rel.materialize = build
    for name in args.relations.split(","):
        if name not in asked:
            raise SystemExit(f"relation_times: no rule read the {name!r} relation")
        columns, wheres = asked[name]
        for _ in range(args.runs):
            rel.forget(name, wheres)
            rel._objects.clear()
            before = resident_mb()[0]
            reset_peak()
            wall, cpu = time.perf_counter(), time.process_time()
            frame = rel.materialize(name, columns, wheres)
            print(f"{name}: {frame.height:,} rows, wall {time.perf_counter() - wall:.2f} s, "
                  f"CPU {time.process_time() - cpu:.2f} s, peak +{resident_mb()[1] - before} MB",
                  flush=True)


if __name__ == "__main__":
    main()
