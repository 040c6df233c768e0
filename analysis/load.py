"""Load a capture for analysis: a zym capture file, or a Kineto trace converted in memory."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from zym.schemas.errors import InputError
from zym.schemas.io import Capture, is_parquet, open_capture
from zym.schemas.memory import release_freed_memory
from zym.schemas.meta import CaptureMeta

if TYPE_CHECKING:
    from .budget import Sample

# The tables the analysis holds. Spans (Kineto's CPU slices) are read by queries, a part at a
# time (``SpanTable``): steps, the profiler's own cost, calls per enclosing Python call.
ANALYSIS_TABLES = ("frame", "stack", "call", "gpu")
# Columns no analysis reads, left out of its load (the exports read the capture with them;
# ``facts.conform`` holds any asked for as nulls): 100-200 MB at 12.5 M calls; the block
# dimensions ~120 MB at 10 M GPU operations; the spans' operator shapes (the analysis reads the
# calls') ~60 MB at 7.3 M spans.
UNREAD = {"call": ("device_id", "stream_id", "cbid"), "gpu": ("block_x", "block_y", "block_z"),
          "span": ("op_shapes", "op_dtypes")}


class SpanTable:
    """A capture's CPU spans (Kineto's slices: ``pid, tid, ts_ns, dur_ns, stack_id, op_id``),
    read by queries that keep few of them (a step function's spans, the ops that launched) or
    a part at a time (the spans in each launch gap), never whole: 73 M spans are ~2.3 GB (the
    bundled trace x600). Held in memory for a trace imported in memory; else read from the
    capture file at each query, every part checked (``schemas.validate``) on first use.
    ``window``: only the spans that overlap ``[t0, t1)``."""

    PART_ROWS = 1 << 20

    def __init__(self, held: pl.DataFrame | None = None, capture: Capture | None = None,
                 skip: Collection[str] = (), window: tuple[int, int] | None = None) -> None:
        self._held, self._capture, self._skip, self.window = held, capture, tuple(skip), window
        self._checked = capture is None
        self._height: int | None = None

    @property
    def columns(self) -> list[str]:
        if self._held is not None:
            return self._held.columns
        return list(self._capture.scan("span", skip=self._skip).collect_schema())

    @property
    def height(self) -> int:
        if self._height is None:
            if self.window is None and self._held is not None:
                self._height = self._held.height
            elif self.window is None:
                self._height = self._capture.rows("span")
            else:
                self._height = int(self.collect(self.lazy().select(pl.len())).item())
        return self._height

    def lazy(self) -> pl.LazyFrame:
        """The spans as a query (collect it with :meth:`collect`: a part at a time)."""
        self.check()
        return self._within(self._held.lazy() if self._held is not None else
                            self._capture.scan("span", skip=self._skip))

    def _within(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        if self.window is None:
            return lf
        t0, t1 = self.window
        return lf.filter((pl.col("ts_ns") < t1) & (pl.col("ts_ns") + pl.col("dur_ns") > t0))

    def collect(self, query: pl.LazyFrame) -> pl.DataFrame:
        """``query`` (built on :meth:`lazy`) run by polars' streaming engine: the spans are
        read a part at a time, and only what the query keeps is held."""
        try:
            return query.collect(engine="streaming")
        except (pl.exceptions.PolarsError, OSError) as e:
            if self._capture is None:
                raise
            raise self._capture.unreadable("span", e) from e

    def parts(self, columns: Collection[str]) -> Iterator[pl.DataFrame]:
        """The spans' ``columns``, a part at a time (held: :attr:`PART_ROWS` rows; in a file:
        those of each slice of :attr:`PART_ROWS` file rows)."""
        self.check()
        if self._held is not None:
            held = (self._held.select(columns) if self.window is None else
                    self.collect(self.lazy().select(columns)))
            for at in range(0, held.height, self.PART_ROWS):
                yield held.slice(at, self.PART_ROWS)
            return
        for query in self._capture.slices("span", self._skip, self.PART_ROWS):
            yield self.collect(self._within(query).select(columns))

    def each_part(self, columns: Collection[str]) -> Iterator[pl.DataFrame]:
        """:meth:`parts`, where a file's table not yet checked is checked in the same pass:
        each part read once for both (at the bundled trace x600, 73 M spans, a pass is
        seconds). A table of one part is read whole, checked, and held: its queries then
        read memory, not the file (~0.1 s less on the bundled trace's ~120,000 spans). The
        table counts as checked once every part has been read."""
        if not self._checked and self._capture.rows("span") <= self.PART_ROWS:
            self._hold()
        if self._checked:
            yield from self.parts(columns)
            return
        for part in self._capture.parts("span", self._skip, self.PART_ROWS):
            yield (part.select(columns) if self.window is None else
                   self._within(part.lazy()).select(columns).collect())
        self._checked = True

    def whole(self) -> pl.DataFrame:
        """Every span in memory (the exports': a timeline draws each one)."""
        if self._held is None:
            self._hold()
        return self._held if self.window is None else self._within(self._held.lazy()).collect()

    def within(self, t0: int, t1: int) -> SpanTable:
        """The spans that overlap ``[t0, t1)`` (and this table's window)."""
        if self.window is not None:
            t0, t1 = max(t0, self.window[0]), min(t1, self.window[1])
        out = SpanTable(self._held, self._capture, self._skip, (t0, t1))
        out._checked = self._checked
        return out

    def _hold(self) -> None:
        """The file's whole table, checked, in memory (constant columns stored once)."""
        self._held = constant_columns(self._capture.load("span", skip=self._skip))
        self._checked = True

    def check(self) -> None:
        """Every row checked, a part at a time (before the first query reads any): a pass of
        :meth:`each_part` that keeps nothing."""
        if not self._checked:
            for _part in self.each_part(()):
                pass


@dataclass
class CaptureData:
    """The tables of one capture, in memory (the spans read on demand: :class:`SpanTable`),
    with their metadata."""

    source: Path
    meta: CaptureMeta
    frames: pl.DataFrame
    stacks: pl.DataFrame
    calls: pl.DataFrame
    gpu: pl.DataFrame
    # The spans: a table in memory (Kineto import), or read from the capture file as each
    # query runs; None when the producer recorded none.
    span_source: SpanTable | pl.DataFrame | None = None
    # Where the capture was too large for the memory budget: how the tables above sample it
    # (:mod:`zym.analysis.budget`); None: they are the whole capture.
    sample: Sample | None = None

    def __post_init__(self) -> None:
        if isinstance(self.span_source, pl.DataFrame):
            self.span_source = SpanTable(held=self.span_source)

    @property
    def span_table(self) -> SpanTable | None:
        """The spans, for queries that read a part at a time (the analysis's)."""
        return self.span_source

    def spans(self) -> pl.DataFrame | None:
        """Every span in memory (``pid, tid, ts_ns, dur_ns, stack_id, op_id, ...``), or None:
        the exports' (the analysis reads :attr:`span_table`)."""
        return self.span_source.whole() if self.span_source is not None else None


# Columns with a handful of distinct values (kinds, copy directions, memory kinds): held as
# categorical codes, 4 bytes a row instead of a string view, on tables of millions of rows.
ENUM_COLUMNS = ("kind", "copy_kind", "src_mem", "dst_mem")


def _compact(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` as the analysis holds it: enum columns as categories, constant columns
    stored once, and every column in one piece. A capture is read one row group (2^20 rows)
    at a time; beside the one-piece columns added to it (constants, the analysis's own), a
    frame whose columns are cut differently is copied whole, every column, by each eager
    polars query on it (at 10 M GPU operations 0.3-0.5 s and ~0.9 GB a query)."""
    table = table.with_columns(pl.col(c).cast(pl.Categorical) for c in ENUM_COLUMNS
                               if table.schema.get(c) == pl.String)
    return constant_columns(table).rechunk()


def constant_columns(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with each column that holds one value in every row (all null, or one integer)
    as a constant: the same values and type, stored once instead of once per row (a capture's
    single process id, the fields its producer never records: at 10 M rows, 40-80 MB each)."""
    if table.height == 0:
        return table
    same = []
    for name, dtype in table.schema.items():
        col = table[name]
        nulls = col.null_count()
        if nulls == table.height:
            same.append(pl.lit(None, dtype).alias(name))
        elif nulls == 0 and dtype.is_integer() and col.min() == col.max():
            same.append(pl.lit(col[0], dtype).alias(name))
    return table.with_columns(same) if same else table


# Text columns of few distinct values on millions of rows, held as categorical codes by an
# analysis that owns its tables: API and kernel names, and the torch ops' input shapes and
# dtypes (JSON text, ~100 bytes a call: 0.7 GB at 7.2 M calls; their consumers cast the few
# rows or distinct values they read back to text).
CODED = {"call": ("name", "op_shapes", "op_dtypes"), "gpu": ("name",)}


def api_codes(data: CaptureData) -> CaptureData:
    """``data`` with the text columns of :data:`CODED` as categorical codes, as ``Facts``
    reads them (``Facts.calls``' ``api`` column is then the calls' names, not a second copy):
    for an analysis that owns its tables (:func:`zym.analysis.report.analyze`). The names'
    text was ~0.4 GB at 10 M calls and ~0.28 GB at 10 M GPU operations (a 16-byte view per row
    and the bytes of names longer than 12), the codes 4 bytes a row. Exports keep the text
    (they load the capture themselves)."""
    text = [c for c in CODED["call"] if data.calls.schema.get(c) == pl.String]
    if text:
        data.calls = data.calls.with_columns(pl.col(text).cast(pl.Categorical))
    if data.gpu.schema.get("name") == pl.String:
        data.gpu = data.gpu.with_columns(pl.col(CODED["gpu"]).cast(pl.Categorical))
    return data


def cut_short(meta) -> dict | None:
    """Where a torch.profiler trace was cut short (its writer killed, a full disk, a copy
    stopped): ``text_bytes_read``, ``gzip_cut``, ``lost`` (``"an event"``, ``"nothing"``:
    the text ends between events, ``"the keys after its events"``) and
    ``complete_until_ns`` (every event group whole up to there; events after it are left
    out); None for a whole trace or a capture."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    got = extra.get("cut_short")
    return got if isinstance(got, dict) else None


def load_capture(path: str | Path, progress: Callable[[str], None] | None = None,
                 codes: bool = False, skip: Mapping[str, Collection[str]] | None = None,
                 budget: int | None = None, budget_given: bool = True) -> CaptureData:
    """Load ``path`` (zym Parquet capture, or Kineto ``.json``/``.json.gz``) for analysis.
    ``codes``: a capture file's calls' and GPU operations' names read as categorical codes
    (what :func:`api_codes` makes of them; their text is then never held for every row);
    ``skip``: per table, columns left out (the analysis': :data:`UNREAD`); ``budget``: bytes
    the analysis may hold: a capture file (or a trace imported out of core) whose analysis
    would hold more is sampled to fit (:mod:`zym.analysis.budget`). ``budget_given``: the
    user gave ``budget`` (``--memory-budget``): a trace past it at the in-memory import's cost
    an event is imported out of core in it, and a sample fits it; False, ``budget`` is the
    default (half the memory available): a trace is imported out of core by the default
    rule (past half the memory available, at least 8 M events, in the import's default
    budget), and a sample fits :data:`zym.analysis.budget.DEFAULT_SAMPLE_BYTES`. None: no
    budget (the whole capture)."""
    skip = skip or {}
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a capture file")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    if not is_parquet(path):
        from zym.capture.kineto import looks_like_kineto
        from zym.capture.kineto_stream import load_or_import

        if not looks_like_kineto(path):
            raise InputError(f"{path}: neither a zym capture (Parquet) nor a torch.profiler "
                             "trace (JSON, optionally gzipped)")
        routed = budget if budget_given else None
        got = load_or_import(path, progress, _in_memory_events(routed), routed)
        if isinstance(got, Path):  # a large trace, imported out of core into a capture
            return _load_file(got, path, progress, codes, skip, budget, budget_given)
        tables, meta = got
        tables = {t: _compact(tables[t].drop(skip.get(t, ()), strict=False))
                  if t in ANALYSIS_TABLES else tables[t] for t in tables}
        if "span" in tables:
            tables["span"] = constant_columns(tables["span"].drop(skip.get("span", ()),
                                                                  strict=False))
        release_freed_memory(tables["call"].height + tables["gpu"].height
                             + (tables["span"].height if "span" in tables else 0))
        return CaptureData(path, meta, tables["frame"], tables["stack"], tables["call"],
                           tables["gpu"], tables.get("span"))
    return _load_file(path, path, progress, codes, skip, budget, budget_given)


def _in_memory_events(budget: int | None) -> int | None:
    """Decoded events up to which a trace's tables are built in memory within ``budget``
    (None: the default, half the memory available)."""
    if budget is None:
        return None
    from zym.capture.kineto_stream import ANALYZE_BYTES_PER_EVENT, analyze_in_memory_events

    return min(analyze_in_memory_events(), max(1, budget // ANALYZE_BYTES_PER_EVENT))


def _load_file(path: Path, source: Path, progress: Callable[[str], None] | None, codes: bool,
               skip: Mapping[str, Collection[str]], budget: int | None = None,
               budget_given: bool = True) -> CaptureData:
    """:func:`load_capture` of a capture file (``source``: what the user named: the file, or
    the trace it was imported from)."""
    if progress:
        progress("reading capture")
    cap = open_capture(path)
    sample = None
    if budget is not None:
        from .budget import sampled

        got = sampled(cap, budget, progress, codes, skip, budget_given)
        if got is not None:  # the sample: held, or in a capture of its own
            cap, sample, loaded = got
            if loaded is not None:  # (read as this reads it)
                return replace(loaded, source=source, sample=sample)
    return load_opened(cap, source, codes, skip, sample)


def read_codes(table: str, codes: bool = True) -> tuple[str, ...]:
    """The columns of ``table`` read as categorical codes: the enum columns, and with
    ``codes`` the names (:data:`CODED`)."""
    return ENUM_COLUMNS + (CODED.get(table, ()) if codes else ())


def _read_table(cap: Capture, table: str, codes: bool,
                skip: Mapping[str, Collection[str]]) -> pl.DataFrame:
    """One table of ``cap`` as the analysis holds it: enum columns (and names, with ``codes``)
    cast to categories as each row group is read (the text is never held whole: ~0.6 s less
    at 10 M GPU operations), ``skip``'s columns left out, compacted."""
    return _compact(cap.load(table, read_codes(table, codes), skip.get(table, ())))


def load_held(cap: Capture, held: Mapping[str, pl.DataFrame], codes: bool = True,
              skip: Mapping[str, Collection[str]] = UNREAD) -> CaptureData:
    """The capture ``cap`` as :func:`load_opened` reads it (``codes``, ``skip``), its calls,
    GPU operations and spans the rows ``held`` (read from it as ``read_codes(table, codes)``
    and ``skip`` say: a sample kept in memory), every row checked as a read of the file
    checks it; the spans held, not read from a file."""
    from zym.schemas.output import display
    from zym.schemas.validate import check_refs, check_table

    shown = display(cap.path)
    frames, stacks = (_read_table(cap, t, codes, skip) for t in ("frame", "stack"))
    rows = {}
    for table in ("call", "gpu", "span"):
        rows[table] = check_table(table, held[table], shown)
        check_refs(table, rows[table], stacks["stack_id"], shown)
    return CaptureData(cap.path, cap.meta, frames, stacks, _compact(rows["call"]),
                       _compact(rows["gpu"]), rows["span"])


def load_opened(cap: Capture, source: Path, codes: bool, skip: Mapping[str, Collection[str]],
                sample: Sample | None = None) -> CaptureData:
    """The tables of the opened capture ``cap`` (``source``, ``codes``, ``skip``: as
    :func:`_load_file`'s; ``sample``: how ``cap`` samples the capture ``source`` names)."""
    tables = {t: _read_table(cap, t, codes, skip) for t in ANALYSIS_TABLES}
    # the spans are read from the file by each query, never held whole
    spans = SpanTable(capture=cap, skip=skip.get("span", ()))
    return CaptureData(source, cap.meta, tables["frame"], tables["stack"], tables["call"],
                       tables["gpu"], spans, sample)
