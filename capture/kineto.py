"""Import torch.profiler (Kineto) Chrome-trace JSON into zym's capture tables.

Kineto writes one JSON object whose ``traceEvents`` hold complete events (``ph: X``) by category:
``python_function`` (with ``Python id``/``Python parent id``), ``cpu_op`` (``External id``),
``cuda_runtime``/``cuda_driver`` (``correlation``) and ``kernel``/``gpu_memcpy``/``gpu_memset``
(``correlation``). This module rebuilds, per CUDA call, the whole stack above it:

    Python frames (Python id tree) -> torch ops (time nesting) -> CUDA API call

and writes calls, GPU activity, spans and the interned stacks in schema v1. Decoding is in
``kineto_json``; everything here is polars joins, a handful per tree level at most.

Kineto names a Python frame ``file(first line of the function): name``: it has no call-site
line, so imported frames carry the function's first line (``CaptureMeta.extra["line"]``).
"""
from __future__ import annotations

import gzip
import platform
import zlib
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
from zym.schemas.apis import api_copy_kind, api_kind
from zym.schemas.errors import InputError
from zym.schemas.meta import CaptureMeta
from zym.schemas.stacks import intern_forest, intern_frames

from .kineto_json import CALL_CATS, GPU_CATS, OP_CATS, PYTHON_CATS, _TraceFile, read_events

Progress = Callable[[str], None]


