"""Import torch.profiler (Kineto) Chrome-trace JSON into zym's capture tables.

Kineto writes one JSON object whose ``traceEvents`` hold complete events (``ph: X``) by category:
``python_function`` (with ``Python id``/``Python parent id``), ``cpu_op`` (``External id``),
``cuda_runtime``/``cuda_driver`` (``correlation``) and ``kernel``/``gpu_memcpy``/``gpu_memset``
(``correlation``). This module rebuilds, per CUDA call, the whole stack above it:

    Python frames (Python id tree) -> torch ops (time nesting) -> CUDA API call

and writes calls, GPU activity, spans and the interned stacks in schema v1. Parsing uses msgspec
in batches so that only one batch of decoded events is alive at a time; all later steps are
polars joins, one per tree level at most.

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

import msgspec
import polars as pl

from zym.schemas.apis import api_copy_kind, api_kind
from zym.schemas.errors import InputError
from zym.schemas.meta import CaptureMeta
from zym.schemas.stacks import intern_forest, intern_frames

PYTHON_CATS = ("python_function",)
OP_CATS = ("cpu_op", "user_annotation")
CALL_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "memset", "cuda_sync": "sync"}
_READ_CHUNK = 1 << 20

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------------
# Parsing: JSON -> one flat events frame

_EMPTY_RAW = msgspec.Raw(b"")


class _Args(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    device: int | None = None
    stream: int | None = None
    bytes: int | None = None
    cbid: int | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    graph_id: int | None = msgspec.field(default=None, name="graph id")
    # Kept as JSON text: shapes nest to varying depth (tensor lists), and only rules read them.
    input_dims: msgspec.Raw = msgspec.field(default=_EMPTY_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_EMPTY_RAW, name="Input type")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None


class _TraceFile(msgspec.Struct):
    traceEvents: list[_Event]  # noqa: N815 (Kineto's key)
    deviceProperties: list[dict] = []  # noqa: N815
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    cupti_version: int | None = None
    baseTimeNanoseconds: int | None = None  # noqa: N815
    with_stack: int | None = None
    record_shapes: int | None = None


_KEEP_CATS = frozenset(PYTHON_CATS + OP_CATS + CALL_CATS + tuple(GPU_CATS))


def read_json_bytes(path: Path) -> bytes:
    """The JSON text of a trace file, gunzipped when it is gzip (by magic, not by name)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head != b"\x1f\x8b":
                return f.read()
            return _gunzip(f, path)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from e


def _gunzip(f, path: Path) -> bytearray:
    # Decompressed into a buffer sized from the gzip trailer (ISIZE, the size mod 2**32), so the
    # text is never held twice; a wrong hint (multi-member or >4 GiB files) only costs regrowth.
    f.seek(-4, 2)
    hint = int.from_bytes(f.read(4), "little")
    f.seek(0)
    out = bytearray(hint)
    view, pos = memoryview(out), 0
    d = zlib.decompressobj(wbits=31)
    try:
        while not d.eof:
            chunk = d.unconsumed_tail or f.read(_READ_CHUNK)
            if not chunk:
                break
            piece = d.decompress(chunk, _READ_CHUNK)
            if pos + len(piece) > len(out):
                view.release()
                out[pos:] = piece
                view = memoryview(out)
            else:
                view[pos:pos + len(piece)] = piece
            pos += len(piece)
    except zlib.error as e:
        raise InputError(f"{path}: corrupt gzip data ({e})") from e
    view.release()
    if not d.eof:
        raise InputError(f"{path}: truncated gzip file: the trace was cut short")
    del out[pos:]
    return out


def parse_events(text: bytes | bytearray, path: Path) -> tuple[pl.DataFrame, _TraceFile]:
    """Decode the trace into one frame of complete events of the categories zym uses."""
    if not text.strip():
        raise InputError(f"{path}: empty file")
    try:
        top = msgspec.json.decode(text, type=_TraceFile)
    except msgspec.ValidationError as e:
        raise InputError(f"{path}: JSON, but not a torch.profiler (Kineto) trace ({e})") from e
    except msgspec.DecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e}); a truncated or non-trace file?") from e
    events, top.traceEvents = _events_frame(top.traceEvents), []
    if events.height == 0:
        raise InputError(f"{path}: JSON, but no torch.profiler events (python_function, cpu_op, "
                         "cuda_runtime, kernel...): not a Kineto trace")
    return events, top


def _events_frame(events: list[_Event]) -> pl.DataFrame:
    """Columns of the complete events in ``events`` whose category zym reads.

    Each category fills only the columns it has (GPU activity: device, stream, grid...; torch
    ops: shapes), which keeps the per-event Python work to a few attribute reads.
    """
    by_cat: dict[str, list[_Event]] = {}
    for e in events:
        if e.ph == "X" and e.cat in _KEEP_CATS:
            by_cat.setdefault(e.cat, []).append(e)
    parts = []
    for cat, ev in by_cat.items():
        args = [e.args or _NO_ARGS for e in ev]
        cols = {
            "cat": pl.repeat(cat, len(ev), dtype=pl.String, eager=True),
            "name": [e.name for e in ev],
            "pid": [_as_int(e.pid) for e in ev],
            "tid": [_as_int(e.tid) for e in ev],
            "ts_us": [e.ts for e in ev],
            "dur_us": [e.dur for e in ev],
            "external_id": [a.external_id for a in args],
        }
        if cat in PYTHON_CATS:
            cols["python_id"] = [a.python_id for a in args]
            cols["python_parent_id"] = [a.python_parent_id for a in args]
        if cat in OP_CATS:
            cols["op_shapes"] = [_raw_text(a.input_dims) for a in args]
            cols["op_dtypes"] = [_raw_text(a.input_type) for a in args]
        if cat in CALL_CATS or cat in GPU_CATS:
            cols["correlation_id"] = [a.correlation for a in args]
        if cat in CALL_CATS:
            cols["cbid"] = [a.cbid for a in args]
        if cat in GPU_CATS:
            cols.update(_gpu_columns(args))
        parts.append(pl.DataFrame(cols, schema={k: _EVENT_SCHEMA[k] for k in cols}))
    return pl.concat([pl.DataFrame(schema=_EVENT_SCHEMA), *parts], how="diagonal")


