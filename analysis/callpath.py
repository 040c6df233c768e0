"""The call-path graph: every GPU operation attributed to the whole stack that caused it.

A *call path* is one distinct CPU stack down to a CUDA API call: Python frames -> torch ops ->
CUDA API (the ``stack_id`` of the call). Identical stacks are one path, whatever the number of
calls; the same kernel reached from two stacks is two paths. Per path:

* GPU work it caused (``gpu_ns``, kernel/copy/memset counts, bytes by copy direction), joined
  by correlation id, and the GPU operations themselves (``gpu_ops``: the leaves of the graph);
* its CUDA calls (``calls``, ``launches``, ``cpu_call_ns``) and the CPU time blocked in them
  (``cpu_blocked_ns``: syncs, copies, synchronous memsets);
* its innermost user frame (``user_*``): the line to change.

Event-level work (millions of GPU operations) is polars group-bys and joins; the graph
(``CallPathGraph``) holds one node per distinct stack node, so its Python-level
operations (subtree totals, export) scale with the number of distinct paths, not events.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from .sites import NO_USER_FRAME
from .trie import NONE, Trie, take_rows, values_at
from .usercode import compiled_frames, is_user_frame

if TYPE_CHECKING:
    import networkx as nx

    from .facts import Facts

UNKNOWN_STACK = -1  # path id of GPU work whose launching call was not captured


@dataclass
class CallPaths:
    """The call paths of a capture and the graph over them."""

    paths: pl.DataFrame  # one row per call path (see module doc)
    gpu_ops: pl.DataFrame  # one row per (path, GPU op name): the leaves
    nodes: pl.DataFrame  # one row per stack node, with frame and user-frame columns
    graph: CallPathGraph


def stack_nodes(frames: pl.DataFrame, stacks: pl.DataFrame) -> pl.DataFrame:
    """Every stack node with its frame and, inherited top-down, the innermost user frame and
    torch op at or above it, and the nearest ``nn.Module`` above that user frame.

    Each is the nearest ancestor-or-self that qualifies (:meth:`Trie.nearest`).
    """
    nodes = (stacks.join(frames, on="frame_id", how="left", maintain_order="left")
             .with_columns(is_user_frame().fill_null(False).alias("is_user")))
    nodes = (nodes.with_columns((pl.col("is_user") & ~compiled_frames(nodes)).alias("is_user"))
             .sort("depth", maintain_order=True))
    trie = Trie.of(nodes)
    user = trie.nearest(nodes["is_user"].to_numpy())
    op = trie.nearest((nodes["kind"] == "torch_op").fill_null(False).to_numpy())
    module = trie.nearest(nodes["name"].str.starts_with("nn.Module: ").fill_null(False)
                          .to_numpy())
    stack_id, module_name = nodes["stack_id"], nodes["name"].str.strip_prefix("nn.Module: ")
    return nodes.with_columns(
        values_at(stack_id, user).alias("user_node"),
        values_at(stack_id, op).alias("op_node"),
        values_at(module_name, module).alias("module"),
        values_at(module_name, take_rows(module, user)).alias("user_module"))


def build_call_paths(facts: Facts) -> CallPaths:
    """Attribute every GPU operation and CUDA call of an analysis window to its call path."""
    gpu_ops = _gpu_ops(facts.gpu)
    paths = _paths(facts.calls, gpu_ops, facts.sites)
    graph = CallPathGraph.from_tables(facts.nodes, paths)
    return CallPaths(paths=paths, gpu_ops=gpu_ops, nodes=facts.nodes, graph=graph)


def _gpu_ops(gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU work per (path, operation name): the leaves of the call-path graph.

    Names are grouped as categorical codes: hashing each distinct kernel name once, not once
    per operation, keeps the grouping of tens of millions of rows small.
    """
    codes = [pl.col(c).cast(pl.Categorical) for c in ("kind", "name", "copy_kind", "src_mem",
                                                      "dst_mem")]
    return (gpu.lazy().select(pl.col("stack_id").fill_null(UNKNOWN_STACK), *codes, "dur_ns",
                              "size_bytes")
            .group_by("stack_id", "kind", "name").agg(
                pl.len().alias("count"),
                pl.col("dur_ns").sum().alias("gpu_ns"),
                pl.col("dur_ns").max().alias("max_ns"),
                pl.col("size_bytes").fill_null(0).sum().alias("bytes"),
                pl.col("copy_kind").drop_nulls().first().alias("copy_kind"),
                pl.col("src_mem").drop_nulls().first().alias("src_mem"),
                pl.col("dst_mem").drop_nulls().first().alias("dst_mem"),
            ).with_columns(pl.col("kind", "name", "copy_kind", "src_mem", "dst_mem")
                           .cast(pl.String))
            .sort("gpu_ns", "stack_id", "name", descending=[True, False, False])
            .collect())


