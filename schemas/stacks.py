"""Interning call stacks into the capture file's stack trie, vectorized.

Producers describe what they saw as a forest of nodes (each node: its parent node and its
frame); ``intern_forest`` turns it into trie ids so that identical root-to-node paths share one
``stack_id``.

Each node's whole root path is reduced to a 64-bit polynomial hash by pointer jumping: in every
round a node adds its current ancestor's segment to its own and jumps to that ancestor's
ancestor, so a forest of depth D takes log2(D) rounds of array gathers, not D rounds of joins
and not one Python step per node. Nodes with equal (hash, depth, frame) have the same path.
"""
from __future__ import annotations

import numpy as np
import polars as pl

MAX_ROUNDS = 40  # 2**40 levels: more rounds means cyclic parent links
_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier: arithmetic wraps mod 2**64


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
    nodes = nodes.select("node", "parent", "frame_id").sort("node")
    keys = nodes["node"].to_numpy()
    parent = _positions(keys, nodes["parent"])
    frames = nodes["frame_id"].to_numpy().astype(np.int64)
    path_hash, size = _path_hashes(parent, frames)
    order = np.lexsort((np.arange(len(keys)), frames, path_hash, size))  # depth-major
    key_cols = np.stack([size, path_hash.view(np.int64), frames])[:, order]
    new_path = np.ones(len(order), dtype=bool)
    new_path[1:] = (key_cols[:, 1:] != key_cols[:, :-1]).any(axis=0)
    path_of_sorted = np.cumsum(new_path) - 1
    stack_of = np.empty(len(order), dtype=np.int64)
    stack_of[order] = path_of_sorted
    # Renumber paths by (depth, first node) so ids do not depend on hash values.
    first = order[new_path]
    renumber = np.empty(len(first), dtype=np.int64)
    renumber[np.lexsort((first, size[first]))] = np.arange(len(first))
    stack_of = renumber[stack_of] + first_id
    stacks = pl.DataFrame({
        "stack_id": stack_of[first],
        "parent_id": pl.Series(np.where(parent[first] >= 0, stack_of[parent[first]], -1)),
        "frame_id": frames[first],
        "depth": (size[first] - 1).astype(np.int32),
    }).with_columns(pl.col("parent_id").replace(-1, None)).sort("stack_id")
    return pl.DataFrame({"node": nodes["node"], "stack_id": stack_of}), stacks


def _positions(keys: np.ndarray, parents: pl.Series) -> np.ndarray:
    """Row of each parent among the sorted ``keys``; -1 for a null or unknown parent."""
    if not len(keys):
        return np.empty(0, dtype=np.int64)
    wanted = parents.fill_null(int(keys[0]) - 1).to_numpy()  # a key smaller than all
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[pos] == wanted, pos, -1)


def _path_hashes(parent: np.ndarray, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node: a hash of the frames on its root path, and the path's length (depth + 1)."""
    anc = parent.copy()
    size = np.ones(len(parent), dtype=np.int64)
    with np.errstate(over="ignore"):
        h = _mix(frames.astype(np.uint64))
        for _ in range(MAX_ROUNDS):
            live = np.flatnonzero(anc >= 0)
            if not len(live):
                return h, size
            up = anc[live]
            # The ancestor's segment is further from the node: it takes the higher powers.
            h[live] = h[live] + h[up] * _power(size[live])
            size[live] += size[up]
            anc[live] = anc[up]
    raise ValueError("call stacks with cyclic parent links (or deeper than 2**40 frames)")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: spreads small frame ids over all 64 bits."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _power(exponent: np.ndarray) -> np.ndarray:
    """``_BASE ** exponent`` mod 2**64, elementwise, by repeated squaring."""
    result = np.ones(len(exponent), dtype=np.uint64)
    base, e = _BASE, exponent.copy()
    while e.any():
        odd = (e & 1).astype(bool)
        result[odd] *= base
        base = base * base
        e >>= 1
    return result


def intern_frames(frames: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Give each distinct ``(kind, name, file, line)`` a ``frame_id``; returns the frame table
    with those four columns and ``frame_id``. Join it back on the four columns (nulls equal)."""
    return (frames.select("kind", "name", "file", "line").unique(maintain_order=True)
            .with_row_index("frame_id", offset=first_id)
            .with_columns(pl.col("frame_id").cast(pl.Int64)))
