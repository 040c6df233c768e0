"""Join GPU work to the CPU call that caused it: same process, same CUDA correlation id."""
from __future__ import annotations

import polars as pl


def attribute_gpu(calls: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU activity with the ``stack_id``, ``api`` name and ``call_tid`` of its launching call.

    GPU work whose call is missing keeps a null ``stack_id``: it is reported as "unknown
    stack", never dropped. A correlation id that two calls share (a producer bug) keeps the
    first, so the GPU total is not double counted.
    """
    launchers = (calls.filter(pl.col("correlation_id").is_not_null())
                 .select("pid", "correlation_id", "stack_id", pl.col("name").alias("api"),
                         pl.col("tid").alias("call_tid"))
                 .unique(["pid", "correlation_id"], keep="first"))
    return gpu.join(launchers, on=["pid", "correlation_id"], how="left", nulls_equal=False)
