"""What torch.profiler (CPU + CUDA activities, with_stack, record_shapes: the harness's trace
settings) adds per recorded event of a C built-in call that runs no torch op (``str.lower``,
``dict.get``, ``list.append``), against a Python function's, an ``nn.Module`` call's (its
forward runs no op; 0, 1 and 16 parameters) and a Tensor method's, from loops timed with and
without it, interleaved (``calibrate.plain_and_traced``): each loop's extra time over its
events of that kind.

    python bench/whatif/builtin_cost.py OUT.json [--n 200000] [--pairs 7]

Not yet run on the GPU machine (round 47: none could be started); on this 2-core machine
(torch 2.13 CPU, CPU activity only) a built-in call's event cost 137-149 ns and a Python
function's 181 ns (docs/benchmarks.md, "A fifth blind round").
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate import plain_and_traced


def loops(n: int) -> dict:
    words = [f"Word{i}" for i in range(n)]
    table = {w: i for i, w in enumerate(words)}
    out: list = []
    a = torch.ones(4)

    def lower():
        for w in words:
            w.lower()

    def get():
        for w in words:
            table.get(w)

    def append():
        out.clear()
        for w in words:
            out.append(w)  # noqa: PERF402 - one call a word: what is timed

    def f(x):
        return x

    def python():
        for w in words:
            f(w)

    def tensor_method():
        for _ in range(n // 10):
            a.add(1)

    def module_loop(params: int):
        class Keep(torch.nn.Module):  # a module whose forward runs no op: its call is timed
            def __init__(self):
                super().__init__()
                for i in range(params):
                    self.register_parameter(f"w{i}", torch.nn.Parameter(torch.ones(4)))

            def forward(self, x):
                return x

        m = Keep()

        def run():
            for w in words[:n // 10]:
                m(w)
        return run

    return {"str.lower": lower, "dict.get": get, "list.append": append,
            "python function": python, "Tensor.add (op)": tensor_method,
            "module, no parameter": module_loop(0), "module, 1 parameter": module_loop(1),
            "module, 16 parameters": module_loop(16)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--pairs", type=int, default=7)
    args = p.parse_args()
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "loops": {}}
    for name, fn in loops(args.n).items():
        plain, traced, events = plain_and_traced(fn, args.pairs)
        xs = [e for e in events if e.get("ph") == "X"]
        py = [e.get("name", "") for e in xs if e.get("cat") == "python_function"]
        kinds = {"builtin": sum(1 for e in py if e.startswith("<built-in")),
                 "module": sum(1 for e in py if e.startswith("nn.Module")),
                 "python_function": sum(1 for e in py if not e.startswith(("<built-in",
                                                                             "nn.Module"))),
                 "cpu_op": sum(1 for e in xs if e.get("cat") == "cpu_op")}
        extra = (statistics.median(traced) - statistics.median(plain)) * 1e9
        pairs = [(t - q) * 1e9 for q, t in zip(plain, traced)]
        main_kind = max(kinds, key=kinds.get)
        result["loops"][name] = {"plain_s": plain, "traced_s": traced, "events": kinds,
                                 "extra_ns": extra, "pairs_extra_ns": pairs,
                                 "ns_per_event": extra / max(sum(kinds.values()), 1),
                                 "main_kind": main_kind}
        print(f"{name:18s} plain {statistics.median(plain) * 1e3:8.2f} ms traced "
              f"{statistics.median(traced) * 1e3:8.2f} ms events {kinds} -> "
              f"{extra / max(sum(kinds.values()), 1):7.0f} ns an event", flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
