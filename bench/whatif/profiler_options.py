"""What torch.profiler's recording costs a service, by its settings: a workload's baseline
timed plain and under the profiler (CPU + CUDA activities) with neither stacks nor shapes,
with stacks, with shapes, and with both (what the what-if traces record), one pass each per
round in a shuffled order; and, once per setting, the events one traced pass records, by
kind (a torch op, a C built-in call, any other Python call, a CUDA runtime or driver call).
What ``KINETO_NS_PER_EVENT`` (zym.analysis.replay) takes out of a trace: the extra time per
pass over the events says what each costs, per setting and per service.

    python bench/whatif/profiler_options.py WORKLOAD OUT.json [--rounds 5] [--device cuda]

Only the pass is timed (the profiler started before, its results gathered after).
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import active, build, load, sync, timed_pass

# (stack+shapes first: the process's first profiled pass is traced as the what-if traces are)
SETTINGS = {"stack+shapes": {"with_stack": True, "record_shapes": True}, "none": {},
            "stack": {"with_stack": True}, "shapes": {"record_shapes": True}}
BUILTIN = "<built-in"


def traced_pass(svc, settings: dict, device: str, keep: Path | None = None) -> float:
    """One pass under the profiler; its seconds (the pass alone). ``keep``: the trace too."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, **settings) as prof:
        sync(svc.device)
        start = time.perf_counter()
        with active(svc):
            for request in svc.requests:
                svc.handle(request)
        sync(svc.device)
        took = time.perf_counter() - start
    if keep is not None:
        prof.export_chrome_trace(str(keep))
    return took


def count_events(path: Path) -> dict[str, int]:
    """A trace's CPU events by kind."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    out = {"cpu_op": 0, "python_builtin": 0, "python_function": 0, "cuda_runtime": 0}
    for e in events:
        cat = e.get("cat")
        if cat == "cpu_op":
            out["cpu_op"] += 1
        elif cat == "python_function":
            out["python_builtin" if str(e.get("name", "")).startswith(BUILTIN)
                else "python_function"] += 1
        elif cat in ("cuda_runtime", "cuda_driver"):
            out["cuda_runtime"] += 1
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload")
    p.add_argument("out", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--requests", type=int, default=None)
    a = p.parse_args()
    if not (HERE / "workloads" / f"{a.workload}.py").exists():
        print(f"profiler_options: no workload {a.workload!r} in bench/whatif/workloads/",
              file=sys.stderr)
        return 2
    mod = load(a.workload)
    svc = build(mod, "base", a.device, a.requests)
    timed_pass(svc)   # warm-up: every shape seen
    events, counted = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, settings in SETTINGS.items():   # one pass each, counted (and a warm-up)
            trace = Path(tmp) / f"{name}.json"
            counted[name] = traced_pass(svc, settings, a.device, trace)
            events[name] = count_events(trace)
            trace.unlink()
    times: dict[str, list[float]] = {k: [] for k in ("plain", *SETTINGS)}
    rng = random.Random(0)
    for _ in range(a.rounds):
        order = list(times)
        rng.shuffle(order)
        for name in order:
            times[name].append(timed_pass(svc) if name == "plain"
                               else traced_pass(svc, SETTINGS[name], a.device))
    plain = statistics.median(times["plain"])
    doc = {"workload": a.workload, "requests": len(svc.requests), "rounds": a.rounds,
           "times_s": times, "events": events,
           "counted_s": counted,   # each setting's first traced pass (stack+shapes: the
                                   # process's first profiler session)
           "median_s": {k: statistics.median(v) for k, v in times.items()}}
    doc["extra_ns_per_event"] = {
        k: (statistics.median(times[k]) - plain) * 1e9 / max(sum(events[k].values()), 1)
        for k in SETTINGS}
    tmp = a.out.with_name(a.out.name + ".part")   # whole or not at all (no zym here)
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(a.out)
    print(f"{a.workload:10s} first traced pass (stack+shapes, the process's first session) "
          f"{counted['stack+shapes'] * 1e3:9.2f} ms")
    for k, ts in times.items():
        n = sum(events[k].values()) if k in events else 0
        print(f"{a.workload:10s} {k:13s} median {statistics.median(ts) * 1e3:9.2f} ms"
              + (f"  events {n:8,d} {events[k]}  extra {doc['extra_ns_per_event'][k]:7.0f} "
                 "ns an event" if k in events else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
