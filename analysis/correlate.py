"""Join GPU work to the CPU call that caused it: same process, same CUDA correlation id."""
from __future__ import annotations

import numpy as np
import polars as pl

# CUPTI correlation ids are 32-bit: (pid, correlation id) packs into one int64 join key,
# which joins faster than two columns.
_PACKED = (pl.col("pid").cast(pl.Int64) * (1 << 32) + pl.col("correlation_id")).alias("_key")


def attribute_gpu_lazy(calls: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """GPU activity with the ``stack_id``, ``api`` name and ``call_tid`` of its launching call.

    Lazy, so that callers which aggregate right away never materialize the joined events.
    GPU work whose call is missing keeps a null ``stack_id``: it is reported as "unknown
    stack", never dropped. A correlation id that two calls share (a producer bug) keeps one of
    them, so the GPU total is not double counted.
    """
    launchers = (calls.filter(pl.col("correlation_id").is_not_null())
                 .select(_PACKED, "stack_id", pl.col("name").alias("api"),
                         pl.col("tid").alias("call_tid"))
                 .unique("_key", keep="any"))
    return (gpu.with_columns(_PACKED)
            .join(launchers, on="_key", how="left", maintain_order="left").drop("_key"))


def attribute_gpu(calls: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Eager form of ``attribute_gpu_lazy``: every GPU column plus the launching call's."""
    return attribute_gpu_lazy(calls.lazy(), gpu.lazy()).collect()


def launch_stack_ids(calls: pl.DataFrame, gpu: pl.DataFrame, missing: int = -1) -> pl.Series:
    """The ``stack_id`` of each GPU row's launching call (``missing`` where none), in row order.

    CUPTI numbers correlation ids densely within a process, so per process a lookup array
    indexed by correlation id replaces a hash join: two array gathers over millions of rows.
    A process whose ids are too sparse for an array falls back to the join.
    """
    out = np.full(gpu.height, missing, dtype=np.int64)
    g_pid, g_corr = gpu["pid"].fill_null(-1).to_numpy(), gpu["correlation_id"].fill_null(-1).to_numpy()
    c_pid, c_corr = calls["pid"].to_numpy(), calls["correlation_id"].fill_null(-1).to_numpy()
    c_stack = calls["stack_id"].fill_null(missing).to_numpy()
    for pid in gpu["pid"].drop_nulls().unique().to_list():
        mine = (c_pid == pid) & (c_corr >= 0)
        rows = np.flatnonzero((g_pid == pid) & (g_corr >= 0))
        if not mine.any() or not len(rows):
            continue
        corr, stack = c_corr[mine], c_stack[mine]
        lo, hi = int(corr.min()), int(corr.max())
        if hi - lo > 4 * len(corr) + 1024:  # sparse: a hash join costs less than the array
            joined = (pl.DataFrame({"correlation_id": g_corr[rows]})
                      .join(pl.DataFrame({"correlation_id": corr, "stack_id": stack})
                            .unique("correlation_id"),
                            on="correlation_id", how="left", maintain_order="left"))
            out[rows] = joined["stack_id"].fill_null(missing).to_numpy()
            continue
        table = np.full(hi - lo + 1, missing, dtype=np.int64)
        table[corr - lo] = stack
        wanted = g_corr[rows] - lo
        inside = (wanted >= 0) & (wanted <= hi - lo)
        out[rows[inside]] = table[wanted[inside]]
    return pl.Series("stack_id", out)
