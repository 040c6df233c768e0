"""Slices that nest properly: emission order and lane assignment for one timeline per track.

A Perfetto track is a stack: ``SLICE_END`` closes the most recent open slice on the track. Work
that overlaps without nesting (two streams' kernels, a Python frame that outlives the torch op
it called, programmatic dependent launches) would corrupt that stack, so every interval gets a
*lane* — lane 0 is the track itself, lanes 1.. are overflow tracks — such that on every lane the
begin/end events, in the order the exporter writes them, nest perfectly.

Order of events at one timestamp on a track: ends (innermost first), then zero-length slices
(written as instants), then begins (outermost first). :func:`emission_keys` computes it and
:func:`assign_lanes` checks it: with depth levels from a running count, each end must meet the
depth its begin opened, so a mismatch anywhere marks the group as overlapping. Only such groups
go through the first-fit pass. From ``JIT_MIN_EVENTS`` events on, where numba is there, the
check and the first-fit pass are compiled loops, one pass each; else numpy passes and a Python
loop, the same results (tests compare them).
"""
from __future__ import annotations

import functools

import numpy as np
import polars as pl

from ..compiled import njit, writes

BEGIN, END, INSTANT = 1, 2, 3
_RANK = {END: 0, INSTANT: 1, BEGIN: 2}
# Events from which the checks below run compiled (one pass) rather than as numpy passes: the
# numpy form sorts the events by group where there are many (a capture's overlapping segments:
# ~24 s of a 10 M-operation export, 45 M events).
JIT_MIN_EVENTS = 200_000


def begin_order(iv: pl.DataFrame) -> pl.DataFrame:
    """``iv`` (``group, row, ts_ns, end_ns``, in row order) sorted so parents begin before
    their children, with ``seq``: the position of each begin in that order. Identical
    intervals keep row order."""
    return (iv.sort("group", "ts_ns", "end_ns", descending=[False, False, True],
                    maintain_order=True)
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
                      ends.cast({"type": pl.Int8, "rank": pl.Int8})]).with_columns(
        write_key().alias("key"))


def ordered_events(iv: pl.DataFrame) -> pl.DataFrame:
    """The begin/end events of ``iv`` (``group, row, ts_ns, end_ns``) in the order they are
    written: by time, then ends, instants, begins (see module doc).

    When time, rank and tie fit one 63-bit key together (captures up to hours long), the sort
    is on that single column, about twice as fast as on two."""
    ev = emission_keys(begin_order(iv))
    if ev.height == 0:
        return ev
    t0, t1 = int(ev["ts_ns"].min()), int(ev["ts_ns"].max())
    tie_bits = (2 * iv.height + 1).bit_length()
    if (t1 - t0).bit_length() + 2 + tie_bits > 62:
        return ev.sort("ts_ns", "key")
    packed = (((pl.col("ts_ns") - t0) * (1 << (tie_bits + 2)))
              + pl.col("rank").cast(pl.Int64) * (1 << tie_bits) + pl.col("tie") + iv.height)
    return ev.sort(packed)


def write_key() -> pl.Expr:
    """``rank`` and ``tie`` folded into one sort key (ties are begin positions, |tie| < 2^39)."""
    return pl.col("rank").cast(pl.Int64) * (1 << 40) + pl.col("tie") + (1 << 39)


