"""Overlapping work never yields improperly nested slices on one track."""
from __future__ import annotations

import numpy as np
import polars as pl
from zym.analysis.export.lanes import (
    BEGIN,
    END,
    assign_lanes,
    begin_order,
    emission_keys,
    nesting_violations,
    ordered_events,
)


def _replay(iv: pl.DataFrame, lanes: pl.DataFrame) -> None:
    """Replay the written begin/end order per (group, lane): each end closes its own slice."""
    ev = ordered_events(iv).join(lanes, on="row")
    stacks: dict = {}
    for group, lane, row, typ in ev.select("group", "lane", "row", "type").iter_rows():
        stack = stacks.setdefault((group, lane), [])
        if typ == BEGIN:
            stack.append(row)
        elif typ == END:
            assert stack and stack.pop() == row
    assert not any(stacks.values())


def test_nested_work_stays_on_one_lane():
    iv = pl.DataFrame({"group": [1] * 5, "row": range(5), "ts_ns": [0, 0, 2, 5, 5],
                       "end_ns": [10, 10, 4, 5, 10]})
    assert len(nesting_violations(ordered_events(iv))) == 0
    assert assign_lanes(iv)["lane"].to_list() == [0] * 5


def test_partial_overlap_moves_to_an_overflow_lane():
    iv = pl.DataFrame({"group": [1, 1, 2], "row": [0, 1, 2], "ts_ns": [0, 5, 0],
                       "end_ns": [10, 15, 3]})
    lanes = assign_lanes(iv).sort("row")
    assert lanes["lane"].to_list() == [0, 1, 0]
    _replay(iv, lanes)


def test_random_intervals_always_replay_cleanly():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = 300
        start = rng.integers(0, 1000, n)
        iv = pl.DataFrame({"group": rng.integers(0, 3, n), "row": np.arange(n),
                           "ts_ns": start, "end_ns": start + rng.integers(0, 200, n)})
        _replay(iv, assign_lanes(iv))


def test_packed_and_two_key_orders_agree():
    rng = np.random.default_rng(1)
    n = 500
    start = rng.integers(0, 10_000, n)
    iv = pl.DataFrame({"group": rng.integers(0, 2, n), "row": np.arange(n), "ts_ns": start,
                       "end_ns": start + rng.integers(0, 300, n)})
    packed = ordered_events(iv)  # a short capture: one packed sort key
    two_keys = emission_keys(begin_order(iv)).sort("ts_ns", "key")
    assert packed.select("row", "type").equals(two_keys.select("row", "type"))
    far = iv.with_columns(pl.when(pl.col("group") == 1).then(pl.col(c) + (1 << 58))
                          .otherwise(c).alias(c) for c in ("ts_ns", "end_ns"))
    _replay(far, assign_lanes(far))  # too long a span to pack: the two-key sort