def events_to_tables(groups: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Turn the event groups (python, op, call, gpu) into the capture tables.

    The CPU events stay one frame whose row index is the node id; derived columns are attached
    with ``with_columns`` (no copy of the other columns), never by joining the wide frame.
    ``groups`` is consumed: each group is released once it is copied into that frame.
    """
    times = [(pl.col("ts_us") * 1000).round().cast(pl.Int64).alias("ts_ns"),
             (pl.col("dur_us").fill_null(0) * 1000).round().cast(pl.Int64).alias("dur_ns")]
    calls = _drop_nested_driver_calls(groups.pop("call").with_columns(*times))
    cpu = (pl.concat([groups.pop("python").with_columns(*times),
                      groups.pop("op").with_columns(*times, pl.col("op_shapes", "op_dtypes")
                                                    .cast(pl.String)),
                      calls], how="diagonal")
           .drop("ts_us", "dur_us").with_row_index("node")
           .with_columns(pl.col("node").cast(pl.Int64)))
    # Frames are parsed once per distinct (category, name), not once per event.
    names = cpu.select("cat", "name").unique(maintain_order=True).with_columns(_frame_columns())
    frames = intern_frames(names.select("kind", pl.col("name_f").alias("name"), "file", "line"))
    names = names.join(frames.rename({"name": "name_f"}), on=["kind", "name_f", "file", "line"],
                       how="left", nulls_equal=True)
    cpu = cpu.with_columns(cpu.select("cat", "name").join(
        names.select("cat", "name", "frame_id"), on=["cat", "name"], how="left",
        nulls_equal=True, maintain_order="left")["frame_id"])
    parents = _parents(cpu)
    node_stack, stacks = intern_forest(
        cpu.select("node", "frame_id").join(parents, on="node", how="left"))
    cpu = cpu.with_columns(node_stack["stack_id"])  # sorted by node: the row order
    calls = _calls(cpu)
    return {
        "frame": frames.select("frame_id", "kind", "name", "file", "line"),
        "stack": stacks,
        "span": _spans(cpu),
        "call": calls,
        "gpu": _gpu(groups.pop("gpu").with_columns(*times).drop("ts_us", "dur_us"), calls),
    }


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


def _drop_nested_driver_calls(calls: pl.DataFrame) -> pl.DataFrame:
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


def _parents(cpu: pl.DataFrame) -> pl.DataFrame:
    """Parent node of every CPU event.

    Python frames: their ``Python parent id``. Torch ops and CUDA calls: the innermost op or call
    that contains them in time on their thread (RecordFunction keeps these well nested), and for
    the outermost ones, the innermost Python frame running at their start.
    """
    py = cpu.filter(pl.col("cat").is_in(list(PYTHON_CATS)))
    py_parent = py.join(py.select(pl.col("python_id").alias("python_parent_id"),
                                  pl.col("node").alias("parent")),
                        on="python_parent_id", how="left").select("node", "parent")
    nested = cpu.filter(~pl.col("cat").is_in(list(PYTHON_CATS)))
    op_parent = nest_intervals(nested.select("node", "tid", "ts_ns", "dur_ns"))
    roots = op_parent.filter(pl.col("parent").is_null()).join(nested, on="node").select(
        "node", "tid", "ts_ns")
    root_parent = innermost_enclosing(roots, py.select("node", "tid", "ts_ns", "dur_ns"),
                                      py_parent)
    op_parent = op_parent.filter(pl.col("parent").is_not_null())
    return pl.concat([py_parent, op_parent, root_parent], how="vertical")


def nest_intervals(iv: pl.DataFrame) -> pl.DataFrame:
    """Parent of each interval in a set that nests properly per thread, by one sort.

    ``iv``: ``node, tid, ts_ns, dur_ns``. Opens and closes are sorted together (at one instant:
    closes first, then opens longest first, then closes of zero-length intervals), a running sum
    gives each open its depth, and its parent is the latest earlier open one level up.
    Returns ``node, parent`` (parent null at depth 0).
    """
    # Ties: at one instant, closes of intervals that have length, then opens (longest first,
    # then in node order), then closes of zero-length intervals; identical intervals nest in
    # node order, so the later-opened one closes first.
    opens = iv.select("node", "tid", pl.col("ts_ns").alias("t"), pl.lit(1, pl.Int8).alias("step"),
                      pl.lit(1, pl.Int8).alias("order"), (-pl.col("dur_ns")).alias("tie"),
                      pl.col("node").alias("tie2"))
    closes = iv.select("node", "tid", (pl.col("ts_ns") + pl.col("dur_ns")).alias("t"),
                       pl.lit(-1, pl.Int8).alias("step"),
                       pl.when(pl.col("dur_ns") == 0).then(2).otherwise(0).cast(pl.Int8)
                       .alias("order"), (-pl.col("ts_ns")).alias("tie"),
                       (-pl.col("node")).alias("tie2"))
    timeline = (pl.concat([opens, closes]).sort("tid", "t", "order", "tie", "tie2")
                .with_columns(pl.col("step").cast(pl.Int32).cum_sum().over("tid").alias("level"))
                .with_row_index("pos")
                .filter(pl.col("step") == 1)
                .select("node", "tid", "pos", (pl.col("level") - 1).alias("depth")))
    parents = timeline.select("tid", "pos", pl.col("depth"), pl.col("node").alias("parent"))
    return (timeline.with_columns((pl.col("depth") - 1).alias("parent_depth"))
            .join_asof(parents, on="pos", by_left=["tid", "parent_depth"],
                       by_right=["tid", "depth"], strategy="backward", check_sortedness=False)
            .select("node", "parent"))


def innermost_enclosing(points: pl.DataFrame, iv: pl.DataFrame,
                        iv_parent: pl.DataFrame) -> pl.DataFrame:
    """For each point (``node, tid, ts_ns``), the innermost interval of ``iv`` that is running at
    that time on the same thread, given the intervals' own tree (``iv_parent``: node, parent).

    The latest interval that started before the point is a candidate; while it ended before the
    point, its parent is the next candidate: one join per tree level, not per point.
    Returns ``node, parent``.
    """
    spans = iv.select(pl.col("node").alias("cand"), "tid", pl.col("ts_ns").alias("c_ts"),
                      (pl.col("ts_ns") + pl.col("dur_ns")).alias("c_end")).sort("c_ts", "c_end",
                                                                                descending=[False, True])
    ends = spans.select("cand", "c_end").join(
        iv_parent.select(pl.col("node").alias("cand"), pl.col("parent").alias("up")),
        on="cand", how="left")
    cur = points.sort("ts_ns").join_asof(spans.select("cand", "tid", "c_ts"), left_on="ts_ns",
                                         right_on="c_ts", by="tid", strategy="backward",
                                         check_sortedness=False).select("node", "ts_ns", "cand")
    done = []
    for _ in range(4096):
        cur = cur.join(ends, on="cand", how="left")
        ok = pl.col("cand").is_null() | (pl.col("c_end") >= pl.col("ts_ns"))
        done.append(cur.filter(ok).select("node", pl.col("cand").alias("parent")))
        cur = cur.filter(~ok).select("node", "ts_ns", pl.col("up").alias("cand"))
        if cur.height == 0:
            break
    return pl.concat(done)


def _spans(cpu: pl.DataFrame) -> pl.DataFrame:
    spans = cpu.filter(pl.col("cat").is_in(list(PYTHON_CATS + OP_CATS)))
    return spans.select(
        "pid", "tid", "ts_ns", "dur_ns", "stack_id",
        pl.when(pl.col("cat").is_in(list(OP_CATS))).then("external_id").alias("op_id"),
        "op_shapes", "op_dtypes",
    )


def _calls(cpu: pl.DataFrame) -> pl.DataFrame:
    calls = cpu.filter(pl.col("cat").is_in(list(CALL_CATS)))
    ops = cpu.filter(pl.col("cat").is_in(list(OP_CATS))).select(
        pl.col("external_id").alias("op_id"), "op_shapes", "op_dtypes").unique("op_id")
    return (calls.select("pid", "tid", "ts_ns", "dur_ns", "name", api_kind(pl.col("name")).alias("kind"),
                         "correlation_id", "stack_id", "cbid", pl.col("external_id").alias("op_id"),
                         api_copy_kind(pl.col("name")).alias("copy_kind"))
            .join(ops, on="op_id", how="left"))


def _gpu(gpu: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    copy = pl.col("name").str.extract_groups(
        r"^Memcpy (?P<dir>\w+) \((?P<src>\w+) -> (?P<dst>\w+)\)")
    memset_dst = pl.col("name").str.extract(r"^Memset \((\w+)\)", 1)
    main_pid = calls["pid"].mode().first() if calls.height else None
    issuer = calls.select("correlation_id", pl.col("pid").alias("issuer")).unique("correlation_id")
    return (gpu.join(issuer, on="correlation_id", how="left").select(
        pl.coalesce("issuer", pl.lit(main_pid, pl.Int64)).alias("pid"),
        "device_id", "stream_id", "ts_ns", "dur_ns", "name",
        pl.col("cat").replace_strict(GPU_CATS).alias("kind"), "correlation_id", "size_bytes",
        copy.struct.field("dir").alias("copy_kind"),
        copy.struct.field("src").str.to_lowercase().alias("src_mem"),
        pl.coalesce(copy.struct.field("dst"), memset_dst).str.to_lowercase().alias("dst_mem"),
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "graph_id",
    ))


# ---------------------------------------------------------------------------------------------
# Entry points

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
        host=platform.node(),
        clock_domain="kineto",
        gpus=gpus,
        driver_version=cuda_version(top.cuda_driver_version),
        runtime_version=cuda_version(top.cuda_runtime_version),
        cupti_version=str(top.cupti_version or ""),
        extra={"line": "first line of the function (Kineto records no call-site line)",
               "with_stack": bool(top.with_stack), "record_shapes": bool(top.record_shapes),
               "base_time_ns": top.baseTimeNanoseconds},
    )


def load_kineto(path: str | Path, progress: Progress | None = None
                ) -> tuple[dict[str, pl.DataFrame], CaptureMeta]:
    """Read a Kineto trace (``.json`` or ``.json.gz``) into capture tables and metadata."""
    say = progress or (lambda _stage: None)
    path = Path(path)
    if path.exists() and path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    say("reading and decoding JSON")
    groups, top = read_events(path)
    say("building call stacks")
    return events_to_tables(groups), capture_meta(top, path)


def import_kineto(path: str | Path, out: str | Path, progress: Progress | None = None) -> Path:
    """Convert a Kineto trace into a zym capture file at ``out``."""
    from zym.schemas.io import write_capture

    tables, meta = load_kineto(path, progress)
    if progress:
        progress("writing")
    return write_capture(out, tables, meta)


def looks_like_kineto(path: str | Path) -> bool:
    """True when the file is gzip or starts like a JSON object (the CLI's format sniffing)."""
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
    return head.lstrip()[:1] == b"{"
