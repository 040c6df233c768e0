"""Flamegraph exports of the call-path graph: folded stacks and speedscope JSON.

Each stack is the whole chain, outermost first: Python frames -> torch ops -> CUDA API call ->
GPU operation. Weights are integer nanoseconds: GPU time by default (``weight="gpu"``), or the
CPU time blocked in CUDA calls (``weight="stall"``; the leaf is then the blocking API call).

Folded stacks (Brendan Gregg's format) are one line per stack, ``frame;frame;leaf <ns>``, read
by flamegraph.pl, speedscope, Perfetto (as a "collapsed stack" profile) and most flamegraph
tools; frames have ``;`` and line breaks replaced so they cannot split a line.

>>> from zym.analysis import analyze                                     # doctest: +SKIP
>>> print(folded_stacks(analyze("trace.json.gz"))[:200])                   # doctest: +SKIP
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ..callpath import UNKNOWN_STACK
from ..report import Analysis

WEIGHTS = ("gpu", "stall")
UNKNOWN = "(unknown stack: launching call not captured)"


def frame_label(name: str | None, file: str | None, line: int | None, kind: str | None) -> str:
    """How a frame reads in a flamegraph: ``function (file.py:line)`` for Python frames,
    ``[nvtx] name`` for NVTX ranges (``[nvtx domain] name`` outside the default domain)."""
    if kind == "python" and file:
        return f"{name} ({Path(file).name}:{line or 0})"
    if kind == "nvtx":
        return f"[nvtx{' ' + file if file else ''}] {name}"
    return name or "(unknown frame)"


def _clean(label: str) -> str:
    return label.replace(";", ":").replace("\n", " ").replace("\r", " ").strip() or "?"


def stack_chains(analysis: Analysis) -> dict[int, list[dict]]:
    """Frames of every stack node, outermost first (``name, file, line, label``): one step per
    distinct node, not per event."""
    nodes = analysis.call_paths.nodes.sort("depth")
    chains: dict[int, list[dict]] = {}
    for sid, parent, name, file, line, kind in nodes.select(
            "stack_id", "parent_id", "name", "file", "line", "kind").iter_rows():
        frame = {"name": name, "file": file, "line": line,
                 "label": frame_label(name, file, line, kind)}
        chains[sid] = chains.get(parent, []) + [frame]
    chains[UNKNOWN_STACK] = [{"name": UNKNOWN, "file": None, "line": None, "label": UNKNOWN}]
    return chains


def weighted_stacks(analysis: Analysis, weight: str = "gpu") -> pl.DataFrame:
    """``stack_id, leaf, weight_ns`` rows, heaviest first: GPU time per (path, GPU operation),
    or CPU time blocked per path."""
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {WEIGHTS}, not {weight!r}")
    cp = analysis.call_paths
    if weight == "gpu":
        rows = cp.gpu_ops.filter(pl.col("kind") != "sync").select(  # syncs: host waits
            "stack_id", pl.col("name").alias("leaf"), pl.col("gpu_ns").alias("weight_ns"))
    else:
        rows = cp.paths.select(pl.col("path_id").alias("stack_id"),
                               pl.lit(None, pl.String).alias("leaf"),
                               pl.col("cpu_blocked_ns").alias("weight_ns"))
    return (rows.filter(pl.col("weight_ns") > 0)
            .with_columns(pl.col("weight_ns").cast(pl.Int64), pl.col("stack_id").fill_null(UNKNOWN_STACK))
            .sort("weight_ns", "stack_id", "leaf", descending=[True, False, False]))


def _frames_of(chains: dict, stack_id: int, leaf: str | None) -> list[dict]:
    frames = list(chains.get(stack_id, chains[UNKNOWN_STACK]))
    if leaf is not None:
        frames.append({"name": leaf, "file": None, "line": None, "label": leaf})
    return frames


def folded_stacks(analysis: Analysis, weight: str = "gpu") -> str:
    """The folded-stack text: one ``a;b;c <integer ns>`` line per stack, heaviest first.

    Identical stacks (same frames and leaf) are merged into one line."""
    chains = stack_chains(analysis)
    totals: dict[str, int] = {}
    for stack_id, leaf, ns in weighted_stacks(analysis, weight).iter_rows():
        line = ";".join(_clean(f["label"]) for f in _frames_of(chains, stack_id, leaf))
        totals[line] = totals.get(line, 0) + ns
    lines = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    return "".join(f"{stack} {ns}\n" for stack, ns in lines)


def speedscope(analysis: Analysis, name: str = "zym") -> dict:
    """A speedscope file (https://www.speedscope.app/file-format-schema.json) with two sampled
    profiles: GPU time and CPU time blocked in CUDA calls, in nanoseconds."""
    from importlib.metadata import version

    chains = stack_chains(analysis)
    frames: list[dict] = []
    index: dict[tuple, int] = {}

    def frame_id(f: dict) -> int:
        key = (f["label"], f["file"], f["line"])
        if key not in index:
            index[key] = len(frames)
            entry = {"name": f["label"]}
            if f["file"]:
                entry["file"] = f["file"]
            if f["line"]:
                entry["line"] = int(f["line"])
            frames.append(entry)
        return index[key]

    profiles = []
    for weight, title in (("gpu", "GPU time"), ("stall", "CPU blocked in CUDA calls")):
        samples, weights = [], []
        for stack_id, leaf, ns in weighted_stacks(analysis, weight).iter_rows():
            samples.append([frame_id(f) for f in _frames_of(chains, stack_id, leaf)])
            weights.append(int(ns))
        profiles.append({"type": "sampled", "name": title, "unit": "nanoseconds",
                         "startValue": 0, "endValue": int(sum(weights)),
                         "samples": samples, "weights": weights})
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": frames}, "profiles": profiles, "name": name,
            "activeProfileIndex": 0, "exporter": f"zym@{version('zym')}"}


def write_folded(analysis: Analysis, out: Path, weight: str = "gpu") -> int:
    text = folded_stacks(analysis, weight)
    out.write_text(text)
    return text.count("\n")


def write_speedscope(analysis: Analysis, out: Path) -> int:
    doc = speedscope(analysis, name=Path(str(analysis.data.source)).name)
    out.write_text(json.dumps(doc, separators=(",", ":")))
    return sum(len(p["samples"]) for p in doc["profiles"])
