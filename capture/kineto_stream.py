"""Import a torch.profiler (Kineto) trace of any size in bounded memory.

``zym import`` decodes the JSON batch by batch (``kineto_json``). While the decoded events fit
the memory budget they stay in memory and the trace is imported whole, as before. Past the
budget the import goes out of core, in two passes:

1. **Spill.** Each time the decoded batches held reach the budget's events, each event group
   (python, op, call, gpu) is converted to integer ns, sorted by start time and written to a
   spill file beside the output (made at the first spill; a row group every
   ``SPILL_ROW_GROUP`` rows, with statistics), and every ``SAMPLE_EVERY``-th start is kept. The
   names and shapes the rows refer to are interned once for the whole trace.
2. **Windows.** The kept starts cut the trace into sub-windows of a quarter of the budget's
   events; a window takes as many as the memory left holds at the most an event has cost so
   far (``_Sizer``: the high-water mark of resident memory during a window). Each window
   reads its events back from the spill files (row groups outside it are skipped by their
   statistics) with the CPU events still open at its start carried over from the window
   before (those whose end is at or after the start, and every event above them up their
   parent links: a root op's Python frame, an op's enclosing op), and builds its tables with
   the in-memory importer's own ``events_to_tables``. The rows that start in the window are
   kept, their frames and stacks mapped to ids interned across the whole trace, and written
   to the capture as row groups of their own. The GPU operations, frames and stacks are
   written last.

So a window's events get the same parents, stacks and calls as in the whole-trace import
wherever they nest the way torch.profiler records them (RecordFunction ops and calls nested
per thread, Python frames inside their parent frame). Row order differs (by window), and
ids are numbered differently (by first appearance). A GPU operation belongs to the process
of its call (by correlation id): searched in its window and the one before, then (in a trace
of several processes) in all the spilled calls; else to the trace's most common process, as
in a whole import.

``zym analyze`` of a trace too large to hold in memory comfortably (:func:`load_or_import`)
imports it this way into a temporary capture, and analyses that.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import polars as pl
from zym.schemas.errors import InputError
from zym.schemas.io import CaptureWriter, write_capture
from zym.schemas.memory import release_freed_memory, reset_peak, resident_mb
from zym.schemas.meta import CaptureMeta
from zym.schemas.output import (
    check_target,
    display,
    process_temp_folder,
    terminate_as_exception,
    write_error,
)
from zym.schemas.validate import check_tables

from .kineto import (
    Progress,
    build_tables,
    capture_meta,
    drop_nested_driver_calls,
    events_to_tables,
    in_ns,
    input_errors,
)
from .kineto_json import (
    GROUP_SCHEMAS,
    LOST_KEYS,
    GroupAccumulator,
    cut_frontier,
    read_events,
)

# The memory an import may use, by default: the decoded events held before they are spilled,
# and a window's events with the tables built from them.
DEFAULT_BUDGET = 1 << 30
# What one event costs at the import's peak (a window's decoded columns, the importer's
# arrays and the tables built from them: ~300 bytes on the bundled trace replicated, ~420 on a
# mixture of experts without Python stacks; docs/benchmarks.md, "Twenty-sixth round"), and the
# memory the process needs beside the events (interpreter, polars, numpy, pyarrow). They size
# the batches held before a spill and the first window; later windows are sized by what the
# ones before used (``_Sizer``).
BYTES_PER_EVENT = 320
BASELINE_BYTES = 256 << 20
MIN_WINDOW_EVENTS = 1000
SPILL_ROW_GROUP = 1 << 16
SAMPLE_EVERY = 256
GROUPS = ("python", "op", "call", "gpu")
CPU_GROUPS = ("python", "op", "call")


def window_events(budget: int) -> int:
    """Events a window (and the decoded batches held before a spill) may hold within
    ``budget`` bytes."""
    return max(MIN_WINDOW_EVENTS, (budget - BASELINE_BYTES) // BYTES_PER_EVENT)


def parse_size(text: str) -> int:
    """``"1G"``, ``"512M"``, ``"2.5GiB"``, ``"800000000"``: bytes (powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = units.get(t[-1:], 1)
    try:
        value = float(t[:-1] if unit > 1 else t)
    except ValueError:
        raise ValueError(f"{text!r}: not a size (e.g. 1G, 512M)") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{text!r}: a size must be positive")
    return int(value * unit)


def _write_spill(rows: pl.DataFrame, spill: Path, out: Path) -> None:
    """``rows`` to the spill file ``spill`` (lz4, row groups with statistics); a write that
    fails (a full disk) is the output's error, one line (polars names the OS error in its
    own error's text: ``os error N``)."""
    try:
        rows.write_parquet(spill, compression="lz4", row_group_size=SPILL_ROW_GROUP,
                           statistics=True)
    except OSError as e:
        raise write_error(out, e) from None
    except pl.exceptions.PolarsError as e:
        if (found := re.search(r"os error (\d+)", str(e))) is None:
            raise
        code = int(found[1])
        raise write_error(out, OSError(code, os.strerror(code))) from None


class _SpillingAccumulator(GroupAccumulator):
    """``GroupAccumulator`` that writes the decoded batches to spill files once they reach
    ``rows`` events (see the module doc); it stays in memory while they fit."""

    def __init__(self, path: Path, parent: Path, rows: int, out: Path) -> None:
        super().__init__(path)
        self.parent, self.rows, self.out = parent, rows, out
        self.folder: Path | None = None  # made in ``parent`` at the first spill
        self.flushes = 0
        self.counts = dict.fromkeys(GROUPS, 0)
        self.samples: list[pl.Series] = []
        self.call_pids: set[int | None] = set()
        self.meta: CaptureMeta | None = None  # the trace's, once decoded

    def add_text(self, buf: bytearray, end: int) -> bool:
        if not super().add_text(buf, end):
            return False
        self._maybe_spill()
        return True

    def add_events(self, events: list) -> None:
        super().add_events(events)
        self._maybe_spill()

    def add_future(self, future: Future) -> None:
        super().add_future(future)
        self._maybe_spill()

    def _held(self) -> int:
        held = 0
        for b in self.batches:
            if isinstance(b, Future):
                if not b.done() or not isinstance(b.result(), tuple):
                    continue
                b = b.result()[0]
            held += sum(df.height for df in b.values())
        return held

    def _maybe_spill(self) -> None:
        if self._held() >= self.rows:
            self._spill()

    def _spill(self) -> None:
        """Write the batches held to the spill folder (made at the first spill: a trace that
        fits never touches the disk); a write that fails is the output's error, one line."""
        batches = [self._merged(b.result()) if isinstance(b, Future) else b
                   for b in self.batches]
        self.batches = []
        for g in GROUPS:
            parts = [b[g] for b in batches if g in b and b[g].height]
            if not parts:
                continue
            rows = in_ns(pl.concat(parts)).sort("ts_ns", maintain_order=True)
            if self.folder is None:
                try:
                    self.folder = Path(tempfile.mkdtemp(prefix=".zym-spill-", dir=self.parent))
                except OSError as e:
                    raise write_error(self.out, e) from None
            _write_spill(rows, self.folder / f"{g}-{self.flushes:06d}.parquet", self.out)
            self.samples.append(rows["ts_ns"].gather_every(SAMPLE_EVERY))
            self.counts[g] += rows.height
            if g == "call":
                self.call_pids.update(rows["pid"].unique().to_list())
        del batches
        self.flushes += 1
        release_freed_memory(self.rows)

    @property
    def spilled(self) -> bool:
        return self.flushes > 0

    def remove(self) -> None:
        """Remove the spill folder, if one was made."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def groups(self) -> dict[str, pl.DataFrame]:
        if not self.spilled:
            return super().groups()
        self._spill()  # the last batches
        if sum(self.counts.values()) == 0:
            raise InputError(f"{self.path}: JSON, but no torch.profiler events (python_function, "
                             "cpu_op, cuda_runtime, kernel...): not a Kineto trace")
        return {}

    def has_events(self) -> bool:
        return self.spilled or super().has_events()

    def spill_files(self, group: str) -> list[Path]:
        return sorted(self.folder.glob(f"{group}-*.parquet")) if self.spilled else []

    def names_table(self) -> pl.DataFrame:
        values = self.names.values
        return pl.DataFrame({"name_id": pl.Series(range(len(values)), dtype=pl.UInt32),
                             "name": pl.Series(values, dtype=pl.String)})

    def shapes_table(self) -> pl.DataFrame:
        values = self.shapes.values
        return pl.DataFrame({"shape_id": pl.Series(range(len(values)), dtype=pl.UInt32),
                             "shape": pl.Series(values, dtype=pl.Binary).cast(pl.String)})

    def edges(self, every: int) -> tuple[list[int], list[int]]:
        """Sub-window starts after the first, about every ``every`` events (from the kept
        starts), and the events of each sub-window (estimated from the kept starts)."""
        if not self.samples:
            return [], []
        starts = pl.concat(self.samples).sort()
        step = max(1, every // SAMPLE_EVERY)
        edges = starts.gather_every(step, offset=step).unique(maintain_order=True)
        # kept starts before each edge: a sub-window's events are the difference, x256
        before = np.searchsorted(starts.to_numpy(), edges.to_numpy(), side="left")
        counts = np.diff(np.concatenate([[0], before, [starts.len()]])) * SAMPLE_EVERY
        return edges.to_list(), counts.tolist()


class _Interned:
    """Frames and stacks interned across the windows: a window's own ids mapped to the
    trace's (a frame by its kind, name, file and line; a stack by its parent stack and
    frame), numbered in order of first appearance."""

    def __init__(self) -> None:
        self.frame_ids: dict[tuple, int] = {}
        self.frames: list[tuple] = []
        self.stack_ids: dict[tuple[int, int], int] = {}
        self.stacks: list[tuple[int | None, int, int]] = []

    def stack_map(self, frames: pl.DataFrame, stacks: pl.DataFrame) -> np.ndarray:
        """The trace's stack id of each of a window's (indexed by the window's stack id).
        Distinct frames and stacks per window: thousands, not one per event."""
        frame_map = np.full(int(frames["frame_id"].max()) + 1 if frames.height else 0, -1,
                            dtype=np.int64)
        for fid, *key in frames.select("frame_id", "kind", "name", "file", "line").iter_rows():
            got = self.frame_ids.get(tuple(key))
            if got is None:
                got = self.frame_ids[tuple(key)] = len(self.frames)
                self.frames.append(tuple(key))
            frame_map[fid] = got
        stacks = stacks.sort("depth", maintain_order=True)  # parents before their children
        out = np.full(int(stacks["stack_id"].max()) + 1 if stacks.height else 0, -1,
                      dtype=np.int64)
        local_frames = frame_map[stacks["frame_id"].to_numpy()]
        for (sid, parent, depth), frame in zip(
                stacks.select("stack_id", "parent_id", "depth").iter_rows(),
                local_frames.tolist()):
            key = (int(out[parent]) if parent is not None else -1, frame)
            got = self.stack_ids.get(key)
            if got is None:
                got = self.stack_ids[key] = len(self.stacks)
                self.stacks.append((key[0] if key[0] >= 0 else None, frame, depth))
            out[sid] = got
        return out

    def frame_table(self) -> pl.DataFrame:
        kind, name, file, line = (list(c) for c in zip(*self.frames)) if self.frames else ([],) * 4
        return pl.DataFrame({"frame_id": pl.Series(range(len(self.frames)), dtype=pl.Int64),
                             "kind": pl.Series(kind, dtype=pl.String),
                             "name": pl.Series(name, dtype=pl.String),
                             "file": pl.Series(file, dtype=pl.String),
                             "line": pl.Series(line, dtype=pl.Int32)})

    def stack_table(self) -> pl.DataFrame:
        parent, frame, depth = (list(c) for c in zip(*self.stacks)) if self.stacks else ([],) * 3
        return pl.DataFrame({"stack_id": pl.Series(range(len(self.stacks)), dtype=pl.Int64),
                             "parent_id": pl.Series(parent, dtype=pl.Int64),
                             "frame_id": pl.Series(frame, dtype=pl.Int64),
                             "depth": pl.Series(depth, dtype=pl.Int32)})


def _empty(group: str) -> pl.DataFrame:
    return in_ns(pl.DataFrame(schema=GROUP_SCHEMAS[group]))


def _read_window(files: list[Path], group: str, lo: int | None, hi: int | None,
                 until: int | None = None) -> pl.DataFrame:
    """The spilled rows of ``group`` that start in ``[lo, hi)`` and at or before ``until``
    (a trace cut short: :func:`_cut_until`)."""
    if not files:
        return _empty(group)
    rows = pl.scan_parquet(files)
    if lo is not None:
        rows = rows.filter(pl.col("ts_ns") >= lo)
    if hi is not None:
        rows = rows.filter(pl.col("ts_ns") < hi)
    if until is not None:
        rows = rows.filter(pl.col("ts_ns") <= until)
    return rows.collect()


def _cut_until(acc: _SpillingAccumulator) -> int | None:
    """For a spilled trace cut short inside its events, where every group is whole
    (:func:`zym.capture.kineto_json.cut_frontier`, from the spill files), recorded in its
    ``cut_short``; None for a whole trace."""
    cut = acc.meta.extra.get("cut_short")
    if cut is None or cut.get("lost") == LOST_KEYS:
        return None

    def last_start(group: str) -> int | None:
        files = acc.spill_files(group)
        return (pl.scan_parquet(files).select(pl.col("ts_ns").max()).collect().item()
                if files else None)

    cut["complete_until_ns"] = until = cut_frontier(last_start(g) for g in GROUPS)
    return until


def _carried(inputs: dict[str, pl.DataFrame], parent_row: np.ndarray, hi: int
             ) -> dict[str, pl.DataFrame]:
    """The CPU rows of ``inputs`` still open at ``hi`` (ending at or after it) and, up their
    parent links, every row above them: what the next window's events may nest in."""
    ends = np.concatenate([(inputs[g]["ts_ns"] + inputs[g]["dur_ns"]).to_numpy()
                           for g in CPU_GROUPS])
    n = ends.shape[0]
    keep = np.zeros(n + 1, dtype=bool)  # row n: the roots' sentinel parent
    keep[:n] = ends >= hi
    rows = np.flatnonzero(keep[:n])
    while rows.size:
        up = parent_row[rows].astype(np.int64)
        up = up[~keep[up]]
        keep[up] = True
        rows = up[up < n]
    out, first = {}, 0
    for g in CPU_GROUPS:
        height = inputs[g].height
        out[g] = inputs[g].filter(pl.Series(keep[first:first + height]))
        first += height
    return out


def _issuers_from_spill(gpu: pl.DataFrame, call_files: list[Path]) -> pl.DataFrame:
    """``gpu`` with the pid of each operation no call of its window (or the one before)
    claimed looked up among all the trace's calls (the first with its correlation id, in the
    trace's order): a trace of several processes whose GPU queue ran windows behind."""
    missing = gpu.filter(pl.col("pid").is_null())["correlation_id"].drop_nulls().unique()
    if missing.len() == 0:
        return gpu
    found = (pl.scan_parquet(call_files).select("pid", "correlation_id")
             .filter(pl.col("correlation_id").is_in(missing.implode()))
             .unique("correlation_id", keep="first", maintain_order=True).collect())
    return (gpu.join(found.rename({"pid": "_pid"}), on="correlation_id", how="left",
                     maintain_order="left")
            .with_columns(pl.coalesce("pid", "_pid").alias("pid")).drop("_pid"))


# A window is made of sub-windows of about this fraction of the budget's events: after each
# window the next one takes as many as the memory the last one used per event leaves room for.
SUB_WINDOWS = 4


class _Sizer:
    """How many sub-windows the next window takes: at first half the budget's events; then
    as many as fit the budget at the most memory an event has cost so far (the high-water
    mark of resident memory during a window, over its events), at least one."""

    def __init__(self, budget: int, rows: int) -> None:
        self.budget_mb = budget >> 20
        self.rows = rows
        self.per_event_mb: float | None = None
        self.start: tuple[int, int] | None = None

    def begin(self) -> None:
        self.start = resident_mb() if reset_peak() else None

    def end(self, events: int) -> None:
        now = resident_mb()
        if self.start is None or now is None or events < MIN_WINDOW_EVENTS:
            return
        used = max(now[1] - self.start[0], 1) / events
        self.per_event_mb = max(self.per_event_mb or 0.0, used)

    def take(self, sub_events: list[int]) -> int:
        """Sub-windows for the next window, from the front of ``sub_events``."""
        if self.per_event_mb is None:
            allowed = self.rows // 2
        else:
            now = resident_mb()
            room = self.budget_mb - (now[0] if now else BASELINE_BYTES >> 20)
            allowed = int(max(room, 0) / self.per_event_mb)
        n, total = 0, 0
        for events in sub_events:
            if n and total + events > allowed:
                break
            n, total = n + 1, total + events
        return max(n, 1)


def _windows(acc: _SpillingAccumulator, shown: str, say: Progress, budget: int,
             until: int | None = None) -> Iterator[tuple[str, pl.DataFrame]]:
    """The tables of the spilled trace, a window at a time: ``(record, rows)``, frames and
    stacks last; only the events that start at or before ``until`` (:func:`_cut_until`)."""
    names, shapes = acc.names_table(), acc.shapes_table()
    files = {g: acc.spill_files(g) for g in GROUPS}
    edges, sub_events = acc.edges(max(1, acc.rows // SUB_WINDOWS))
    subs = list(zip([None, *edges], [*edges, None]))
    carry = {g: _empty(g) for g in CPU_GROUPS}
    recent = pl.DataFrame(schema={"pid": pl.Int64, "correlation_id": pl.Int64})
    interned = _Interned()
    sizer = _Sizer(budget, acc.rows)
    pids: dict[int | None, int] = {}
    gpu_parts: list[Path] = []
    # Calls of one process (or none): the GPU operations' fallback process is known now.
    one_pid = len(acc.call_pids - {None}) <= 1
    pid_of_all = next(iter(acc.call_pids - {None}), None)
    windows = 0
    first, total = 0, sum(sub_events)
    while first < len(subs):
        take = sizer.take(sub_events[first:])
        lo, hi = subs[first][0], subs[first + take - 1][1]
        say(f"building window {windows + 1} "
            f"({100 * sum(sub_events[:first + take]) // max(total, 1)}% of the events)")
        first += take
        sizer.begin()
        inputs = {g: pl.concat([carry[g], _read_window(files[g], g, lo, hi, until)])
                  for g in CPU_GROUPS}
        inputs["call"] = drop_nested_driver_calls(inputs["call"])
        gpu_in = _read_window(files["gpu"], "gpu", lo, hi, until)
        events = sum(df.height for df in inputs.values()) + gpu_in.height
        links: dict = {}
        tables = check_tables(events_to_tables(
            {**inputs, "gpu": gpu_in, "names": names, "shapes": shapes}, timed=True,
            links=links, issuers=recent), shown)
        del gpu_in
        if hi is not None:
            carry = _carried(inputs, links["parent_row"], hi)
        del inputs, links
        stack_of = pl.Series(interned.stack_map(tables["frame"], tables["stack"]))
        own = (pl.col("ts_ns") >= lo) if lo is not None else pl.lit(True)
        for record in ("span", "call"):
            rows = tables.pop(record).filter(own)
            yield record, rows.with_columns(stack_of.gather(rows["stack_id"]).alias("stack_id"))
            if record == "call":
                for pid, count in rows["pid"].value_counts().iter_rows():
                    pids[pid] = pids.get(pid, 0) + count
                recent = rows.select("pid", "correlation_id").filter(
                    pl.col("correlation_id").is_not_null())
            del rows
        gpu = tables.pop("gpu")
        if one_pid:  # every operation no call claims is that process's: written now
            yield "gpu", gpu.with_columns(pl.col("pid").fill_null(pl.lit(pid_of_all, pl.Int64)))
        else:  # which process is the most common is known at the end: kept until then
            if gpu["pid"].null_count():
                gpu = _issuers_from_spill(gpu, files["call"])
            gpu_parts.append(acc.folder / f"out-gpu-{len(gpu_parts):06d}.parquet")
            _write_spill(gpu, gpu_parts[-1], acc.out)
        windows += 1
        del gpu, tables
        sizer.end(events)
        release_freed_memory(acc.rows)
    # The most common process of the calls (of equally common, the least), as ``_gpu`` does.
    counted = [(-count, pid) for pid, count in pids.items() if pid is not None]
    main_pid = min(counted)[1] if counted else None
    for part in gpu_parts:
        yield "gpu", pl.read_parquet(part).with_columns(
            pl.col("pid").fill_null(pl.lit(main_pid, pl.Int64)))
    yield "frame", interned.frame_table()
    yield "stack", interned.stack_table()


def import_bounded(path: str | Path, out: str | Path, progress: Progress | None = None,
                   force: bool = True, budget: int = DEFAULT_BUDGET) -> Path:
    """Convert a Kineto trace into a zym capture file at ``out`` within about ``budget``
    bytes of memory (see the module doc); a trace whose decoded events fit is imported
    whole, as ``load_kineto`` does. The spill goes in a folder beside the output, made only
    if the trace needs it, removed at the end (on an error or SIGTERM too)."""
    say = progress or (lambda _stage: None)
    path, out = Path(path), Path(out)
    check_target(out, force)  # before the work, not only after it
    folder = out.parent if out.parent.is_dir() else Path(tempfile.gettempdir())
    with terminate_as_exception():
        got = _read(path, say, folder, window_events(budget), out)
        if not isinstance(got, _SpillingAccumulator):
            tables, meta = got
            say("writing")
            return write_capture(out, tables, meta, force=force)
        try:
            return _write_windows(got, path, out, say, budget, force)
        finally:
            got.remove()


# `zym analyze` of a trace builds its tables in memory while that is expected to take at most
# half the memory available now (~140 bytes an event at the analysis's peak: 1.17 GB at 8.6 M
# events, 3.71 GB at 33 M), and never below ANALYZE_IN_MEMORY_EVENTS; past that, the trace is
# imported out of core into a temporary capture, which is then analysed: less memory for more
# time (33 M events: 2.98 GB and 45 s against 3.71 GB and 30 s; docs/benchmarks.md, round 26).
ANALYZE_IN_MEMORY_EVENTS = 8_000_000
ANALYZE_BYTES_PER_EVENT = 140


def analyze_in_memory_events() -> int:
    """Decoded events up to which `zym analyze` builds a trace's tables in memory."""
    from zym.schemas.memory import available_bytes

    available = available_bytes()
    if available is None:  # not Linux: four times the floor
        return 4 * ANALYZE_IN_MEMORY_EVENTS
    return max(ANALYZE_IN_MEMORY_EVENTS, available // 2 // ANALYZE_BYTES_PER_EVENT)


def load_or_import(path: str | Path, progress: Progress | None = None,
                   events: int | None = None, budget: int | None = None
                   ) -> tuple[dict[str, pl.DataFrame], CaptureMeta] | Path:
    """For an analysis of a trace: its tables and metadata, built in memory, while its
    decoded events number at most ``events`` (:func:`analyze_in_memory_events`); past that,
    the path of a temporary capture it was imported into out of core (in ``budget`` bytes,
    else the default budget), removed when the process exits."""
    events = analyze_in_memory_events() if events is None else events
    say = progress or (lambda _stage: None)
    path = Path(path)
    with terminate_as_exception():
        # (no budget given: the tables' stages leave polars its freed memory, which the
        # next stage reuses; a budget's in-memory share was measured with it given back)
        got = _read(path, say, Path(tempfile.gettempdir()), events, path, budget is not None)
        if not isinstance(got, _SpillingAccumulator):
            return got
        try:
            folder = process_temp_folder("zym-analyze-")
            return _write_windows(got, path, folder / "capture.parquet", say,
                                  DEFAULT_BUDGET if budget is None else budget, True)
        finally:
            got.remove()


def _read(path: Path, say: Progress, parent: Path, rows: int, out: Path, purge: bool = True
          ) -> tuple[dict[str, pl.DataFrame], CaptureMeta] | _SpillingAccumulator:
    """Decode ``path``: its tables and metadata when its events stayed under ``rows``, else
    the accumulator that spilled them into a folder in ``parent`` (its ``meta`` set; the
    caller removes the folder; ``out``: what a failed spill's error names). On an error
    nothing is left in ``parent``. ``purge``: as :func:`zym.capture.kineto.build_tables`'."""
    shown = display(path)
    if path.exists() and path.stat().st_size == 0:
        raise InputError(f"{shown}: empty file")
    made: list[_SpillingAccumulator] = []

    def accumulator(p: Path) -> _SpillingAccumulator:
        for old in made:  # a second attempt (a batch cut inside an event): start over
            old.remove()
        made.append(_SpillingAccumulator(p, parent, rows, out))
        return made[-1]

    say("reading and decoding JSON")
    try:
        with input_errors(shown):
            groups, top = read_events(path, accumulator)
            meta = capture_meta(top, path)
            acc = made[-1] if made else None
            if acc is None or not acc.spilled:
                return check_tables(build_tables(groups, say, purge), shown), meta
    except BaseException:
        for old in made:
            old.remove()
        raise
    acc.meta = meta
    return acc


def _write_windows(acc: _SpillingAccumulator, path: Path, out: Path, say: Progress,
                   budget: int, force: bool) -> Path:
    shown = display(path)
    meta = acc.meta
    meta.extra["imported_in_windows"] = {"events": sum(acc.counts.values()),
                                         "budget_bytes": budget}
    until = _cut_until(acc)
    with input_errors(shown), CaptureWriter(out, meta, force) as writer:
        for record, rows in _windows(acc, shown, say, budget, until):
            writer.write(record, rows)
    return out


__all__ = ["DEFAULT_BUDGET", "import_bounded", "load_or_import", "parse_size", "window_events"]

