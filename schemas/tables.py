"""The capture file's logical tables, as code.

One Parquet file holds six logical tables as a tagged union (see README.md beside this file):
every row has a ``record`` tag, and each record kind uses the subset of the shared columns listed
here. A column has one name, type and unit in every table where it appears, so ``correlation_id``
in ``call`` and ``gpu`` join without renaming.

Columns are declared once, below, and both the pyarrow schema (for writers and for users of
pyarrow and DuckDB) and the polars schema (for zym's analysis, which never needs pyarrow) are
derived from the declaration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # one of _ARROW_TYPES
    doc: str
    unit: str = ""


_C = Column
COLUMNS: dict[str, Column] = {c.name: c for c in [
    _C("record", "string", "record kind: frame, stack, span, range, call or gpu"),
    _C("pid", "int64", "OS process id"),
    _C("tid", "int64", "OS thread id (system tid where the producer knows it)"),
    _C("ts_ns", "int64", "start time in the capture's clock domain", "ns"),
    _C("dur_ns", "int64", "duration", "ns"),
    _C("name", "string", "frame: function; call: API name; gpu: kernel or activity name; "
                         "range: the range's name as the program gave it"),
    _C("kind", "string", "frame: FRAME_KINDS; call: CALL_KINDS; gpu: GPU_KINDS; "
                         "range: RANGE_KINDS"),
    _C("correlation_id", "int64", "CUDA correlation id: joins a call to the GPU work it caused"),
    _C("stack_id", "int64", "leaf node of the interned call stack (stack table)"),
    _C("device_id", "int32", "CUDA device ordinal"),
    _C("stream_id", "int64", "CUDA stream id"),
    _C("size_bytes", "int64", "bytes copied or set", "bytes"),
    _C("copy_kind", "string", "copy direction: HtoD, DtoH, DtoD, HtoH, PtoP"),
    _C("src_mem", "string", "copy source memory: pageable, pinned, device, managed, array"),
    _C("dst_mem", "string", "copy destination memory: pageable, pinned, device, managed, array"),
    _C("grid_x", "int32", "kernel grid size, x"),
    _C("grid_y", "int32", "kernel grid size, y"),
    _C("grid_z", "int32", "kernel grid size, z"),
    _C("block_x", "int32", "kernel block size, x"),
    _C("block_y", "int32", "kernel block size, y"),
    _C("block_z", "int32", "kernel block size, z"),
    _C("graph_id", "int64", "CUDA graph id of a kernel replayed by a graph launch"),
    _C("cbid", "int32", "CUPTI callback id of the API call"),
    _C("op_id", "int64", "torch op id (Kineto External id) of the innermost op"),
    _C("op_shapes", "string", "input shapes of the innermost torch op, JSON"),
    _C("op_dtypes", "string", "input dtypes of the innermost torch op, JSON"),
    _C("op_seq", "int64", "autograd sequence number of a torch op's span: the op ran with "
                          "autograd recording it (grad mode on); null: not recorded "
                          "(inference or no-grad mode), not an op, or not said"),
    _C("frame_id", "int64", "frame id (frame table)"),
    _C("parent_id", "int64", "parent stack node; null at a root"),
    _C("depth", "int32", "depth of a stack node; roots are 0. range: nesting depth on its "
                         "thread, outermost 0"),
    _C("file", "string", "source file of a frame; the NVTX domain of an nvtx frame (null: "
                         "the default domain)"),
    _C("line", "int32", "line of a frame: the executing line where known, else the first line"),
    _C("source", "string", "text of a frame's line, stripped, at most 200 characters; null "
                           "where unknown"),
    _C("domain", "string", "NVTX domain of a range; null: the default domain"),
    _C("clipped", "string", "which end of a range the capture did not record, so that the "
                            "range is cut at the recording's start or end: start | end | "
                            "both (a continuous capture's file cuts a range at its interval's "
                            "bounds); null: both recorded"),
]}

# Which columns each record kind uses, in file order. `record` leads every table.
TABLES: dict[str, tuple[str, ...]] = {
    "frame": ("record", "frame_id", "kind", "name", "file", "line", "source"),
    "stack": ("record", "stack_id", "parent_id", "frame_id", "depth"),
    "span": ("record", "pid", "tid", "ts_ns", "dur_ns", "stack_id", "op_id",
             "op_shapes", "op_dtypes", "op_seq"),
    "range": ("record", "pid", "tid", "ts_ns", "dur_ns", "name", "kind", "domain", "clipped",
              "stack_id", "depth"),
    "call": ("record", "pid", "tid", "ts_ns", "dur_ns", "name", "kind", "correlation_id",
             "stack_id", "device_id", "stream_id", "size_bytes", "copy_kind", "cbid", "op_id",
             "op_shapes", "op_dtypes"),
    "gpu": ("record", "pid", "device_id", "stream_id", "ts_ns", "dur_ns", "name", "kind",
            "correlation_id", "size_bytes", "copy_kind", "src_mem", "dst_mem", "grid_x",
            "grid_y", "grid_z", "block_x", "block_y", "block_z", "graph_id"),
}
# Sort order of record kinds in the file: small lookup tables first, so a reader of
# frames and stacks touches only the first row groups.
RECORD_ORDER: tuple[str, ...] = ("frame", "stack", "span", "range", "call", "gpu")
# Columns a record of that kind must have filled in.
REQUIRED: dict[str, tuple[str, ...]] = {
    "frame": ("frame_id", "kind", "name"),
    "stack": ("stack_id", "frame_id", "depth"),
    "span": ("pid", "tid", "ts_ns", "dur_ns", "stack_id"),
    "range": ("pid", "tid", "ts_ns", "dur_ns", "name", "kind"),
    "call": ("pid", "tid", "ts_ns", "dur_ns", "name", "kind"),
    "gpu": ("ts_ns", "dur_ns", "name", "kind"),
}

FRAME_KINDS = ("python", "torch_op", "native", "cuda_api", "nvtx")
RANGE_KINDS = ("nvtx", "nvtx_mark")  # an NVTX range (push/pop, start/end); an nvtxMark instant
CLIPPED = ("start", "end", "both")
CALL_KINDS = ("launch", "copy", "memset", "sync", "other")
GPU_KINDS = ("kernel", "copy", "memset", "sync")
COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP")
FILE_COLUMNS: tuple[str, ...] = tuple(COLUMNS)


def _arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    return {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32()}[name]


def _polars_type(name: str) -> pl.DataType:
    import polars as pl

    return {"string": pl.String(), "int64": pl.Int64(), "int32": pl.Int32()}[name]


def arrow_schema(table: str | None = None) -> pa.Schema:
    """The pyarrow schema of one logical table, or of the whole file when ``table`` is None.

    Field metadata carries each column's doc and unit, so they travel with the file.
    """
    import pyarrow as pa

    names = FILE_COLUMNS if table is None else TABLES[table]
    return pa.schema([
        pa.field(n, _arrow_type(COLUMNS[n].type),
                 metadata={"doc": COLUMNS[n].doc, "unit": COLUMNS[n].unit})
        for n in names
    ])


def polars_schema(table: str | None = None) -> dict[str, pl.DataType]:
    """The polars schema (column name to dtype) of one logical table, or of the whole file."""
    names = FILE_COLUMNS if table is None else TABLES[table]
    return {n: _polars_type(COLUMNS[n].type) for n in names}
