"""GPU work and busy periods: how busy each GPU was (``Facts.busy`` reads them; defined here once)."""
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

