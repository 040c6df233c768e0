"""The analysis result as plain data: what `zym analyze --format json` prints and renderers read."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from .callpath import UNKNOWN_STACK, CallPaths, build_call_paths
from .load import CaptureData, load_capture
from .timeline import gpu_utilization


@dataclass
class Analysis:
    data: CaptureData
    call_paths: CallPaths
    utilization: dict

    def to_dict(self, top: int | None = None) -> dict:
        """Capture facts, GPU utilization and the call paths ranked two ways.

        ``top`` limits each ranking; None keeps every path (machines usually want all).
        """
        paths = self.call_paths.paths
        total_gpu = int(paths["gpu_ns"].sum() or 0)
        by_gpu = paths.filter(pl.col("gpu_ns") > 0).sort("gpu_ns", "path_id",
                                                         descending=[True, False])
        by_blocked = paths.filter(pl.col("cpu_blocked_ns") > 0).sort(
            "cpu_blocked_ns", "path_id", descending=[True, False])
        if top is not None:
            by_gpu, by_blocked = by_gpu.head(top), by_blocked.head(top)
        ops = self._gpu_ops_by_path()
        return {
            "capture": self.capture_facts(),
            "gpu": self.utilization | {"attributed_ns": total_gpu - self._unknown_gpu_ns()},
            "paths_by_gpu_time": [self._path_dict(r, total_gpu, ops)
                                  for r in by_gpu.iter_rows(named=True)],
            "paths_by_cpu_blocked": [self._path_dict(r, total_gpu, ops)
                                     for r in by_blocked.iter_rows(named=True)],
        }

    def _gpu_ops_by_path(self) -> dict[int, list[dict]]:
        """Each path's GPU operations (the leaves), read in one pass."""
        by_path: dict[int, list[dict]] = {}
        for row in self.call_paths.gpu_ops.select(
                "stack_id", "name", "kind", "count", "gpu_ns", "bytes").iter_rows(named=True):
            by_path.setdefault(row.pop("stack_id"), []).append(row)
        return by_path

    def capture_facts(self) -> dict:
        d, m, ops = self.data, self.data.meta, self.call_paths.gpu_ops
        return {
            "source": str(d.source), "producer": m.producer, "host": m.host,
            "gpus": m.gpus, "driver_version": m.driver_version,
            "runtime_version": m.runtime_version, "cupti_version": m.cupti_version,
            "clock_domain": m.clock_domain, "dropped": m.dropped,
            "calls": d.calls.height, "gpu_ops": d.gpu.height,
            # From the per-path leaves: no pass over millions of events here.
            **{plural: int(ops.filter(pl.col("kind") == kind)["count"].sum())
               for kind, plural in (("kernel", "kernels"), ("copy", "copies"),
                                    ("memset", "memsets"))},
            "paths": self.call_paths.paths.height,
            "threads": d.calls.lazy().select("pid", "tid").unique().select(pl.len()).collect().item(),
        }

    def _unknown_gpu_ns(self) -> int:
        unknown = self.call_paths.paths.filter(pl.col("path_id") == UNKNOWN_STACK)
        return int(unknown["gpu_ns"].sum() or 0)

    def _path_dict(self, row: dict, total_gpu: int, ops: dict[int, list[dict]]) -> dict:
        graph = self.call_paths.graph
        stack = graph.path(row["path_id"])
        node = graph.graph.nodes.get(row["path_id"], {})
        return {
            "path_id": row["path_id"],
            "site": site_label(row),
            "user_frame": None if row["user_function"] is None else {
                "file": row["user_file"], "line": row["user_line"],
                "function": row["user_function"], "module": row["user_module"]},
            "user_chain": [f"{f['file']}:{f['line']} {f['name']}" for f in stack if f["is_user"]],
            "torch_op": row["torch_op"], "api": row["api"],
            "gpu_ns": row["gpu_ns"],
            # Self: GPU work of calls whose stack ends exactly here; total: with the subtree.
            "gpu_self_ns": node.get("self_gpu_ns", 0), "gpu_total_ns": node.get("total_gpu_ns", 0),
            "gpu_share_pct": round(100 * row["gpu_ns"] / total_gpu, 3) if total_gpu else 0.0,
            "kernels": row["kernels"], "copies": row["copies"], "memsets": row["memsets"],
            "bytes": {"HtoD": row["bytes_htod"], "DtoH": row["bytes_dtoh"],
                      "DtoD": row["bytes_dtod"]},
            "calls": row["calls"], "launches": row["launches"], "syncs": row["syncs"],
            "cpu_call_ns": row["cpu_call_ns"], "cpu_blocked_ns": row["cpu_blocked_ns"],
            "gpu_ops": ops.get(row["path_id"], []),
            "stack": [{k: f[k] for k in ("kind", "name", "file", "line")} for f in stack],
        }


def site_label(row: dict) -> str:
    """``file:line function`` of a path's innermost user frame (``Module.forward`` for modules)."""
    if row["user_function"] is None:
        return "(no user frame)" if row["path_id"] != UNKNOWN_STACK else "(unknown stack)"
    function = row["user_function"]
    if row["user_module"] and function == "forward":
        function = f"{row['user_module']}.forward"
    return f"{row['user_file']}:{row['user_line']} {function}"


def analyze(path: str | Path, progress: Callable[[str], None] | None = None) -> Analysis:
    """Load a capture (or Kineto trace) and build its call paths and GPU utilization."""
    data = load_capture(path, progress)
    if progress:
        progress("attributing GPU work to call paths")
    call_paths = build_call_paths(data)
    return Analysis(data, call_paths, gpu_utilization(data.calls, data.gpu))
