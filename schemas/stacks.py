"""Interning call stacks into the capture file's stack trie, vectorized.

Producers describe what they saw as a forest of nodes (each node: its parent node and its
frame); ``intern_forest`` turns it into trie ids so that identical root-to-node paths share one
``stack_id``.

Each node's whole root path is reduced to a 64-bit polynomial hash by pointer jumping: in every
round a node adds its current ancestor's segment to its own and jumps to that ancestor's
ancestor, so a forest of depth D takes log2(D) rounds of column gathers, not D rounds of joins
and not one Python step per node. Nodes with equal (hash, depth, frame) have the same path.
All of it is polars expressions: UInt64 arithmetic wraps mod 2**64, which the hash relies on.
"""
from __future__ import annotations

import polars as pl

MAX_ROUNDS = 40  # 2**40 levels: more rounds means cyclic parent links
_BASE = 0x9E3779B97F4A7C15  # odd 64-bit multiplier


def intern_forest(nodes: pl.DataFrame, first_id: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Intern a forest of nodes into stack-trie ids.

    ``nodes`` has columns ``node`` (unique key), ``parent`` (a node key or null) and
    ``frame_id``. A parent that is not itself a node is treated as absent (the node is a root).

    Returns ``(node_stack, stacks)``: ``node_stack`` maps each ``node`` to its ``stack_id``;
    ``stacks`` is the trie (``stack_id, parent_id, frame_id, depth``) in the capture schema.
    Ids are numbered by depth, then by the first node (in key order) that has the path, so the
    same input always gives the same ids.

    >>> n = pl.DataFrame({"node": [1, 2, 3], "parent": [None, 1, 1], "frame_id": [7, 8, 8]})
    >>> ns, st = intern_forest(n)
    >>> ns.sort("node")["stack_id"].to_list()  # nodes 2 and 3 share a path: one stack
    [0, 1, 1]
    """
    nodes = nodes.select("node", "parent", pl.col("frame_id").cast(pl.Int64)).sort("node")
    rows = nodes.select(pl.col("node").alias("parent"),
                        pl.int_range(pl.len(), dtype=pl.Int64).alias("parent_row"))
    forest = (nodes.join(rows, on="parent", how="left", maintain_order="left")
              .with_row_index("row").with_columns(pl.col("row").cast(pl.Int64)))
    forest = forest.with_columns(_path_hashes(forest))
    # One row per distinct path (its first node in key order), numbered depth-major.
    forest = forest.with_columns(
        pl.col("row").min().over("size", "hash", "frame_id").alias("first_row"))
    paths = (forest.filter(pl.col("row") == pl.col("first_row"))
             .sort("size", "row")
             .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).add(first_id).alias("stack_id")))
    stack_of_row = pl.repeat(None, forest.height, dtype=pl.Int64, eager=True).scatter(
        paths["row"], paths["stack_id"])
    node_stack = forest.select(
        "node", stack_of_row.gather(forest["first_row"]).alias("stack_id"))
    stack_of_path = node_stack["stack_id"]
    stacks = paths.select(
        "stack_id",
        stack_of_path.gather(paths["parent_row"]).alias("parent_id"),
        "frame_id",
        (pl.col("size") - 1).cast(pl.Int32).alias("depth"),
    )
    return node_stack, stacks


def _path_hashes(forest: pl.DataFrame) -> list[pl.Series]:
    """Per row: a hash of the frames on its root path (``hash``) and the path's length, depth
    + 1 (``size``). ``forest`` has ``frame_id`` and ``parent_row`` (null at a root).

    A segment's hash is sum(frame_i * B**i), nearest frame first; ``power`` carries B**length,
    so joining a segment to its ancestor's is one multiply-add."""
    state = forest.select(_mix(pl.col("frame_id").cast(pl.UInt64)).alias("hash"),
                          pl.lit(_BASE, pl.UInt64).alias("power"),
                          pl.lit(1, pl.Int64).alias("size"), pl.col("parent_row").alias("anc"))
    for _ in range(MAX_ROUNDS):
        if state["anc"].null_count() == state.height:
            return [state["hash"], state["size"]]
        up = pl.col("anc")
        # The ancestor's segment is further from the node: it takes the higher powers.
        state = state.select(
            (pl.col("hash") + pl.col("hash").gather(up).fill_null(0) * pl.col("power"))
            .alias("hash"),
            (pl.col("power") * pl.col("power").gather(up).fill_null(1)).alias("power"),
            (pl.col("size") + pl.col("size").gather(up).fill_null(0)).alias("size"),
            up.gather(up).alias("anc"),
        )
    raise ValueError("call stacks with cyclic parent links (or deeper than 2**40 frames)")


def _mix(x: pl.Expr) -> pl.Expr:
    """splitmix64 finalizer: spreads small frame ids over all 64 bits (x >> k as x // 2**k)."""
    x = x.xor(x // (1 << 30)) * pl.lit(0xBF58476D1CE4E5B9, pl.UInt64)
    x = x.xor(x // (1 << 27)) * pl.lit(0x94D049BB133111EB, pl.UInt64)
    return x.xor(x // (1 << 31))


def intern_frames(frames: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Give each distinct ``(kind, name, file, line)`` a ``frame_id``; returns the frame table
    with those four columns and ``frame_id``. Join it back on the four columns (nulls equal)."""
    return (frames.select("kind", "name", "file", "line").unique(maintain_order=True)
            .with_row_index("frame_id", offset=first_id)
            .with_columns(pl.col("frame_id").cast(pl.Int64)))
