"""Counter series per GPU over fixed time bins: busy % and copy bandwidth.

Bins are at most :data:`MAX_BINS` per capture and at least :data:`MIN_BIN_NS` wide. A GPU is
busy in a bin for the union of its activity there (work on several streams counts once); copy
bandwidth spreads each copy's bytes evenly over its duration. Sync records (a host thread
waiting for the GPU) are not GPU work and do not count as busy.
"""
from __future__ import annotations

import polars as pl

MAX_BINS = 2000
MIN_BIN_NS = 10_000
BUSY = ("GPU busy", "%")
COPY_BW = ("copy bandwidth", "GB/s")


def bin_width(start_ns: int, end_ns: int) -> int:
    return max(MIN_BIN_NS, -(-(end_ns - start_ns) // MAX_BINS))


def gpu_counters(gpu: pl.DataFrame) -> pl.DataFrame:
    """Samples ``pid, device_id, counter, unit, ts_ns, value``: one per bin and series, and a
    closing zero at the end of the capture window."""
    if gpu.height == 0:
        return pl.DataFrame()
    g = gpu.select(pl.col("pid").fill_null(0), pl.col("device_id").fill_null(0), "kind",
                   "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns").clip(0)).alias("end_ns"),
                   pl.col("size_bytes").fill_null(0))
    t0, t1 = int(g["ts_ns"].min()), int(g["end_ns"].max())
    width = bin_width(t0, t1)
    work = g.filter(pl.col("kind") != "sync")  # sync records time host waits, not GPU work
    busy = _spread(_union(work), width, t0).with_columns(
        (100.0 * pl.col("overlap_ns") / width).alias("value"))
    copies = g.filter((pl.col("kind") == "copy") & (pl.col("end_ns") > pl.col("ts_ns")))
    bw = _spread(copies, width, t0, weight="size_bytes").with_columns(
        (pl.col("weighted") / width).alias("value"))  # bytes per ns = GB/s
    out = []
    for (name, unit), series in ((BUSY, busy), (COPY_BW, bw)):
        if series.height == 0:
            continue
        out.append(_dense(series, t0, t1, width).with_columns(
            pl.lit(name).alias("counter"), pl.lit(unit).alias("unit")))
    return pl.concat(out) if out else pl.DataFrame()


def _union(g: pl.DataFrame) -> pl.DataFrame:
    iv = g.select("pid", "device_id", "ts_ns", "end_ns").sort("pid", "device_id", "ts_ns")
    opened = pl.col("ts_ns") > pl.col("end_ns").cum_max().shift(1).over("pid", "device_id")
    return (iv.with_columns(opened.fill_null(True).cum_sum().over("pid", "device_id")
                            .alias("period"))
            .group_by("pid", "device_id", "period")
            .agg(pl.col("ts_ns").min(), pl.col("end_ns").max()).drop("period"))


def _spread(iv: pl.DataFrame, width: int, t0: int, weight: str | None = None) -> pl.DataFrame:
    """Per (pid, device, bin): nanoseconds of ``iv`` inside the bin (``overlap_ns``) and, with
    ``weight``, that column apportioned by overlap (``weighted``)."""
    first = (pl.col("ts_ns") - t0) // width
    last = (pl.col("end_ns") - 1 - t0) // width
    x = iv.with_columns(pl.int_ranges(first, pl.max_horizontal(first, last) + 1).alias("bin")
                        ).explode("bin")
    lo = pl.max_horizontal("ts_ns", pl.col("bin") * width + t0)
    hi = pl.min_horizontal("end_ns", (pl.col("bin") + 1) * width + t0)
    x = x.with_columns((hi - lo).clip(0).alias("overlap_ns"))
    aggs = [pl.col("overlap_ns").sum()]
    if weight:
        dur = (pl.col("end_ns") - pl.col("ts_ns")).cast(pl.Float64)
        aggs.append((pl.col(weight) * pl.col("overlap_ns") / dur).sum().alias("weighted"))
    return x.group_by("pid", "device_id", "bin").agg(aggs)


def _dense(series: pl.DataFrame, t0: int, t1: int, width: int) -> pl.DataFrame:
    """Every bin of the window per (pid, device), zero where nothing ran, and a final zero."""
    n_bins = (t1 - t0) // width + 1
    keys = series.select("pid", "device_id").unique().sort("pid", "device_id")
    grid = keys.join(pl.DataFrame({"bin": pl.arange(0, n_bins, eager=True)}), how="cross")
    dense = grid.join(series.select("pid", "device_id", "bin", "value"),
                      on=["pid", "device_id", "bin"], how="left")
    dense = dense.select("pid", "device_id", (pl.col("bin") * width + t0).alias("ts_ns"),
                         pl.col("value").fill_null(0.0))
    tail = keys.select("pid", "device_id", pl.lit(t0 + n_bins * width).alias("ts_ns"),
                       pl.lit(0.0).alias("value"))
    return pl.concat([dense, tail], how="vertical_relaxed")
