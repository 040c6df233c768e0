"""Stream raw capture records to Arrow IPC files while capturing, and finalize them into the
schema-v2 capture Parquet.

During a capture, records go to ``<output>.raw/``: ``calls.arrow`` (one row per API call,
arguments still raw) and ``frames.arrow`` (one row per frame of each distinct stack,
already symbolized, since code objects are only readable while the target lives). Batches are
flushed every ``FLUSH_ROWS`` rows or ``FLUSH_SECONDS``: if zym is killed, everything but the
last batch survives, and ``finalize`` reads what a truncated stream holds.
"""
from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from zym.schemas.errors import InputError
from zym.schemas.meta import CaptureMeta

from . import events
from .probes import CUDA_MEMCPY_KIND, PROBES
from .rawcheck import ChecksummedFile

if TYPE_CHECKING:
    import polars as pl

FLUSH_ROWS = 8192
NATIVE_FLUSH_ROWS = 64      # stack copies are up to 128 KiB each
FLUSH_SECONDS = 1.0
# Stack keys with a meaning of their own (real stacks are numbered from 1).
STACK_NONE = 0        # the thread had no Python frames: the call's stack is its API frame
STACK_MISSED = -1     # frames were lost (ring buffer full) or unreadable
MISSED_FRAME = "[missed user stack]"
TRUNCATED_FRAME = "[truncated]"

# Raw stream columns and their Arrow types. Capturing needs pyarrow only: polars is imported
# when finalizing, so a lean host can capture and another finalize (`zym capture --finalize`).
# Calls are kept as the kernel sent them (struct zym_call) until a batch is flushed; their
# stack is resolved from (pid, stack_hash) when finalizing, by a join with the frames' keys.
RAW_COLUMNS: dict[str, dict[str, str]] = {
    "calls": {"pid": "int64", "tid": "int64", "ts_ns": "int64", "dur_ns": "int64",
              "probe": "int32", "size_arg": "uint64", "stream": "uint64",
              "copy_arg": "uint64", "stack_hash": "uint64", "flags": "int32",
              "native_key": "uint64"},
    "frames": {"pid": "int64", "hash": "uint64", "stack_key": "int64", "depth": "int32",
               "kind": "string", "name": "string", "file": "string", "line": "int32",
               "source": "string"},
    # Native stack copies (one per distinct native path) and the executable mappings of the
    # processes they came from; unwound after the capture (capture/native.py) into
    # native_frames: the frames between the innermost Python frame and the API, outermost
    # first, with the torch op layer.
    "natives": {"pid": "int64", "key": "uint64", "ip": "uint64", "sp": "uint64",
                "bp": "uint64", "probe": "int32", "stack": "binary"},
    "maps": {"pid": "int64", "start": "uint64", "end": "uint64", "offset": "uint64",
             "path": "string", "size": "int64", "mtime_ns": "int64"},
    "native_frames": {"pid": "int64", "key": "uint64", "depth": "int32", "kind": "string",
                      "name": "string", "file": "string"},
}
# Streams written while capturing; native_frames is written once, after (native.resolve_raw).
CAPTURE_STREAMS = ("calls", "frames", "natives", "maps")
# Raw columns added later: a raw directory written before them reads them as nulls.
RAW_OPTIONAL = {"frames": ("source",), "calls": ("native_key",)}


def raw_schema(table: str):  # -> pa.Schema
    import pyarrow as pa

    return pa.schema([(c, getattr(pa, t)()) for c, t in RAW_COLUMNS[table].items()])


def raw_polars_schema(table: str) -> dict[str, pl.DataType]:
    import polars as pl

    names = {"int64": pl.Int64, "int32": pl.Int32, "uint64": pl.UInt64, "string": pl.String,
             "binary": pl.Binary}
    return {c: names[t] for c, t in RAW_COLUMNS[table].items()}