def _calls_by_path(calls: pl.DataFrame) -> pl.DataFrame:
    """CPU-side measures per path; blocking as the facts define it (:func:`facts.blocking`)."""
    per_api = calls.lazy().group_by("stack_id", "api", "kind").agg(
        pl.len().alias("calls"),
        pl.col("dur_ns").sum().alias("cpu_call_ns"),
        pl.col("dur_ns").filter("blocking").sum().alias("cpu_blocked_ns"),
        pl.col("dur_ns").filter("blocking").max().alias("max_blocked_ns"),
        pl.col("ts_ns").min().alias("first_ts"),
    ).collect()
    return per_api.sort("first_ts").group_by("stack_id", maintain_order=True).agg(
        pl.col("calls").sum(),
        pl.col("calls").filter(pl.col("kind") == "launch").sum().alias("launches"),
        pl.col("calls").filter(pl.col("kind") == "sync").sum().alias("syncs"),
        pl.col("cpu_call_ns").sum(),
        pl.col("cpu_blocked_ns").sum(),
        pl.col("max_blocked_ns").max(),
        pl.col("api").first().cast(pl.String).alias("api"),
    ).with_columns(pl.col("stack_id").fill_null(UNKNOWN_STACK))


def _paths(calls: pl.DataFrame, gpu_ops: pl.DataFrame, sites: pl.DataFrame) -> pl.DataFrame:
    direction = pl.col("copy_kind")
    # Sync records (CUPTI SYNCHRONIZATION) time a host wait, not GPU work: counted, not summed.
    busy = pl.col("kind") != "sync"
    gpu_by_path = gpu_ops.group_by("stack_id").agg(
        pl.col("gpu_ns").filter(busy).sum(),
        pl.col("count").filter(pl.col("kind") == "kernel").sum().alias("kernels"),
        pl.col("count").filter(pl.col("kind") == "copy").sum().alias("copies"),
        pl.col("count").filter(pl.col("kind") == "memset").sum().alias("memsets"),
        *[pl.col("bytes").filter((pl.col("kind") == "copy") & (direction == d)).sum()
          .alias(f"bytes_{d.lower()}") for d in ("HtoD", "DtoH", "DtoD")],
        pl.col("name").filter(busy).first().alias("top_gpu_op"),
    )
    site = sites.select("stack_id", "user_node", "user_function", "user_file", "user_line",
                        "user_module", "user_short_file", "user_source", "mechanism",
                        "torch_op", "site")
    counts = ["kernels", "copies", "memsets", "bytes_htod", "bytes_dtoh", "bytes_dtod", "gpu_ns",
              "calls", "launches", "syncs", "cpu_call_ns", "cpu_blocked_ns"]
    return (_calls_by_path(calls).join(gpu_by_path, on="stack_id", how="full", coalesce=True)
            .join(site, on="stack_id", how="left")
            .with_columns([pl.col(c).fill_null(0).cast(pl.Int64) for c in counts])
            .with_columns(pl.col("api").fill_null("(unknown: no CUDA call captured)"),
                          pl.when(pl.col("stack_id") == UNKNOWN_STACK)
                          .then(pl.lit("(unknown stack)")).otherwise(
                              pl.col("site").fill_null(NO_USER_FRAME)).alias("site"))
            .rename({"stack_id": "path_id"})
            .sort("gpu_ns", "cpu_blocked_ns", "path_id", descending=[True, True, False]))


