"""Import torch.profiler (Kineto) Chrome-trace JSON into zym's capture tables.

Kineto writes one JSON object whose ``traceEvents`` hold complete events (``ph: X``) by category:
``python_function`` (with ``Python id``/``Python parent id``), ``cpu_op`` (``External id``),
``cuda_runtime``/``cuda_driver`` (``correlation``) and ``kernel``/``gpu_memcpy``/``gpu_memset``
(``correlation``). This module rebuilds, per CUDA call, the whole stack above it:

    Python frames (Python id tree) -> torch ops (time nesting) -> CUDA API call

and writes calls, GPU activity, spans and the interned stacks in the capture schema (frames without source text). Decoding is in
``kineto_json``; everything here is polars joins, a handful per tree level at most.

Kineto names a Python frame ``file(first line of the function): name``: it has no call-site
line, so imported frames carry the function's first line (``CaptureMeta.extra["line"]``).
"""
from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl
from zym.schemas.apis import api_copy_kind, api_kind
from zym.schemas.errors import InputError, first_line
from zym.schemas.lookup import first_row_of
from zym.schemas.memory import release_freed_memory as free_memory
from zym.schemas.meta import CaptureMeta
from zym.schemas.output import display
from zym.schemas.stacks import CyclicStacksError, intern_frames, intern_rows, row_type
from zym.schemas.validate import check_tables

from .kineto_json import (
    CALL_CATS,
    CAT_TYPE,
    GPU_CATS,
    OP_CATS,
    _TraceFile,
    read_events,
)
from .kineto_text import starts_like_json

try:  # nest_intervals' compiled half (_nesting.c), built by pip where a C compiler is
    from zym.capture import _nesting
except ImportError:
    _nesting = None

Progress = Callable[[str], None]


class TimeRangeError(ValueError):
    """An event time zym cannot hold as int64 nanoseconds."""


def events_to_tables(groups: dict[str, pl.DataFrame], timed: bool = False,
                     links: dict | None = None, issuers: pl.DataFrame | None = None,
                     purge: bool = True) -> dict[str, pl.DataFrame]:
    """Turn the event groups (python, op, call, gpu, and the names and shapes their ids refer
    to) into the capture tables.

    The CPU groups stay separate, narrow frames; each row's node id is its position in
    python, op, call order, and derived columns (frame, stack) are attached with
    ``with_columns`` (no copy of the other columns). ``groups`` is consumed.

    For an import window by window (``kineto_stream``): ``timed``, the groups' times are
    already ``ts_ns``/``dur_ns`` (:func:`in_ns`); ``links``, a dict that receives each CPU
    row's parent row (``parent_row``, python, op, call rows in order; the sentinel ``n`` at a
    root); ``issuers``, earlier calls (``pid, correlation_id``) that GPU operations may belong
    to, and the GPU operations no call claims keep a null pid (the caller fills it in).
    ``purge`` False: between stages, polars' freed memory is left to polars (its next stage
    reuses it; given back, it faults in again), the C library's given back
    (``release_freed_memory``).
    """
    def free(rows: int) -> None:
        free_memory(rows, polars=purge)

    names, shapes = groups.pop("names"), groups.pop("shapes")
    # GPU operations' names as categorical codes while the CPU side is built: a few hundred
    # distinct kernel names, ~200 bytes each, repeated on every row (~110 MB of text at 570 k
    # kernels), held through every stage below; ``_gpu`` gives the text back at the end.
    groups["gpu"] = groups["gpu"].with_columns(pl.col("name").cast(pl.Categorical))
    # Nodes are 0..n-1 in python, op, call order. On a large trace each stage below frees
    # hundreds of MB that were allocated batch by batch: given back between stages, so that
    # their peaks do not add up (``release_freed_memory``).
    n = sum(groups[g].height for g in ("python", "op", "call"))
    cpu = []
    for g in ("python", "op", "call"):
        cpu.append(groups.pop(g) if timed else in_ns(groups.pop(g)))
        free(n)
    cpu[2] = drop_nested_driver_calls(cpu[2])
    py, op, call = _numbered(cpu)
    del cpu
    n = py.height + op.height + call.height
    free(n)
    frames, py, op, call = _with_frames(names, py, op, call)
    parents = _parents(py, pl.concat([g.select("node", "tid", "ts_ns", "dur_ns") for g in (op, call)]),
                       purge)
    free(n)
    # ``parents`` names each node once: the forest by position (a scatter into rows, a root's
    # parent the sentinel row n), not by a join on the node.
    parent_row = np.full(n, n, dtype=row_type(n))
    parent_row[parents["node"].to_numpy()] = parents["parent"].fill_null(n).to_numpy()
    del parents
    if links is not None:
        links["parent_row"] = parent_row
    frame_of_row = np.concatenate([g["frame_id"].to_numpy() for g in (py, op, call)])
    # Only what the tables take from here on (ids, names and categories are used up).
    py = py.select("pid", "tid", "ts_ns", "dur_ns")
    op = op.select("pid", "tid", "ts_ns", "dur_ns", "external_id", "shape_id", "dtypes_id",
                   "sequence")
    call = call.select("pid", "tid", "ts_ns", "dur_ns", "name_id", "correlation_id", "cbid",
                       "external_id")
    free(n)
    node_stack_ids, stacks = intern_rows(frame_of_row, parent_row)
    del parent_row, frame_of_row
    free(n)
    stack_ids = pl.Series("stack_id", node_stack_ids)  # python, op, call rows in order
    del node_stack_ids
    py = py.with_columns(stack_ids.slice(0, py.height))
    op = op.with_columns(stack_ids.slice(py.height, op.height))
    call = call.with_columns(stack_ids.slice(py.height + op.height, call.height))
    calls = _calls(call, op, names, shapes)
    del call, stack_ids
    free(n)
    tables = {
        "frame": frames.select("frame_id", "kind", "name", "file", "line"),
        "stack": stacks,
        "span": _spans(py, op, shapes),
        "call": calls,
        "gpu": _gpu(groups.pop("gpu") if timed else in_ns(groups.pop("gpu")), calls, issuers),
    }
    del py, op
    free(n)
    return tables


