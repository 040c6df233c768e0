"""Memory through `zym analyze`'s rules in one process: RSS and its high-water mark (VmHWM)
before and after the replays, the base state, the relations and ``call_instance``, printed
when the high-water mark grew (tracemalloc does not see Arrow/polars buffers).

    python bench/mem_trace_rules.py CAPTURE.parquet
"""
from __future__ import annotations

import functools
import sys
import time


def main(path: str) -> None:
    from zym.analysis import analyze, relations, replay
    from zym.rules import engine, evaluate, load_packs

    t0 = time.perf_counter()
    last = [0]

    def say(stage: str, force: bool = False) -> None:
        got = {}
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS", "VmHWM")):
                    got[line[:5]] = int(line.split()[1]) // 1024
        if force or got["VmHWM"] > last[0] + 5:
            print(f"{time.perf_counter() - t0:6.1f} s  RSS {got['VmRSS']} MB  "
                  f"HWM {got['VmHWM']} MB  {stage}", flush=True)
        last[0] = got["VmHWM"]

    def wrap(owner, name: str) -> None:
        f = getattr(owner, name)

        @functools.wraps(f)
        def traced(*args, **kwargs):
            say(f"before {owner.__name__}.{name}")
            out = f(*args, **kwargs)
            say(f"after {owner.__name__}.{name}")
            return out
        setattr(owner, name, traced)

    for owner, name in ((replay.Timeline, "_replay_whole"), (replay._Base, "__init__"),
                        (replay._Base, "replay"), (relations.Relations, "materialize"),
                        (relations.Relations, "_instances"), (engine, "rank"),
                        (engine, "_plan"), (engine, "_findings")):
        wrap(owner, name)
    a = analyze(path)
    say("analyze", True)
    _ = a.timeline
    say("timeline", True)
    evaluate(a, load_packs(()), ())
    say("rules", True)


if __name__ == "__main__":
    main(sys.argv[1])
