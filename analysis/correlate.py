"""Join GPU work to the CPU call that caused it: same process, same CUDA correlation id.

One primitive, ``match_rows``, serves the call paths and the rules alike.
"""
from __future__ import annotations

import polars as pl

# CUPTI correlation ids are 32-bit: (pid, correlation id) packs into one int64 join key.
_KEY = (pl.col("pid").cast(pl.Int64) * (1 << 32) + pl.col("correlation_id")).alias("_key")


def match_rows(src_pid: pl.Series, src_corr: pl.Series, dst_pid: pl.Series,
               dst_corr: pl.Series) -> pl.Series:
    """For each destination row, the row of ``src`` with the same (pid, correlation id), or
    null.

    CUPTI numbers correlation ids densely within a process, so with one process and compact
    ids (the usual case) this is an array indexed by correlation id and one gather; otherwise
    a hash join on the packed key. A correlation id that two source rows share (a producer
    bug) matches the first, so GPU time is never counted twice.
    """
    n = src_corr.len()
    pids = pl.concat([src_pid.drop_nulls().unique(), dst_pid.drop_nulls().unique()]).unique()
    lo = min(int(src_corr.min() or 0), int(dst_corr.min() or 0))
    hi = max(int(src_corr.max() or 0), int(dst_corr.max() or 0))
    if pids.len() <= 1 and lo >= 0 and hi < 4 * (n + dst_corr.len()) + 1024:
        ok = src_corr.is_not_null()
        rows = pl.int_range(n, eager=True).cast(pl.Int64).filter(ok).reverse()
        pos = pl.repeat(None, hi + 1, dtype=pl.Int64, eager=True).scatter(
            src_corr.filter(ok).reverse(), rows)  # reversed: the first row of an id wins
        return pos.gather(dst_corr)
    src = (pl.DataFrame({"pid": src_pid, "correlation_id": src_corr}).with_row_index("row")
           .select(_KEY, pl.col("row").cast(pl.Int64)).filter(pl.col("_key").is_not_null())
           .unique("_key", keep="first"))
    dst = pl.DataFrame({"pid": dst_pid, "correlation_id": dst_corr}).select(_KEY)
    return dst.join(src, on="_key", how="left", maintain_order="left")["row"]


def launch_stack_ids(calls: pl.DataFrame, gpu: pl.DataFrame, missing: int = -1) -> pl.Series:
    """The ``stack_id`` of each GPU row's launching call (``missing`` where none), in row order."""
    rows = match_rows(calls["pid"], calls["correlation_id"], gpu["pid"], gpu["correlation_id"])
    return calls["stack_id"].gather(rows).fill_null(missing).alias("stack_id")
