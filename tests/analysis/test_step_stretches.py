"""A step's longest stretch of its own CPU work without a CUDA call (``Relations._quiet_of``),
and which of its stretches the stretches relation keeps (``Relations._kept_stretches``), on
steps built by hand: one step from 0 to 100 ns with calls at 10-12 and 30-32, the next step's
first call at 105; the function returned at 80 where the spans say so."""
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
    kept = Relations._kept_stretches(CALLS, steps, ON, tail)
    return Relations._quiet_of(kept).filter(pl.col("step") == 0).to_dicts()[0]


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


def test_the_stretches_kept_are_the_longest_and_the_phases():
    """The same layout in ms: a step of 100 ms with calls at 10 and 30 and a return at 80;
    its stretches 10 (head), 18 (between), 48 (after its last call, to the return), the time
    from its last call on 68 (not its own); the next step (100-200 ms) has one call, 105-107
    ms, and returns at 105.5 ms. Kept: every stretch of the first step a tenth of it or more
    (the head, exactly a tenth, too), and the time after its last call; of the second, its
    longest (5 ms, before its call), and the time after its call (its own part: none)."""
    ms = 1_000_000
    calls = CALLS.with_columns(pl.col("ts_ns", "dur_ns") * ms)
    steps = STEPS.with_columns(pl.col("ts_ns", "end_ns") * ms,
                               pl.Series("_ret", [80 * ms, 105_500_000]))
    kept = Relations._kept_stretches(calls, steps, ON, False).sort("step", "quiet_end")
    rows = [(r["step"], r["_stretch_ns"] // 1000, r["_own"], r["longest"])
            for r in kept.iter_rows(named=True)]
    assert rows == [(0, 10_000, True, False), (0, 18_000, True, False),
                    (0, 48_000, True, True), (0, 68_000, False, False),
                    (1, 5_000, True, True), (1, 93_000, False, False)]
