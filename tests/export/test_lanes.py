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


def _random_intervals(rng, n: int, groups: int, span: int, longest: int) -> pl.DataFrame:
    """``n`` intervals on ``groups`` tracks: overlapping, nested, zero-length and identical
    ones (a few starts and lengths repeat)."""
    start = rng.integers(0, span, n)
    length = np.where(rng.random(n) < 0.1, 0, rng.integers(1, longest, n))
    twin = rng.random(n) < 0.05  # copies of the previous interval, on its group
    group = rng.integers(0, groups, n)
    for a in (start, length, group):
        a[1:][twin[1:]] = a[:-1][twin[1:]]
    return pl.DataFrame({"group": group.astype(np.uint32), "row": np.arange(n, dtype=np.uint32),
                         "ts_ns": start, "end_ns": start + length})


def test_compiled_nesting_check_finds_the_groups_the_numpy_passes_find(monkeypatch):
    from zym.analysis.export import lanes

    rng = np.random.default_rng(7)
    found = []
    for groups, longest in ((3, 50), (12, 3), (40, 6), (2000, 40), (5, 2)):
        iv = _random_intervals(rng, 4000, groups, 20_000, longest)
        events = ordered_events(iv)
        monkeypatch.setattr(lanes, "JIT_MIN_EVENTS", 1 << 62)
        numpy_way = nesting_violations(events)
        monkeypatch.setattr(lanes, "JIT_MIN_EVENTS", 0)
        compiled = nesting_violations(events)
        assert compiled.tolist() == numpy_way.tolist()
        found.append(len(numpy_way) / groups)
    # every group overlapping, some (few tracks and many), none (intervals of 0 or 1 ns)
    assert found[0] == 1 and 0 < found[1] < 1 and 0 < found[2] < 1 and 0 < found[3] < 1
    assert found[4] == 0


def test_compiled_first_fit_gives_the_lanes_of_the_segment_pass(monkeypatch):
    """Compiled, every interval of an overlapping group goes through first-fit (no segments):
    the same lanes as the segments that nest kept on lane 0 and first-fit over the rest."""
    from zym.analysis.export import lanes

    rng = np.random.default_rng(8)
    for groups, longest in ((2, 40), (30, 8), (500, 30)):
        iv = _random_intervals(rng, 5000, groups, 30_000, longest)
        monkeypatch.setattr(lanes, "JIT_MIN_EVENTS", 1 << 62)
        python_way = assign_lanes(iv).sort("row")
        monkeypatch.setattr(lanes, "JIT_MIN_EVENTS", 0)
        compiled = assign_lanes(iv).sort("row")
        assert python_way["lane"].max() > 0  # (some work did overlap)
        assert compiled.equals(python_way)
        _replay(iv, compiled)
