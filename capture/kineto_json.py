"""Decode torch.profiler (Kineto) Chrome-trace JSON into columns, one frame per event group.

Groups: ``python`` (python_function), ``op`` (cpu_op, user_annotation), ``call`` (cuda_runtime,
cuda_driver) and ``gpu`` (kernel, gpu_memcpy, gpu_memset, cuda_sync). msgspec does all JSON
parsing, into typed structs that hold only the fields zym reads.

Kineto pretty-prints one event per block at a fixed indentation, so the ``traceEvents`` array
can be cut between events (``\n  },\n  {``: JSON strings hold no raw newlines) and decoded
piece by piece while the file is still being decompressed: the text is never held whole. A file
laid out otherwise (minified, re-exported) is decoded whole instead, with the same result.
"""
from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Iterator
from operator import attrgetter, itemgetter
from pathlib import Path
from queue import Empty, Full, Queue
from typing import BinaryIO

import msgspec
import polars as pl
from zym.schemas.errors import InputError

PYTHON_CATS = ("python_function",)
OP_CATS = ("cpu_op", "user_annotation")
CALL_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "memset", "cuda_sync": "sync"}
_READ_CHUNK = 1 << 20  # decompressed bytes per piece: ~3,000 events decoded at a time

_EMPTY_RAW = msgspec.Raw(b"")


