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
from operator import attrgetter
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
    traceEvents: list[msgspec.Raw]  # noqa: N815 (Kineto's key)
    deviceProperties: list[dict] = []  # noqa: N815
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    cupti_version: int | None = None
    baseTimeNanoseconds: int | None = None  # noqa: N815
    with_stack: int | None = None
    record_shapes: int | None = None


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


def parse_events(text: bytes | bytearray, path: Path) -> tuple[dict[str, pl.DataFrame], _TraceFile]:
    """Decode the trace into one frame per event group (python, op, call, gpu).

    The first pass only splits ``traceEvents`` into raw byte views; events are then decoded in
    batches and turned into columns at once, so only one batch of Python objects is alive.
    """
    if not text or text.isspace():
        raise InputError(f"{path}: empty file")
    try:
        top = msgspec.json.decode(text, type=_TraceFile)
    except msgspec.ValidationError as e:
        raise InputError(f"{path}: JSON, but not a torch.profiler (Kineto) trace ({e})") from e
    except msgspec.DecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e}); a truncated or non-trace file?") from e
    raws, top.traceEvents = top.traceEvents, []
    parts: dict[str, list[pl.DataFrame]] = {group: [] for group in _GROUP_SCHEMAS}
    for start in range(0, len(raws), BATCH_EVENTS):
        try:
            events = _DECODER.decode(b"[" + b",".join(raws[start:start + BATCH_EVENTS]) + b"]")
        except msgspec.ValidationError as e:
            raise InputError(f"{path}: malformed trace event ({e})") from e
        for group, frame in _group_frames(events).items():
            parts[group].append(frame)
    del raws
    groups = {g: pl.concat(dfs) if dfs else pl.DataFrame(schema=_GROUP_SCHEMAS[g])
              for g, dfs in parts.items()}
    if sum(df.height for df in groups.values()) == 0:
        raise InputError(f"{path}: JSON, but no torch.profiler events (python_function, cpu_op, "
                         "cuda_runtime, kernel...): not a Kineto trace")
    return groups, top


def _group_frames(events: list[_Event]) -> dict[str, pl.DataFrame]:
    """Columns of the complete events that zym reads, one frame per event group.

    Each group fills only the columns it has (GPU activity: device, stream, grid...; torch
    ops: shapes), which keeps the per-event Python work to a few attribute reads.
    """
    by_group: dict[str, list[_Event]] = {}
    for e in events:
        group = _GROUP_OF.get(e.cat) if e.ph == "X" else None
        if group:
            by_group.setdefault(group, []).append(e)
    out = {}
    for group, ev in by_group.items():
        cat, name, pid, tid, ts, dur, args = _columns(ev, "cat", "name", "pid", "tid", "ts",
                                                      "dur", "args")
        args = [a or _NO_ARGS for a in args]
        cols = {"cat": cat, "name": name, "pid": _int_column(pid), "tid": _int_column(tid),
                "ts_us": ts, "dur_us": dur}
        arg_fields = [f for f in _GROUP_SCHEMAS[group] if f not in cols and f in _ARG_ATTR]
        cols.update(zip(arg_fields, _columns(args, *[_ARG_ATTR[f] for f in arg_fields])))
        if group == "op":
            cols["op_shapes"] = [bytes(a.input_dims) or None for a in args]
            cols["op_dtypes"] = [bytes(a.input_type) or None for a in args]
        if group == "gpu":
            cols.update(_dims(args))
        out[group] = pl.DataFrame(cols, schema=_GROUP_SCHEMAS[group])
    return out


def _columns(items: list, *attrs: str) -> list[list]:
    """The named attributes of ``items``, one list per attribute (map + attrgetter run in C)."""
    return [list(map(attrgetter(a), items)) for a in attrs]


