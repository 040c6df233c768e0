"""What torch.profiler (CPU + CUDA activities, with_stack, record_shapes: the harness's trace
settings) adds per recorded Python event, by kind: a call of a Python function, a call of a
built-in (C) function (``<built-in method join of str object>``). Three CPU-only loops, each
timed plain and traced, interleaved; the events of one traced pass counted by kind from its
exported trace. The two pure loops give a cost per event of each kind; the third (the readback
workload's detokenizer, a mix) checks them.

    python bench/whatif/profiler_kinds.py OUT.json [--pairs 7]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workloads"))
sys.path.insert(0, str(HERE))
from calibrate import plain_and_traced

N = 20_000


def plain_py(x: int) -> int:
    return x + 1


def loop_py() -> None:
    for i in range(N):
        plain_py(i)


def loop_builtin() -> None:
    s, parts = "abc", ["a", "b"]
    for _ in range(N):
        s.join(parts)


def loop_detok() -> None:
    from readback import BATCH, VOCAB, Detokenizer

    d = Detokenizer()
    for t in range(N // 200):
        d.add([(t * 31 + i) % VOCAB for i in range(BATCH)])


def count_events(events: list[dict]) -> dict:
    """Complete events by kind: Python calls, built-in calls, the rest."""
    out = {"python": 0, "builtin": 0, "other": 0}
    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "python_function":
            out["builtin" if e.get("name", "").startswith("<built-in") else "python"] += 1
        else:
            out["other"] += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--pairs", type=int, default=7)
    a = p.parse_args()
    torch.zeros(1, device="cuda")
    res = {}
    for name, fn in (("python", loop_py), ("builtin", loop_builtin), ("detok", loop_detok)):
        plain, traced, trace = plain_and_traced(fn, a.pairs)
        events = count_events(trace)
        extra = statistics.median(traced) - statistics.median(plain)
        res[name] = {"plain_s": plain, "traced_s": traced, "events": events,
                     "extra_ns": extra * 1e9}
        print(name, events, f"plain {statistics.median(plain) * 1e3:.2f} ms, traced "
              f"{statistics.median(traced) * 1e3:.2f} ms", flush=True)
    py = res["python"]["extra_ns"] / max(res["python"]["events"]["python"], 1)
    c = res["builtin"]["extra_ns"] / max(res["builtin"]["events"]["builtin"], 1)
    ev = res["detok"]["events"]
    res["fit"] = {"python_ns": py, "builtin_ns": c,
                  "detok_predicted_ns": py * ev["python"] + c * ev["builtin"],
                  "detok_measured_ns": res["detok"]["extra_ns"]}
    print(res["fit"])
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
