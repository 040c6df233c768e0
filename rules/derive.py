"""Derivations per distinct stack and per matmul call: the site table and matmul FLOPs.

Both run on small tables (distinct stack nodes; calls of matmul-family ops), never per event.
"""
from __future__ import annotations

import polars as pl

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
_SHAPES = pl.List(pl.List(pl.Int64))
_ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2,
                  "bfloat16": 2, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


def dtype_expr() -> pl.Expr:
    return pl.col("op_dtypes").str.extract(r'^\[\s*"([^"]*)"', 1).alias("dtype")


def site_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """Per stack node (``stack_id``): ``site_id`` and the site's user frame, torch ops and the
    innermost Python built-in above it, and ``code_site``: one id per distinct (user frame
    file/line/function, torch op chain, built-in), shared by call paths that reach the same
    code from different callers.

    The work scales with distinct stack nodes, not with events.
    """
    parts = pl.col("name").str.extract_groups(r"^<built-in (?P<how>method|function) (?P<fn>\w+)")
    builtin = pl.when(parts.struct.field("how") == "method").then(
        pl.lit(".") + parts.struct.field("fn")).otherwise(parts.struct.field("fn"))
    base = nodes.select(
        "stack_id", "parent_id", "depth", "kind", "user_node", "op_node", "user_module",
        pl.when(pl.col("kind") == "torch_op").then(pl.col("name")).alias("_op"),
        pl.when(pl.col("kind") == "native").then(builtin).alias("_builtin"),
        pl.when(pl.col("kind") == "python").then(
            pl.concat_str(pl.col("file").fill_null("?"), pl.lit(":"), pl.col("name")))
        .alias("_py"))
    # Inherited top-down: a dict pass in depth order over the distinct stack nodes (a trie of
    # thousands of nodes however many events), cheaper than one join per depth level.
    chain_of: dict[int, str] = {}
    frames_of: dict[int, str] = {}
    api_of: dict[int, str | None] = {}
    ids, chains, apis, frames_col = [], [], [], []
    for sid, parent, op, api, py in base.sort("depth").select(
            "stack_id", "parent_id", "_op", "_builtin", "_py").iter_rows():
        up = chain_of.get(parent, "") if parent is not None else ""
        chain_of[sid] = f"{up};{op}" if op is not None else up
        up_py = frames_of.get(parent, "") if parent is not None else ""
        frames_of[sid] = f"{up_py};{py}" if py is not None else up_py
        api_of[sid] = api if api is not None else (api_of.get(parent) if parent is not None
                                                   else None)
        ids.append(sid)
        chains.append(chain_of[sid])
        frames_col.append(frames_of[sid] + ";" if frames_of[sid] else "")
        apis.append(api_of[sid])
    chain = pl.DataFrame({"stack_id": ids, "op_chain": chains, "py_api": apis,
                          "frames": frames_col},
                         schema={"stack_id": pl.Int64, "op_chain": pl.String, "py_api": pl.String,
                                 "frames": pl.String})
    chain = chain.with_columns(pl.when(pl.col("op_chain") == "").then(pl.lit(""))
                               .otherwise(pl.col("op_chain") + ";").alias("op_chain"))
    site_id = (pl.when(pl.col("kind") == "cuda_api").then(pl.coalesce("parent_id", "stack_id"))
               .otherwise("stack_id"))
    frames = nodes.select(pl.col("stack_id").alias("user_node"), pl.col("name").alias("user_function"),
                          pl.col("file").alias("user_file"), pl.col("line").alias("user_line"))
    ops = nodes.select(pl.col("stack_id").alias("op_node"), pl.col("name").alias("torch_op"))
    site = (base.select("stack_id", site_id.alias("site_id"))
            .join(base.select(pl.col("stack_id").alias("site_id"), "user_node", "op_node",
                              "user_module"), on="site_id", how="left")
            .join(chain.rename({"stack_id": "site_id"}), on="site_id", how="left")
            .join(frames, on="user_node", how="left")
            .join(ops, on="op_node", how="left").drop("op_node"))
    # The code site: same line, same torch ops, same built-in, whatever the callers above.
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in (
        "user_file", "user_line", "user_function", "user_module", "op_chain", "py_api")],
        separator="\x1f")
    return site.with_columns(key.rank("dense").cast(pl.Int64).alias("code_site"))


def with_flops(calls: pl.DataFrame) -> pl.DataFrame:
    """FLOPs, intensity and 8-alignment of matmul-family calls from their input shapes.

    ``mm [M,K]x[K,N]``, ``addmm (bias, [M,K], [K,N])``, ``bmm [B,M,K]x[B,K,N]``: 2*M*N*K
    (*B). Intensity: FLOPs per byte of both inputs and the output. Unparsable shapes: null.
    """
    nulls = [pl.lit(None, pl.Int64).alias("flops"), pl.lit(None, pl.Boolean).alias("dims_aligned8"),
             pl.lit(None, pl.Float64).alias("intensity")]
    if calls.height == 0:
        return calls.with_columns(nulls)
    try:
        mm = calls.with_columns(pl.col("op_shapes").str.json_decode(_SHAPES).alias("_s"),
                                dtype_expr())
    except pl.exceptions.PolarsError:  # shapes of an unexpected form: FLOPs stay unknown
        return calls.with_columns(nulls)
    a_idx = pl.when(pl.col("torch_op").is_in(["aten::addmm", "aten::baddbmm"])).then(1).otherwise(0)
    mm = mm.with_columns(pl.col("_s").list.get(a_idx, null_on_oob=True).alias("_a"),
                         pl.col("_s").list.get(a_idx + 1, null_on_oob=True).alias("_b"))
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