class RawWriter:
    """Column buffers for calls and frames, flushed as Arrow IPC stream batches (or, on a
    host without pyarrow, as JSON lines that ``read_raw`` reads the same way)."""

    def __init__(self, raw_dir: Path) -> None:
        self.dir = raw_dir
        raw_dir.mkdir(parents=True, exist_ok=True)
        self._buffers: dict[str, dict[str, list[Any]]] = {
            t: {c: [] for c in RAW_COLUMNS[t]} for t in CAPTURE_STREAMS}
        try:
            import pyarrow as pa
            from pyarrow import ipc
        except ImportError:
            self._pa = None
            self._sinks = {t: ChecksummedFile(raw_dir / f"{t}.jsonl") for t in CAPTURE_STREAMS}
            self._writers = {t: io.TextIOWrapper(self._sinks[t], encoding="utf-8")
                             for t in CAPTURE_STREAMS}
        else:
            self._pa = pa
            # pyarrow imports pandas (when installed) at its first conversion: ~1 s that would
            # otherwise fall on the first flush, mid-capture, with the collector stalled and a
            # short-lived target's memory gone before its stacks are read. Paid here, before
            # the target runs.
            pa.array(np.zeros(1, np.int64))
            self._schemas = {t: raw_schema(t) for t in CAPTURE_STREAMS}
            # Each stream gets a checksum per batch (rawcheck): --finalize verifies them.
            self._sinks = {t: ChecksummedFile(raw_dir / f"{t}.arrow") for t in CAPTURE_STREAMS}
            self._writers = {t: ipc.new_stream(self._sinks[t], self._schemas[t])
                             for t in CAPTURE_STREAMS}
        self._call_records: list[np.ndarray] = []
        self._pending_calls = 0
        self._last_flush = time.monotonic()
        self.rows = {t: 0 for t in CAPTURE_STREAMS}
        self._closed = False

    def add_calls(self, records: np.ndarray) -> None:
        """Call records as drained from the ring (``events.CALL_DTYPE``): kept as they are and
        decoded into columns a batch at a time, never one call at a time."""
        self._call_records.append(records)
        self._pending_calls += len(records)
        if self._pending_calls >= FLUSH_ROWS:
            self.flush()

    def add_call(self, record: bytes) -> None:
        """One ``struct zym_call`` as bytes (tests, and records from elsewhere)."""
        self.add_calls(np.frombuffer(record, dtype=events.CALL_DTYPE, count=1).copy())

    def add(self, table: str, **row: Any) -> None:
        buf = self._buffers[table]
        optional = RAW_OPTIONAL.get(table, ())
        for column, values in buf.items():
            values.append(row.get(column) if column in optional else row[column])
        if len(buf["pid"]) >= (NATIVE_FLUSH_ROWS if table == "natives" else FLUSH_ROWS):
            self.flush()

    def _decode_calls(self) -> None:
        """The pending call records as the raw stream's columns, one numpy cast each."""
        if not self._call_records:
            return
        recs = np.concatenate(self._call_records)
        for name, type_ in RAW_COLUMNS["calls"].items():
            self._buffers["calls"][name].append(recs[name].astype(type_))
        self._call_records.clear()
        self._pending_calls = 0

    def maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        # Frames first: a call batch never refers to a stack that is not on disk yet.
        self._decode_calls()
        for table in ("frames", "maps", "natives", "calls"):
            buf = self._buffers[table]
            if table == "calls" and buf["pid"]:   # numpy arrays, one per decoded batch
                buf = {c: np.concatenate(v) for c, v in buf.items()}
            n = len(buf["pid"])
            if n:
                self._write(table, buf)
                self.rows[table] += n
                for values in self._buffers[table].values():
                    values.clear()
        self._last_flush = time.monotonic()

    def _write(self, table: str, buf: dict[str, list[Any]]) -> None:
        if self._pa is None:
            cols = {c: v.tolist() if isinstance(v, np.ndarray) else v for c, v in buf.items()}
            if "stack" in cols:     # JSON has no bytes
                cols["stack"] = [b.hex() for b in cols["stack"]]
            rows = (dict(zip(cols, values)) for values in zip(*cols.values()))
            self._writers[table].write("".join(json.dumps(r) + "\n" for r in rows))
            self._writers[table].flush()
        else:
            batch = self._pa.record_batch([self._pa.array(v, type=f.type) for v, f in
                                           zip(buf.values(), self._schemas[table])],
                                          schema=self._schemas[table])
            self._writers[table].write_batch(batch)
        self._sinks[table].checkpoint()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.flush()
        for w in self._writers.values():
            w.close()
        for sink in self._sinks.values():
            sink.close()


