"""`zym analyze` in a memory budget: a capture whose analysis would not fit is analysed on a
sample of its time.

The analysis holds every call and GPU operation of a capture (at 10 M GPU operations ~4 GB),
so a long capture can need more memory than the machine has. Before anything is read, the
analysis's peak is estimated from the capture's rows (:func:`estimate_bytes`: bytes a row of
each table costs at the peak, measured, and a fixed part); where it exceeds the budget,
:data:`SLICES` time slices, one at the start of each of as many equal parts of the capture,
together as long as the budget allows (the default budget, half the memory available: as
:data:`DEFAULT_SAMPLE_BYTES` allows), are copied into a temporary capture (every call that
starts in a slice, with the GPU operations it launched and the spans and ranges that start in
it, the first slice also those that start before it; a capture of the GPU side alone, the GPU
operations that start in it; the frames and stacks whole), each slice shifted to start where
the one before ended (its end, or where its last call or GPU operation ended, if later), and
that capture is analysed as any other. The report says so (``sample`` in JSON, a line in
text): its figures are those of the sample (durations, counts, savings of its window); shares
and per-step figures stand for the capture where its steps are alike.

No seam cuts a step. The capture's steps are found in a first copy of the slices as the
analysis finds them (:func:`zym.analysis.phases.find_steps`), held in memory with only the
spans they are found from (:func:`held_sample`, :func:`step_stacks`); where its slices are
too short to hold :data:`STEPS_A_SLICE` of them, they are made fewer and longer
(:func:`longer_slices`) and their steps found again; then each slice is cut at the starts of
the steps in it (from its first step's start to its last's: :func:`at_steps`) and the sample
copied whole. A seam then joins two whole steps, not the parts of two (one long step, the
first calls after it taken for those of the step before). A capture without spans or ranges
is sampled in memory and never written: its slices are read as the analysis reads a capture,
the steps found in them, and the analysis given those tables (read again only where the
slices were cut at the steps).

Slices are read a part at a time by their row groups' time ranges (the capture's Parquet
statistics), so a written copy's memory is that of an eighth of the sample, whatever the
capture's size (a sample held in memory is what its analysis holds).
"""
from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl
from zym.schemas.errors import OutputError
from zym.schemas.io import Capture, CaptureWriter, open_capture
from zym.schemas.memory import LARGE_ROWS, release_freed_memory
from zym.schemas.output import display, process_temp_folder

if TYPE_CHECKING:
    from .load import CaptureData
    from .phases import Steps

# What the analysis holds at its peak (rules on), by rows, set a little above what was
# measured so that a sample stays within its budget: a CUDA call, GPU operation or range
# ~400 B up to the first 3 M of them (measured ~370 B: a synthetic sample of 2.5 M peaks at
# 1.04 GB, every fix replayed over its whole window) and ~170 B past them (a long window's
# fixes are replayed on a sample of it: 22.5 M peak at 4.1 GB); a span ~45 B up to the first
# 15 M and ~10 B past them (read a part at a time: the bundled trace x600, 73 M spans with
# 12.9 M calls and GPU operations, peaks at 3.6 GB); and a fixed part (the interpreter and
# libraries; numba's where it is loaded: NUMBA_BYTES). (bytes a row, up to how many rows,
# bytes a row past them); docs/benchmarks.md, "Thirty-sixth round".
ROW_COST = {"events": (400, 3_000_000, 170), "span": (45, 15_000_000, 10)}
# The rows' cost is counted this much higher: captures of other shapes cost more a row (64
# threads or 8 processes, 1 M GPU operations: +13-16% at the peak; many call sites far more,
# their findings' replays: the 20,000-site capture ~2x).
HEADROOM = 1.2
EVENT_TABLES = ("call", "gpu", "range")
FIXED_BYTES = 200 << 20
# numba and the compiled loops, loaded where the analysis holds JIT_MIN_CALLS calls or more
# (zym.analysis.instances): measured 127 MiB (the bundled eBPF capture x40, 283,000 calls:
# 583 MiB with numba, 456 MiB with it unavailable; docs/benchmarks.md, thirty-seventh round).
NUMBA_BYTES = 150 << 20
# Slices of a sample: one at the start of each of as many equal parts of the capture.
SLICES = 8
# Slices hold at least this many steps where the capture has steps (fewer, longer slices
# where they would not), so that each keeps a whole step or more once cut at the steps' starts.
STEPS_A_SLICE = 4
# A GPU operation of a call in a slice is looked for until this long past the slice's end (or
# the slice's length, if longer): the GPU queue runs behind its launches.
GPU_LAG_NS = 1_000_000_000
# The fraction is never below this: a budget below the fixed part still reads something.
MIN_FRACTION = 0.001
# Without --memory-budget, a capture whose analysis would exceed the default budget (half the
# memory available) is sampled to fit this, not the default budget: a larger sample costs
# time in proportion and finds the same (the bundled trace x600's capture: the same findings
# and savings at 1G, 2G and 4G, 5.5-68% of its time, in 5.7, 10.6 and 27.3 s against 15.0 s
# whole: a large sample of a capture with spans is written, then read back; the synthetic
# 100 M by default: the same 159 findings at 0.65% in 8.8 s and 0.8 GB as at 23.9% (the
# default budget's sample) in 41 s and 9.1 GB; docs/benchmarks.md, forty-first round).
DEFAULT_SAMPLE_BYTES = 1 << 30
SAMPLED_TABLES = ("span", "range", "call", "gpu")


