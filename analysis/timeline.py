"""GPU work and busy periods: how busy each GPU was (``Facts.busy`` reads them; defined here once)."""
from __future__ import annotations

import numpy as np
import polars as pl

from .replay import _segmented_cummax, _starts


def gpu_work(gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU activity that occupies the GPU: kernels, copies, memsets. Sync records time a host
    thread waiting for the GPU (CUPTI SYNCHRONIZATION), so they are not GPU work."""
    return gpu.filter(pl.col("kind") != "sync") if "kind" in gpu.columns else gpu


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
    at the latest end of its intervals. (In numpy: one sort, a running maximum per device and
    a segmented maximum; no group-by over millions of rows.)
    """
    # Only the columns read here are filtered (not every column of every operation).
    iv = (gpu.select(c for c in ("device_id", "ts_ns", "dur_ns", "kind") if c in gpu.columns)
          .with_row_index("first_row")
          .pipe(gpu_work)
          .filter(pl.col("ts_ns").is_not_null() & pl.col("dur_ns").is_not_null()))
    start = iv["ts_ns"].cast(pl.Int64).to_numpy()
    end = start + iv["dur_ns"].cast(pl.Int64).to_numpy()
    row = iv["first_row"].to_numpy()
    dev_s = iv["device_id"].fill_null(-1)
    dev = dev_s.to_numpy()
    one = len(dev) == 0 or dev.min() == dev.max()
    order = np.argsort(start, kind="stable") if one else np.lexsort((start, dev))
    start, end, row, dev = start[order], end[order], row[order], dev[order]
    del order
    opened = _starts(dev)  # each device's first interval, and (below) each that starts after
    reach = _segmented_cummax(end, opened)  # every earlier one on its device has ended
    opened[1:] |= start[1:] > reach[:-1]
    del reach
    at = np.flatnonzero(opened)
    return pl.DataFrame({
        "device_id": pl.Series(dev[at]).cast(dev_s.dtype),
        "start_ns": start[at],
        "end_ns": np.maximum.reduceat(end, at) if len(at) else end[:0],
        "first_row": row[at].astype(np.int64),
    })
