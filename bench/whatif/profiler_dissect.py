"""What in a real loop makes torch.profiler's cost per recorded Python event higher than in a
loop of one call (profiler_context.py: fraudscore's feature loop ~2.5x a loop of one call on
the same H100 host): loops of one construct each, timed with and without torch.profiler (the
harness's settings), interleaved, in one process: each loop's extra time per iteration and
per recorded event. Loops that record no event (arithmetic, numpy operators) show whether
the profiler slows code between events (the interpreter's own speed under tracing).

    python bench/whatif/profiler_dissect.py OUT.json [--pairs 5]
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from profiler_context import run


def loops() -> dict:
    n = 20_000
    words = [f"Word{i}" for i in range(5 * n)]
    rng = np.random.default_rng(0)
    arrays = [rng.random(30) for _ in range(n)]
    floats = rng.random(n).tolist()

    def f(x):
        return x

    def flat():
        for w in words:
            f(w)

    def at_depth(d, fn):
        return fn() if d == 0 else at_depth(d - 1, fn)

    def log1p10():
        for x in floats:
            (math.log1p(x), math.log1p(x), math.log1p(x), math.log1p(x), math.log1p(x),
             math.log1p(x), math.log1p(x), math.log1p(x), math.log1p(x), math.log1p(x))

    def arith():   # no call: no event
        s = 0.0
        for x in floats:
            for _ in range(10):
                s += x * 2.5 - 1.0
        return s

    def np_ops():  # numpy operators only: no event
        for a in arrays:
            a * 2.0 + 1.0

    def type_calls():   # int() and float(): calls of types, no event
        for x in floats:
            int(x), float(x), int(x), float(x), int(x), float(x), int(x), float(x)

    def ufunc_calls():  # a numpy ufunc called on a float: no event
        for x in floats:
            np.log1p(x), np.log1p(x), np.log1p(x), np.log1p(x)

    def np_sum():
        for a in arrays:
            a.sum()

    def np_mean():
        for a in arrays:
            a.mean()

    def np_std():
        for a in arrays:
            a.std()

    def np_mask_sum():
        for a in arrays:
            a[a > 0.5].sum()

    def np_index_ops():  # boolean masks, comparisons, no call
        for a in arrays:
            a[a > 0.5]

    return {"python function": flat, "python function, 30 frames deep":
            lambda: at_depth(30, flat), "math.log1p x10": log1p10,
            "arithmetic (no event)": arith, "numpy operators (no event)": np_ops,
            "boolean mask (no event)": np_index_ops, "int() and float() x8 (no event)":
            type_calls, "np.log1p(float) x4 (no event)": ufunc_calls, "ndarray.sum": np_sum,
            "ndarray.mean": np_mean, "ndarray.std": np_std, "mask then sum": np_mask_sum}


def main() -> int:
    return run(__doc__, loops(), 5)


if __name__ == "__main__":
    sys.exit(main())
