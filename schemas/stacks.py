"""Interning call stacks into the capture file's stack trie, vectorized.

Producers describe what they saw as a forest of nodes (each node: its parent node and its
frame); ``intern_forest`` turns it into trie ids so that identical root-to-node paths share one
``stack_id``.

Each node's whole root path is reduced to a 64-bit polynomial hash by pointer jumping: in every
round a node adds its current ancestor's segment to its own and jumps to that ancestor's
ancestor, so a forest of depth D takes log2(D) rounds of column gathers, not D rounds of joins
and not one Python step per node. Nodes with equal (depth, hash) have the same path, and
paths are numbered by one sort on that pair: no joins or group-bys, which on a trace's
hundred thousand nodes cost more memory than the data. UInt64 arithmetic in polars wraps mod
2**64, which the hash relies on.
"""
from __future__ import annotations

import polars as pl

from .lookup import first_row_of

MAX_ROUNDS = 40  # 2**40 levels: more rounds means cyclic parent links
_BASE = 0x9E3779B97F4A7C15  # odd 64-bit multiplier


class CyclicStacksError(ValueError):
    """Parent links that loop: the producer's data is not a forest."""


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
    if nodes.height == 0:
        return (pl.DataFrame(schema={"node": nodes["node"].dtype, "stack_id": pl.Int64}),
                pl.DataFrame(schema={"stack_id": pl.Int64, "parent_id": pl.Int64,
                                     "frame_id": pl.Int64, "depth": pl.Int32}))
    frame, parent_row = nodes["frame_id"], first_row_of(nodes["node"], nodes["parent"])
    # Each distinct path gets a number and its first row; stack ids go depth-major, then by
    # that first row.
    hashes, size = _path_hashes(frame, parent_row)
    path = _path_numbers(hashes, size)
    n_paths = int(path.max()) + 1
    rows = pl.int_range(nodes.height, dtype=pl.Int64, eager=True)
    first_row = pl.repeat(None, n_paths, dtype=pl.Int64, eager=True).scatter(
        path.reverse(), rows.reverse())  # reversed: a path's first row is written last
    paths = (pl.DataFrame({"first_row": first_row, "size": size.gather(first_row)})
             .with_row_index("path").sort("size", "first_row"))
    ids = pl.int_range(first_id, first_id + n_paths, dtype=pl.Int64, eager=True)
    stack_of_path = pl.repeat(None, n_paths, dtype=pl.Int64, eager=True).scatter(
        paths["path"], ids)
    node_stack_ids = stack_of_path.gather(path)
    node_stack = pl.DataFrame({"node": nodes["node"], "stack_id": node_stack_ids})
    first_rows = paths["first_row"]
    stacks = pl.DataFrame({
        "stack_id": ids,
        "parent_id": node_stack_ids.gather(parent_row.gather(first_rows)),
        "frame_id": frame.gather(first_rows),
        "depth": (paths["size"] - 1).cast(pl.Int32),
    })
    return node_stack, stacks


def _path_hashes(frame: pl.Series, parent_row: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Per row: a hash of the frames on its root path, and the path's length (depth + 1).

    ``parent_row``: each row's parent row (null at a root). A segment's hash is
    sum(frame_i * B**i), nearest frame first; ``power`` carries B**length, so joining a
    segment to its ancestor's is one multiply-add."""
    state = pl.DataFrame({"frame": frame, "anc": parent_row}).select(
        _mix(pl.col("frame").cast(pl.UInt64)).alias("hash"),
        pl.lit(_BASE, pl.UInt64).alias("power"),
        pl.lit(1, pl.Int64).alias("size"), "anc")
    for _ in range(MAX_ROUNDS):
        if state["anc"].null_count() == state.height:
            return state["hash"], state["size"]
        up = pl.col("anc")
        # The ancestor's segment is further from the node: it takes the higher powers.
        state = state.select(
            (pl.col("hash") + pl.col("hash").gather(up).fill_null(0) * pl.col("power"))
            .alias("hash"),
            (pl.col("power") * pl.col("power").gather(up).fill_null(1)).alias("power"),
            (pl.col("size") + pl.col("size").gather(up).fill_null(0)).alias("size"),
            up.gather(up).alias("anc"),
        )
    raise CyclicStacksError("call stacks with cyclic parent links (or deeper than 2**40 frames)")


def _path_numbers(hashes: pl.Series, sizes: pl.Series) -> pl.Series:
    """A dense number per distinct (size, hash) pair, for each row: one sort, no hash table."""
    ordered = (pl.DataFrame({"size": sizes, "hash": hashes})
               .with_row_index("row").sort("size", "hash"))
    new_path = ((pl.col("size") != pl.col("size").shift()) | (pl.col("hash") != pl.col("hash").shift()))
    number = ordered.select(new_path.fill_null(True).cum_sum().cast(pl.Int64) - 1).to_series()
    return pl.repeat(None, ordered.height, dtype=pl.Int64, eager=True).scatter(
        ordered["row"], number)


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
