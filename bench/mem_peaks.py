"""Peak memory of each stage of `zym analyze` (rules on) in one process: the high-water mark
of RSS between consecutive stage boundaries (``/proc/self/clear_refs`` resets VmHWM at each
boundary, so every line's peak is that interval's own), RSS at the boundary, and the
estimated size of the polars tables held at the end of the main stages. tracemalloc does not
see Arrow/polars/numpy buffers; this does.

    python bench/mem_peaks.py CAPTURE.parquet|TRACE.json.gz [--trim] [--no-rules] [--sizes]

``--trim``: ``malloc_trim(0)`` at every boundary (what glibc keeps of freed memory shows as
the difference in RSS). On a torch.profiler trace the Kineto load's stages are lines too
(decoding, each ``events_to_tables`` stage, and each ``release_freed_memory`` there, before
and after it gives memory back: an RSS that falls inside a stage which frees nothing is an
allocator giving back an earlier stage's memory late, as polars' jemalloc did before the
thirteenth round).
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import time

from zym.schemas.memory import reset_peak, resident_mb


def _traced(f, label: str, say):
    """``f``, saying when it is entered and left (a stage boundary each)."""
    @functools.wraps(f)
    def traced(*a, **k):
        say(f"-> {label}")
        out = f(*a, **k)
        say(f"<- {label}")
        return out
    return traced


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("--trim", action="store_true")
    p.add_argument("--no-rules", action="store_true")
    p.add_argument("--sizes", action="store_true", help="estimated_size of held tables")
    args = p.parse_args()
    libc = ctypes.CDLL("libc.so.6")
    t0 = time.perf_counter()
    overall = [0]

    def say(stage: str) -> None:
        rss, hwm = resident_mb()
        trimmed = ""
        if args.trim:
            libc.malloc_trim(0)
            trimmed = f"  trim-> {resident_mb()[0]:6d}"
        overall[0] = max(overall[0], hwm)
        print(f"{time.perf_counter() - t0:6.1f} s  peak {hwm:6d}  RSS {rss:6d}"
              f"{trimmed}  | {stage}", flush=True)
        reset_peak()

    def wrap(owner, name: str) -> None:
        setattr(owner, name, _traced(getattr(owner, name),
                                     f"{getattr(owner, '__name__', owner)}.{name}", say))

    from zym.analysis import facts, load, relations, replay, report
    from zym.analysis.export import summary
    from zym.capture import kineto, kineto_json
    from zym.rules import engine, findings

    reset_peak()
    say("imports")
    for owner, name in ((load, "load_capture"), (report, "stack_nodes"),
                        (report, "find_phases"), (report, "restrict"),
                        (report, "build_call_paths"), (report, "capture_overhead"),
                        (replay.Timeline, "_build_gpu"), (replay.Timeline, "_build_calls"),
                        (replay.Timeline, "_replay_whole"), (replay._Base, "__init__"),
                        (relations.Relations, "materialize"), (relations.Relations, "_instances"),
                        (engine, "_plan"), (engine, "_replan"), (engine, "rank"),
                        (relations.Relations, "_matmuls"), (findings.Findings, "_replay_together"),
                        (summary, "build_report"), (kineto, "read_events"),
                        (kineto_json, "_decode_streaming"), (kineto, "events_to_tables"),
                        (kineto, "_with_frames"), (kineto, "nest_intervals"),
                        (kineto, "innermost_enclosing"), (kineto, "intern_rows"),
                        (kineto, "_calls"), (kineto, "_spans"), (kineto, "_gpu"),
                        (kineto, "check_tables")):
        wrap(owner, name)
    release = kineto.release_freed_memory

    def released(rows: int) -> None:
        say("   release (before)")
        release(rows)
        say("   release (after)")
    kineto.release_freed_memory = released
    for cls, props in ((facts.Facts, ("calls", "gpu", "sites", "busy", "gaps", "kernel_table")),
                       (report.Analysis, ("timeline", "relations"))):  # cached properties
        for prop in props:
            cp = cls.__dict__[prop]
            cp.func = _traced(cp.func, f"{cls.__name__}.{prop}", say)

    est = findings.Finding.estimate

    def estimate(self, *a, **k):
        out = est(self, *a, **k)
        say(f"   estimate {self.rule_id} ({self.occurrence_count} occ)")
        return out
    findings.Finding.estimate = estimate

    a = report.analyze(args.input)
    say("analyze done")
    if args.sizes:
        _sizes(a, "after analyze")
    if args.no_rules:  # (with the rules, the timeline is built where the CLI builds it)
        _ = a.timeline
        say("timeline done")
    fs = None
    if not args.no_rules:
        from zym.rules import evaluate, load_packs
        fs = evaluate(a, load_packs(()), ())
        say("rules done")
        if args.sizes:
            _sizes(a, "after rules")
    summary.build_report(a, fs, None, 5, None)
    say("report done")
    print(f"overall peak {overall[0]} MB")


def _sizes(a, when: str) -> None:
    import numpy as np
    import polars as pl

    mb = 1 << 20
    seen: set[int] = set()

    def walk(obj, name: str, depth: int = 0) -> int:
        if id(obj) in seen or depth > 3:
            return 0
        seen.add(id(obj))
        if isinstance(obj, pl.DataFrame):
            n = obj.estimated_size()
            if n > 4 * mb:
                wide = {c: f"{obj[c].estimated_size() / mb:.0f}{obj[c].dtype}"
                        for c in obj.columns if obj[c].estimated_size() > 8 * mb}
                print(f"   {n / mb:7.0f} MB  {name} {obj.shape} {wide}")
            return n
        if isinstance(obj, pl.Series):
            n = obj.estimated_size()
            if n > 4 * mb:
                print(f"   {n / mb:7.0f} MB  {name} series {obj.dtype} {obj.len()}")
            return n
        if isinstance(obj, np.ndarray):
            n = obj.nbytes if obj.base is None else 0
            if n > 4 * mb:
                print(f"   {n / mb:7.0f} MB  {name} ndarray {obj.dtype} {obj.shape}")
            return n
        total = 0
        if isinstance(obj, dict):
            for k, v in obj.items():
                total += walk(v, f"{name}[{k!r}]", depth + 1)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj[:50]):
                total += walk(v, f"{name}[{i}]", depth + 1)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("zym"):
            for k, v in vars(obj).items():
                total += walk(v, f"{name}.{k}", depth + 1)
        return total

    print(f"== held {when}")
    total = walk(a, "a")
    print(f"== total held {total / mb:.0f} MB")


if __name__ == "__main__":
    main()