@dataclass(frozen=True)
class Sample:
    """How a capture was sampled: what its report says."""

    budget: int  # bytes the sample was fit to
    estimate: int  # bytes the whole capture's analysis would hold (estimated)
    fraction: float  # of the capture's time the slices cover
    slices: tuple[tuple[int, int], ...]  # [start, end) of each, in the capture's clock (ns)
    capture_rows: dict[str, int]  # per table, the capture's
    sample_rows: dict[str, int]  # per table, the sample's
    extent: tuple[int, int] = (0, 0)  # [start, end) of the capture's calls and GPU work (ns)
    shifts: tuple[int, ...] = ()  # per slice, added to its times in the sample (once written)
    cut_at_steps: int = 0  # slices cut at the starts of the capture's steps (:func:`at_steps`)
    path: Path | None = None  # the sample's capture (a temporary file, once written)
    # per stack, the calls that sync or copy, in the capture and in its sample
    # (:func:`zym.analysis.census.sync_copy_census`; once written)
    census: pl.DataFrame | None = field(default=None, compare=False, repr=False)
    held: pl.DataFrame | None = field(default=None, compare=False, repr=False)
    # the capture sampled, opened (checked once: its content hash reads the whole file)
    source: Capture | None = field(default=None, compare=False, repr=False)
    # the default budget the whole capture's estimate exceeded, where no budget was given (the
    # sample then fits :data:`DEFAULT_SAMPLE_BYTES`, or this where less); None: a given budget
    default_budget: int | None = None

    def in_sample_clock(self) -> tuple[tuple[int, int], ...]:
        """Each slice's part of the sample's clock, end to end: from its start (shifted) to
        the next slice's (the last: to the end of time); () before the slices are copied."""
        if not self.slices or len(self.shifts) != len(self.slices):
            return ()
        starts = [a + shift for (a, _), shift in zip(self.slices, self.shifts, strict=True)]
        return tuple(zip(starts, [*starts[1:], int(np.iinfo(np.int64).max)], strict=True))

    def to_dict(self) -> dict:
        return {"budget_bytes": self.budget, "default_budget_bytes": self.default_budget,
                "estimated_bytes": self.estimate,
                "least_bytes": least_bytes(self.capture_rows),
                "fraction": round(self.fraction, 6), "slices": [list(s) for s in self.slices],
                "slices_cut_at_steps": self.cut_at_steps,
                "capture_rows": self.capture_rows, "sample_rows": self.sample_rows}


def available_budget() -> int:
    """The default budget: half the memory available now (``MemAvailable``), so that a
    capture is analysed whole wherever it fits."""
    from zym.schemas.memory import available_bytes

    available = available_bytes()
    return (available if available is not None else 8 << 30) // 2