def write_raw_meta(raw_dir: Path, meta: CaptureMeta) -> None:
    (raw_dir / "meta.json").write_text(json.dumps(asdict(meta), sort_keys=True))


def read_raw(raw_dir: Path, table: str) -> pl.DataFrame:
    """Every complete batch of one raw stream; a stream cut short by a crash keeps its start."""
    import polars as pl
    import pyarrow as pa
    from pyarrow import ipc

    jsonl = raw_dir / f"{table}.jsonl"
    if jsonl.exists():      # written on a host without pyarrow; a cut last line is dropped
        lines = [ln for ln in jsonl.read_text().splitlines() if ln.endswith("}")]
        schema = raw_polars_schema(table)
        rows = [json_row(ln) for ln in lines]
        return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema)
    batches = []
    try:
        with ipc.open_stream(raw_dir / f"{table}.arrow") as reader:
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError):
        pass    # truncated: keep the batches read so far
    if not batches:
        return pl.DataFrame(schema=raw_polars_schema(table))
    frame = pl.from_arrow(pa.Table.from_batches(batches))
    schema = raw_polars_schema(table)
    frame = frame.with_columns(pl.lit(None, schema[c]).alias(c) for c in RAW_OPTIONAL.get(table, ())
                               if c not in frame.columns)
    missing = sorted(set(raw_polars_schema(table)) - set(frame.columns))
    if missing:
        raise InputError(f"{raw_dir}: raw {table} stream lacks {', '.join(missing)}: it was "
                         "written by another zym version; finalize it with that version")
    return frame.cast(raw_polars_schema(table))


def _probe_table() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame({
        "probe": list(range(len(PROBES))),
        "api": [p.symbol for p in PROBES],
        "call_kind": [p.kind for p in PROBES],
        "size_scale": [p.size_scale if p.size_slot >= 0 else None for p in PROBES],
        "fixed_copy": [p.copy_kind for p in PROBES],
        "copy_from_arg": [p.copy_slot >= 0 for p in PROBES],
        "has_stream": [p.stream_slot >= 0 for p in PROBES],
    }, schema_overrides={"probe": pl.Int32, "size_scale": pl.Int64})


def decode_calls(raw: pl.DataFrame) -> pl.DataFrame:
    """Raw call rows -> schema ``call`` columns (plus ``stack_key``), by a join with PROBES."""
    import polars as pl

    copy_arg = pl.col("copy_arg").cast(pl.Int64)
    return raw.join(_probe_table(), on="probe", how="left").select(
        "pid", "tid", "ts_ns", "dur_ns", pl.col("api").alias("name"),
        pl.col("call_kind").alias("kind"),
        pl.when("has_stream").then(pl.col("stream").cast(pl.Int64, wrap_numerical=True))
        .alias("stream_id"),
        (pl.col("size_arg").cast(pl.Int64, wrap_numerical=True) * pl.col("size_scale"))
        .alias("size_bytes"),
        pl.when("copy_from_arg")
        .then(copy_arg.replace_strict(CUDA_MEMCPY_KIND, default=None, return_dtype=pl.String))
        .otherwise(pl.col("fixed_copy")).alias("copy_kind"),
        "stack_key",
        (pl.col("native_key") if "native_key" in raw.columns
         else pl.lit(None, pl.UInt64)).alias("native_key"),
    )


