"""Slices that nest properly: emission order and lane assignment for one timeline per track.

A Perfetto track is a stack: ``SLICE_END`` closes the most recent open slice on the track. Work
that overlaps without nesting (two streams' kernels, a Python frame that outlives the torch op
it called, programmatic dependent launches) would corrupt that stack, so every interval gets a
*lane* — lane 0 is the track itself, lanes 1.. are overflow tracks — such that on every lane the
begin/end events, in the order the exporter writes them, nest perfectly.

Order of events at one timestamp on a track: ends (innermost first), then zero-length slices
(written as instants), then begins (outermost first). :func:`emission_keys` computes it and
:func:`assign_lanes` checks it column-wise: with depth levels from a running sum, a LIFO stream
at each level alternates begin/end of the same interval, so a mismatch anywhere marks the group
as overlapping. Only such groups go through the sequential first-fit pass.
"""
from __future__ import annotations

import numpy as np
import polars as pl

BEGIN, END, INSTANT = 1, 2, 3
_RANK = {END: 0, INSTANT: 1, BEGIN: 2}


def begin_order(iv: pl.DataFrame) -> pl.DataFrame:
    """``iv`` (``group, row, ts_ns, end_ns``) sorted so parents begin before their children,
    with ``seq``: the position of each begin in that order."""
    return (iv.sort("group", "ts_ns", "end_ns", "row", descending=[False, False, True, False])
            .with_row_index("seq").with_columns(pl.col("seq").cast(pl.Int64)))


def emission_keys(iv: pl.DataFrame) -> pl.DataFrame:
    """Begin/end events of the intervals ``iv`` (``group, row, ts_ns, end_ns, seq``) with their
    sort keys ``(ts_ns, rank, tie)``. Zero-length intervals yield one instant."""
    zero = pl.col("end_ns") == pl.col("ts_ns")
    begins = iv.select("group", "row", "ts_ns",
                       pl.when(zero).then(INSTANT).otherwise(BEGIN).alias("type"),
                       pl.when(zero).then(_RANK[INSTANT]).otherwise(_RANK[BEGIN]).alias("rank"),
                       pl.col("seq").alias("tie"))
    ends = iv.filter(~zero).select("group", "row", pl.col("end_ns").alias("ts_ns"),
                                   pl.lit(END).alias("type"), pl.lit(_RANK[END]).alias("rank"),
                                   (-pl.col("seq")).alias("tie"))
    return pl.concat([begins.cast({"type": pl.Int8, "rank": pl.Int8}),
                      ends.cast({"type": pl.Int8, "rank": pl.Int8})])


def ordered_events(iv: pl.DataFrame) -> pl.DataFrame:
    """The begin/end events of ``iv`` (``group, row, ts_ns, end_ns``) in the order they are
    written: by time, then ends, instants, begins (see module doc)."""
    return emission_keys(begin_order(iv)).sort("ts_ns", "rank", "tie")


def nesting_violations(events: pl.DataFrame) -> np.ndarray:
    """The groups whose events (from :func:`ordered_events`, in that order) do not nest."""
    keep = events["type"].to_numpy() != INSTANT
    g = events["group"].to_numpy()[keep].astype(np.int64)
    t = events["type"].to_numpy()[keep]
    r = events["row"].to_numpy()[keep].astype(np.int64)
    if len(g) == 0:
        return np.zeros(0, np.int64)
    o = np.argsort(g, kind="stable")
    g, t, r = g[o], t[o], r[o]
    step = np.where(t == BEGIN, 1, -1)
    running = np.cumsum(step)
    starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    base = np.repeat(running[starts] - step[starts], np.diff(np.r_[starts, len(g)]))
    depth = running - base  # open slices after each event, per group
    level = np.where(t == BEGIN, depth, depth + 1)
    width = int(level.max()) + 2
    key = g * width + level
    o = np.argsort(key, kind="stable")
    key, t, r = key[o], t[o], r[o]
    run_start = np.r_[0, np.flatnonzero(np.diff(key)) + 1]
    pos = np.arange(len(key)) - np.repeat(run_start, np.diff(np.r_[run_start, len(key)]))
    even = pos % 2 == 0
    bad = (even & (t != BEGIN)) | (~even & ((t != END) | (r != np.roll(r, 1))))
    return np.unique(key[bad] // width)


def lanes_for(iv: pl.DataFrame, groups) -> pl.DataFrame:
    """``row, lane`` for the intervals of ``iv`` in ``groups``: each interval, in begin order,
    on the first lane where it nests inside the open slices."""
    rows, lanes = [], []
    ordered = begin_order(iv.filter(pl.col("group").is_in(pl.Series(list(groups)).implode())))
    current = None
    stacks: list[list[int]] = []
    for group, row, start, end in ordered.select("group", "row", "ts_ns", "end_ns").iter_rows():
        if group != current:
            current, stacks = group, []
        rows.append(row)
        lanes.append(_first_fit(stacks, start, end))
    return pl.DataFrame({"row": rows, "lane": lanes},
                        schema={"row": iv.schema["row"], "lane": pl.Int32})


def assign_lanes(iv: pl.DataFrame) -> pl.DataFrame:
    """``row, lane`` for every interval of ``iv`` (``group, row, ts_ns, end_ns``): lane 0 in
    groups that nest, first-fit lanes in the others."""
    bad = nesting_violations(ordered_events(iv))
    good = iv.filter(~pl.col("group").is_in(pl.Series(bad.tolist(), dtype=iv.schema["group"])
                                            .implode())).select(
        "row", pl.lit(0, pl.Int32).alias("lane"))
    return pl.concat([good, lanes_for(iv, bad.tolist())]) if len(bad) else good


def _first_fit(stacks: list[list[int]], start: int, end: int) -> int:
    """Push ``[start, end]`` on the first lane where it nests; a new lane when none fits."""
    if end == start:
        return 0  # an instant never breaks nesting
    for lane, stack in enumerate(stacks):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or end <= stack[-1]:
            stack.append(end)
            return lane
    stacks.append([end])
    return len(stacks) - 1