def _dims(args: list[_Args]) -> dict[str, list]:
    grid = [a.grid or _NO_DIM for a in args]
    block = [a.block or _NO_DIM for a in args]
    return {**{f"grid_{axis}": [g[i] for g in grid] for i, axis in enumerate("xyz")},
            **{f"block_{axis}": [b[i] for b in block] for i, axis in enumerate("xyz")}}


_DECODER = msgspec.json.Decoder(list[_Event])
BATCH_EVENTS = 10_000
_NO_ARGS = _Args()
_NO_DIM = (None, None, None)
_GROUP_OF = ({c: "python" for c in PYTHON_CATS} | {c: "op" for c in OP_CATS}
             | {c: "call" for c in CALL_CATS} | {c: "gpu" for c in GPU_CATS})
# Event field -> _Args attribute, for the fields that live in "args".
_ARG_ATTR = {"external_id": "external_id", "correlation_id": "correlation",
             "python_id": "python_id", "python_parent_id": "python_parent_id",
             "device_id": "device", "stream_id": "stream", "size_bytes": "bytes", "cbid": "cbid",
             "graph_id": "graph_id"}
_COMMON = {"cat": pl.String, "name": pl.String, "pid": pl.Int64, "tid": pl.Int64,
           "ts_us": pl.Float64, "dur_us": pl.Float64}
_GROUP_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "python": _COMMON | {"python_id": pl.Int64, "python_parent_id": pl.Int64},
    "op": _COMMON | {"external_id": pl.Int64, "op_shapes": pl.Binary, "op_dtypes": pl.Binary},
    "call": _COMMON | {"external_id": pl.Int64, "correlation_id": pl.Int64, "cbid": pl.Int32},
    "gpu": _COMMON | {"external_id": pl.Int64, "correlation_id": pl.Int64, "device_id": pl.Int32,
                      "stream_id": pl.Int64, "size_bytes": pl.Int64, "graph_id": pl.Int64}
    | {f"{d}_{axis}": pl.Int32 for d in ("grid", "block") for axis in "xyz"},
}


def _int_column(values: list[int | str | None]) -> pl.Series:
    """Kineto writes pids and tids as numbers, except for its own pseudo-processes ("Spans")."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (TypeError, pl.exceptions.PolarsError):
        return pl.Series([_as_int(v) for v in values], dtype=pl.Int64)


def _as_int(value: int | str | None) -> int | None:
    if isinstance(value, int) or value is None:
        return value
    return int(value) if value.lstrip("-").isdigit() else None


def events_to_tables(groups: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Turn the event groups (python, op, call, gpu) into the capture tables."""
    times = [(pl.col("ts_us") * 1000).round().cast(pl.Int64).alias("ts_ns"),
             (pl.col("dur_us").fill_null(0) * 1000).round().cast(pl.Int64).alias("dur_ns")]
    cpu = (pl.concat([groups["python"], groups["op"].with_columns(pl.col("op_shapes", "op_dtypes")
                                                                  .cast(pl.String)),
                      groups["call"]], how="diagonal")
           .with_row_index("node").with_columns(pl.col("node").cast(pl.Int64), *times)
           .drop("ts_us", "dur_us"))
    cpu = _drop_nested_driver_calls(cpu)
    # Frames are parsed once per distinct (category, name), not once per event.
    names = cpu.select("cat", "name").unique(maintain_order=True).with_columns(_frame_columns())
    frames = intern_frames(names.select("kind", pl.col("name_f").alias("name"), "file", "line"))
    names = names.join(frames.rename({"name": "name_f"}), on=["kind", "name_f", "file", "line"],
                       how="left", nulls_equal=True)
    cpu = cpu.join(names.select("cat", "name", "frame_id"), on=["cat", "name"], how="left",
                   nulls_equal=True)
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
        "gpu": _gpu(groups["gpu"].with_columns(*times).drop("ts_us", "dur_us"), calls),
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
    say("reading")
    text = read_json_bytes(path)
    say("parsing JSON")
    groups, top = parse_events(text, path)
    del text
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
