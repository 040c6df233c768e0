"""Interning call stacks into the capture file's stack trie, vectorized.

Producers describe what they saw as a forest of nodes (each node: its parent node and its
frame); ``intern_forest`` turns it into trie ids so that identical root-to-node paths share one
``stack_id``.

Each node's whole root path is reduced to a 64-bit polynomial hash by pointer jumping: in every
round a node adds its current ancestor's segment to its own and jumps to that ancestor's
ancestor, so a forest of depth D takes log2(D) rounds of column gathers, not D rounds of joins
and not one Python step per node. Nodes with equal (depth, hash) have the same path, and
paths are numbered by one sort on that pair: no joins or group-bys, which on a trace's
hundred thousand nodes cost more memory than the data. The rounds update a few numpy columns
in place; uint64 arithmetic wraps mod 2**64, which the hash relies on.

Where the compiled half (``_stacks.c``) is built, one walk does the same work exactly, with
no hash to collide: each row's path is interned as (its parent's path, its frame) in a table
of the paths found so far, parents first; on a trace's millions of rows it takes a fraction of
the rounds' time and memory. The rounds stay for an install without a C compiler.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .lookup import first_row_of

try:  # the compiled walk (_stacks.c), built by pip where a C compiler is; else the rounds
    from . import _stacks
except ImportError:
    _stacks = None

MAX_ROUNDS = 40  # 2**40 levels: more rounds means cyclic parent links
_BASE = 0x9E3779B97F4A7C15  # odd 64-bit multiplier
_STACKS_SCHEMA = {"stack_id": pl.Int64, "parent_id": pl.Int64, "frame_id": pl.Int64,
                  "depth": pl.Int32}


class CyclicStacksError(ValueError):
    """Parent links that loop: the producer's data is not a forest."""