class _Dim3(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A CUDA grid or block size, written by Kineto as ``[x, y, z]``."""

    x: int | None = None
    y: int | None = None
    z: int | None = None


_NO_DIM = _Dim3()


class _Args(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    device: int | None = None
    stream: int | None = None
    bytes: int | None = None
    cbid: int | None = None
    grid: _Dim3 = _NO_DIM
    block: _Dim3 = _NO_DIM
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
    traceEvents: list[msgspec.Raw]
    deviceProperties: list[dict] = []
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    cupti_version: int | None = None
    baseTimeNanoseconds: int | None = None
    with_stack: int | None = None
    record_shapes: int | None = None


def read_events(path: Path) -> tuple[dict[str, pl.DataFrame], _TraceFile]:
    """Decode a trace file (``.json`` or gzip, told by its magic bytes) into event groups."""
    try:
        with open(path, "rb") as f:
            result = _decode_streaming(_prefetched(_pieces(f, path)), path)
        if result is not None:
            return result
        return parse_events(read_json_bytes(path), path)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from e


def _pieces(f: BinaryIO, path: Path) -> Iterator[bytes]:
    """The file's JSON text in pieces of about ``_READ_CHUNK`` bytes, gunzipped when gzip."""
    gz = f.read(2) == b"\x1f\x8b"
    f.seek(0)
    if not gz:
        while piece := f.read(_READ_CHUNK):
            yield piece
        return
    d = zlib.decompressobj(wbits=31)
    try:
        while not d.eof:
            chunk = d.unconsumed_tail or f.read(_READ_CHUNK)
            if not chunk:
                break
            yield d.decompress(chunk, _READ_CHUNK)
    except zlib.error as e:
        raise InputError(f"{path}: corrupt gzip data ({e})") from e
    if not d.eof:
        raise InputError(f"{path}: truncated gzip file: the trace was cut short")


def _prefetched(pieces: Iterator[bytes], depth: int = 2) -> Iterator[bytes]:
    """Run ``pieces`` on a thread, ``depth`` items ahead: zlib releases the GIL, so the next
    piece is decompressed while this one is decoded. Exceptions arrive in order; a consumer
    that stops early stops the thread."""
    queue: Queue = Queue(maxsize=depth)
    stop, done = threading.Event(), object()

    def produce() -> None:
        try:
            for piece in pieces:
                while not stop.is_set():
                    try:
                        queue.put(piece, timeout=0.1)
                        break
                    except Full:
                        continue
                if stop.is_set():
                    return
            queue.put(done)
        except BaseException as e:  # noqa: BLE001 (handed to the consumer, raised there)
            queue.put(e)

    thread = threading.Thread(target=produce, daemon=True, name="zym-gunzip")
    thread.start()
    try:
        while (item := queue.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting to hand over its last item
            with contextlib.suppress(Empty):
                queue.get(timeout=0.05)


_ARRAY_OPEN = b'\n  "traceEvents": ['
_BETWEEN_EVENTS = b"\n  },\n  {"
_ARRAY_CLOSE = b"\n  ]"
_HEADER_LIMIT = 1 << 24  # Kineto's header is a few kB; past this the layout is not Kineto's


def _decode_streaming(pieces: Iterator[bytes], path: Path
                      ) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    """Decode Kineto's own layout piece by piece; None when the text is laid out otherwise."""
    buf = bytearray()
    for piece in pieces:
        buf += piece
        start = buf.find(_ARRAY_OPEN)
        if start >= 0:
            break
        if len(buf) > _HEADER_LIMIT:
            return None
    else:
        return None
    header = bytes(buf[:start + len(_ARRAY_OPEN)])
    del buf[:start + len(_ARRAY_OPEN)]
    acc = _GroupAccumulator(path)
    for piece in pieces:
        buf += piece
        cut = buf.rfind(_BETWEEN_EVENTS)
        if cut > 0:
            if not acc.add_array(buf, cut + 4):  # events up to and with this one's "\n  }"
                return None
            del buf[:cut + 5]  # the rest starts at the next event's "\n  {"
    close = buf.rfind(_ARRAY_CLOSE)
    trailer = bytes(buf[close + len(_ARRAY_CLOSE):]) if close >= 0 else b""
    if close < 0 or not acc.add_array(buf, close):
        return None
    try:
        top = msgspec.json.decode(header + b"]" + trailer, type=_TraceFile)
    except msgspec.MsgspecError:
        return None
    return acc.groups(), top


class _GroupAccumulator:
    """Decodes comma-separated event text and keeps the columns of each event group."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.parts: dict[str, list[pl.DataFrame]] = {group: [] for group in _GROUP_SCHEMAS}

    def add_array(self, buf: bytearray, end: int) -> bool:
        """Decode ``buf[:end]``, whole events separated by commas, in place: its leading
        newline and the byte at ``end`` become the brackets of a JSON array (no copy).
        False when it does not decode as JSON (not Kineto's layout)."""
        if end <= 0:
            return True
        buf[0], buf[end] = ord("["), ord("]")
        try:
            with memoryview(buf) as view:
                events = _DECODER.decode(view[:end + 1])
        except msgspec.ValidationError as e:
            raise InputError(f"{self.path}: malformed trace event ({e})") from e
        except msgspec.DecodeError:
            return False
        self.add_events(events)
        return True

    def add_events(self, events: list[_Event]) -> None:
        for group, frame in _group_frames(events).items():
            self.parts[group].append(frame)

    def groups(self) -> dict[str, pl.DataFrame]:
        groups = {g: pl.concat(dfs) if dfs else pl.DataFrame(schema=_GROUP_SCHEMAS[g])
                  for g, dfs in self.parts.items()}
        if sum(df.height for df in groups.values()) == 0:
            raise InputError(f"{self.path}: JSON, but no torch.profiler events (python_function, "
                             "cpu_op, cuda_runtime, kernel...): not a Kineto trace")
        return groups


def read_json_bytes(path: Path) -> bytearray:
    """The whole JSON text of a trace file, gunzipped when it is gzip."""
    with open(path, "rb") as f:
        return bytearray().join(_pieces(f, path))


def parse_events(text: bytes | bytearray, path: Path) -> tuple[dict[str, pl.DataFrame], _TraceFile]:
    """Decode a whole JSON text into one frame per event group (python, op, call, gpu).

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
    acc = _GroupAccumulator(path)
    for start in range(0, len(raws), BATCH_EVENTS):
        try:
            acc.add_events(_DECODER.decode(b"[" + b",".join(raws[start:start + BATCH_EVENTS])
                                           + b"]"))
        except msgspec.ValidationError as e:
            raise InputError(f"{path}: malformed trace event ({e})") from e
    return acc.groups(), top


def _group_frames(events: list[_Event]) -> dict[str, pl.DataFrame]:
    """Columns of the complete events that zym reads, one frame per event group.

    Events are split by group with polars, gathered with ``itemgetter`` and read with
    ``map(attrgetter)``: C loops, no Python bytecode per event, and each group reads only the
    fields it has (GPU activity: device, stream, grid...; torch ops: shapes).
    """
    rows = (pl.DataFrame(dict(zip(("ph", "cat"), _columns(events, "ph", "cat"))),
                         schema={"ph": pl.String, "cat": pl.String})
            .with_row_index("i")
            .filter(pl.col("ph") == "X")
            .select("i", pl.col("cat").replace_strict(_GROUP_OF, default=None).alias("group"))
            .drop_nulls("group")
            .group_by("group").agg("i"))
    out = {}
    for group, indices in rows.iter_rows():
        ev = itemgetter(*indices)(events) if len(indices) > 1 else (events[indices[0]],)
        schema = _GROUP_SCHEMAS[group]
        name, cat, pid, tid, ts, dur, args = _columns(ev, "name", "cat", "pid", "tid", "ts",
                                                      "dur", "args")
        args = [a or _NO_ARGS for a in args]
        cols = {"cat": cat, "name": name, "pid": _int_column(pid), "tid": _int_column(tid),
                "ts_us": ts, "dur_us": dur}
        fields = [f for f in schema if f not in cols]
        cols.update(zip(fields, _columns(args, *[_ARG_ATTR[f] for f in fields])))
        if group == "op":
            cols["op_shapes"] = list(map(bytes, cols["op_shapes"]))
            cols["op_dtypes"] = list(map(bytes, cols["op_dtypes"]))
        out[group] = pl.DataFrame(cols, schema=schema)
    if "op" in out:  # an absent shape was decoded as empty bytes
        out["op"] = out["op"].with_columns(pl.col("op_shapes", "op_dtypes").replace(b"", None))
    return out


def _columns(items: list, *attrs: str) -> list[list]:
    """The named attributes of ``items``, one list per attribute (map + attrgetter run in C)."""
    return [list(map(attrgetter(a), items)) for a in attrs]


_DECODER = msgspec.json.Decoder(list[_Event])
BATCH_EVENTS = 10_000
_NO_ARGS = _Args()
_GROUP_OF = ({c: "python" for c in PYTHON_CATS} | {c: "op" for c in OP_CATS}
             | {c: "call" for c in CALL_CATS} | {c: "gpu" for c in GPU_CATS})
# Event field -> _Args attribute, for the fields that live in "args".
_ARG_ATTR = {"external_id": "external_id", "correlation_id": "correlation",
             "python_id": "python_id", "python_parent_id": "python_parent_id",
             "device_id": "device", "stream_id": "stream", "size_bytes": "bytes", "cbid": "cbid",
             "graph_id": "graph_id", "op_shapes": "input_dims", "op_dtypes": "input_type",
             **{f"{d}_{axis}": f"{d}.{axis}" for d in ("grid", "block") for axis in "xyz"}}
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


