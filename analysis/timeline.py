"""Time facts of a capture: its window, and how busy each GPU was within it."""
from __future__ import annotations

import polars as pl


def gpu_work(gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU activity that occupies the GPU: kernels, copies, memsets. Sync records time a host
    thread waiting for the GPU (CUPTI SYNCHRONIZATION), so they are not GPU work."""
    return gpu.filter(pl.col("kind") != "sync") if "kind" in gpu.columns else gpu


def busy_intervals(gpu: pl.DataFrame) -> pl.DataFrame:
    """Union of GPU activity intervals per device: ``device_id, start_ns, end_ns`` (disjoint),
    and ``first_row``: the row of ``gpu`` whose operation opened the period.

    Overlapping work on several streams counts once; sync records are not work. Sorted by
    start, an interval opens a new busy period when it starts after every earlier interval on
    its device has ended.
    """
    # Only the columns read here are filtered (not every column of every operation).
    iv = (gpu.select(c for c in ("device_id", "ts_ns", "dur_ns", "kind") if c in gpu.columns)
          .with_row_index("first_row")
          .pipe(gpu_work)
          .select(pl.col("device_id").fill_null(-1), pl.col("ts_ns").alias("start_ns"),
                  (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
                  pl.col("first_row").cast(pl.Int64))
          .sort("device_id", "start_ns", "first_row"))
    opened = pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1).over("device_id")
    return (iv.with_columns(opened.fill_null(True).cum_sum().over("device_id").alias("period"))
            .group_by("device_id", "period")
            .agg(pl.col("start_ns").first(), pl.col("end_ns").max(), pl.col("first_row").first())
            .drop("period").sort("device_id", "start_ns"))


def gpu_utilization(calls: pl.DataFrame, gpu: pl.DataFrame) -> dict:
    """Capture window and per-device busy/idle time within it.

    The window spans every recorded CPU call and GPU operation; idle time is window time
    in which the device ran nothing.
    """
    bounds = [df.select(pl.col("ts_ns").min().alias("lo"), (pl.col("ts_ns") + pl.col("dur_ns"))
                        .max().alias("hi")).row(0) for df in (calls, gpu) if df.height]
    if not bounds:
        return {"window_ns": 0, "activity_ns": 0, "devices": []}
    window = max(hi for _, hi in bounds) - min(lo for lo, _ in bounds)
    busy = (busy_intervals(gpu).group_by("device_id")
            .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns")).sort("device_id"))
    devices = [{"device_id": r["device_id"], "busy_ns": r["busy_ns"],
                "idle_ns": max(window - r["busy_ns"], 0),
                "busy_pct": round(100 * r["busy_ns"] / window, 2) if window else 0.0}
               for r in busy.iter_rows(named=True)]
    return {"window_ns": window, "activity_ns": int(gpu_work(gpu)["dur_ns"].sum() or 0),
            "devices": devices}