# Kineto times in µs that stay inside int64 ns once converted (and once an end is added).
_MAX_US = float(1 << 61) / 1000


def in_ns(group: pl.DataFrame) -> pl.DataFrame:
    """Kineto's microsecond times (floats, ns in the fraction) as integer ns; a time that is
    not finite, negative, or past the int64 ns range is bad input (``TimeRangeError``)."""
    is_bad = (~pl.col("ts_us").is_between(0, _MAX_US).fill_null(False)
              | ~pl.col("dur_us").fill_null(0).is_between(0, _MAX_US))
    # Whole µs and the fraction apart: Kineto's epoch-µs times (1.7e15) times 1000 pass 2^53,
    # where a float64 is 256 ns coarse; the whole part is exact as an integer. One pass with
    # the range check (the casts of a bad row give null, and the row is refused below).
    whole = pl.col("ts_us").floor()
    out = group.with_columns(
        (whole.cast(pl.Int64, strict=False) * 1000
         + ((pl.col("ts_us") - whole) * 1000).round().cast(pl.Int64, strict=False))
        .alias("ts_ns"),
        (pl.col("dur_us").fill_null(0) * 1000).round().cast(pl.Int64, strict=False)
        .alias("dur_ns"),
        is_bad.alias("_bad"),
    )
    if out["_bad"].any():
        bad = group.filter(is_bad)
        raise TimeRangeError(f"{bad.height} event(s) with a timestamp or duration that is "
                             f"missing, negative, not finite or past 2^61 ns (first: ts "
                             f"{bad['ts_us'][0]}, dur {bad['dur_us'][0]} µs)")
    return out.drop("ts_us", "dur_us", "_bad")


