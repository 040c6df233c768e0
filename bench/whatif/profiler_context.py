"""Is torch.profiler's cost of a recorded Python event the same in real code as in a loop of
one call? Loops of one kind of call (a Python function, a C built-in) and real loops of the
workloads (fraudscore's per-authorisation features: numpy reductions, built-ins and numpy's
Python wrappers; mottrack's IoU of every box pair: plain Python calls), each timed with and
without torch.profiler (the harness's settings: CPU + CUDA activities, with_stack,
record_shapes), interleaved, in one process on one host: each loop's extra time over its
recorded events (built-ins, Python calls, ops), with the trace's own spans of the loop.

Why: the deflation takes a Python call's and a built-in's cost from loops of one call (279 and
271 ns on one H100 host, 553 on another); fraudscore's trace, deflated so, still replays its
feature loop at ~1.5-2x the loop's measured time. Either hosts differ (then the one-call
loops here cost more too) or the cost depends on the code around the event (then the real
loops cost more per event than the one-call loops on the same host).

    python bench/whatif/profiler_context.py OUT.json [--pairs 7]

CPU-only loops (no CUDA work), so it also runs on a machine without a GPU (CPU activity only
there).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "workloads"))


def _activities():
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts


def timed(fn, pairs: int) -> dict:
    """``fn`` warmed up, then ``pairs`` times plain and traced, alternating (plain first, the
    order swapped every other pair), a garbage collection before each; the events of the first
    traced run by kind."""
    import gc
    import tempfile

    from torch.profiler import profile

    fn()
    plain, traced, kinds = [], [], None
    for i in range(pairs):
        for traced_now in ((False, True) if i % 2 == 0 else (True, False)):
            gc.collect()
            if not traced_now:
                t = time.perf_counter()
                fn()
                plain.append(time.perf_counter() - t)
                continue
            with profile(activities=_activities(), with_stack=True, record_shapes=True) as prof:
                t = time.perf_counter()
                fn()
                traced.append(time.perf_counter() - t)
            if kinds is None:
                path = Path(tempfile.mkdtemp()) / "t.json"
                prof.export_chrome_trace(str(path))
                xs = [e for e in json.loads(path.read_text())["traceEvents"]
                      if e.get("ph") == "X"]
                py = [e.get("name", "") for e in xs if e.get("cat") == "python_function"]
                kinds = {"builtin": sum(1 for e in py if e.startswith("<built-in")),
                         "python_function": sum(1 for e in py if not e.startswith("<built-in")),
                         "cpu_op": sum(1 for e in xs if e.get("cat") == "cpu_op")}
                path.unlink()
    n = max(sum(kinds.values()), 1)
    extra = (statistics.median(traced) - statistics.median(plain)) * 1e9
    return {"plain_s": plain, "traced_s": traced, "events": kinds, "extra_ns": extra,
            "ns_per_event": extra / n,
            "pairs_ns_per_event": [(t - q) * 1e9 / n for q, t in zip(plain, traced)]}


def loops() -> dict:
    import numpy as np

    words = [f"Word{i}" for i in range(100_000)]

    def f(x):
        return x

    def python():
        for w in words:
            f(w)

    def builtin():
        for w in words:
            w.lower()

    arrays = [np.arange(30.0) + i for i in range(20_000)]

    def ndarray_sum():
        for a in arrays:
            a.sum()

    import fraudscore
    store = fraudscore.make_store()
    request = fraudscore.make_requests(1, store=store)[0]
    features = fraudscore.FeatureLoop(store)

    import mottrack
    rng = np.random.default_rng(0)
    tracks = rng.uniform(0, 500, (60, 4))
    tracks[:, 2:] += tracks[:, :2]
    dets = rng.uniform(0, 500, (80, 4))
    dets[:, 2:] += dets[:, :2]

    return {"python function": python, "str.lower (built-in)": builtin,
            "ndarray.sum (built-in + numpy's Python)": ndarray_sum,
            "fraudscore features (real loop)": lambda: features(request),
            "mottrack IoU (real loop)": lambda: mottrack.iou_loop(tracks, dets)}


def run(doc: str, loops: dict, default_pairs: int) -> int:
    """The command line of this script and of ``profiler_dissect.py``: each of ``loops``
    timed (:func:`timed`), a line each, all of them written to OUT as JSON, whole or not at
    all (a temporary file renamed over it)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--pairs", type=int, default=default_pairs)
    args = p.parse_args()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    result = {"gpu": gpu, "torch": torch.__version__, "python": sys.version.split()[0],
              "loops": {}}
    width = max(map(len, loops))
    for name, fn in loops.items():
        r = timed(fn, args.pairs)
        result["loops"][name] = r
        n_ev = sum(r["events"].values())
        print(f"{name:{width}s} plain {statistics.median(r['plain_s']) * 1e3:8.2f} ms traced "
              f"{statistics.median(r['traced_s']) * 1e3:8.2f} ms extra "
              f"{r['extra_ns'] / 1e6:7.2f} ms {r['events']} -> "
              f"{r['extra_ns'] / max(n_ev, 1):6.0f} ns an event", flush=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, args.out)
    return 0


def main() -> int:
    return run(__doc__, loops(), 7)


if __name__ == "__main__":
    sys.exit(main())