def nesting_violations(events: pl.DataFrame) -> np.ndarray:
    """The groups whose events (from :func:`ordered_events`, in that order) do not nest.

    With depths from a running count of begins and ends per group, the events nest exactly
    when every end comes at the depth its begin opened: the first end that would close
    another slice than its own meets a deeper stack than its begin did.
    """
    keep = events["type"].to_numpy() != INSTANT
    g = events["group"].to_numpy()[keep].astype(np.int64)
    t = events["type"].to_numpy()[keep]
    r = events["row"].to_numpy()[keep].astype(np.int64)
    if len(g) == 0:
        return np.zeros(0, np.int64)
    compiled = _compiled_nesting() if len(g) >= JIT_MIN_EVENTS else None
    if compiled is not None:  # one pass in write order: no sort by group
        bad = np.zeros(int(g.max()) + 1, np.bool_)
        compiled(g, t == BEGIN, r, np.zeros(len(bad), np.int64),
                 np.zeros(int(r.max()) + 1, np.int64), bad)
        return np.flatnonzero(bad)
    begin = t == BEGIN
    step = np.where(begin, 1, -1)
    ids = np.flatnonzero(np.bincount(g)) if g.max() < 1 << 20 else np.unique(g)
    if len(ids) <= 16:  # few tracks: one running sum per group, in place
        depth = np.empty(len(g), np.int64)
        for k in ids.tolist():
            m = g == k
            depth[m] = np.cumsum(step[m])
    else:  # many: sort by group once (stable), one running sum, rebased per group
        o = _stable_argsort(g)
        g, t, r, begin, step = g[o], t[o], r[o], begin[o], step[o]
        running = np.cumsum(step)
        starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
        depth = running - np.repeat(running[starts] - step[starts],
                                    np.diff(np.r_[starts, len(g)]))
    opened = np.zeros(int(r.max()) + 1, np.int64)
    opened[r[begin]] = depth[begin]  # depth after each begin
    ends = ~begin
    bad = depth[ends] + 1 != opened[r[ends]]  # depth before each end vs its begin's
    return np.unique(g[ends][bad])


@writes("depth", "opened", "bad")
def _nesting(group, begin, row, depth, opened, bad) -> None:
    """:func:`nesting_violations` in one pass over the begins and ends in write order:
    ``depth[g]``, the slices open on group ``g``; ``opened[r]``, the depth row ``r``'s begin
    opened; ``bad[g]`` set where an end meets another depth than its begin opened. For numba."""
    for i in range(len(group)):
        g = group[i]
        if begin[i]:
            depth[g] += 1
            opened[row[i]] = depth[g]
        else:
            if depth[g] != opened[row[i]]:
                bad[g] = True
            depth[g] -= 1


@functools.cache
def _compiled_nesting():
    """``_nesting`` compiled by numba; None without numba (numpy passes then)."""
    compiled = njit(_nesting)
    return compiled[0] if compiled else None