def _numbered(cpu_groups: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """The CPU groups with a ``node`` id each, numbered across the groups in order."""
    out, first = [], 0
    for group in cpu_groups:
        out.append(group.with_columns(
            pl.int_range(first, first + pl.len(), dtype=pl.Int64).alias("node")))
        first += group.height
    return out


def _with_frames(names: pl.DataFrame, *cpu_groups: pl.DataFrame) -> list[pl.DataFrame]:
    """The frame table, and each CPU group with its rows' ``frame_id``.

    Frames are parsed once per distinct (category, name), not once per event; rows find theirs
    in a table indexed by name id and category code (a gather, no join)."""
    n_cats = len(CAT_TYPE.categories)
    key = (pl.col("name_id").cast(pl.Int64) * n_cats + pl.col("cat").to_physical()).alias("key")
    seen = pl.repeat(False, names.height * n_cats, dtype=pl.Boolean, eager=True)
    for g in cpu_groups:  # the (name, category) pairs that occur, by marking their keys
        seen = seen.scatter(g.select(key)["key"], True)
    pair = seen.arg_true().cast(pl.Int64)
    keys = (pl.DataFrame({"name_id": (pair // n_cats).cast(pl.UInt32),
                          "cat": pl.Series(CAT_TYPE.categories, dtype=CAT_TYPE).gather(pair % n_cats)})
            .join(names, on="name_id", how="left", maintain_order="left")
            .with_columns(_frame_columns()))
    frames = intern_frames(keys.select("kind", pl.col("name_f").alias("name"), "file", "line"))
    keys = keys.join(frames.rename({"name": "name_f"}), on=["kind", "name_f", "file", "line"],
                     how="left", nulls_equal=True, maintain_order="left")
    lookup = pl.repeat(None, names.height * n_cats, dtype=pl.Int64, eager=True).scatter(
        keys.select(key)["key"], keys["frame_id"])
    return [frames, *(g.with_columns(lookup.gather(g.select(key)["key"]).alias("frame_id"))
                      for g in cpu_groups)]


def _frame_columns() -> list[pl.Expr]:
    """Frame identity of each CPU event: kind, normalized name, file and line."""
    cat, name = pl.col("cat"), pl.col("name")
    py_file_line = name.str.extract_groups(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")
    is_py_def = (cat == "python_function") & py_file_line.struct.field("func").is_not_null()
    is_builtin = (cat == "python_function") & name.str.starts_with("<built-in")
    kind = (pl.when(cat.is_in(list(CALL_CATS))).then(pl.lit("cuda_api"))
            .when(cat.is_in(list(OP_CATS))).then(pl.lit("torch_op"))
            .when(is_builtin).then(pl.lit("native"))
            .otherwise(pl.lit("python")))
    # Names that would split identical paths: per-instance module numbers and object addresses.
    normalized = (name.str.replace(r"^(nn\.Module: .*?)_\d+$", "$1")
                  .str.replace(r" at 0x[0-9a-fA-F]+", ""))
    return [
        kind.alias("kind"),
        pl.when(is_py_def).then(py_file_line.struct.field("func"))
        .otherwise(normalized).alias("name_f"),
        pl.when(is_py_def).then(py_file_line.struct.field("file")).alias("file"),
        pl.when(is_py_def).then(py_file_line.struct.field("line").cast(pl.Int32)).alias("line"),
    ]


def drop_nested_driver_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """A driver call made inside a runtime call on the same thread is part of that call."""
    runtime = (calls.filter(pl.col("cat") == "cuda_runtime")
               .select("tid", pl.col("ts_ns").alias("rt_ts"),
                       (pl.col("ts_ns") + pl.col("dur_ns")).alias("rt_end")).sort("rt_ts"))
    driver = calls.with_row_index("_row").filter(pl.col("cat") == "cuda_driver").sort("ts_ns")
    if not (runtime.height and driver.height):
        return calls
    inside = (driver.join_asof(runtime, left_on="ts_ns", right_on="rt_ts", by="tid",
                               check_sortedness=False)
              .filter(pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("rt_end"))["_row"])
    if inside.len() == 0:
        return calls
    return calls.with_row_index("_row").filter(~pl.col("_row").is_in(inside.implode())).drop("_row")


def _parents(py: pl.DataFrame, nested: pl.DataFrame, purge: bool = True) -> pl.DataFrame:
    """Parent node of every CPU event.

    Python frames (``py``): their ``Python parent id``. Torch ops and CUDA calls (``nested``:
    ``node, tid, ts_ns, dur_ns``): the innermost op or call that contains them in time on their
    thread (RecordFunction keeps these well nested), and for the outermost ones, the innermost
    Python frame running at their start. An op that runs Python code inside it (a
    ``record_function`` block, torch.profiler's ``ProfilerStep#N`` opened by ``prof.step()``
    and running until the next one, an op calling back into Python) is not the parent of what
    that code issues: an op or call inside it whose innermost Python frame began after the op
    did has that frame as its parent (:func:`_frame_inside_op`). ``purge``: as
    :func:`events_to_tables`'.
    """
    parent_row = first_row_of(py["python_id"], py["python_parent_id"])
    py_parent = py.select("node", py["node"].gather(parent_row).alias("parent"))
    op_parent = nested.select("node", "tid", "ts_ns", nest_intervals(nested))
    free_memory(py.height + nested.height, polars=purge)  # the nesting's arrays, at once
    py_iv = py.select("node", "tid", "ts_ns", "dur_ns")
    roots = op_parent.filter(pl.col("parent").is_null()).drop("parent")
    root_parent = innermost_enclosing(roots, py_iv, py_parent)
    del roots
    free_memory(py.height + nested.height, polars=purge)
    spanning = _python_inside(nested, py_iv)
    inner = op_parent.filter(pl.col("parent").is_in(spanning.implode())) if spanning.len() else None
    op_parent = op_parent.filter(pl.col("parent").is_not_null()).select("node", "parent")
    if inner is not None and inner.height:
        inner = inner.with_columns(
            nested["ts_ns"].gather(first_row_of(nested["node"], inner["parent"]))
            .alias("parent_ts"))
        frames = innermost_enclosing(inner.select("node", "tid", "ts_ns"), py_iv, py_parent)
        moved = _frame_inside_op(inner, frames["parent"], py)
        op_parent = pl.concat([op_parent.filter(~pl.col("node").is_in(moved["node"].implode())),
                               moved])
    return pl.concat([py_parent, op_parent, root_parent], how="vertical")


# Ops searched at a time by ``_python_inside`` (its temporaries: ~40 bytes an op).
INSIDE_SLICE_ROWS = 1 << 20


def _python_inside(nested: pl.DataFrame, py_iv: pl.DataFrame) -> pl.Series:
    """The ops and calls of ``nested`` (``node, tid, ts_ns, dur_ns``) with a Python frame of
    their thread starting strictly inside them (after their start, before their end): each
    thread's frame starts sorted once, searched for the ops' starts and ends a slice of ops at
    a time (threads are few; no per-event Python)."""
    none = pl.Series("node", [], dtype=pl.Int64)
    if py_iv.height == 0 or nested.height == 0:
        return none
    by_thread = py_iv.select("tid", "ts_ns")
    if by_thread["tid"].n_unique() > 1:  # each thread's frames together (one thread: as is)
        by_thread = by_thread.sort("tid", maintain_order=True)
    frame_ts = by_thread["ts_ns"].to_numpy()
    starts, first = {}, 0
    for tid, n in by_thread["tid"].rle().struct.unnest().select("value", "len").iter_rows():
        # Kineto writes a thread's frames nearly in time order: a stable sort is ~one pass
        starts[tid] = np.sort(frame_ts[first:first + n], kind="stable")
        first += n
    del by_thread, frame_ts
    found = []
    for part in nested.select("node", "tid", "ts_ns", "dur_ns").iter_slices(INSIDE_SLICE_ROWS):
        tids = part["tid"].unique().to_list()
        for tid in tids:
            if tid not in starts:
                continue
            mine = part if len(tids) == 1 else part.filter(
                pl.col("tid").is_null() if tid is None else pl.col("tid") == tid)
            ts = mine["ts_ns"].to_numpy()
            end = ts + mine["dur_ns"].to_numpy()
            inside = (np.searchsorted(starts[tid], end, "left")
                      > np.searchsorted(starts[tid], ts, "right"))
            if inside.any():
                found.append(mine["node"].filter(pl.Series(inside)))
    return pl.concat(found).cast(pl.Int64) if found else none


def _frame_inside_op(inner: pl.DataFrame, frame: pl.Series, py: pl.DataFrame
                     ) -> pl.DataFrame:
    """``node, parent`` of the ops and calls inside an op of :func:`_python_inside`: the innermost
    Python frame running at their start (``frame``) where it began after their parent op did
    (so it runs inside that op), else the op as before."""
    frame_ts = py["ts_ns"].gather(first_row_of(py["node"], frame))
    return (inner.with_columns(frame.alias("_frame"), frame_ts.alias("_frame_ts"))
            .select("node", pl.when(pl.col("_frame").is_not_null()
                                    & (pl.col("_frame_ts") > pl.col("parent_ts")))
                    .then(pl.col("_frame")).otherwise(pl.col("parent")).alias("parent")))


def nest_intervals(iv: pl.DataFrame) -> pl.Series:
    """Parent node of each interval (null at the top), in row order, for intervals that nest
    properly per thread.

    ``iv``: ``node, tid, ts_ns, dur_ns``. In preorder (thread, start, longest first, node), an
    interval's depth is the number of earlier intervals of its thread still open when it
    opens, and its parent is the latest earlier interval one level up: a few sorts and
    sorted-array searches, no join. Every open and close gets one integer key that orders
    threads, then instants, then, at one instant, closes of intervals that have length before
    opens before closes of zero-length ones; identical intervals nest in node order.
    """
    n = iv.height
    if n == 0:
        return pl.Series("parent", [], dtype=pl.Int64)
    width, threads = _key_width(iv), iv["tid"].n_unique() + 1
    if threads * width >= 1 << 62:  # times too far apart (a bogus one): keep only their order
        iv = _ranked_times(iv)
        width = _key_width(iv)
    # numpy arrays (the data's own buffers): ~30 small queries' fixed costs saved. Each step
    # works in place or drops what it no longer needs: on millions of intervals every array
    # is tens of MB.
    ts, dur, node = iv["ts_ns"].to_numpy(), iv["dur_ns"].to_numpy(), iv["node"].to_numpy()
    t0 = ts.min()
    base = iv["tid"].rank("dense").fill_null(0).cast(pl.Int64).to_numpy(writable=True)
    base *= width
    opens = ts - t0
    opens *= 3
    opens += base
    opens += 1
    closes = ts + dur
    closes -= t0
    closes *= 3
    closes += base
    closes[dur == 0] += 2
    if _nesting is not None:
        return _nested_compiled(opens, closes, base, dur, node)
    closes.sort()
    neg_dur = np.negative(dur)
    order = np.lexsort((node, neg_dur, opens))  # preorder: open, longest first, node
    del neg_dur
    opens, base = opens[order], base[order]
    # depth = earlier intervals of the thread - those of them closed before this one opens
    depth = np.arange(n, dtype=np.int64)
    depth -= np.searchsorted(opens, base, "left")
    depth -= np.searchsorted(closes, opens, "left")
    depth += np.searchsorted(closes, base, "left")
    del opens, base, closes
    # The latest earlier interval one level up: the largest (depth, position) key below
    # (depth - 1, position). At depth > 0 it exists and is on the same thread, because a
    # thread's first interval is at depth 0.
    top = np.empty(n, dtype=bool)
    top[order] = depth <= 0
    key = depth
    key *= n
    key += np.arange(n, dtype=np.int64)
    level = np.sort(key)
    key -= n
    up = np.searchsorted(level, key, "left")
    del key
    up -= 1
    np.maximum(up, 0, out=up)
    up = level[up]
    del level
    up %= n
    parent = np.empty(n, dtype=np.int64)
    parent[order] = node[order[up]]
    del up, order
    out = pl.Series("parent", parent, dtype=pl.Int64)
    return out.scatter(np.flatnonzero(top), None) if top.any() else out


def _nested_compiled(opens: np.ndarray, closes: np.ndarray, base: np.ndarray,
                     dur: np.ndarray, node: np.ndarray) -> pl.Series:
    """``nest_intervals``' parents by its compiled half (``_nesting.c``): the preorder by a
    stable sort of the open keys (nearly sorted already: Kineto writes a thread's events in
    time order) with each run of equal keys ordered in C, then one counting pass."""
    n = opens.shape[0]
    node = np.ascontiguousarray(node, dtype=np.int64)
    order = np.argsort(opens, kind="stable")
    _nesting.preorder(opens, np.ascontiguousarray(dur, dtype=np.int64), node, order)
    closes.sort(kind="stable")
    parent = np.empty(n, dtype=np.int64)
    top = np.empty(n, dtype=np.uint8)
    _nesting.nest(opens, closes, order, node, base, parent, top)
    out = pl.Series("parent", parent, dtype=pl.Int64)
    return out.scatter(np.flatnonzero(top), None) if top.any() else out


def _key_width(iv: pl.DataFrame) -> int:
    """Keys one thread's opens and closes need: three per instant of its time span."""
    return 3 * (int((iv["ts_ns"] + iv["dur_ns"]).max() - iv["ts_ns"].min()) + 1)


def _ranked_times(iv: pl.DataFrame) -> pl.DataFrame:
    """Starts and ends replaced by their dense rank among all of them: the same order, ties
    and zero lengths, in a span of at most 2n instants."""
    start = iv["ts_ns"]
    rank = pl.concat([start, start + iv["dur_ns"]]).rank("dense").cast(pl.Int64)
    first, last = rank.slice(0, iv.height), rank.slice(iv.height)
    return iv.with_columns(first.alias("ts_ns"), (last - first).alias("dur_ns"))


def innermost_enclosing(points: pl.DataFrame, iv: pl.DataFrame,
                        iv_parent: pl.DataFrame) -> pl.DataFrame:
    """For each point (``node, tid, ts_ns``), the innermost interval of ``iv`` that is running at
    that time on the same thread, given the intervals' own tree (``iv_parent``: node, parent).

    The latest interval that started at or before the point (at one start, the shortest; of
    identical ones, the last node) is a candidate; while it ended before the point, its parent
    is the next candidate: one round of array lookups per tree level, not a step per point.
    (The candidates are numpy sorts and searches: the tie rule is then exact; polars'
    ``join_asof`` took the first of identical intervals.)
    Returns ``node, parent`` in ``points``' order.
    """
    m, n = points.height, iv.height
    if m == 0 or n == 0:
        return pl.DataFrame({"node": points["node"],
                             "parent": pl.repeat(None, m, dtype=pl.Int64, eager=True)})
    thread = np.unique(np.concatenate([iv["tid"].fill_null(-1).to_numpy(),
                                       points["tid"].fill_null(-1).to_numpy()]),
                       return_inverse=True)[1].astype(np.int64)
    ts, pts = iv["ts_ns"].to_numpy(), points["ts_ns"].to_numpy()
    end = ts + iv["dur_ns"].to_numpy()
    node = iv["node"].to_numpy()
    # One sorted key per start: thread, then time (times ranked where the span is too wide).
    t0 = min(int(ts.min()), int(pts.min()))
    span = max(int(ts.max()), int(pts.max())) - t0 + 1
    if (int(thread.max()) + 1) * span >= 1 << 62:
        ranked = np.unique(np.concatenate([ts, pts]), return_inverse=True)[1].astype(np.int64)
        iv_t, pt_t, t0, span = ranked[:n], ranked[n:], 0, int(ranked.max()) + 1
    else:
        iv_t, pt_t = ts, pts
    # Whole-length arrays are dropped as soon as they are used up: on a large trace each is
    # tens of MB, and this runs at the load's peak.
    key = thread[:n] * span
    key += iv_t
    key -= t0
    del iv_t
    if _nesting is not None:  # the same order: a stable sort of the key, then each tie run's
        order = np.argsort(key, kind="stable")
        _nesting.preorder(key, end, np.ascontiguousarray(node, np.int64), order)
    else:
        order = np.lexsort((node, -end, key))  # thread, start, longest first, node
    key = key[order]
    iv_thread = thread[:n][order]
    cand = np.searchsorted(key, thread[n:] * span + (pt_t - t0), side="right") - 1
    del key, pt_t
    found = cand >= 0
    found[found] = iv_thread[cand[found]] == thread[n:][found]
    del iv_thread, thread, ts
    # Each sorted interval's parent, as a sorted row (-1: none).
    node_s = node[order]
    del node
    end_s = end[order]
    del end, order
    sorted_nodes = pl.Series(node_s)
    parent_node = iv_parent["parent"].gather(first_row_of(iv_parent["node"], sorted_nodes))
    up = first_row_of(sorted_nodes, parent_node).fill_null(-1).to_numpy()
    del sorted_nodes, parent_node
    best = np.full(m, -1, np.int64)
    active = np.flatnonzero(found)
    c = cand[active]
    for _ in range(4096):
        if not len(active):
            break
        ok = end_s[c] >= pts[active]
        best[active[ok]] = c[ok]
        active, c = active[~ok], up[c[~ok]]
        going = c >= 0
        active, c = active[going], c[going]
    parent = pl.Series("parent", node_s[np.maximum(best, 0)], dtype=pl.Int64)
    if (none := best < 0).any():
        parent = parent.scatter(np.flatnonzero(none), None)
    return pl.DataFrame({"node": points["node"], "parent": parent})


def _spans(py: pl.DataFrame, op: pl.DataFrame, shapes: pl.DataFrame) -> pl.DataFrame:
    cols = ["pid", "tid", "ts_ns", "dur_ns", "stack_id"]
    # autograd's sequence numbers: none at all in a trace of inference (grad mode off), then
    # one null stored once (a scalar column) rather than a column of nulls a span long
    seq = op["sequence"].null_count() < op.height
    py_spans = py.select(*cols, pl.lit(None, pl.Int64).alias("op_id"),
                         pl.lit(None, pl.String).alias("op_shapes"),
                         pl.lit(None, pl.String).alias("op_dtypes"),
                         *([pl.lit(None, pl.Int64).alias("op_seq")] if seq else []))
    # One op span per torch op (millions on a large trace) repeats a few hundred shape texts:
    # held as categorical codes, 4 bytes a row (the capture file's schema casts them back).
    op_spans = _with_shapes(op, shapes, pl.Categorical).select(
        *cols, pl.col("external_id").alias("op_id"), "op_shapes", "op_dtypes",
        *([pl.col("sequence").alias("op_seq")] if seq else []))
    py_spans = py_spans.with_columns(pl.col("op_shapes", "op_dtypes").cast(pl.Categorical))
    spans = pl.concat([py_spans, op_spans])
    return spans if seq else spans.with_columns(pl.lit(None, pl.Int64).alias("op_seq"))


def _calls(call: pl.DataFrame, op: pl.DataFrame, names: pl.DataFrame, shapes: pl.DataFrame
           ) -> pl.DataFrame:
    # A name's kinds once per distinct name, not once per call; ``names`` row i is name id i,
    # so each call's are gathers by its id.
    named = names.select("name", api_kind(pl.col("name")).alias("kind"),
                         api_copy_kind(pl.col("name")).alias("copy_kind"))
    name_id = call["name_id"]
    op_row = first_row_of(op["external_id"], call["external_id"])  # an id's first op
    calls = call.select("pid", "tid", "ts_ns", "dur_ns", named["name"].gather(name_id),
                        named["kind"].gather(name_id).fill_null("other"), "correlation_id",
                        "stack_id", "cbid", pl.col("external_id").alias("op_id"),
                        named["copy_kind"].gather(name_id),
                        op["shape_id"].gather(op_row), op["dtypes_id"].gather(op_row))
    return _with_shapes(calls, shapes).drop("shape_id", "dtypes_id")


def _with_shapes(rows: pl.DataFrame, shapes: pl.DataFrame, dtype: pl.DataType = pl.String
                 ) -> pl.DataFrame:
    """``op_shapes`` and ``op_dtypes`` (JSON text, as ``dtype``) from the rows' shape ids."""
    text = shapes["shape"].cast(dtype)
    return rows.with_columns(text.gather(rows["shape_id"]).alias("op_shapes"),
                             text.gather(rows["dtypes_id"]).alias("op_dtypes"))


def _gpu(gpu: pl.DataFrame, calls: pl.DataFrame, issuers: pl.DataFrame | None = None
         ) -> pl.DataFrame:
    """The gpu table from the GPU group (``name`` text or categorical codes): copy direction
    and memory kinds read once per distinct name, then given to its rows. Each operation's
    pid is its call's (by correlation id), else the most common pid of the calls; with
    ``issuers`` (earlier calls, ``pid, correlation_id``) those are searched too, after
    ``calls``, and an operation no call claims keeps a null pid."""
    text = pl.col("name").cast(pl.String)
    copy = text.str.extract_groups(r"^Memcpy (?P<dir>\w+) \((?P<src>\w+) -> (?P<dst>\w+)\)")
    memset_dst = text.str.extract(r"^Memset \((\w+)\)", 1)
    per_name = gpu.select(pl.col("name").unique()).select(
        "name", copy.struct.field("dir").alias("copy_kind"),
        copy.struct.field("src").str.to_lowercase().alias("src_mem"),
        pl.coalesce(copy.struct.field("dst"), memset_dst).str.to_lowercase().alias("dst_mem"))
    main_pid = calls["pid"].mode().min() if calls.height else None  # of equally common: the least
    if issuers is not None:
        main_pid = None
        calls = pl.concat([calls.select("pid", "correlation_id"),
                           issuers.select("pid", "correlation_id")])
    issuer = calls["pid"].gather(first_row_of(calls["correlation_id"], gpu["correlation_id"]))
    return (gpu.with_columns(issuer.alias("issuer"))
            .join(per_name, on="name", how="left", maintain_order="left", nulls_equal=True)
            .select(
                pl.coalesce("issuer", pl.lit(main_pid, pl.Int64)).alias("pid"),
                "device_id", "stream_id", "ts_ns", "dur_ns", text.alias("name"),
                pl.col("cat").replace_strict(GPU_CATS).alias("kind"), "correlation_id",
                "size_bytes", "copy_kind", "src_mem", "dst_mem",
                "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "graph_id"))


# ---------------------------------------------------------------------------------------------
# Entry points

# torch.profiler's tensorboard_trace_handler names its files WORKER.TIME.pt.trace.json[.gz],
# TIME in ms or ns since the epoch and WORKER defaulting to HOSTNAME_PID: the only place a
# Kineto trace names its machine.
_HANDLER_NAME = re.compile(r"^(?P<host>[^/]+)_\d+\.\d{10,}\.pt\.trace\.json(?:\.gz)?$")


def trace_host(path: Path) -> str:
    """The machine a trace was recorded on, where its file name says it (torch.profiler's
    default name); else "" (unknown: not the machine that imports it)."""
    m = _HANDLER_NAME.match(path.name)
    return m["host"] if m else ""


def capture_meta(top: _TraceFile, path: Path) -> CaptureMeta:
    from importlib.metadata import version

    def cuda_version(v: int | None) -> str:
        return "" if not v else f"{v // 1000}.{v % 1000 // 10}"

    gpus = [{k: d.get(k) for k in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor",
                                   "numSms") if k in d} for d in top.deviceProperties]
    return CaptureMeta(
        producer="zym import (torch.profiler/Kineto)",
        producer_version=version("zym"),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        source=str(path),
        host=trace_host(path),
        clock_domain="kineto",
        gpus=gpus,
        driver_version=cuda_version(top.cuda_driver_version),
        runtime_version=cuda_version(top.cuda_runtime_version),
        cupti_version=str(top.cupti_version or ""),
        extra={"line": "first line of the function (Kineto records no call-site line)",
               "with_stack": bool(top.with_stack), "record_shapes": bool(top.record_shapes),
               "base_time_ns": top.baseTimeNanoseconds,
               **({"cut_short": top.cut_short} if top.cut_short else {})},
    )


def load_kineto(path: str | Path, progress: Progress | None = None
                ) -> tuple[dict[str, pl.DataFrame], CaptureMeta]:
    """Read a Kineto trace (``.json`` or ``.json.gz``) into capture tables and metadata."""
    say = progress or (lambda _stage: None)
    path = Path(path)
    shown = display(path)
    if path.exists() and path.stat().st_size == 0:
        raise InputError(f"{shown}: empty file")
    say("reading and decoding JSON")
    with input_errors(shown):
        groups, top = read_events(path)
        meta = capture_meta(top, path)
        tables = build_tables(groups, say)
    return check_tables(tables, shown), meta


def build_tables(groups: dict[str, pl.DataFrame], say: Progress, purge: bool = True
                 ) -> dict[str, pl.DataFrame]:
    """The capture tables of a whole trace's decoded groups (consumed). ``purge`` False:
    polars' freed memory is left to it between the stages (:func:`events_to_tables`): an
    analysis in no given budget (x40: ~0.1-0.3 s of ~4.6 s, ~50 MB more at its peak)."""
    say("building call stacks")
    return events_to_tables(groups, purge=purge)


@contextmanager
def input_errors(shown: str) -> Iterator[None]:
    """What the decoder let through and the table code could not use is bad input, named as
    such (``schemas.validate`` checks the values the code produced)."""
    try:
        yield
    except CyclicStacksError as e:
        raise InputError(f"{shown}: Python parent ids form a loop ({e}): not a valid "
                         "torch.profiler trace") from None
    except RecursionError:
        raise InputError(f"{shown}: JSON nested too deeply to be a torch.profiler trace") from None
    except (pl.exceptions.PolarsError, OverflowError, ValueError, TypeError) as e:
        raise InputError(f"{shown}: unusable torch.profiler trace ({first_line(e)})") from None




def import_kineto(path: str | Path, out: str | Path, progress: Progress | None = None,
                  force: bool = True, budget: int | None = None) -> Path:
    """Convert a Kineto trace into a zym capture file at ``out`` (``force``: replace an
    existing file; see ``zym.schemas.output`` for how outputs are written), in about
    ``budget`` bytes of memory (default ``kineto_stream.DEFAULT_BUDGET``): a trace too large
    for it is imported out of core (``kineto_stream``)."""
    from .kineto_stream import DEFAULT_BUDGET, import_bounded

    return import_bounded(path, out, progress, force, DEFAULT_BUDGET if budget is None
                          else budget)


def looks_like_kineto(path: str | Path) -> bool:
    """True when the file is gzip or starts like a JSON object or array (the CLI's format
    sniffing; the Trace Event Format allows a bare array of events)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as g:
                head = g.read(64)
        except (OSError, EOFError, zlib.error):
            return True  # gzip that fails: let the importer report it
    return starts_like_json(head)