def _gpu_columns(args: list[_Args]) -> dict[str, list]:
    grid = [a.grid or _NO_DIM for a in args]
    block = [a.block or _NO_DIM for a in args]
    return {
        "device_id": [a.device for a in args],
        "stream_id": [a.stream for a in args],
        "size_bytes": [a.bytes for a in args],
        "graph_id": [a.graph_id for a in args],
        "grid_x": [g[0] for g in grid], "grid_y": [g[1] for g in grid],
        "grid_z": [g[2] for g in grid],
        "block_x": [b[0] for b in block], "block_y": [b[1] for b in block],
        "block_z": [b[2] for b in block],
    }


_NO_ARGS = _Args()
_NO_DIM = (None, None, None)
_EVENT_SCHEMA = {
    "cat": pl.String, "name": pl.String, "pid": pl.Int64, "tid": pl.Int64,
    "ts_us": pl.Float64, "dur_us": pl.Float64, "external_id": pl.Int64,
    "correlation_id": pl.Int64, "python_id": pl.Int64, "python_parent_id": pl.Int64,
    "device_id": pl.Int32, "stream_id": pl.Int64, "size_bytes": pl.Int64, "cbid": pl.Int32,
    "graph_id": pl.Int64, "grid_x": pl.Int32, "grid_y": pl.Int32, "grid_z": pl.Int32,
    "block_x": pl.Int32, "block_y": pl.Int32, "block_z": pl.Int32,
    "op_shapes": pl.String, "op_dtypes": pl.String,
}


def _as_int(value: int | str | None) -> int | None:
    if isinstance(value, int) or value is None:
        return value
    return int(value) if value.lstrip("-").isdigit() else None


def _raw_text(raw: msgspec.Raw) -> str | None:
    return bytes(raw).decode() if len(raw) else None


# ---------------------------------------------------------------------------------------------
# Events -> schema tables

def events_to_tables(events: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Turn the flat events frame into the capture tables (frame, stack, span, call, gpu)."""
    events = events.with_row_index("node").with_columns(
        pl.col("node").cast(pl.Int64),
        (pl.col("ts_us") * 1000).round().cast(pl.Int64).alias("ts_ns"),
        (pl.col("dur_us").fill_null(0) * 1000).round().cast(pl.Int64).alias("dur_ns"),
    ).drop("ts_us", "dur_us")
    gpu_rows = events.filter(pl.col("cat").is_in(list(GPU_CATS)))
    cpu = events.filter(~pl.col("cat").is_in(list(GPU_CATS)))
    cpu = _drop_nested_driver_calls(cpu)
    cpu = cpu.with_columns(_frame_columns())
    frames = intern_frames(cpu.select("kind", pl.col("name_f").alias("name"), "file", "line"))
    cpu = cpu.join(frames.rename({"name": "name_f"}), on=["kind", "name_f", "file", "line"],
                   how="left", nulls_equal=True)
    parents = _parents(cpu)
    node_stack, stacks = intern_forest(
        cpu.select("node", "frame_id").join(parents, on="node", how="left"))
    cpu = cpu.join(node_stack, on="node", how="left")
    calls = _calls(cpu)
    return {
        "frame": frames.select("frame_id", "kind", "name", "file", "line"),
        "stack": stacks,
        "span": _spans(cpu),
        "call": calls,
        "gpu": _gpu(gpu_rows, calls, events),
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


def _drop_nested_driver_calls(cpu: pl.DataFrame) -> pl.DataFrame:
    """A driver call made inside a runtime call on the same thread is part of that call."""
    runtime = (cpu.filter(pl.col("cat") == "cuda_runtime")
               .select("tid", pl.col("ts_ns").alias("rt_ts"),
                       (pl.col("ts_ns") + pl.col("dur_ns")).alias("rt_end")).sort("rt_ts"))
    driver = cpu.filter(pl.col("cat") == "cuda_driver").sort("ts_ns")
    if not (runtime.height and driver.height):
        return cpu
    inside = (driver.join_asof(runtime, left_on="ts_ns", right_on="rt_ts", by="tid",
                                 check_sortedness=False)
              .filter(pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("rt_end")).select("node"))
    return cpu.join(inside, on="node", how="anti")


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


def _gpu(gpu: pl.DataFrame, calls: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
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
    say("reading")
    text = read_json_bytes(path)
    say("parsing JSON")
    events, top = parse_events(text, path)
    del text
    say("building call stacks")
    return events_to_tables(events), capture_meta(top, path)


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