def intern_forest(nodes: pl.DataFrame, first_id: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Intern a forest of nodes into stack-trie ids.

    ``nodes`` has columns ``node`` (unique key), ``parent`` (a node key or null) and
    ``frame_id`` (not null). A parent that is not itself a node is treated as absent (the node
    is a root).

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
    n = nodes.height
    if n == 0:
        return (pl.DataFrame(schema={"node": nodes["node"].dtype, "stack_id": pl.Int64}),
                pl.DataFrame(schema=_STACKS_SCHEMA))
    if nodes["frame_id"].null_count():
        raise ValueError("a stack node without a frame")
    # Rows as numpy indices, a root's parent the sentinel row n (one past the end).
    parent_row = first_row_of(nodes["node"], nodes["parent"]).fill_null(n).to_numpy()
    node_stack_ids, stacks = intern_rows(nodes["frame_id"].to_numpy(),
                                         parent_row.astype(row_type(n), copy=False), first_id)
    node_stack = pl.DataFrame({"node": nodes["node"], "stack_id": node_stack_ids})
    return node_stack, stacks


def row_type(n: int) -> type:
    """The narrowest numpy integer that holds row numbers 0..n (n: the sentinel)."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def intern_rows(frame: np.ndarray, parent_row: np.ndarray, first_id: int = 0
                ) -> tuple[np.ndarray, pl.DataFrame]:
    """:func:`intern_forest` on a forest given by rows: ``frame`` (int64) and ``parent_row``
    (each row's parent row, ``len(frame)`` at a root; ``row_type``) of rows 0..n-1 in key
    order. Returns each row's stack id and the trie. For producers whose nodes are already
    rows: no key lookup, and no table of the forest beside the arrays."""
    n = frame.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), pl.DataFrame(schema=_STACKS_SCHEMA)
    if _stacks is not None:
        path, parent_path, path_frame, size, first_row = _walked_paths(frame, parent_row)
    else:
        path, parent_path, path_frame, size, first_row = _hashed_paths(frame, parent_row)
    # Stack ids go depth-major, then by the path's first row.
    n_paths = first_row.shape[0]
    by_path = np.lexsort((first_row, size))
    ids = np.arange(first_id, first_id + n_paths, dtype=np.int64)
    stack_of_path = np.empty(n_paths, dtype=np.int64)
    stack_of_path[by_path] = ids
    node_stack_ids = stack_of_path[path]
    del path
    parent_ids = pl.Series(stack_of_path[np.maximum(parent_path[by_path], 0)])
    if (is_root := parent_path[by_path] < 0).any():
        parent_ids = parent_ids.scatter(np.flatnonzero(is_root), None)
    return node_stack_ids, pl.DataFrame({
        "stack_id": ids,
        "parent_id": parent_ids,
        "frame_id": path_frame[by_path].astype(np.int64, copy=False),
        "depth": (size[by_path] - 1).astype(np.int32),
    })


def _hashed_paths(frame: np.ndarray, parent_row: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's path number, and per path: its parent path (-1 at a root), frame, size
    (depth + 1) and first row; paths found by their hashes (``_path_hashes``), numbered in
    no particular order."""
    n = frame.shape[0]
    hashes, size = _path_hashes(frame, parent_row)
    path, first_row = _path_numbers(hashes, size)
    del hashes
    parent_of_first = parent_row[first_row]
    parent_path = np.where(parent_of_first == n, -1, path[np.minimum(parent_of_first, n - 1)])
    return path, parent_path, frame[first_row], size[first_row], first_row


def _path_hashes(frame: np.ndarray, parent_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: a hash of the frames on its root path, and the path's length (depth + 1).

    ``parent_row``: each row's parent row (``len(frame)`` at a root). A segment's hash is
    sum(frame_i * B**i), nearest frame first; ``power`` carries B**length, so joining a
    segment to its ancestor's is one multiply-add. The arrays carry one more row, the roots'
    absent parent (hash 0, power 1, size 0, its own ancestor), so no step needs a mask, and
    each round updates them in place: a few columns of the forest, not a table per round."""
    n = frame.shape[0]
    hashes = np.zeros(n + 1, dtype=np.uint64)
    hashes[:n] = _mix(frame.astype(np.uint64))
    power = np.full(n + 1, _BASE, dtype=np.uint64)
    power[n] = 1
    size = np.ones(n + 1, dtype=parent_row.dtype)
    size[n] = 0
    anc = np.append(parent_row, np.array([n], dtype=parent_row.dtype))
    for _ in range(MAX_ROUNDS):
        if not (anc[:n] < n).any():
            return hashes[:n], size[:n]
        # The ancestor's segment is further from the node: it takes the higher powers. Every
        # gather reads the values before this round's update (a copy), so the rounds stay
        # synchronous.
        up = hashes[anc]
        up *= power
        hashes += up
        del up
        power *= power[anc]
        size += size[anc]
        anc = anc[anc]
    raise CyclicStacksError("call stacks with cyclic parent links (or deeper than 2**40 frames)")


def _path_numbers(hashes: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A dense number per distinct (size, hash) pair, for each row, and each number's first
    row: one stable sort, no hash table."""
    order = np.lexsort((hashes, sizes))  # stable: a pair's rows in row order
    h, s = hashes[order], sizes[order]
    new_path = np.empty(order.shape[0], dtype=bool)
    new_path[0] = True
    np.not_equal(h[1:], h[:-1], out=new_path[1:])
    new_path[1:] |= s[1:] != s[:-1]
    del h, s
    number = np.empty(order.shape[0], dtype=np.int64)
    number[order] = np.cumsum(new_path) - 1
    return number, order[new_path]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: spreads small frame ids over all 64 bits (uint64 wraps)."""
    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def intern_frames(frames: pl.DataFrame, first_id: int = 0) -> pl.DataFrame:
    """Give each distinct ``(kind, name, file, line)`` a ``frame_id``; returns the frame table
    with those four columns and ``frame_id``. Join it back on the four columns (nulls equal)."""
    return (frames.select("kind", "name", "file", "line").unique(maintain_order=True)
            .with_row_index("frame_id", offset=first_id)
            .with_columns(pl.col("frame_id").cast(pl.Int64)))


def _walked_paths(frame: np.ndarray, parent_row: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_hashed_paths`` by the compiled walk (``_stacks.c``): the same paths, exactly (no
    hash), numbered in the order the walk first meets them."""
    n = frame.shape[0]
    path = np.full(n, -1, dtype=row_type(n))  # -1: not yet resolved
    frame = np.ascontiguousarray(frame, dtype=np.int64)
    parent_row = np.ascontiguousarray(parent_row)
    if parent_row.dtype not in (np.int32, np.int64):
        parent_row = parent_row.astype(np.int64)
    n_paths, *per_path = _stacks.walk(frame, parent_row, parent_row.itemsize,
                                      path, path.itemsize)
    if n_paths < 0:
        raise CyclicStacksError("call stacks with cyclic parent links")
    parent_path, path_frame, size, first_row = (np.frombuffer(b, np.int64) for b in per_path)
    return path, parent_path, path_frame, size, first_row