def _path_rows(calls: pl.DataFrame, frames: pl.DataFrame,
               natives: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (distinct call path, depth): the Python frames of the call's stack from the
    root, then its native frames (``natives``, by ``native_id``: the torch ops and native
    functions between the innermost Python frame and the API), then the API frame. A path is
    a (stack_key, native_id, API name) triple."""
    import polars as pl

    paths = (calls.filter(pl.col("stack_key").is_not_null())
             .select("stack_key", "native_id", "name").unique()
             .sort("stack_key", "native_id", "name", nulls_last=True)
             .with_row_index("path_id"))
    python = paths.select("path_id", "stack_key").join(frames, on="stack_key", how="inner")
    depth = python.group_by("path_id").agg(pl.len().cast(pl.Int32).alias("depth"))
    paths = paths.join(depth, on="path_id", how="left").with_columns(
        pl.col("depth").fill_null(0))
    parts = [python]
    if natives is not None and natives.height:
        native = (paths.select("path_id", "stack_key", "native_id", pl.col("depth").alias("base"))
                  .join(natives, on="native_id", how="inner")
                  .with_columns((pl.col("base") + pl.col("depth")).cast(pl.Int32).alias("depth"),
                                pl.lit(None, pl.Int32).alias("line"),
                                pl.lit(None, pl.String).alias("source")))
        parts.append(native)
        deeper = native.group_by("path_id").agg((pl.col("depth").max() + 1).alias("_api"))
        paths = paths.join(deeper, on="path_id", how="left").with_columns(
            pl.coalesce("_api", "depth").cast(pl.Int32).alias("depth")).drop("_api")
    api = paths.select("path_id", "stack_key", "depth",
                       pl.lit("cuda_api").alias("kind"), "name",
                       pl.lit(None, pl.String).alias("file"), pl.lit(None, pl.Int32).alias("line"),
                       pl.lit(None, pl.String).alias("source"))
    return pl.concat([p.select(api.columns) for p in parts] + [api])


def native_table(calls: pl.DataFrame, native_frames: pl.DataFrame | None
                 ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Calls with ``native_id`` (their native path's number, null without one) and the
    native paths' frames by ``native_id``."""
    import polars as pl

    if native_frames is None or native_frames.height == 0:
        return calls.with_columns(pl.lit(None, pl.Int64).alias("native_id")), None
    ids = (native_frames.select("pid", "key").unique().sort("pid", "key")
           .with_row_index("native_id").with_columns(pl.col("native_id").cast(pl.Int64)))
    natives = native_frames.join(ids, on=["pid", "key"]).select(
        "native_id", "depth", "kind", "name", "file")
    calls = calls.join(ids.rename({"key": "native_key"}), on=["pid", "native_key"], how="left")
    return calls, natives


def _build_trie(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Intern frames and stack nodes. Returns (frame table, stack table, path_id -> stack_id).

    One join per depth level, not per row: a node is (parent node, frame), so identical
    prefixes of different paths share their nodes."""
    import polars as pl

    frame_cols = ["kind", "name", "file", "line", "source"]
    frame_table = (rows.select(frame_cols).unique(maintain_order=True)
                   .with_row_index("frame_id").with_columns(pl.col("frame_id").cast(pl.Int64)))
    rows = rows.join(frame_table, on=frame_cols, how="left", nulls_equal=True)
    nodes: list[pl.DataFrame] = []
    leaf: pl.DataFrame | None = None      # path_id -> its deepest node so far
    current: pl.DataFrame | None = None   # path_id -> its node at the previous depth
    next_id = 0
    for d in range(int(rows["depth"].max() or 0) + 1):
        level = rows.filter(pl.col("depth") == d).select("path_id", "frame_id")
        level = (level.with_columns(pl.lit(None, pl.Int64).alias("parent_id")) if current is None
                 else level.join(current.rename({"stack_id": "parent_id"}), on="path_id"))
        uniq = (level.select("parent_id", "frame_id").unique(maintain_order=True)
                .with_row_index("stack_id", offset=next_id)
                .with_columns(pl.col("stack_id").cast(pl.Int64),
                              pl.lit(d, pl.Int32).alias("depth")))
        next_id += uniq.height
        nodes.append(uniq)
        current = level.join(uniq, on=["parent_id", "frame_id"], how="left",
                             nulls_equal=True).select("path_id", "stack_id")
        leaf = current if leaf is None else pl.concat(
            [leaf.join(current, on="path_id", how="anti"), current])
    stacks = pl.concat(nodes).select("stack_id", "parent_id", "frame_id", "depth")
    return frame_table, stacks, leaf


def resolve_stacks(raw_calls: pl.DataFrame, raw_frames: pl.DataFrame) -> pl.DataFrame:
    """Each raw call gets ``stack_key``: its stack's key, STACK_NONE (a thread without Python
    frames), STACK_MISSED (the stack record was lost, or the interpreter was not known yet)
    or null (not walked: --sample)."""
    import polars as pl

    keys = raw_frames.select("pid", pl.col("hash").alias("stack_hash"), "stack_key").unique()
    flags = pl.col("flags")
    return raw_calls.join(keys, on=["pid", "stack_hash"], how="left").with_columns(
        pl.when((flags & events.F_NOT_SAMPLED) != 0).then(None)
        .when((flags & events.F_NO_LAYOUT) != 0).then(STACK_MISSED)
        .when(pl.col("stack_hash") == 0).then(STACK_NONE)
        .otherwise(pl.col("stack_key").fill_null(STACK_MISSED))
        .cast(pl.Int64).alias("stack_key"))


def build_tables(raw_calls: pl.DataFrame, raw_frames: pl.DataFrame,
                 native_frames: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    """Schema-v1 frame, stack and call tables from the raw streams (vectorized)."""
    import polars as pl

    calls, natives = native_table(decode_calls(resolve_stacks(raw_calls, raw_frames)),
                                  native_frames)
    missed = pl.DataFrame({"stack_key": [STACK_MISSED], "depth": [0], "kind": ["native"],
                           "name": [MISSED_FRAME], "file": [None], "line": [None],
                           "source": [None]},
                          schema={c: t for c, t in raw_polars_schema("frames").items()
                                  if c not in ("pid", "hash")})
    frames = pl.concat([raw_frames.drop("pid", "hash").unique(["stack_key", "depth"]), missed])
    rows = _path_rows(calls, frames, natives)
    if rows.height == 0:
        return {"call": calls.drop("stack_key", "native_key", "native_id")}
    frame_table, stacks, leaf = _build_trie(rows)
    paths = (calls.filter(pl.col("stack_key").is_not_null())
             .select("stack_key", "native_id", "name").unique()
             .sort("stack_key", "native_id", "name", nulls_last=True)
             .with_row_index("path_id").join(leaf, on="path_id"))
    calls = (calls.join(paths.drop("path_id"), on=["stack_key", "native_id", "name"],
                        how="left", nulls_equal=True)
             .drop("stack_key", "native_key", "native_id").sort("ts_ns"))
    return {"frame": frame_table, "stack": stacks, "call": calls}


def native_frames_of(raw_dir: Path, meta: CaptureMeta) -> pl.DataFrame | None:
    """The raw capture's unwound native paths (unwound here first when the capture was not
    unwound where it ran: ``native.unwind_raw``); None without any."""
    from .native import unwind_raw

    unwind_raw(raw_dir, meta)
    if not (raw_dir / "native_frames.arrow").exists():
        return None
    return read_raw(raw_dir, "native_frames")


def json_row(line: str) -> dict:
    """One JSON-lines raw row, as written on a host without pyarrow (a stack copy's bytes as
    hex: JSON has no bytes)."""
    row = json.loads(line)
    if isinstance(row, dict) and isinstance(row.get("stack"), str):
        row["stack"] = bytes.fromhex(row["stack"])
    return row


def finalize(raw_dir: Path, output: Path, meta: CaptureMeta,
             add: Callable[[dict, CaptureMeta], dict] | None = None) -> dict[str, pl.DataFrame]:
    """Write the capture Parquet from a raw directory; returns the tables written. ``add``
    gives the tables more (the GPU side of a continuous capture) before they are written."""
    import polars as pl
    from zym.schemas import write_capture

    raw_calls, raw_frames = read_raw(raw_dir, "calls"), read_raw(raw_dir, "frames")
    tables = build_tables(raw_calls, raw_frames, native_frames_of(raw_dir, meta))
    resolved = resolve_stacks(raw_calls, raw_frames)
    meta.extra["missed_stacks"] = resolved.filter(pl.col("stack_key") == STACK_MISSED).height
    if add is not None:
        tables = add(tables, meta)
    write_capture(output, tables, meta)
    return tables