def estimate_bytes(rows: dict[str, float]) -> int:
    """The analysis's estimated peak for a capture of ``rows`` rows per table."""
    def cost(n: float, first: int, upto: int, rest: int) -> float:
        return first * min(n, upto) + rest * max(0.0, n - upto)

    from .instances import JIT_MIN_CALLS

    events = sum(rows.get(t, 0) for t in EVENT_TABLES)
    fixed = FIXED_BYTES + (NUMBA_BYTES if rows.get("call", 0) >= JIT_MIN_CALLS else 0)
    return int(fixed + HEADROOM * (cost(events, *ROW_COST["events"])
                                   + cost(rows.get("span", 0), *ROW_COST["span"])))


def least_bytes(rows: dict[str, int]) -> int:
    """The estimated peak of the least sample of a capture of ``rows`` rows per table
    (:data:`MIN_FRACTION` of each): below it, a budget fits no sample, and the least is read."""
    return estimate_bytes({t: n * MIN_FRACTION for t, n in rows.items()})


def fitting_fraction(rows: dict[str, int], budget: int) -> float:
    """The largest share of ``rows`` (every table alike) whose estimate fits ``budget``, to
    a millionth (never below :data:`MIN_FRACTION`)."""
    lo, hi = MIN_FRACTION, 1.0
    for _ in range(20):
        mid = (lo + hi) / 2
        if estimate_bytes({t: n * mid for t, n in rows.items()}) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def rows_and_time(cap: Capture) -> tuple[dict[str, int], tuple[int, int] | None]:
    """The rows of each sampled table of ``cap`` and the ``[start, end)`` of its calls' starts
    (else its GPU operations'), from the file's metadata where it can (:func:`_row_groups`);
    None where it has neither."""
    got = _row_groups(cap)
    rows, extent = got if got is not None else _scanned(cap)
    clock = extent.get("call") or extent.get("gpu")
    return ({t: int(rows.get(t, 0)) for t in SAMPLED_TABLES},
            None if clock is None else (int(clock[0]), int(clock[1]) + 1))


def _row_groups(cap: Capture) -> tuple[dict[str, int], dict[str, tuple[int, int]]] | None:
    """From the file's metadata alone (:meth:`zym.schemas.io.Capture.row_groups`): rows per
    table and each table's time extent (its row groups' ``ts_ns`` statistics); None where a
    row group holds several tables or lacks statistics (the rows are then counted by a scan,
    :func:`_scanned`)."""
    groups = cap.row_groups()
    if groups is None:
        return None
    rows: dict[str, int] = {}
    extent: dict[str, tuple[int, int]] = {}
    for kind, n, t in groups:
        if not n:
            continue
        rows[kind] = rows.get(kind, 0) + n
        if kind in SAMPLED_TABLES:
            if t is None:
                return None
            lo, hi = extent.get(kind, t)
            extent[kind] = (min(lo, t[0]), max(hi, t[1]))
    return rows, extent


def _scanned(cap: Capture) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """:func:`_row_groups`' answer from one scan of the ``record`` and ``ts_ns`` columns."""
    got = (pl.scan_parquet(cap.path).group_by("record")
           .agg(pl.len().alias("rows"), pl.col("ts_ns").min().alias("lo"),
                pl.col("ts_ns").max().alias("hi")).collect())
    rows = dict(zip(got["record"].to_list(), got["rows"].to_list(), strict=True))
    extent = {r: (lo, hi) for r, lo, hi in got.select("record", "lo", "hi").iter_rows()
              if lo is not None}
    return rows, extent


def plan(cap: Capture, budget: int, given: bool = True) -> Sample | None:
    """The sample of ``cap`` that fits ``budget`` bytes, or None where the whole fits.
    ``given`` False: ``budget`` is the default (no --memory-budget); a capture past it is
    sampled to fit :data:`DEFAULT_SAMPLE_BYTES` (or ``budget``, where less)."""
    everything = cap.file_rows()
    if estimate_bytes({"call": everything}) <= budget:  # fits, whatever its tables
        return None
    rows, clock = rows_and_time(cap)
    estimate = estimate_bytes(rows)
    if estimate <= budget:
        return None
    if clock is None:
        return None  # no calls nor GPU work: nothing to sample by time
    fit = budget if given else min(budget, DEFAULT_SAMPLE_BYTES)
    fraction = fitting_fraction(rows, fit)
    return Sample(fit, estimate, fraction, spread(clock, SLICES, fraction), rows, {},
                  extent=clock, default_budget=None if given else budget)


