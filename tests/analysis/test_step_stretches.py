"""A step's longest stretch of its own CPU work without a CUDA call (``Relations._quiet``),
on steps built by hand: one step from 0 to 100 ns with calls at 10-12 and 30-32, the next
step's first call at 105; the function returned at 80 where the spans say so."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from zym.analysis.relations import Relations

CALLS = pl.DataFrame({"step": [0, 0, 1], "call_idx": [0, 1, 2], "ts_ns": [10, 30, 105],
                      "dur_ns": [2, 2, 2]})
STEPS = pl.DataFrame({"step": [0, 1], "ts_ns": [0, 100], "end_ns": [100, 200]})
ON = np.array([0, 1, 2])  # every call on the steps' thread


def _row(steps: pl.DataFrame, tail: bool) -> dict:
    return Relations._quiet(CALLS, steps, ON, tail).filter(pl.col("step") == 0).to_dicts()[0]


@pytest.mark.parametrize("ret, tail, want", [
    # spans, no return known: head 10, between the calls 18; the tail is not the step's own
    (None, False, {"_stretch_ns": 18, "quiet_idx": 1, "quiet_end": 30, "_at_return": False}),
    # spans, returned at 80: its work after the last call, 48, ended by the return; the CPU
    # time before the next call on the thread holds it
    (80, False, {"_stretch_ns": 48, "quiet_idx": 2, "quiet_end": 80, "_at_return": True}),
    # a step that starts at a line: the whole tail, 68, up to the next step
    (None, True, {"_stretch_ns": 68, "quiet_idx": 2, "quiet_end": 100, "_at_return": False}),
])
def test_the_step_s_own_stretches(ret, tail, want):
    steps = STEPS if ret is None else STEPS.with_columns(pl.Series("_ret", [ret, 150]))
    got = _row(steps, tail)
    assert got["quiet_ns"] == 68   # the longest stretch without a call, own work or not
    assert {k: got[k] for k in want} == want
