"""Join GPU work to the CPU call that caused it: same process, same CUDA correlation id."""
from __future__ import annotations

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
    return gpu.with_columns(_PACKED).join(launchers, on="_key", how="left").drop("_key")


def attribute_gpu(calls: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Eager form of ``attribute_gpu_lazy``: every GPU column plus the launching call's."""
    return attribute_gpu_lazy(calls.lazy(), gpu.lazy()).collect()