class CallPathGraph:
    """A tree of stack nodes (parent -> child) weighted by GPU time, held as arrays: one entry
    per distinct stack node, in the order of the nodes frame (parents before children), and
    the unknown stack's work as a root of its own.

    Per node: its frame (``kind``, ``name``, ``file``, ``line``, ``is_user``, ``module``),
    ``self_gpu_ns`` (GPU work of calls whose stack ends there), ``total_gpu_ns`` (self plus
    every descendant), the same for ``*_blocked_ns``. :meth:`node` and :meth:`path` give them
    as dicts; ``attrs`` (every node) and ``graph`` (a networkx ``DiGraph``, imported only
    when asked for, so that `zym analyze` does not load networkx) are built when first read.
    """

    FRAME = ("kind", "name", "file", "line", "is_user", "module")

    def __init__(self, frames: pl.DataFrame, trie: Trie, self_gpu: np.ndarray,
                 self_blocked: np.ndarray) -> None:
        self.trie = trie
        self._frames = frames
        self.self_gpu_ns, self.self_blocked_ns = self_gpu, self_blocked
        self.total_gpu_ns_of = trie.subtree_sums(self_gpu)
        self.total_blocked_ns_of = trie.subtree_sums(self_blocked)

    @classmethod
    def from_tables(cls, nodes: pl.DataFrame, paths: pl.DataFrame) -> CallPathGraph:
        """``nodes`` sorted by depth (parents before children), as :func:`stack_nodes` gives."""
        frames = nodes.select("stack_id", "parent_id", "depth", *cls.FRAME).with_columns(
            pl.col("kind").cast(pl.String))
        if paths.filter(pl.col("path_id") == UNKNOWN_STACK).height:
            unknown = pl.DataFrame({"stack_id": [UNKNOWN_STACK], "parent_id": [None], "depth": [0],
                                    "kind": ["unknown"], "name": ["(unknown stack)"],
                                    "is_user": [False]})
            frames = pl.concat([frames, unknown], how="diagonal_relaxed")
        trie = Trie.of(frames)
        rows = trie.rows_of(paths["path_id"].cast(pl.Int64).to_numpy())
        known = rows != NONE
        self_gpu = np.zeros(len(trie), np.int64)
        self_blocked = np.zeros(len(trie), np.int64)
        self_gpu[rows[known]] = paths["gpu_ns"].to_numpy()[known]
        self_blocked[rows[known]] = paths["cpu_blocked_ns"].to_numpy()[known]
        return cls(frames.drop("parent_id", "depth"), trie, self_gpu, self_blocked)

    @cached_property
    def _columns(self) -> dict[str, list]:
        return {c: self._frames[c].to_list() for c in self.FRAME}

    @cached_property
    def _row(self) -> dict[int, int]:
        return dict(zip(self.trie.ids.tolist(), range(len(self.trie))))

    def _node_at(self, row: int) -> dict:
        cols = self._columns
        return {**{c: cols[c][row] for c in self.FRAME},
                "self_gpu_ns": int(self.self_gpu_ns[row]),
                "self_blocked_ns": int(self.self_blocked_ns[row]),
                "total_gpu_ns": int(self.total_gpu_ns_of[row]),
                "total_blocked_ns": int(self.total_blocked_ns_of[row])}

    def node(self, stack_id: int) -> dict | None:
        """One node's frame and weights; None for a stack id the graph does not hold."""
        row = self._row.get(stack_id)
        return None if row is None else self._node_at(row)

    def path(self, stack_id: int) -> list[dict]:
        """The frames from the root down to ``stack_id``, outermost first (each node's
        attributes and its ``stack_id``)."""
        ids = self.trie.ids
        return [self._node_at(r) | {"stack_id": int(ids[r])} for r in self.path_rows(stack_id)]

    def path_rows(self, stack_id: int) -> list[int]:
        """The rows from the root down to ``stack_id`` (none for a stack it does not hold);
        :meth:`column` gives each row's frame."""
        row = self._row.get(stack_id)
        return [] if row is None else self.trie.paths(np.array([row]))[0]

    def column(self, name: str) -> list:
        """One of :attr:`FRAME`'s values, per row."""
        return self._columns[name]

    def user_frames(self, stack_id: int) -> list[dict]:
        """The user frames (``file``, ``line``, ``name``) from the root down to ``stack_id``."""
        file, line, name, user = (self._columns[c] for c in ("file", "line", "name", "is_user"))
        return [{"file": file[r], "line": line[r], "name": name[r]}
                for r in self.path_rows(stack_id) if user[r]]

    @cached_property
    def attrs(self) -> dict[int, dict]:
        """Every node's attributes by stack id (built when first read)."""
        return {int(sid): self._node_at(r) for r, sid in enumerate(self.trie.ids.tolist())}

    @cached_property
    def parent(self) -> dict[int, int | None]:
        ids, up = self.trie.ids.tolist(), self.trie.parent.tolist()
        return {sid: (ids[u] if u != NONE else None) for sid, u in zip(ids, up)}

    @cached_property
    def children(self) -> dict[int, list[int]]:
        """Each node's children, in the nodes' order."""
        ids = self.trie.ids.tolist()
        out: dict[int, list[int]] = {sid: [] for sid in ids}
        for sid, u in zip(ids, self.trie.parent.tolist()):
            if u != NONE:
                out[ids[u]].append(sid)
        return out

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The tree as a networkx ``DiGraph`` with the same node attributes."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self.attrs.items())
        g.add_edges_from((up, node) for node, up in self.parent.items() if up is not None)
        return g

    def roots(self) -> list[int]:
        return self.trie.ids[self.trie.parent == NONE].tolist()

    def total_gpu_ns(self) -> int:
        return int(self.total_gpu_ns_of[self.trie.parent == NONE].sum())
