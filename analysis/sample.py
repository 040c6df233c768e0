"""Fixes replayed on a sample of a long window: runs of consecutive steps spread evenly
through it, in two interleaved halves, the saving scaled to the window.

A replay's cost grows with the window (each finding's fix is replayed alone and with those
ranked above it: at 10 M GPU operations, ~30 s of the analysis). A steady state repeats its
steps, so a saving per unit of time measured on a spread of them holds for the rest; what it
is not, the two halves of the sample say: each is replayed apart, and the report gives both
scaled figures beside the estimate (their mean, weighted by the time each covers).

The sample replays the same model (:class:`zym.analysis.replay.Timeline`): each half is a
timeline of its runs' calls and the GPU work they launched, with the time between runs left
as CPU work no fix changes (the queue drains there, as between requests). What a fix edits
outside the sample is left out of its replay; a CUDA graph whose launches a run's ends cut
is left out too. The fix models read every call of the window (its gap, whether it waits:
:class:`zym.analysis.replay.CallSide`); the replay's fidelity (how far the unfixed replay
ends from the recording) is the halves', scaled to the window as the savings are. The window
is never replayed whole.

Only above ``SAMPLE_ABOVE`` calls and GPU operations in the window (``ZYM_REPLAY_SAMPLE``:
``all`` replays every step however long the window; a number sets the threshold): below it
every report is the whole window's replay, as before.

A capture analysed on a sample of its time (:mod:`zym.analysis.budget`: slices spread
through it, end to end) is replayed in two halves too, its alternate slices
(:func:`slice_sample`): every fix on each half apart, the estimate their sum, and each
estimate gives what each half alone gives, so that a figure of the sample says how far its
own parts agree on it.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from .replay import CallSide, Fix, Timeline, _Chained, index_dtype
from .timeline import interval_of

ENV_SAMPLE = "ZYM_REPLAY_SAMPLE"
# Calls + GPU operations in the window from which the fixes are replayed on a sample.
SAMPLE_ABOVE = 3_000_000
# About this many calls + GPU operations replayed (both halves together).
SAMPLE_EVENTS = 1_000_000
# Runs of consecutive steps (or slices of time, without steps), alternately in each half.
RUNS = 16


@dataclass(frozen=True)
class Sample:
    """Where the fixes are replayed: ``ranges`` (start, end) in time order; the even ones
    make the first half, the odd ones the second. ``steps``/``of_steps``: steps sampled and
    in the window (0 and 0: the window has no steps; the runs are slices of time)."""

    ranges: tuple[tuple[int, int], ...]
    steps: int
    of_steps: int
    window_ns: int
    # the runs are the slices of the capture's sample (:func:`slice_sample`), not runs of a
    # long window
    of_capture: bool = False

    def half_ns(self, half: int) -> int:
        return sum(t1 - t0 for t0, t1 in self.ranges[half::2])

    @property
    def sampled_ns(self) -> int:
        return self.half_ns(0) + self.half_ns(1)

    def to_dict(self) -> dict:
        return {"runs": len(self.ranges), "steps": self.steps, "of_steps": self.of_steps,
                "of_capture_sample": self.of_capture,
                "sampled_ns": self.sampled_ns, "window_ns": self.window_ns,
                "sampled_pct": round(100 * self.sampled_ns / self.window_ns, 2)
                if self.window_ns else None}


def share_text(sample: dict) -> str:
    """What a sample (``Sample.to_dict``) holds of its window, as reports say it."""
    return (f"{sample['steps']:,} of its {sample['of_steps']:,} steps" if sample["steps"]
            else f"{sample['sampled_pct']:.3g}% of its time")


def slice_sample(window: tuple[int, int], slices: tuple[tuple[int, int], ...]
                 ) -> Sample | None:
    """The halves of a capture's sample: its ``slices`` (``[start, end)`` in the sample's
    clock, in time order) within ``window``, the even ones one half and the odd ones the
    other; None where fewer than two slices meet the window (no halves)."""
    lo, hi = window
    ranges = tuple((max(a, lo), min(b, hi)) for a, b in slices if min(b, hi) > max(a, lo))
    if len(ranges) < 2 or hi <= lo:
        return None
    return Sample(ranges, 0, 0, hi - lo, of_capture=True)


def sample_threshold() -> int | None:
    """Calls + GPU operations from which fixes are replayed on a sample (None: never)."""
    raw = os.environ.get(ENV_SAMPLE, "").strip().lower()
    if not raw:
        return SAMPLE_ABOVE
    if raw == "all":
        return None
    if not raw.isdigit():
        from zym.schemas.errors import ZymError

        raise ZymError(f"{ENV_SAMPLE}={raw!r}: give 'all' (replay every step) or a number of "
                       "calls and GPU operations from which fixes are replayed on a sample")
    return int(raw)


def choose_sample(window: tuple[int, int], events: int, starts: np.ndarray | None,
                  threshold: int | None, budget: int | None = None,
                  runs: int | None = None) -> Sample | None:
    """The runs to replay for a window of ``events`` calls and GPU operations (``starts``:
    its steps' starts, sorted; None: no steps), or None where the whole window is replayed:
    below ``threshold``, or where the sample would not be a small part of it."""
    lo, hi = window
    budget = SAMPLE_EVENTS if budget is None else budget
    runs = RUNS if runs is None else runs
    if threshold is None or events < threshold or hi <= lo or budget <= 0:
        return None
    share = budget / events
    if starts is not None and len(starts) >= 2 * runs:
        n = len(starts)
        per_run = max(1, round(share * n / runs))
        if 2 * per_run * runs > n:  # half the window or more: replay it all
            return None
        bounds = np.append(starts, hi)
        ranges = []
        for j in range(runs):
            first = min(max(0, int((j + 0.5) * n / runs) - per_run // 2), n - per_run)
            ranges.append((int(bounds[first]), int(bounds[first + per_run])))
        return Sample(tuple(ranges), per_run * runs, n, hi - lo)
    if starts is not None and len(starts):
        return None  # a few long steps: no run of whole steps is a small part
    width = (hi - lo) * share / runs
    if 2 * width * runs > hi - lo:
        return None
    ranges = tuple((int(lo + (j + 0.5) * (hi - lo) / runs - width / 2),
                    int(lo + (j + 0.5) * (hi - lo) / runs + width / 2)) for j in range(runs))
    return Sample(ranges, 0, 0, hi - lo)


class _Slice:
    """The facts a :class:`Timeline` reads, for the calls of some time ranges and the GPU
    work they launched (``call_idx``/``gpu_idx`` numbered anew, in the same order)."""

    def __init__(self, calls: pl.DataFrame, gpu: pl.DataFrame, window: tuple[int, int]):
        self.calls, self.gpu, self.window = calls, gpu, window


def _in_ranges(ts: np.ndarray, ranges: tuple[tuple[int, int], ...], ordered: bool = False
               ) -> np.ndarray:
    """Whether each time is in one of ``ranges`` (``[start, end)``, sorted and disjoint).
    ``ordered``: the times are sorted, and each range's rows are found by two searches of the
    times (the search per row, with its whole-length temporaries, took ~0.25 s a pass at
    12.5 M calls)."""
    bounds = np.array(ranges, np.int64).reshape(-1, 2)
    if not ordered:
        return interval_of(ts, bounds[:, 0], bounds[:, 1]) >= 0
    keep = np.zeros(len(ts), bool)
    for lo, hi in zip(np.searchsorted(ts, bounds[:, 0]), np.searchsorted(ts, bounds[:, 1])):
        keep[lo:hi] = True
    return keep


def _renumber(keep: np.ndarray) -> np.ndarray:
    """Per row, its position among the kept rows, -1 where not kept (int32 where that holds
    them: two such maps a half, of every call and every operation)."""
    out = np.full(len(keep), -1, index_dtype(len(keep)))
    out[keep] = np.arange(int(keep.sum()))
    return out


class SampledTimeline:
    """A window's timeline whose ``saving`` replays each fix on a :class:`Sample` (two half
    timelines) and scales it to the window. What the fix models read of every call (its gap,
    whether it waits) is the full window's (:class:`CallSide`); the window is never
    replayed whole."""

    def __init__(self, facts, overhead_ns: np.ndarray, sample: Sample,
                 step_threads: np.ndarray | None) -> None:
        self.sample = sample
        calls = facts.calls.select("call_idx", "pid", "_thread", "ts_ns", "dur_ns", "end_ns",
                                   "api", "kind", "blocking", "own_row")
        gpu = facts.gpu.select("gpu_idx", "ts_ns", "dur_ns", "end_ns", "device_id",
                               "stream_id", "call_idx", "work")
        side = CallSide(calls, gpu, facts.window[0], partial=False)  # (gaps and waits only)
        self.gap, self.waits, self.n_calls = side.gap, side.waits, side.n_calls
        del side
        overhead = np.broadcast_to(np.asarray(overhead_ns, np.int64), (calls.height,))
        self.overhead_ns = np.clip(overhead, 0, None) if overhead.size and overhead.min() < 0 \
            else overhead
        self.usable = calls.height > 0 and bool(gpu["work"].any())
        ts = calls["ts_ns"].to_numpy()
        ts_ordered = calls["ts_ns"].is_sorted()
        g_ts = gpu["ts_ns"].to_numpy()
        g_ordered = gpu["ts_ns"].is_sorted()
        launcher = gpu["call_idx"].fill_null(-1).to_numpy()
        self.halves: list[Timeline] = []
        self._call_maps: list[np.ndarray] = []
        self._gpu_maps: list[np.ndarray] = []
        for half in (0, 1):
            ranges = sample.ranges[half::2]
            keep = _in_ranges(ts, ranges, ts_ordered)
            g_keep = np.where(launcher >= 0, keep[np.maximum(launcher, 0)],
                              _in_ranges(g_ts, ranges, g_ordered))
            cm, gm = _renumber(keep), _renumber(g_keep)
            c = calls.filter(pl.Series(keep)).with_columns(
                pl.Series("call_idx", cm[keep]),
                pl.Series("own_row", _through(gm, calls["own_row"].filter(pl.Series(keep)))))
            g = gpu.filter(pl.Series(g_keep)).with_columns(
                pl.Series("gpu_idx", gm[g_keep]),
                pl.Series("call_idx", _through(cm, gpu["call_idx"].filter(pl.Series(g_keep)))))
            # from its first run's start to where its last call or operation ends (a run ends
            # at the next step's start: the idle before it is the time between runs, not the
            # replay's), or to the window's end where its last run reaches it
            ends = [df["end_ns"].max() for df in (c, g.filter("work")) if df.height]
            end = facts.window[1] if ranges[-1][1] >= facts.window[1] or not ends else max(ends)
            part = _Slice(c, g, (ranges[0][0], end))
            self.halves.append(Timeline(part, overhead[keep], step_threads=step_threads))
            self._call_maps.append(cm)
            self._gpu_maps.append(gm)

    @property
    def baseline(self) -> None:
        """Builds each half's unfixed replay state (what every sampled replay starts from);
        the full window is not replayed whole (~5 s at 10 M GPU operations)."""
        for h in self.halves:
            if h.usable:
                h._base  # noqa: B018 - the state every sampled replay starts from

    def _scaled(self, late_ns: int) -> int:
        """The window's length when the sample's runs replay ``late_ns`` later (or sooner)
        than recorded in all: that difference, per nanosecond of the runs, scaled to the
        window (the time between runs replays as recorded)."""
        window, ns = self.sample.window_ns, self.sample.sampled_ns
        return int(window + (round(late_ns * window / ns) if ns else 0))

    @property
    def uninstrumented_ns(self) -> int:
        """``Timeline.uninstrumented_ns`` of the window, from the halves (without the
        replays that keep the recording's cost in)."""
        return self._scaled(sum(h.uninstrumented_ns - (h.w1 - h.w0)
                                for h in self.halves if h.n_calls))

    @property
    def fidelity(self) -> dict:
        """``Timeline.fidelity`` of the window, from the halves: each half's replay ends
        later or sooner than it was recorded by what its runs' replays gained or lost (the
        time between runs replays as recorded: CPU work no edit changes); that difference,
        per nanosecond of the runs, is scaled to the window."""
        window = self.sample.window_ns
        replayed = self._scaled(sum(h.fidelity["replayed_ns"] - (h.w1 - h.w0)
                                    for h in self.halves if h.n_calls))
        # the typical launch latency and queue gap: the sample's (its larger half's)
        big = max(self.halves, key=lambda h: len(h.op_dur))
        return {"recorded_ns": int(window), "replayed_ns": int(replayed),
                "error_pct": round(100 * (replayed - window) / window, 2) if window else 0.0,
                "uninstrumented_ns": self.uninstrumented_ns,
                "profiler_overhead_ns": int(self.overhead_ns.sum()),
                "launch_latency_ns": big.launch_latency_ns, "queue_gap_ns": big.queue_gap_ns,
                "skewed_ops": sum(h.skewed_ops for h in self.halves)}

    def saving(self, fix: Fix, reference: bool = False, alone: bool = False) -> int:
        """``Timeline.saving`` on each half, per nanosecond of the time it covers, times the
        window (the halves' figures kept for :meth:`spread`)."""
        if fix.is_empty():
            return 0
        got = [h.saving(m, reference=reference, alone=alone) if h.usable else 0
               for h, m in zip(self.halves, self._mapped(fix), strict=True)]
        window, ns = self.sample.window_ns, self.sample.sampled_ns
        # kept on the fix, as its edits on each half are (``_mapped``): a fix's id may be a
        # later fix's once it is freed
        fix.__dict__["_spread"] = (self, tuple(round(s * window / self.sample.half_ns(i))
                                               if self.sample.half_ns(i) else 0
                                               for i, s in enumerate(got)))
        return round(sum(got) * window / ns) if ns else 0

    def spread(self, fix: Fix) -> tuple[int, int] | None:
        """The saving of ``fix`` as each half alone gives it (scaled to the window); None for
        a fix this timeline has not replayed."""
        got = fix.__dict__.get("_spread")
        return got[1] if got is not None and got[0] is self else None

    @property
    def sampled(self) -> dict:
        return self.sample.to_dict()

    def _mapped(self, fix: Fix) -> tuple[Fix, Fix]:
        """``fix`` on each half's rows (kept on it: a chain of fixes maps link by link, so
        that each half replays it where it differs from the last one, as the full does)."""
        got = fix.__dict__.get("_sampled")
        if got is not None and got[0] is self:
            return got[1]
        if isinstance(fix, _Chained) and fix.__dict__.get("first") is not None:
            a, b = self._mapped(fix.first), self._mapped(fix.second)
            out = (Fix.chain(a[0], b[0]), Fix.chain(a[1], b[1]))
        else:
            out = tuple(_map_fix(fix, cm, gm)
                        for cm, gm in zip(self._call_maps, self._gpu_maps, strict=True))
        fix.__dict__["_sampled"] = (self, out)
        return out


def _through(index: np.ndarray, rows: pl.Series) -> pl.Series:
    """``rows`` (positions, null: none) renumbered through ``index`` (-1: not kept: null)."""
    at = rows.fill_null(-1).to_numpy()
    out = np.where(at >= 0, index[np.maximum(at, 0)], -1).astype(np.int64)
    return pl.Series(rows.name, out).replace(-1, None)


def _map_fix(fix: Fix, calls: np.ndarray, gpu: np.ndarray) -> Fix:
    """``fix``'s edits of the kept calls and operations, renumbered (an increasing map: the
    sorted edit arrays stay sorted)."""
    def at(a: np.ndarray, index: np.ndarray) -> np.ndarray:
        return index[a.astype(np.int64, copy=False)].astype(np.int64) if len(a) else \
            a.astype(np.int64)

    def rows(a: np.ndarray, index: np.ndarray) -> np.ndarray:
        m = at(a, index)
        return m[m >= 0]

    def pairs(keys: np.ndarray, values: np.ndarray, index: np.ndarray):
        m = at(keys, index)
        return m[m >= 0], values[m >= 0]

    cost_calls, cost_ns = pairs(fix.cost_calls, fix.cost_ns, calls)
    gap_calls, gap_ns = pairs(fix.gap_calls, fix.gap_ns, calls)
    gpu_ops, gpu_dur = pairs(fix.gpu_ops, fix.gpu_dur_ns, gpu)
    first = at(fix.graph_first, calls)
    last = at(fix.graph_last, calls) if len(fix.graph_last) else first
    # a graph whose launches are all in the sample (none of them cut out between its ends)
    whole = (first >= 0) & (last >= 0) & (last - first == fix.graph_last - fix.graph_first)
    return Fix(remove_calls=rows(fix.remove_calls, calls),
               unblock_calls=rows(fix.unblock_calls, calls), cost_calls=cost_calls,
               cost_ns=cost_ns, gap_calls=gap_calls, gap_ns=gap_ns, gpu_ops=gpu_ops,
               gpu_dur_ns=gpu_dur, gapless_ops=rows(fix.gapless_ops, gpu),
               graph_first=first[whole], graph_last=last[whole],
               graph_launch_ns=fix.graph_launch_ns[whole] if len(fix.graph_launch_ns) else
               fix.graph_launch_ns, graph_node_ns=fix.graph_node_ns, describe=fix.describe)


def window_timeline(facts, overhead_ns: np.ndarray, starts: np.ndarray | None,
                    step_threads: Callable[[], np.ndarray] | None,
                    slices: tuple[tuple[int, int], ...] | None = None
                    ) -> Timeline | SampledTimeline:
    """The window's replayable timeline; where the window is long (:func:`choose_sample`)
    and has GPU work to replay, the one whose fixes are replayed on a sample of it; else,
    where ``slices`` (a capture's sample: its slices in the sample's clock), the one whose
    fixes are replayed on its two halves (:func:`slice_sample`)."""
    events = facts.calls.height + facts.gpu.height
    sample = choose_sample(facts.window, events, starts, sample_threshold())
    if sample is None and slices:
        sample = slice_sample(facts.window, slices)
    if sample is None or not facts.calls.height or not facts.gpu["work"].any():
        return Timeline(facts, overhead_ns, step_threads=step_threads)
    return SampledTimeline(facts, overhead_ns, sample,
                           step_threads() if step_threads is not None else None)