def spread(extent: tuple[int, int], n: int, fraction: float) -> tuple[tuple[int, int], ...]:
    """``n`` slices of ``extent``, together ``fraction`` of it, one at the start of each of
    ``n`` equal parts."""
    t0, t1 = extent
    part = (t1 - t0) / n
    length = max(1, int(part * fraction))
    return tuple((int(t0 + k * part), int(t0 + k * part) + length) for k in range(n))


def write_sample(cap: Capture, sample: Sample, out: Path, opened_before: bool = True
                 ) -> Sample:
    """Copy ``sample``'s slices of ``cap`` into a capture at ``out`` (:func:`_copy_slices`);
    the sample with its rows counted and its slices' shifts. ``opened_before`` False: the
    first slice without the spans and ranges that start before it (a part of the capture's
    time, :func:`capture_part`)."""
    with CaptureWriter(out, cap.meta, temporary=True) as w:
        for table in ("frame", "stack"):
            w.write(table, cap.scan(table).collect())
        return _copy_slices(cap, sample, w.write, opened_before=opened_before)


def held_sample(cap: Capture, sample: Sample, spans: pl.Series | None = None,
                codes: bool = True, skip: Mapping[str, Collection[str]] | None = None
                ) -> tuple[CaptureData, Sample]:
    """``sample``'s slices of ``cap`` held in memory, read as the analysis reads a capture
    (:func:`zym.analysis.load.load_held`: ``codes``, ``skip``, default ``UNREAD``); the
    sample with its rows counted and its slices' shifts. ``spans``: only the spans of these
    stacks, and no ranges (:func:`step_stacks`: a first copy that the steps are found in,
    never written: for the bundled trace x600 at 1G, ~1.6 M spans, ~1.7 s written and read
    back)."""
    from .load import UNREAD, load_held, read_codes

    skip = UNREAD if skip is None else skip
    parts: dict[str, list[pl.DataFrame]] = {t: [] for t in SAMPLED_TABLES}
    copied = _copy_slices(cap, sample, lambda table, rows: parts[table].append(rows), spans,
                          codes=lambda table: read_codes(table, codes), skip=skip)
    return load_held(cap, {t: pl.concat(parts[t]) for t in ("call", "gpu", "span")}, codes,
                     skip), copied


