"""Interning call stacks into the capture file's stack trie, vectorized.

Producers describe what they saw as a forest of nodes (each node: its parent node and its
frame); ``intern_forest`` turns it into trie ids so that identical root-to-node paths share one
``stack_id``. The work is one join per tree level, not one Python step per event.
"""
from __future__ import annotations

import polars as pl

MAX_DEPTH = 4096  # a deeper forest is a cycle or corrupt input; py-spy caps walks the same way


def intern_forest(nodes: pl.DataFrame, first_id: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Intern a forest of nodes into stack-trie ids.

    ``nodes`` has columns ``node`` (unique key), ``parent`` (a node key or null) and
    ``frame_id``. A parent that is not itself a node is treated as absent (the node is a root).

    Returns ``(node_stack, stacks)``: ``node_stack`` maps each ``node`` to its ``stack_id``;
    ``stacks`` is the trie (``stack_id, parent_id, frame_id, depth``) in the capture schema.

    >>> n = pl.DataFrame({"node": [1, 2, 3], "parent": [None, 1, 1], "frame_id": [7, 8, 8]})
    >>> ns, st = intern_forest(n)
    >>> ns.sort("node")["stack_id"].to_list()  # nodes 2 and 3 share a path: one stack
    [0, 1, 1]
    """
    nodes = nodes.select(
        "node", "frame_id",
        pl.when(pl.col("parent").is_in(nodes["node"].implode())).then("parent").alias("parent"),
    ).with_columns(node_depths(nodes.select("node", "parent")).alias("depth"))
    mapped, tries = [], []
    next_id = first_id
    parent_ids = None
    for depth, level in enumerate(_levels(nodes)):
        if parent_ids is None:
            level = level.with_columns(pl.lit(None, pl.Int64).alias("parent_id"))
        else:
            level = level.join(parent_ids, on="parent", how="left")
        # Ids in node order: the same input always interns to the same ids.
        trie = (level.sort("node").select("parent_id", "frame_id").unique(maintain_order=True)
                .with_row_index("stack_id", offset=next_id)
                .with_columns(pl.col("stack_id").cast(pl.Int64),
                              pl.lit(depth, pl.Int32).alias("depth")))
        level = level.join(trie, on=["parent_id", "frame_id"], how="left", nulls_equal=True)
        mapped.append(level.select("node", "stack_id"))
        tries.append(trie)
        next_id += trie.height
        parent_ids = level.select(pl.col("node").alias("parent"), pl.col("stack_id").alias("parent_id"))
    node_stack = (pl.concat(mapped) if mapped
                  else pl.DataFrame(schema={"node": nodes["node"].dtype, "stack_id": pl.Int64}))
    stacks = (pl.concat(tries) if tries else pl.DataFrame(
        schema={"stack_id": pl.Int64, "parent_id": pl.Int64, "frame_id": pl.Int64, "depth": pl.Int32}))
    return node_stack, stacks.select("stack_id", "parent_id", "frame_id", "depth")


def _levels(nodes: pl.DataFrame) -> list[pl.DataFrame]:
    by_depth = nodes.partition_by("depth", as_dict=True, include_key=False)
    return [by_depth[(d,)] for d in range(len(by_depth))]


def node_depths(tree: pl.DataFrame) -> pl.Series:
    """Depth of every node of a forest (``node``, ``parent``), by pointer jumping: each round
    doubles how far every node has looked up, so a forest of depth D takes log2(D) joins.
    """
    up = tree.select("node", pl.col("parent").alias("anc"),
                     pl.when(pl.col("parent").is_null()).then(0).otherwise(1).alias("dist"))
    for _ in range(64):
        if up["anc"].null_count() == up.height:
            return tree.select("node").join(up, on="node", how="left")["dist"].cast(pl.Int32)
        up = up.join(up.select(pl.col("node").alias("anc"), pl.col("anc").alias("anc2"),
                               pl.col("dist").alias("dist2")), on="anc", how="left",
                     maintain_order="left"
                     ).select("node", pl.col("anc2").alias("anc"),
                              pl.col("dist") + pl.col("dist2").fill_null(0))
        if up.height > tree.height:
            break
    raise ValueError(f"call stacks deeper than {MAX_DEPTH} frames: cyclic parent links?")


def intern_frames(frames: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Give each distinct ``(kind, name, file, line)`` a ``frame_id``; returns the frame table
    with those four columns and ``frame_id``. Join it back on the four columns (nulls equal)."""
    return (frames.select("kind", "name", "file", "line").unique(maintain_order=True)
            .with_row_index("frame_id", offset=first_id)
            .with_columns(pl.col("frame_id").cast(pl.Int64)))
