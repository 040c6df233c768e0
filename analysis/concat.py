"""Concatenation facts from the input shapes a producer recorded (Kineto ``record_shapes``,
`zym capture --shapes`): how much of a ``torch.cat``'s output is what it appends. A tensor
grown by concatenation in a loop (a key/value cache, results gathered step by step) is copied
whole at every step to append a sliver: its output holds hundreds of times what the step added.
Runs on the calls of concatenation ops only, never per event.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars

CONCAT_OPS = ("aten::cat", "aten::concat", "aten::concatenate", "aten::_cat")
# The column :func:`with_append_factor` adds.
CONCAT_COLUMNS = ("append_factor",)


def with_append_factor(calls: polars.DataFrame) -> polars.DataFrame:
    """``append_factor`` of each concatenation call (``op_shapes``): the elements of its
    output over those of every input but the largest (the appended part); 1 where the inputs
    are alike (a U-Net's skip connection: 2), ~1,000 where a 1,024-long cache gains one
    position. Null where the shapes are missing or not of that form (one input; inputs of
    different ranks; an empty input). Worked out once per distinct shape list."""
    import polars as pl

    from .matmul import by_distinct

    return by_distinct(calls, ("op_shapes",), _factor_of, CONCAT_COLUMNS,
                       [pl.lit(None, pl.Float64).alias("append_factor")])


def _factor_of(shapes: polars.DataFrame) -> polars.DataFrame:
    """:func:`with_append_factor`'s column for each row of ``shapes`` (``op_shapes``)."""
    import polars as pl

    # cat's inputs: a list of tensors, recorded as one list of shapes (the tensor list), then
    # the dimension (a scalar: shape []); the tensors' shapes are the lists of integers
    text = pl.col("op_shapes").cast(pl.String)
    listed = pl.when(text.str.contains(r"^\[\s*\[\s*\[")).then(text)  # a tensor list first
    decoded = shapes.with_columns(listed.str.json_decode(
        pl.List(pl.List(pl.List(pl.Int64)))).list.first().alias("_s"))
    sizes = pl.col("_s").list.eval(pl.element().list.eval(pl.element()).list.eval(
        pl.element().cast(pl.Float64)).list.eval(pl.element().product()).list.first())
    ranks = pl.col("_s").list.eval(pl.element().list.len())
    out = decoded.with_columns(sizes.alias("_n"), ranks.alias("_k")).with_columns(
        (pl.col("_n").list.sum() / (pl.col("_n").list.sum() - pl.col("_n").list.max()))
        .alias("append_factor"))
    ok = ((pl.col("_n").list.len() >= 2) & (pl.col("_k").list.n_unique() == 1)
          & (pl.col("_n").list.min() > 0))
    return out.with_columns(pl.when(ok).then(pl.col("append_factor"))
                            .alias("append_factor")).drop("_s", "_n", "_k")
