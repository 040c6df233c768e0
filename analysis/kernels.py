"""What each GPU operation is, from its name: operation class, math precision, tensor cores.

The classification is data (``kernel_classes.yaml`` beside this module): ordered regular
expressions on kernel names, first match wins per field. It runs once per distinct name and
is gathered onto the operations, so it costs the same on ten or ten million kernels, and it
is the same on every producer (zym captures carry no torch ops or dtypes; Kineto traces do,
and rules refine with them where present).

>>> names = pl.Series(["sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_ffma_x",
...                    "nvjet_sm90_hsh_192x128_64x5_1x2_h_bz_coopB_bias_TNT", "Memcpy DtoH"])
>>> kinds = pl.Series(["kernel", "kernel", "copy"])
>>> pl.DataFrame(classify_kernels(names, kinds)).rows()
[('gemm', 'fp32', False), ('gemm', 'fp16', True), ('copy', None, None)]
"""
from __future__ import annotations

from functools import lru_cache

import polars as pl
from zym.schemas.lookup import distinct_text, per_distinct

FIELDS = {"op_class": pl.String, "precision": pl.String, "tensor_core": pl.Boolean}
OP_CLASSES = ("gemm", "gemv", "attention", "conv", "elementwise", "reduction", "norm",
              "softmax", "index", "copy", "memset", "sort", "nccl", "other")
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


@lru_cache(maxsize=1)
def kernel_rules() -> tuple[dict, ...]:
    """The classification rules, in order (``kernel_classes.yaml``)."""
    from .bundled import bundled_yaml

    rules = tuple(bundled_yaml("kernel_classes.yaml")["kernels"])
    for r in rules:
        unknown = set(r) - {"match", *FIELDS}
        if unknown or r.get("op_class", OP_CLASSES[0]) not in OP_CLASSES \
                or r.get("precision", PRECISIONS[0]) not in PRECISIONS:
            raise ValueError(f"kernel_classes.yaml: bad rule {r}")
    return rules


def classify_names(names: pl.Series) -> pl.DataFrame:
    """One row per name: ``name`` and the :data:`FIELDS` (null where no rule says)."""
    df = pl.DataFrame({"name": names.cast(pl.String)})
    out = []
    for field, dtype in FIELDS.items():
        expr = pl.lit(None, dtype)
        for rule in reversed(kernel_rules()):
            if field in rule:
                expr = (pl.when(pl.col("name").str.contains(rule["match"]))
                        .then(pl.lit(rule[field], dtype)).otherwise(expr))
        out.append(expr.alias(field))
    return df.with_columns(out)


def classify_kernels(names: pl.Series, kinds: pl.Series, table: pl.DataFrame | None = None
                     ) -> list[pl.Series]:
    """``op_class``, ``precision`` (categorical) and ``tensor_core`` for each GPU operation.

    Copies and memsets are their own class; a kernel no rule names is ``other``. ``table``:
    :func:`classify_names` of (at least) every name in ``names``, when already at hand (an
    analysis classifies its capture's names once, for the whole capture and its window).
    """
    if names.len() == 0:
        return [pl.Series(f, [], pl.Categorical if dtype == pl.String else dtype)
                for f, dtype in FIELDS.items()]
    if table is None:
        table = classify_names(distinct_text(names))
    # each distinct name's row of the table, spread to the operations by their codes
    key = table.select(pl.col("name"), pl.int_range(pl.len()).alias("_r"))
    idx = per_distinct(names, lambda text: pl.DataFrame({"name": text}).join(
        key, on="name", how="left", maintain_order="left")["_r"])
    # The classes as categorical codes: gathered and compared as integers, not as text (at
    # 10 M operations: 0.4 s against 1.2 s).
    cols = [(table[f].cast(pl.Categorical) if dtype == pl.String else table[f]).gather(idx)
            .alias(f) for f, dtype in FIELDS.items()]
    kind = kinds.cast(pl.Categorical)
    op_class = pl.select(
        pl.when(kind.is_in(["copy", "memset"])).then(kind)
        .when(kind == "sync").then(pl.lit(None, pl.Categorical))
        .otherwise(pl.coalesce(cols[0], pl.lit("other", pl.Categorical)))).to_series().alias(
            "op_class")
    is_kernel = kind == "kernel"
    return [op_class, pl.select(pl.when(is_kernel).then(cols[1])).to_series().alias("precision"),
            pl.select(pl.when(is_kernel).then(cols[2])).to_series().alias("tensor_core")]