def _stable_argsort(keys: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative ints; numpy radix-sorts 16-bit keys in linear time."""
    if len(keys) and keys.max() < 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def lanes_for(iv: pl.DataFrame, groups) -> pl.DataFrame:
    """``row, lane`` for the intervals of ``iv`` in ``groups``: each interval, in begin order,
    on the first lane where it nests inside the open slices.

    Compiled (numba, ``JIT_MIN_EVENTS`` intervals or more), first-fit runs over every
    interval. Else a group is first cut into segments where everything before has ended;
    segments that nest stay on lane 0 wholesale, and only the others take the first-fit loop
    in Python (the same lanes: first-fit keeps a segment that nests on lane 0)."""
    sub = begin_order(iv.filter(pl.col("group").is_in(pl.Series(list(groups)).implode())))
    if sub.height >= JIT_MIN_EVENTS and _compiled_first_fit() is not None:
        # compiled, the first-fit pass over every interval of the groups costs less than
        # finding the segments that nest: it puts those on lane 0 as they are (each segment
        # starts with every lane empty, and an interval that nests in the open ones goes to
        # the first lane), so the lanes are the same (tests compare the two ways)
        lanes = _first_fit_lanes(sub["group"].to_numpy(), sub["ts_ns"].to_numpy(),
                                 sub["end_ns"].to_numpy())
        return pl.DataFrame({"row": sub["row"], "lane": pl.Series(lanes, dtype=pl.Int32)})
    opened = pl.col("ts_ns") < pl.col("end_ns").cum_max().shift(1).over("group")
    sub = sub.with_columns((~opened.fill_null(False)).cum_sum().alias("segment"))
    segments = sub.select(pl.col("segment").alias("group"), "row", "ts_ns", "end_ns")
    bad = nesting_violations(ordered_events(segments))
    bad_rows = sub.filter(pl.col("segment").is_in(pl.Series(bad.tolist(), dtype=pl.UInt32)
                                                  .implode()))
    fine = sub.filter(~pl.col("row").is_in(bad_rows["row"].implode())).select(
        "row", pl.lit(0, pl.Int32).alias("lane"))
    lanes = _first_fit_lanes(bad_rows["segment"].to_numpy(), bad_rows["ts_ns"].to_numpy(),
                             bad_rows["end_ns"].to_numpy())
    fixed = pl.DataFrame({"row": bad_rows["row"], "lane": pl.Series(lanes, dtype=pl.Int32)})
    return pl.concat([fine, fixed]).cast({"row": iv.schema["row"]})


def assign_lanes(iv: pl.DataFrame) -> pl.DataFrame:
    """``row, lane`` for every interval of ``iv`` (``group, row, ts_ns, end_ns``): lane 0 in
    groups that nest, first-fit lanes in the others."""
    bad = nesting_violations(ordered_events(iv))
    good = iv.filter(~pl.col("group").is_in(pl.Series(bad.tolist(), dtype=iv.schema["group"])
                                            .implode())).select(
        "row", pl.lit(0, pl.Int32).alias("lane"))
    return pl.concat([good, lanes_for(iv, bad.tolist())]) if len(bad) else good


def _first_fit_lanes(groups, starts, ends) -> list[int] | np.ndarray:
    """For intervals in begin order: the first lane (per group) where each nests inside the
    open slices, pushing it there; a new lane when none fits. Zero-length ones stay on lane 0
    (they are written as instants)."""
    compiled = _compiled_first_fit() if len(groups) >= JIT_MIN_EVENTS else None
    if compiled is not None:
        n = len(groups)
        out = np.zeros(n, np.int64)
        compiled(np.asarray(groups, np.int64), np.asarray(starts, np.int64),
                 np.asarray(ends, np.int64), np.full(n + 1, -1, np.int64),
                 np.full(n, -1, np.int64), out)
        return out
    out = []
    current = None
    stacks: list[list[int]] = []
    for group, start, end in zip(groups.tolist(), starts.tolist(), ends.tolist()):
        if group != current:
            current, stacks = group, []
        if end == start:
            out.append(0)
            continue
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                out.append(lane)
                break
        else:
            stacks.append([end])
            out.append(len(stacks) - 1)
    return out


@writes("top", "below", "out")
def _first_fit(groups, starts, ends, top, below, out) -> None:
    """:func:`_first_fit_lanes` in one compiled pass: each lane's stack of open intervals is a
    linked list (``top[lane]``, the interval on top; ``below[i]``, the one under ``i``),
    ``out[i]`` the lane of interval ``i``. For numba."""
    lanes = 0
    for i in range(len(groups)):
        if i > 0 and groups[i] != groups[i - 1]:
            lanes = 0  # (a new group: its lanes start empty)
        start, end = starts[i], ends[i]
        if end == start:
            out[i] = 0
            continue
        placed = False
        for lane in range(lanes):
            t = top[lane]
            while t >= 0 and ends[t] <= start:
                t = below[t]
            top[lane] = t
            if t < 0 or end <= ends[t]:
                below[i] = t
                top[lane] = i
                out[i] = lane
                placed = True
                break
        if not placed:
            below[i] = -1
            top[lanes] = i
            out[i] = lanes
            lanes += 1


@functools.cache
def _compiled_first_fit():
    """``_first_fit`` compiled by numba; None without numba (the loop above then)."""
    compiled = njit(_first_fit)
    return compiled[0] if compiled else None
