"""Join GPU work to the CPU call that caused it: same process, same CUDA correlation id.

One primitive, ``match_rows``, serves the call paths and the rules alike.
"""
from __future__ import annotations

import polars as pl
from zym.schemas.lookup import first_row_of


def match_rows(src_pid: pl.Series, src_corr: pl.Series, dst_pid: pl.Series,
               dst_corr: pl.Series) -> pl.Series:
    """For each destination row, the row of ``src`` with the same (pid, correlation id), or
    null.

    CUPTI numbers correlation ids densely within a process, so with one process (the usual
    case) the id alone is the key, and the lookup an array gather; with several, CUPTI's 32-bit
    ids pack with the pid into one int64 key. A correlation id that two source rows share (a
    producer bug) matches the first, so GPU time is never counted twice.
    """
    pids = pl.concat([src_pid.drop_nulls().unique(), dst_pid.drop_nulls().unique()]).unique()
    if pids.len() <= 1:
        return first_row_of(src_corr, dst_corr)
    return first_row_of(_packed(src_pid, src_corr), _packed(dst_pid, dst_corr))


def _packed(pid: pl.Series, corr: pl.Series) -> pl.Series:
    return pid.cast(pl.Int64) * (1 << 32) + corr.cast(pl.Int64)


def launch_stack_ids(calls: pl.DataFrame, gpu: pl.DataFrame, missing: int = -1) -> pl.Series:
    """The ``stack_id`` of each GPU row's launching call (``missing`` where none), in row order."""
    rows = match_rows(calls["pid"], calls["correlation_id"], gpu["pid"], gpu["correlation_id"])
    return calls["stack_id"].gather(rows).fill_null(missing).alias("stack_id")
