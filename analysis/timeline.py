"""GPU work and busy periods: how busy each GPU was (``Facts.busy`` reads them; defined here once)."""
from __future__ import annotations

import numpy as np
import polars as pl

from .replay import _segmented_cummax, _starts


def is_work() -> pl.Expr:
    """Whether a GPU operation occupies the GPU: kernels, copies, memsets. Sync records time a
    host thread waiting for the GPU (CUPTI SYNCHRONIZATION), so they are not GPU work (null
    where the kind is)."""
    return pl.col("kind") != "sync"


def gpu_work(gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU activity that occupies the GPU (:func:`is_work`)."""
    return gpu.filter(is_work()) if "kind" in gpu.columns else gpu


def interval_of(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each time, the interval ``[starts[k], ends[k])`` holding it (intervals sorted and
    disjoint), -1 where none does: a step's calls, a sample's runs."""
    k = np.searchsorted(starts, ts, side="right") - 1
    inside = (k >= 0) & (ts < np.asarray(ends)[np.maximum(k, 0)]) if len(starts) else \
        np.zeros(len(ts), bool)
    return np.where(inside, k, -1)


def busy_intervals(gpu: pl.DataFrame) -> pl.DataFrame:
    """Union of GPU activity intervals per device: ``device_id, start_ns, end_ns`` (disjoint),
    and ``first_row``: the row of ``gpu`` whose operation opened the period.

    Overlapping work on several streams counts once; sync records are not work, nor is a row
    with no time. Sorted by device and start (ties in row order), an interval opens a new busy
    period when it starts after every earlier interval on its device has ended; a period ends
    at the latest end of its intervals: the running maximum of the ends at its last interval
    (every earlier period on its device ended before it began; durations are not negative,
    the capture checks say so). In numpy: no group-by over
    millions of rows, and one whole-length array of ends where the work is on one device in
    time order, as a capture's is (rows copied only where some are not work, sorted only
    where they are out of order: at 10 M operations the filtered, indexed and sorted copies
    of every column were 1.2 GB).
    """
    work = gpu.select((is_work().fill_null(False) if "kind" in gpu.columns else pl.lit(True))
                      & pl.col("ts_ns").is_not_null() & pl.col("dur_ns").is_not_null()
                      ).to_series()
    cols = gpu.select("ts_ns", "dur_ns", pl.col("device_id").fill_null(-1))
    rows = None                                # rows of ``gpu`` kept: all of them
    if not work.all():
        rows = np.flatnonzero(work.to_numpy())
        cols = cols.filter(work)
    dev_s = cols["device_id"]
    start = cols["ts_ns"].cast(pl.Int64).to_numpy()
    dev = dev_s.to_numpy()
    one = len(dev) == 0 or dev.min() == dev.max()
    order = None                               # the kept rows by device and start: in order
    if not (one and cols["ts_ns"].is_sorted()):
        order = np.argsort(start, kind="stable") if one else np.lexsort((start, dev))
        start, dev = start[order], dev[order]
    dur = cols["dur_ns"].cast(pl.Int64).to_numpy()
    reach = dur[order] if order is not None else dur.copy()
    del cols, dur
    reach += start          # each interval's end, then (below) the latest end so far on its device
    if one:
        np.maximum.accumulate(reach, out=reach)
        opened = np.zeros(len(start), bool)
        opened[:1] = True
    else:
        opened = _starts(dev)
        reach = _segmented_cummax(reach, opened)
    opened[1:] |= start[1:] > reach[:-1]
    at = np.flatnonzero(opened)
    del opened
    last = np.append(at[1:], len(start)) - 1 if len(at) else at  # each period's last interval
    first = at if order is None else order[at]
    return pl.DataFrame({
        "device_id": pl.Series(dev[at]).cast(dev_s.dtype),
        "start_ns": start[at],
        "end_ns": reach[last],
        "first_row": (first if rows is None else rows[first]).astype(np.int64),
    })