def _copy_slices(cap: Capture, sample: Sample, put: Callable[[str, pl.DataFrame], None],
                 spans: pl.Series | None = None, opened_before: bool = True,
                 codes: Callable[[str], Collection[str]] | None = None,
                 skip: Mapping[str, Collection[str]] | None = None) -> Sample:
    """``sample``'s slices of ``cap``, each shifted to start where the one before ended, given
    to ``put`` a part of a slice at a time (at most a :data:`SLICES`-th of the sample's time,
    however few and long its slices); the sample with its rows counted and its slices'
    shifts. ``spans``: only the spans of these stacks, and no ranges (a first copy to find the
    steps in: :func:`step_stacks`). ``opened_before`` False: the first slice without the
    spans and ranges that start before it. ``codes``, ``skip``: each table's columns read as
    codes and left out (:meth:`Capture.scan`)."""
    counts = dict.fromkeys(SAMPLED_TABLES, 0)
    piece = max(1, sum(b - a for a, b in sample.slices) // SLICES)
    end = None  # where the slice before ended, shifted
    shifts = []
    for k, (a, b) in enumerate(sample.slices):
        shift = 0 if end is None else end - a
        shifts.append(shift)
        end = b + shift  # (its end, or where its last call or GPU operation ends)
        for lo in range(a, b, piece):
            parts = _slice(cap, lo, min(b, lo + piece), spans=spans,
                           first=opened_before and k == 0 and lo == a,
                           by_call=sample.capture_rows["call"] > 0, codes=codes, skip=skip)
            for table, df in parts.items():
                if df.height:
                    df = df.with_columns(pl.col("ts_ns") + shift)
                    if table in ("call", "gpu"):
                        end = max(end, int((df["ts_ns"] + df["dur_ns"].fill_null(0)).max()))
                put(table, df)
                counts[table] += df.height
            del parts, df
            release_freed_memory(LARGE_ROWS)  # (the part's rows and their row groups)
    return replace(sample, sample_rows=counts, shifts=tuple(shifts))


def at_steps(sample: Sample, starts: np.ndarray, thread_calls: np.ndarray) -> Sample:
    """``sample`` (written: its shifts known) with its slices cut at the starts of steps, so
    that no seam cuts a step: ``starts``, the steps found in the written sample, and
    ``thread_calls``, the start of every call on the steps' thread (sorted), both in the
    sample's clock. A slice then runs from its first step's start to its last's (the step
    that its end cut is left out); the first slice keeps its own start (the capture's, with
    its startup). A slice's first call on the steps' thread is never taken for a step's start
    (a step the seam cut can look as if it starts there); a slice of fewer than two starts
    (shorter than a step) is left as it was. The sample is to be written again."""
    slices, cut = [], 0
    for k, ((a, b), shift) in enumerate(zip(sample.slices, sample.shifts, strict=True)):
        lo, hi = a + shift, b + shift
        i = np.searchsorted(thread_calls, lo)
        first = thread_calls[i] if i < len(thread_calls) and thread_calls[i] < hi else lo
        mine = starts[(starts > first) & (starts < hi)] - shift
        if k == 0 and len(mine):  # (its own start: not a seam)
            slices.append((a, int(mine[-1])))
            cut += 1
        elif len(mine) >= 2:
            slices.append((int(mine[0]), int(mine[-1])))
            cut += 1
        else:
            slices.append((a, b))
    kept = sum(b - a for a, b in slices) / max(1, sum(b - a for a, b in sample.slices))
    return replace(sample, fraction=sample.fraction * kept, slices=tuple(slices), sample_rows={},
                   shifts=(), cut_at_steps=cut)


def longer_slices(sample: Sample, step_ns: float) -> Sample | None:
    """Fewer, longer slices of ``sample``'s length together, where its slices are too short
    to hold :data:`STEPS_A_SLICE` steps of ``step_ns`` each (or one slice, if even that is
    too short); None where they hold them."""
    n = len(sample.slices)
    length = sum(b - a for a, b in sample.slices)
    want = max(1, min(n, int(length // max(1.0, STEPS_A_SLICE * step_ns))))
    if want == n:
        return None
    return replace(sample, slices=spread(sample.extent, want, sample.fraction), sample_rows={},
                   shifts=())


def step_stacks(cap: Capture) -> pl.Series:
    """The stacks whose spans the steps are found from (:func:`zym.analysis.phases.find_steps`):
    a Python function's, or torch.profiler's ``ProfilerStep#N``."""
    from .phases import PROFILER_STEP

    frames = cap.load("frame").filter((pl.col("kind") == "python") | (
        (pl.col("kind") == "torch_op") & pl.col("name").str.contains(PROFILER_STEP)))
    return cap.load("stack").filter(pl.col("frame_id").is_in(frames["frame_id"].implode())
                                    )["stack_id"]


def steps_of(data: CaptureData) -> tuple[Steps, np.ndarray] | None:
    """The steps of the capture ``data`` holds as its analysis finds them
    (:func:`zym.analysis.phases.find_steps`), and the start of every call on their thread
    (sorted); None where it has no repeated step."""
    from .callpath import stack_nodes
    from .facts import Facts
    from .load import api_codes
    from .phases import find_steps

    data = api_codes(replace(data))  # (its own tables: ``data`` may be the analysis's, as read)
    nodes = stack_nodes(data.frames, data.stacks)
    facts = Facts(data, nodes)
    steps = find_steps(facts.calls, facts.gpu, nodes, data.span_table)
    if steps is None:
        return None
    mine = facts.calls.filter(pl.col("_thread") == steps.thread)["ts_ns"].sort()
    return steps, mine.to_numpy()


def _slice(cap: Capture, a: int, b: int, by_call: bool = True, first: bool = False,
           spans: pl.Series | None = None,
           codes: Callable[[str], Collection[str]] | None = None,
           skip: Mapping[str, Collection[str]] | None = None) -> dict[str, pl.DataFrame]:
    """The rows of one slice ``[a, b)``: the calls, spans and ranges that start in it, and the
    GPU operations those calls launched (by process and correlation id; ``by_call`` False, a
    capture of the GPU side alone: the GPU operations that start in it). The ``first`` slice
    also has the spans and ranges that start before it (a step or request opens before its
    first call). ``spans``: only the spans of these stacks, and no ranges."""
    def starting(table: str, lo: int | None, hi: int) -> pl.LazyFrame:
        ts = pl.col("ts_ns")
        read = cap.scan(table, codes(table) if codes else (), (skip or {}).get(table, ()))
        return read.filter((ts < hi) if lo is None else (ts >= lo) & (ts < hi))

    calls = starting("call", a, b).collect()
    if by_call:
        keys = calls.lazy().select("pid", "correlation_id").drop_nulls().unique()
        gpu = (starting("gpu", a, b + max(b - a, GPU_LAG_NS))
               .join(keys, on=["pid", "correlation_id"], how="semi").collect())
    else:
        gpu = starting("gpu", a, b).collect()
    since = None if first else a
    if spans is not None:
        return {"span": starting("span", since, b).filter(pl.col("stack_id").is_in(
            spans.implode())).collect(), "call": calls, "gpu": gpu}
    return {"span": starting("span", since, b).collect(),
            "range": starting("range", since, b).collect(), "call": calls, "gpu": gpu}


def capture_part(cap: Capture, spec: str) -> Path:
    """A temporary capture (removed when the process exits) of the part ``spec`` (``FROM:TO``
    from the capture's start, as ``--window``) of ``cap``: the calls that start in it with the
    GPU work they launched, and the spans and ranges that start in it, in the capture's own
    clock; read a part at a time, so its memory is that of the part, whatever the capture's
    size (a timeline export of a part: ``zym export --window FROM:TO``)."""
    from .phases import Phases, parse_window

    rows, clock = rows_and_time(cap)
    if clock is None:
        from zym.schemas.errors import InputError

        raise InputError(f"{display(cap.path)}: no CUDA call nor GPU work to take a part of")
    t0, t1 = parse_window(spec, Phases(window=clock))
    part = Sample(0, 0, (t1 - t0) / max(1, clock[1] - clock[0]), ((t0, t1),), rows, {},
                  extent=clock)
    folder = process_temp_folder("zym-part-")
    out = folder / "part.parquet"
    try:
        write_sample(cap, part, out, opened_before=False)
    except OutputError as e:
        raise _unwritable(cap, folder, e, "its part", "export a shorter one") from None
    release_freed_memory(LARGE_ROWS)
    return out


def _unwritable(cap: Capture, folder: Path, e: OutputError, what: str, smaller: str
                ) -> OutputError:
    """The one line for a copy of ``cap`` that cannot be written in the temporary ``folder``
    (the writer's names a temporary file the user never saw), the folder removed; ``smaller``:
    how to ask for a smaller copy."""
    shutil.rmtree(folder, True)
    said = re.search(r"cannot write \((.*?)\);", str(e))
    why = said[1] if said else str(e)
    return OutputError(f"{display(cap.path)}: {what} cannot be written in "
                       f"{display(folder.parent)} ({why}): free space there, set TMPDIR, or "
                       f"{smaller}")


class _Background:
    """``work(*args)`` (a census) on a daemon thread of its own: where the caller stops first
    (an error, Ctrl-C), the process does not wait for it to end (the census of a 100 M
    capture takes seconds), as it would for an executor's thread."""

    def __init__(self, work: Callable[..., pl.DataFrame], *args: object) -> None:
        self._got: tuple = ()
        self._thread = threading.Thread(target=self._run, args=(work, *args),
                                        name="zym-census", daemon=True)
        self._thread.start()

    def _run(self, work: Callable, *args: object) -> None:
        try:
            self._got = (work(*args), None)
        except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
            self._got = (None, e)

    def result(self) -> pl.DataFrame:
        """What ``work`` returned (its exception raised here), once it has ended."""
        self._thread.join()
        value, error = self._got
        if error is not None:
            raise error
        return value


class Sampled(NamedTuple):
    """A capture's sample for the memory budget (:func:`sampled`)."""

    capture: Capture | None  # the sample's temporary capture, opened (None: held, not written)
    sample: Sample  # how it was sampled
    # its tables as the analysis reads them, where they are held (a capture without spans
    # or ranges: :func:`held_sample`); else None (read from ``capture``)
    loaded: CaptureData | None


def sampled(cap: Capture, budget: int, progress: Callable[[str], None] | None = None,
            codes: bool = True, skip: Mapping[str, Collection[str]] | None = None,
            given: bool = True) -> Sampled | None:
    """Where the analysis of ``cap`` would exceed ``budget`` bytes: a sample that fits (``given``
    False, the default budget: one that fits :data:`DEFAULT_SAMPLE_BYTES`; :func:`plan`), held
    in memory (a capture without spans or ranges: its tables read as ``codes`` and ``skip``
    say, :func:`zym.analysis.load.load_held`) or in a temporary capture (removed when the
    process exits), and how it was sampled; else None."""
    sample = plan(cap, budget, given)
    if sample is None:
        return None
    if progress:
        progress(f"sampling {sample.fraction:.1%} of the capture (memory budget)")
    # every line that syncs or copies, also those outside the slices (the report names
    # them): counted on a thread of its own while the slices are copied (both mostly in
    # polars and pyarrow, which leave the interpreter)
    from .census import sync_copy_census

    counted = _Background(sync_copy_census, cap)
    mine, sample, loaded = _copied(cap, sample, codes, skip)
    census = counted.result()
    held = sync_copy_census(mine if mine is not None else loaded.calls)
    release_freed_memory(LARGE_ROWS)
    return Sampled(mine, replace(sample, path=mine.path if mine is not None else None,
                                 census=census, held=held, source=cap), loaded)


def _copied(cap: Capture, sample: Sample, codes: bool,
            skip: Mapping[str, Collection[str]] | None) -> Sampled:
    """``sample`` of ``cap`` copied, cut at the capture's steps where it has them: held in
    memory (a capture without spans or ranges) or written into a temporary capture (removed
    when the process exits); that capture opened, or the held tables; and how it was
    copied."""
    # The steps are found in a first copy held in memory (of a capture with spans or ranges,
    # with only the spans they are found from, the sample then written whole; of one
    # without, the sample itself, never written); its slices are made to hold whole steps,
    # then cut at their starts.
    partial = sample.capture_rows["span"] + sample.capture_rows["range"] > 0
    spans = step_stacks(cap) if partial else None

    def first_copy(sample: Sample) -> tuple[CaptureData, Sample]:
        if partial:  # (read as the steps are found: codes, UNREAD)
            return held_sample(cap, sample, spans)
        return held_sample(cap, sample, None, codes, skip)

    loaded, copied = first_copy(sample)
    sample, found = copied, steps_of(loaded)
    if found is not None:
        longer = longer_slices(sample, float(np.median(found[0].durations())))
        if longer is not None:
            del loaded
            release_freed_memory(LARGE_ROWS)
            loaded, copied = first_copy(longer)
            sample, found = copied, steps_of(loaded)
    if found is not None:
        cut = at_steps(sample, found[0].start_ns, found[1])
        sample = cut if cut.cut_at_steps else sample
    if not partial and sample is copied:  # held as the analysis reads it
        return Sampled(None, sample, loaded)
    del loaded
    release_freed_memory(LARGE_ROWS)
    if not partial:  # held again, cut at the steps
        loaded, sample = held_sample(cap, sample, None, codes, skip)
        return Sampled(None, sample, loaded)
    folder = process_temp_folder("zym-sample-")
    out = folder / "sample.parquet"
    try:
        sample = write_sample(cap, sample, out)
    except OutputError as e:
        raise _unwritable(cap, folder, e, "its sample for the memory budget",
                          "give a larger --memory-budget") from None
    release_freed_memory(LARGE_ROWS)  # the slices' columns: not counted again at the peak
    opened = open_capture(out)  # (checked: its hash reads it whole)
    opened.shown = f"{cap.name} (its sample)"  # (a row it refuses is the capture's)
    return Sampled(opened, sample, None)
