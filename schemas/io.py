"""Read and write zym capture files.

Writing goes through pyarrow (one row group run per record kind, so row groups stay
homogeneous); reading goes through polars alone, so ``zym analyze`` never imports pyarrow.

>>> cap = open_capture("trace.parquet")            # doctest: +SKIP
>>> cap.meta.producer, cap.scan("gpu").select("name", "dur_ns").collect()   # doctest: +SKIP
"""
from __future__ import annotations

import sys
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from .errors import InputError, SchemaError, first_line
from .integrity import HASH_KEY, HASH_PLACEHOLDER, seal, verify
from .meta import META_KEY, VERSION_KEY, CaptureMeta
from .output import atomic_output, display
from .tables import COLUMNS, RECORD_ORDER, REQUIRED, TABLES, arrow_schema, polars_schema
from .text import printable
from .version import ADDED_IN, READABLE_VERSIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    import pyarrow as pa

PARQUET_MAGIC = b"PAR1"
ROW_GROUP_ROWS = 1 << 20


def conform(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """Shape ``df`` into the logical table ``table``: add absent columns as nulls, cast, order.

    Raises ``SchemaError`` on a column the table does not have, or a null in a required column.
    """
    schema = polars_schema(table)
    extra = set(df.columns) - set(schema)
    if extra:
        raise SchemaError(f"{table} table: unknown column(s) {sorted(extra)}")
    if not df.width:  # no columns, no rows (in polars 1.x, literals over it made one row)
        df = pl.DataFrame(schema={n: t for n, t in schema.items() if n != "record"})
    df = df.with_columns(
        [pl.lit(table).alias("record")]
        + [pl.lit(None, dtype).alias(n) for n, dtype in schema.items()
           if n not in df.columns and n != "record"]
    ).select([pl.col(n).cast(dtype, strict=True) for n, dtype in schema.items()])
    missing = [c for c in REQUIRED[table] if df.height and df[c].null_count()]
    if missing:
        raise SchemaError(f"{table} table: null values in required column(s) {missing}")
    return df


def write_capture(path: str | Path, tables: Mapping[str, pl.DataFrame], meta: CaptureMeta,
                  force: bool = True) -> Path:
    """Write one capture file through ``schemas.output.atomic_output`` (temporary file, fsync,
    rename; ``force``: replace an existing regular file), sealed with a content hash.

    ``tables`` maps record kinds to frames holding any subset of that table's columns;
    kinds that are absent are written empty. Every frame is conformed (and so type-checked)
    before the output is touched.
    """
    conformed = {record: conform(record, tables.get(record, pl.DataFrame()))
                 for record in RECORD_ORDER}
    with CaptureWriter(path, meta, force) as writer:
        for record in RECORD_ORDER:
            writer.write(record, conformed[record])
    return Path(path)


# How capture files are encoded: those kept (checked by any Parquet reader that reads page
# checksums, statistics for any query engine), and a process's own temporary ones.
_KEPT = {"compression": "zstd", "write_statistics": True, "write_page_checksum": True}
_TEMPORARY = {"compression": "lz4", "write_statistics": ["record", "ts_ns"],
              "write_page_checksum": False}
# Columns of kept files written as deltas (DELTA_BINARY_PACKED, not dictionaries): times and
# the ids that grow with them. A torch.profiler trace of 0.54 M rows (the fifth blind round's
# lineocr): 2.55 -> 1.56 MB, written in half the time (docs/benchmarks.md, round 47).
DELTA_COLUMNS = ("ts_ns", "dur_ns", "correlation_id", "op_id")


def _kept_encoding(schema) -> dict:
    """The writer options of a kept file with ``schema``: :data:`_KEPT`, and
    :data:`DELTA_COLUMNS` delta-encoded (every other column dictionary-encoded as before)."""
    return _KEPT | {"use_dictionary": [n for n in schema.names if n not in DELTA_COLUMNS],
                    "column_encoding": {c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS
                                        if c in schema.names}}


class CaptureWriter:
    """A capture file written a part at a time (an import window by window): each
    :meth:`write` adds one record kind's rows as row groups of their own (row groups stay
    homogeneous, whatever the order of the parts). The file appears, sealed, only when the
    ``with`` block ends without an error; until then the old file (if any) is untouched, and
    an error leaves nothing behind (``atomic_output``).

    Each row group is encoded and compressed on a thread of its own while the caller makes
    the next (pyarrow leaves the interpreter meanwhile): one row group in flight at a time,
    so at most one more is held. An import out of core spent ~45% of its windows writing.

    ``temporary``: a file this process writes to read it back itself (a sample for the memory
    budget, a part of a capture) and then removes: encoded for speed (lz4, statistics only
    of the columns zym's readers prune row groups by, ``record`` and ``ts_ns``, no page
    checksums; still sealed), not for keeping: the sample of a span-heavy trace was written
    in ~60% of the time.

    >>> with CaptureWriter("out.parquet", meta) as w:   # doctest: +SKIP
    ...     w.write("call", calls)
    """

    def __init__(self, path: str | Path, meta: CaptureMeta, force: bool = True,
                 temporary: bool = False) -> None:
        self.path, self.meta, self.force = Path(path), meta, force
        self.temporary = temporary

    def __enter__(self) -> CaptureWriter:  # noqa: PYI034 (Self: Python 3.11+)
        from concurrent.futures import ThreadPoolExecutor

        import pyarrow.parquet as pq

        self._schema = arrow_schema().with_metadata(
            {VERSION_KEY: str(SCHEMA_VERSION), META_KEY: self.meta.to_json(),
             HASH_KEY: HASH_PLACEHOLDER})
        self._nulls: dict = {}
        self._output = atomic_output(self.path, force=self.force)
        self._tmp = self._output.__enter__()
        try:
            self._writer = pq.ParquetWriter(self._tmp, self._schema, **(
                _TEMPORARY if self.temporary else _kept_encoding(self._schema)))
        except BaseException:
            self._output.__exit__(*sys.exc_info())
            raise
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="zym-write")
        self._pending = None
        return self

    def write(self, record: str, df: pl.DataFrame) -> None:
        """Add rows of one record kind (any subset of its columns; conformed here). A row
        group at a time: the file layout's copies (categories as text, absent columns as
        nulls) are held for one row group, not for the whole table. A row group's failure
        to write is raised here, at the next call, or at the block's end."""
        if df.height == 0:
            conform(record, df)  # (the columns still checked)
        for part in df.iter_slices(ROW_GROUP_ROWS):
            table = _to_file_layout(conform(record, part), self._schema, self._nulls)
            self._wait()
            self._pending = self._pool.submit(self._writer.write_table, table,
                                              row_group_size=ROW_GROUP_ROWS)

    def _wait(self) -> None:
        """The row group in flight written (its error raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __exit__(self, kind, value, tb) -> bool | None:
        try:
            try:
                self._wait()
            finally:
                self._pool.shutdown(wait=True)
                self._writer.close()
            if kind is None:
                seal(self._tmp)
        except BaseException:
            if kind is None:
                self._output.__exit__(*sys.exc_info())
                raise
        return self._output.__exit__(kind, value, tb)


def _to_file_layout(df: pl.DataFrame, file_schema: pa.Schema,
                    nulls: dict) -> pa.Table:
    """Widen one record kind's frame (at most ``ROW_GROUP_ROWS`` rows) to the file's column
    set: absent columns are slices of one all-null column per type (``nulls``, made on first
    use, all over one buffer of zeros), not new buffers each time (the file's 34 columns, most
    absent from any one record kind: at a million rows, ~0.25 GB of zeros a row group)."""
    import pyarrow as pa

    arrow = df.to_arrow()
    names = set(arrow.column_names)
    cols = []
    for f in file_schema:
        if f.name in names:
            cols.append(arrow.column(f.name).cast(f.type))
            continue
        if f.type not in nulls:
            nulls[f.type] = _all_null(f.type, nulls)
        cols.append(nulls[f.type].slice(0, arrow.num_rows))
    return pa.Table.from_arrays(cols, schema=file_schema)


def _all_null(dtype: pa.DataType, nulls: dict) -> pa.Array:
    """``ROW_GROUP_ROWS`` nulls of ``dtype`` (int32, int64 or string: the file's types),
    their validity and values (or offsets) all views of one shared buffer of zeros."""
    import pyarrow as pa

    if "zeros" not in nulls:
        nulls["zeros"] = pa.py_buffer(bytes(8 * (ROW_GROUP_ROWS + 1)))
    zeros = nulls["zeros"]
    values = [zeros, pa.py_buffer(b"")] if pa.types.is_string(dtype) else [zeros]
    return pa.Array.from_buffers(dtype, ROW_GROUP_ROWS, [zeros, *values],
                                 null_count=ROW_GROUP_ROWS)


@dataclass
class Capture:
    """An opened, validated capture file. Tables are scanned lazily (column and row-group pruning)."""

    path: Path
    meta: CaptureMeta
    version: int = SCHEMA_VERSION
    absent: frozenset[str] = frozenset()   # columns added after this file's version
    # per table: its first and last file row and its row count (``_extent``); "groups": the
    # footer's row groups (``row_groups``)
    _extents: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # what its errors name: the file (None), or the capture a temporary copy was made of
    shown: str | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The capture as its errors name it (one printable line)."""
        return self.shown if self.shown is not None else display(self.path)

    def scan(self, table: str, codes: Collection[str] = (), skip: Collection[str] = (),
             rows: tuple[int, int] | None = None) -> pl.LazyFrame:
        """The rows of one logical table, with that table's columns and types (a column the
        file's version predates reads as nulls; a text column of ``codes`` as categorical
        codes, cast as it is read: its text is not held for every row; the columns of
        ``skip`` not read). ``rows``: only those of the file's rows ``(offset, length)``."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
        types = polars_schema(table)
        cols = [pl.lit(None, types[c]).alias(c) if c in self.absent else
                pl.col(c).cast(pl.Categorical) if c in codes and types[c] == pl.String else
                pl.col(c) for c in TABLES[table] if c != "record" and c not in skip]
        lf = pl.scan_parquet(self.path)
        if rows is not None:
            lf = lf.slice(*rows)
        return lf.filter(pl.col("record") == table).select(cols)

    def slices(self, table: str, skip: Collection[str] = (), rows: int = ROW_GROUP_ROWS,
               codes: Collection[str] = ()) -> Iterator[pl.LazyFrame]:
        """The table as queries over successive ``rows``-row slices of the file (from its
        first row to its last: a windowed import interleaves tables), each run alone: a
        table read in bounded memory, whatever its size (polars' streaming batches run ahead
        of a slower reader and hold what they made). ``codes``: as :meth:`scan`'s."""
        first, last, _ = self._extent(table)
        for at in range(first, last + 1, rows) if first is not None else ():
            yield self.scan(table, codes=codes, skip=skip, rows=(at, min(rows, last + 1 - at)))

    def runs(self, table: str, codes: Collection[str] = (), skip: Collection[str] = (),
             rows: int = ROW_GROUP_ROWS) -> Iterator[pl.LazyFrame]:
        """The table as queries over successive parts of its time, each about ``rows`` rows
        (runs of its row groups, by the ``ts_ns`` statistics of the file's footer; a row group
        that spans two parts is read by both, each row counted in one), each run alone: a
        table read in bounded memory without reading the other tables' rows, however they
        interleave (:meth:`slices` read the bundled trace x600's calls through its spans,
        2.5 s; a query per row group re-read the footer 600 times, 12 s; pyarrow's reader
        kept ~50 MB once done). :meth:`slices` where a row group holds several tables or its
        statistics are missing. ``codes``, ``skip``: as :meth:`scan`'s."""
        groups = self.row_groups()
        mine = None if groups is None else [(t, n) for kind, n, t in groups if kind == table]
        if mine is None or any(t is None for t, _ in mine):
            yield from self.slices(table, skip, rows, codes)
            return
        starts, held = [], 0
        for (lo, _), n in sorted(mine):
            if not starts or held + n > rows:
                starts.append(lo)
                held = 0
            held += n
        ts = pl.col("ts_ns")
        for k, lo in enumerate(starts):
            hi = starts[k + 1] if k + 1 < len(starts) else None
            keep = (ts >= lo) if k else pl.lit(True)
            yield self.scan(table, codes, skip).filter(keep if hi is None else keep & (ts < hi))

    def row_groups(self) -> list[tuple[str, int, tuple | None]] | None:
        """Each row group's table ("" where it is empty), rows, and ``(min, max)`` of its
        ``ts_ns`` (None where the footer has no statistics of it), from the footer alone
        (decoded once: the bundled trace x600's, 1,802 row groups, takes ~50 MB to decode);
        None where a row group holds several tables or its ``record`` column has no
        statistics."""
        if "groups" not in self._extents:
            self._extents["groups"] = self._row_groups()
        return self._extents["groups"]

    def _row_groups(self) -> list[tuple[str, int, tuple | None]] | None:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(self.path).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        rec, ts = names.index("record"), names.index("ts_ns")
        out = []
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            if group.num_rows == 0:
                out.append(("", 0, None))
                continue
            kind, t = group.column(rec).statistics, group.column(ts).statistics
            if kind is None or not kind.has_min_max or kind.min != kind.max:
                return None
            out.append((kind.min, group.num_rows,
                        (t.min, t.max) if t is not None and t.has_min_max else None))
        return out

    def _extent(self, table: str) -> tuple[int | None, int | None, int]:
        """The file rows of ``table``: its first and last (None: no rows) and how many (the
        ``record`` column read once per table and file)."""
        got = self._extents.get(table)
        if got is None:
            try:
                got = self._extents[table] = (
                    pl.scan_parquet(self.path).with_row_index("_i")
                    .filter(pl.col("record") == table)
                    .select(pl.col("_i").min().alias("first"), pl.col("_i").max().alias("last"),
                            pl.len().alias("rows"))
                    .collect().row(0))
            except (pl.exceptions.PolarsError, OSError) as e:
                raise self.unreadable(table, e) from e
        return got

    def load(self, table: str, codes: Collection[str] = (), skip: Collection[str] = ()
             ) -> pl.DataFrame:
        """One table, every field checked (``schemas.validate``): out-of-range or inconsistent
        values are an ``InvalidCaptureError``, never a traceback or a wrong answer. ``codes``:
        text columns read as categorical codes; ``skip``: columns not read (see ``scan``)."""
        from .validate import check_refs, check_stacks, check_table

        df = check_table(table, self._read(table, codes=codes, skip=skip), self.name)
        if table == "stack":
            check_stacks(df, self._keys("frame", "frame_id"), self.name)
        elif table in ("call", "span", "range"):
            check_refs(table, df, self._keys("stack", "stack_id"), self.name)
        return df

    def parts(self, table: str, skip: Collection[str] = (), rows: int = ROW_GROUP_ROWS
              ) -> Iterator[pl.DataFrame]:
        """One table a slice of ``rows`` file rows at a time (:meth:`slices`), each part checked as
        :meth:`load` checks the whole table (every check is of a row alone, or of the
        stack ids it names): a table read in bounded memory, whatever its size."""
        from .validate import check_refs, check_table

        keys = self._keys("stack", "stack_id") if table in ("call", "span", "range") else None
        try:
            for query in self.slices(table, skip, rows):
                part = check_table(table, query.collect(), self.name)
                if keys is not None:
                    check_refs(table, part, keys, self.name)
                yield part
        except (pl.exceptions.PolarsError, OSError) as e:
            raise self.unreadable(table, e) from e

    def file_rows(self) -> int:
        """How many rows the file holds, every table together (its footer's count alone)."""
        return int(pl.scan_parquet(self.path).select(pl.len()).collect().item())

    def rows(self, table: str) -> int:
        """How many rows ``table`` has (only the file's ``record`` column read)."""
        return int(self._extent(table)[2])

    def _read(self, table: str, columns: list[str] | None = None,
              codes: Collection[str] = (), skip: Collection[str] = ()) -> pl.DataFrame:
        try:
            lf = self.scan(table, codes, skip)
            return (lf.select(columns) if columns else lf).collect()
        except (pl.exceptions.PolarsError, OSError) as e:
            raise self.unreadable(table, e) from e

    def unreadable(self, table: str, e: BaseException) -> InputError:
        """The one-line error for ``table`` of this file failing to read (``e``)."""
        return InputError(f"{self.name}: cannot read the {table} table "
                          f"({first_line(e)})")

    def _keys(self, table: str, column: str) -> pl.Series:
        return self._read(table, [column])[column]


def open_capture(path: str | Path) -> Capture:
    """Open a capture file after checking that it is Parquet, zym's, of a readable version,
    and has every column of the schema with its type."""
    path = Path(path)
    _check_parquet_file(path)
    try:
        kv = pl.read_parquet_metadata(path)
        file_schema = pl.read_parquet_schema(path)
    except Exception as e:  # polars raises several types for corrupt footers
        raise InputError(f"{path}: not a readable Parquet file ({first_line(e)})") from e
    version = kv.get(VERSION_KEY)
    if version is None:
        raise SchemaError(f"{path}: a Parquet file, but not a zym capture (no {VERSION_KEY} key)")
    if not (version.isascii() and version.isdigit()) or int(version) not in READABLE_VERSIONS:
        raise SchemaError(
            f"{display(path)}: zym capture schema version {printable(version[:40])}; this zym reads version(s) "
            f"{', '.join(map(str, sorted(READABLE_VERSIONS)))}: upgrade zym or re-import the trace"
        )
    absent = frozenset(c for c, v in ADDED_IN.items() if int(version) < v)
    _check_columns(path, file_schema, absent)
    verify(path, kv.get(HASH_KEY))
    try:
        meta = CaptureMeta.from_json(kv.get(META_KEY, '{"producer": "unknown"}'))
    except (ValueError, TypeError) as e:
        raise SchemaError(f"{display(path)}: corrupt {META_KEY} metadata ({first_line(e)})"
                          ) from e
    return Capture(path, meta, int(version), absent)


def is_parquet(path: str | Path) -> bool:
    """True when the file starts with the Parquet magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def _check_parquet_file(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path}: empty file")
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 4))
        tail = f.read(4)
    if head != PARQUET_MAGIC:
        raise InputError(f"{path}: not a Parquet file")
    if tail != PARQUET_MAGIC:
        raise InputError(f"{path}: truncated Parquet file (no footer): the capture did not finish")


def _check_columns(path: Path, file_schema: Mapping[str, pl.DataType],
                   absent: frozenset[str] = frozenset()) -> None:
    expected = {n: t for n, t in polars_schema().items() if n not in absent}
    missing = [n for n in expected if n not in file_schema]
    if missing:
        raise SchemaError(f"{path}: capture lacks column(s) {', '.join(missing)}")
    wrong = [f"{n} is {file_schema[n]}, expected {COLUMNS[n].type}"
             for n, t in expected.items() if file_schema[n] != t]
    if wrong:
        raise SchemaError(f"{path}: mistyped column(s): {'; '.join(wrong)}")


