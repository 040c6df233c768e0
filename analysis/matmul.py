"""Matmul facts from the input shapes a producer recorded (Kineto ``record_shapes``): FLOPs,
arithmetic intensity and 8-alignment per matmul-family call. Runs on the calls of matmul-family
ops only, never per event. ``MATMUL_OPS`` is importable without polars: `zym capture --shapes`
tells the target which operators to record from it (on GPU hosts that lack polars too).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars

# Ops whose inputs are (bias?, A, B): aten::_addmm_activation is addmm fused with GELU/ReLU
# (nn.Linear followed by an activation under inference mode).
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation")
_ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2,
                  "bfloat16": 2, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


def dtype_expr() -> polars.Expr:
    import polars as pl

    return pl.col("op_dtypes").str.extract(r'^\[\s*"([^"]*)"', 1).alias("dtype")


# The columns :func:`with_flops` adds for a matmul-family call (with ``dtype``).
MATMUL_COLUMNS = ("flops", "dims_aligned8", "intensity")


def with_flops(calls: polars.DataFrame) -> polars.DataFrame:
    """FLOPs, intensity and 8-alignment of matmul-family calls from their input shapes.

    ``mm [M,K]x[K,N]``, ``addmm (bias, [M,K], [K,N])``, ``bmm [B,M,K]x[B,K,N]``: 2*M*N*K
    (*B). Intensity: FLOPs per byte of both inputs and the output. Unparsable shapes: null.
    Adds ``dtype`` (the first input's) too. Worked out once per distinct (shapes, dtypes)
    pair and given to each call by its group: a serving loop repeats a few shapes millions of
    times, and the decoded shape lists cost ~1 kB a row.
    """
    import polars as pl

    nulls = [pl.lit(None, pl.Int64).alias("flops"), pl.lit(None, pl.Boolean).alias("dims_aligned8"),
             pl.lit(None, pl.Float64).alias("intensity")]
    return by_distinct(calls, ("op_shapes", "op_dtypes"), _flops_of,
                       ("dtype", "flops", "dims_aligned8", "intensity"), nulls)


def by_distinct(calls: polars.DataFrame, keys: tuple[str, ...], facts, columns: tuple[str, ...],
                nulls: list[polars.Expr]) -> polars.DataFrame:
    """``calls`` with ``columns``, worked out by ``facts`` once per distinct value of ``keys``
    (a frame of those distinct rows, each with ``_r``: the rows it stands for) and given to
    each call by its group; ``nulls`` instead where there are no calls, or where ``facts``
    meets shapes of an unexpected form (a polars error)."""
    import polars as pl

    if calls.height == 0:
        return calls.with_columns(nulls)
    groups = (calls.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r"), *keys)
              .group_by(*keys).agg("_r"))
    try:
        per = facts(groups)
    except pl.exceptions.PolarsError:  # shapes of an unexpected form: the facts stay unknown
        return calls.with_columns(nulls)
    back = per.select("_r", *columns).explode("_r").sort("_r").drop("_r")
    return calls.with_columns(back.get_columns())


def _flops_of(shapes: polars.DataFrame) -> polars.DataFrame:
    """:func:`with_flops`'s columns for each row of ``shapes`` (``op_shapes``, ``op_dtypes``)."""
    import polars as pl

    mm = shapes.with_columns(pl.col("op_shapes", "op_dtypes").cast(pl.String)).with_columns(
        pl.col("op_shapes").str.json_decode(pl.List(pl.List(pl.Int64))).alias("_s"),
        dtype_expr())
    # A and B: the last two inputs with dimensions, whatever comes before them (a bias for
    # addmm/baddbmm/_addmm_activation) or after (beta, alpha: scalars, shape [])
    operands = pl.col("_s").list.eval(pl.element().filter(pl.element().list.len() > 0))
    mm = mm.with_columns(operands.list.get(-2, null_on_oob=True).alias("_a"),
                         operands.list.get(-1, null_on_oob=True).alias("_b"))
    batch = pl.when(pl.col("_a").list.len() == 3).then(pl.col("_a").list.get(0, null_on_oob=True)
                                                       ).otherwise(1)
    m_, k_ = (pl.col("_a").list.reverse().list.get(i, null_on_oob=True) for i in (1, 0))
    n_ = pl.col("_b").list.reverse().list.get(0, null_on_oob=True)
    size = pl.col("dtype").replace_strict(_ELEMENT_BYTES, default=None, return_dtype=pl.Int64)
    aligned = pl.col("_s").list.eval(
        pl.element().list.tail(2).list.eval(pl.element() % 8 == 0).list.all()).list.all()
    return (mm.with_columns((2 * batch * m_ * k_ * n_).cast(pl.Int64).alias("flops"),
                            aligned.alias("dims_aligned8"),
                            (batch * (m_ * k_ + k_ * n_ + m_ * n_) * size).cast(pl.Float64)
                            .alias("_mem"))
            .with_columns((pl.col("flops") / pl.col("_mem")).alias("intensity"))
            .drop("_s", "_a", "_b", "_mem"))
