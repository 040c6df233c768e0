"""``zym capture --finalize``: a raw capture directory, verified, into one capture file.

Everything read is checked before it is used: the raw streams against their checksums
(``rawcheck``), their columns and value ranges, and ``meta.json`` field by field. A damaged
directory is an error naming the file, never a capture with fewer calls than were recorded.
The eBPF tables and the CUPTI spools (``<name>.cupti`` beside the raw folder) are joined in
memory and written once, through the common output path (``zym.schemas.output``).
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
from zym.schemas.errors import InputError
from zym.schemas.meta import CaptureMeta, meta_from_dict

from .native import unwind_raw
from .probes import PROBES
from .rawcheck import RawCorruptError, read_meta_text, verify_stream
from .sink import (
    RAW_COLUMNS,
    RAW_OPTIONAL,
    STACK_MISSED,
    build_tables,
    json_row,
    raw_polars_schema,
    resolve_stacks,
)

MAX_RAW_DEPTH = 4096  # frames per raw stack; the collector walks at most a few hundred
# Ranges of raw values; anything outside is damage or a foreign file. Columns in _NULLABLE
# may be null (a frame whose code object could not be read has no line).
_NULLABLE = {"frames": {"line"}}
_RANGES = {
    "calls": {"pid": (0, 1 << 31), "tid": (0, 1 << 31), "ts_ns": (0, (1 << 63) - 1),
              "dur_ns": (0, 1 << 50), "probe": (0, len(PROBES) - 1)},
    "frames": {"pid": (0, 1 << 31), "depth": (0, MAX_RAW_DEPTH - 1), "line": (0, 1 << 30)},
    "native_frames": {"pid": (0, 1 << 31), "depth": (0, MAX_RAW_DEPTH - 1)},
    "natives": {"pid": (0, 1 << 31)},
    "maps": {"pid": (0, 1 << 31)},
}


def read_raw_checked(raw_dir: Path, table: str) -> tuple[pl.DataFrame, int]:
    """One raw stream, verified: (rows, bytes left out because no checksum covers them)."""
    arrow, jsonl = raw_dir / f"{table}.arrow", raw_dir / f"{table}.jsonl"
    if jsonl.exists():
        checked = verify_stream(jsonl)
        frame = _decode_jsonl(jsonl, checked.data, table)
    elif arrow.exists():
        checked = verify_stream(arrow)
        frame = _decode_arrow(arrow, checked.data, table)
    else:
        return pl.DataFrame(schema=raw_polars_schema(table)), 0
    _check_ranges(raw_dir / f"{table}.*", frame, table)
    return frame, checked.unverified_bytes


def _decode_arrow(path: Path, data: bytes, table: str) -> pl.DataFrame:
    import pyarrow as pa
    from pyarrow import ipc

    if not data:
        return pl.DataFrame(schema=raw_polars_schema(table))
    try:
        with ipc.open_stream(pa.BufferReader(data)) as reader:
            arrow = reader.read_all()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise RawCorruptError(f"{path}: not a zym raw stream ({_one_line(e)})") from None
    expected = {c: getattr(pa, t)() for c, t in RAW_COLUMNS[table].items()}
    got = {f.name: f.type for f in arrow.schema}
    optional = set(RAW_OPTIONAL.get(table, ()))
    if {c: t for c, t in expected.items() if c in got or c not in optional} != got:
        raise InputError(f"{path}: raw {table} stream has columns {sorted(got)} of other types "
                         "than this zym writes: finalize it with the zym that captured it")
    frame = pl.from_arrow(arrow)
    schema = raw_polars_schema(table)
    return frame.with_columns(pl.lit(None, schema[c]).alias(c) for c in sorted(optional)
                              if c not in got).select(list(schema))


def _decode_jsonl(path: Path, data: bytes, table: str) -> pl.DataFrame:
    schema = raw_polars_schema(table)
    rows = []
    try:
        for line in data.decode("utf-8").splitlines():
            row = json_row(line)
            optional = set(RAW_OPTIONAL.get(table, ()))
            if not isinstance(row, dict) or not set(schema) - optional <= set(row) <= set(schema):
                raise ValueError("a row without the raw columns")
            rows.append({c: row.get(c) for c in schema})
        return pl.DataFrame(rows, schema=schema, strict=True, orient="row")
    except (ValueError, TypeError, OverflowError, RecursionError, pl.exceptions.PolarsError) as e:
        raise RawCorruptError(f"{path}: not a zym raw stream ({_one_line(e)})") from None


def _check_ranges(where: Path, frame: pl.DataFrame, table: str) -> None:
    for col, (lo, hi) in _RANGES[table].items():
        missing = pl.lit(False) if col in _NULLABLE.get(table, ()) else pl.col(col).is_null()
        bad = frame.filter(~pl.col(col).is_between(lo, hi).fill_null(True) | missing)
        if bad.height:
            raise RawCorruptError(f"{where}: {bad.height} row(s) with {col} outside {lo}..{hi} "
                                  f"(first: {bad[col][0]}): damaged or foreign raw stream")


def read_meta_checked(raw_dir: Path) -> CaptureMeta:
    """``meta.json`` as ``CaptureMeta``, each field type-checked; a default when zym was
    killed before writing it."""
    path = raw_dir / "meta.json"
    if not path.exists():
        return CaptureMeta(producer="zym capture", clock_domain="CLOCK_MONOTONIC",
                           extra={"note": "finalized from a raw capture without metadata"})
    try:
        return meta_from_dict(read_meta_text(path))
    except (TypeError, ValueError) as e:
        raise RawCorruptError(f"{path}: {e}") from None


def finalize_raw(raw_dir: Path, output: Path, force: bool = False
                 ) -> tuple[dict[str, pl.DataFrame], CaptureMeta]:
    """Verify ``raw_dir``, build the tables, join the CUPTI spools beside it, write ``output``
    once. Returns the tables written and their metadata."""
    from zym.schemas.io import write_capture
    from zym.schemas.output import check_target

    check_target(output, force)
    if not raw_dir.is_dir():
        raise InputError(f"{raw_dir}: not a folder (give the OUT.parquet.raw folder)")
    meta = read_meta_checked(raw_dir)
    calls, calls_lost = read_raw_checked(raw_dir, "calls")
    frames, frames_lost = read_raw_checked(raw_dir, "frames")
    unwind_raw(raw_dir, meta)     # here, when the capture was not unwound where it ran
    natives, natives_lost = read_raw_checked(raw_dir, "native_frames")
    tables = build_tables(calls, frames, natives)
    resolved = resolve_stacks(calls, frames)
    meta.extra["missed_stacks"] = resolved.filter(pl.col("stack_key") == STACK_MISSED).height
    if calls_lost or frames_lost or natives_lost:  # an unfinished last batch: counted
        meta.dropped["raw_unverified_bytes"] = calls_lost + frames_lost + natives_lost
    spool = raw_dir.with_name(raw_dir.name.removesuffix(".raw") + ".cupti")
    if spool.is_dir():
        from .cupti.finalize import merge_gpu

        tables = merge_gpu(tables, spool, meta)
    write_capture(output, tables, meta, force=force)
    return tables, meta


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__
