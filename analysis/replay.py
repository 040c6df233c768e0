"""What-if replay: re-run a capture's timeline with a fix applied, and see how much sooner it ends.

The timeline is the capture's dependency graph:

* each CPU thread runs its CUDA calls in order; between two calls it does other work (Python,
  the framework), the call's *gap*, which no fix of a CUDA call changes; a call costs its own
  CPU time (*intrinsic*); a call that **waits** for the GPU (a sync, a blocking copy) also
  waits until the GPU work it depends on has finished;
* each GPU stream runs its operations in launch order: an operation starts when it has been
  launched (its call started, plus the launch latency observed for it) and the one before it
  on the stream has finished, and runs for its recorded duration.

A fix edits the graph: a removed sync no longer waits (and costs nothing), so the calls after
it move earlier and the GPU no longer idles behind it; a copy made non-blocking costs only its
launch; a kernel class sped up by a factor runs shorter; a CUDA graph collapses the CPU work
of a run of launches into one launch. The replay recomputes every start time; the saving is
``replay(no fix) - replay(fix)``, so the model's own error on the baseline cancels (it is
reported as ``fidelity``).

The computation is exact max-plus algebra, vectorised. Between two waiting calls of a thread
(an *epoch*) every call moves by the same amount ``D``, so per stream the end of the newest
operation is ``S + max(ready - S_before)`` (``S``: summed durations on the stream) and the
running maxima are kept per (epoch, stream). Only epochs are visited one by one: a loop over
waiting calls (syncs), never over events, compiled with numba when there are many of them.

A rule's fix edits a few calls and operations, and every finding is replayed twice (alone,
and with those ranked above it), so replays after the first start from the unfixed replay's
state (:class:`_Base`): the calls and operations a fix does not edit move by sums of the
edits before them, a group (epoch, stream) with no edit among its members keeps its maximum,
shifted, and only the groups holding an edit, and the epochs around a removed wait, are
recomputed. The outcome is the whole replay's, to the nanosecond (tests compare the two).
With numba, a fix runs only over the epochs where it is in play (a wait it takes away: at its
epoch's rank, which then waits no more): once its effect on the state is one translation of
every thread and stream, the rest is the unfixed (or the last) replay's, translated
(``_Base._replay_sparse``).

Modelled: launch latency, stream FIFO order, host waits, blocking copies. Not modelled: work
the GPU does for other processes, cross-stream event dependencies (their delay is kept as the
operation's launch latency), the launch queue limit, and CPU work that waits for something
other than the GPU (a request arriving): the replay is of a closed loop.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from .compiled import njit, writes
from .instances import thread_order
from .waits import RETURN_SLACK_NS, latest_end_before, partial_waits

if TYPE_CHECKING:
    from .facts import Facts

# CPU time torch.profiler (CPU + CUDA activities, with_stack=True, record_shapes=True) adds
# per recorded CPU event, by kind: a call of a C built-in (``str.lower``, ``len``, a Tensor
# method: its event's name starts with ``KINETO_BUILTIN_PREFIX``), any other Python call, a
# torch op, a CUDA runtime/driver call. A Python call's and a built-in's are what loops of
# such calls alone measure with and without the profiler: 279 ns a Python call's on an H100's
# host (bench/whatif/results/h100-costs48/builtin_cost.json; 271-336 a built-in's there), 271
# on the H200's (results/h200/calibration2.json), 553 on another H100 host
# (results/h100-readback/profiler_kinds.json). With those fixed, an op's and a runtime call's
# are the pair (a grid of the H200 host's earlier fit, 1,157 and 2,156 ns, times 2.0-4.0 and
# 0.8-2.4; bench/whatif/calibrate.py) that brings the unfixed replay without these costs
# closest to the measured step (median |log| of the ratio) over the 26 torch.profiler traces
# of bench/whatif/results/ whose service was also timed without the profiler
# (docs/benchmarks.md, "Forty-ninth round": 0.081 -> 0.060, the forty-eighth round's figures
# before; each round's traces left out in turn: 0.082). Before, the fit put the ops' cost on
# the Python calls (2,103 ns each), and a loop of plain Python calls (a tracker's IoU of every
# box pair) was taken out at 7x what recording it cost. Traces of other settings are deflated
# by the same figures; an op's and a runtime call's scaled by the trace's own host speed:
KINETO_NS_PER_EVENT = {"python_function": 279, "python_builtin": 271, "cpu_op": 3_934,
                       "cuda_runtime": 2_156}
KINETO_BUILTIN_PREFIX = "<built-in"
# A trace's own host speed: the median span of its ``KINETO_SPEED_OP`` ops (an op with no GPU
# work that nearly every op's output is allocated with: the host's dispatch and recording of
# one op) over ``KINETO_SPEED_REF_NS`` (about that median in the traces of the H100 and H200
# hosts that were also timed without the profiler), at least 1. An op's and a runtime call's
# recording costs above are scaled by it: a run whose ops dispatched at half the speed
# recorded them at half the speed too. (A Python call's and a built-in's, measured by loops
# of them, are not: with them scaled too, the tracker's IoU loop of plain Python calls, in a
# trace at 1.22, was priced at 0.67x what vectorising it saved, 0.88x without.) Over the 29
# traces timed without the profiler (docs/benchmarks.md, "Fifty-first round"), the unfixed
# replay against the measured request: mean |log| 0.205 -> 0.155 (a run whose ops dispatched
# 1.8x slower, replayed at 1.78x its measured request, now 1.31x; one at 2.5x, already at
# 1.02x, now 0.82x); the fixes' estimates within ±30% of what they saved: 34 -> 37 of 56.
KINETO_SPEED_OP = "aten::empty"
KINETO_SPEED_REF_NS = 3_100
# fewer of those ops: no speed read (1): one allocation that went to cudaMalloc (ms) would set
# the median of two or three (convlayout's trace has 6, at 6.4-8.0 µs, its replay 2.0x slow)
KINETO_SPEED_MIN_SPANS = 5
# Positions of calls and operations (and -1: none) are held as int32 below this count (half
# the memory of int64), as int64 from it; the margin leaves room for the +1 of running counts.
# Times and durations stay int64 (nanoseconds overflow int32 in 2 s).
INDEX32_MAX = np.iinfo(np.int32).max - 2
# A fix replays in one compiled pass over the epochs, groups and waiting calls where it is in
# play (``_Base._replay_sparse``); off: the dense kernels over every one.
SPARSE = True
# ... when the fix edits fewer calls and operations than 1 in this many epochs: each edit
# costs a few epochs run twice and a jump (~5 us at 1 M operations); past it, the dense
# kernels' passes over every call and operation cost less.
SPARSE_EDITS_PER_EPOCH = 16
# Replays run at once on this many threads (``ZYM_REPLAY_THREADS``; default: the cores this
# process may use, at most 4). The compiled loops release the interpreter; each replay in
# flight holds its checkpoints (~10 MB a million GPU operations, hence the cap), each thread
# keeps its own last chained replay, and one at a time runs the dense kernels (their buffers
# are shared).
ENV_REPLAY_THREADS = "ZYM_REPLAY_THREADS"
MAX_REPLAY_THREADS = 4
_BUILD = threading.RLock()   # the unfixed replay's state and the sparse state: built once


def replay_threads() -> int:
    """How many replays may run at once (see ``ENV_REPLAY_THREADS``)."""
    raw = os.environ.get(ENV_REPLAY_THREADS, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            from zym.schemas.errors import ZymError

            raise ZymError(f"{ENV_REPLAY_THREADS}={raw!r}: give a number of threads, 1 or "
                           "more (or unset it: the cores this process may use, at most "
                           f"{MAX_REPLAY_THREADS})")
        return int(raw)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_REPLAY_THREADS))


def _max_of(values: np.ndarray, mask: np.ndarray | None) -> int:
    """The largest of ``values`` where ``mask`` (None: all), or -2^62 for none."""
    values = values if mask is None else values[mask]
    return int(values.max()) if len(values) else -(1 << 62)


def median_int(values: np.ndarray) -> int:
    """``int(np.median(values))``, 0 for none. (polars' selection: numpy's introselect is
    slow on arrays mostly of one value, as the gaps between queued kernels are: 1.1 s
    against 0.04 s on 7.3 M gaps, 5.7 M of them 0.)"""
    return int(pl.Series(values).median()) if len(values) else 0


def index_dtype(n: int) -> type:
    """The integer type of positions below ``n`` (see ``INDEX32_MAX``)."""
    return np.int32 if n <= INDEX32_MAX else np.int64


def narrow_index(a: np.ndarray, n: int) -> np.ndarray:
    """``a``, positions below ``n`` (or -1), as :func:`index_dtype` of ``n``."""
    return a.astype(index_dtype(n), copy=False)


@dataclass
class Fix:
    """Edits to the timeline, by ``call_idx`` (rows of ``Facts.calls``) and ``gpu_idx`` (rows of
    ``Facts.gpu``). Empty arrays change nothing. ``describe`` says how the estimate was made."""

    remove_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unblock_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cost_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cost_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gap_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gap_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gpu_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gpu_dur_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # operations that run right after the one before them on their stream, without the queue
    # gap between two launched operations (one kernel's work split over many launches: the
    # items of a batch)
    gapless_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    graph_first: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    graph_last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    graph_launch_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    graph_node_ns: int = 0
    # CPU work the fix takes away after the window's last CUDA call (the last step's
    # post-processing up to where its function returned): outside what the replay runs,
    # saved outright where the GPU is done by then (:meth:`Timeline.saving`)
    tail_ns: int = 0
    describe: str = ""

    def edits_nothing(self) -> bool:
        """No edit for the replay to make (a tail at most)."""
        return not any(len(getattr(self, f)) for f in (
            "remove_calls", "unblock_calls", "cost_calls", "gap_calls", "gpu_ops", "gapless_ops",
            "graph_first"))

    def is_empty(self) -> bool:
        return self.edits_nothing() and not self.tail_ns

    @staticmethod
    def combine(fixes: list[Fix]) -> Fix:
        """All of ``fixes`` at once. Where two edit the same call or operation, the larger
        change holds (the shorter duration, the smaller cost), so nothing is counted twice."""
        def cat(name: str) -> np.ndarray:
            parts = [getattr(f, name) for f in fixes]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)

        def smallest(keys: str, values: str) -> tuple[np.ndarray, np.ndarray]:
            """Each key once, in order, with its smallest value. A stable sort of the keys
            alone: fixes are sorted runs, which it merges in linear time."""
            k, v = cat(keys), cat(values)
            if not len(k):
                return k, v
            order = np.argsort(k, kind="stable")
            k = k[order]
            first = np.flatnonzero(_starts(k))
            return k[first], np.fmin.reduceat(v[order], first)

        cost_calls, cost_ns = smallest("cost_calls", "cost_ns")
        gap_calls, gap_ns = smallest("gap_calls", "gap_ns")
        gpu_ops, gpu_dur = smallest("gpu_ops", "gpu_dur_ns")
        graphs = [f for f in fixes if len(f.graph_first)]
        return Fix(remove_calls=sorted_unique(cat("remove_calls")),
                   unblock_calls=sorted_unique(cat("unblock_calls")), cost_calls=cost_calls,
                   cost_ns=cost_ns, gap_calls=gap_calls, gap_ns=gap_ns, gpu_ops=gpu_ops,
                   gpu_dur_ns=gpu_dur, gapless_ops=sorted_unique(cat("gapless_ops")),
                   graph_first=cat("graph_first"),
                   graph_last=cat("graph_last"),
                   graph_launch_ns=cat("graph_launch_ns"),   # one per segment, as graph_first
                   graph_node_ns=max((f.graph_node_ns for f in graphs), default=0),
                   # one window, one last step: the same tail however many fixes take it
                   tail_ns=max((f.tail_ns for f in fixes), default=0),
                   describe="; ".join(f.describe for f in fixes if f.describe))


    @staticmethod
    def chain(together: Fix, fix: Fix) -> Fix:
        """``Fix.combine([together, fix])``, its edit arrays built only when read: a replay
        of it right after one of ``together`` merges ``fix``'s edits into the edit set that
        replay kept (``_Base._replay_chained``), without sorting every edit again."""
        return _Chained(together, fix)


class _Chained(Fix):
    """``Fix.chain``: ``Fix.combine([first, second])``, whose call and operation edits are
    combined on first read (then the parts are let go); the graph edits and ``describe``
    and the gapless operations (what a replay reads before choosing its path) are combined
    at once."""

    _LAZY = ("remove_calls", "unblock_calls", "cost_calls", "cost_ns", "gap_calls", "gap_ns",
             "gpu_ops", "gpu_dur_ns")

    def __init__(self, first: Fix, second: Fix) -> None:  # no dataclass __init__: lazy fields
        self.first, self.second = first, second
        parts = (first, second)
        self.graph_first = np.concatenate([f.graph_first for f in parts])
        self.graph_last = np.concatenate([f.graph_last for f in parts])
        self.graph_launch_ns = np.concatenate([f.graph_launch_ns for f in parts])
        # read before a replay chooses its path, as the graphs are: combined at once
        self.gapless_ops = sorted_unique(*(f.gapless_ops for f in parts))
        self.graph_node_ns = max((f.graph_node_ns for f in parts if len(f.graph_first)),
                                 default=0)
        self.describe = "; ".join(f.describe for f in parts if f.describe)
        self.tail_ns = max(first.tail_ns, second.tail_ns)
        # (first's are known: no recursion)
        self._edits_nothing = first.edits_nothing() and second.edits_nothing()
        self._empty = self._edits_nothing and not self.tail_ns

    def __getattr__(self, name: str):
        if name not in _Chained._LAZY:
            raise AttributeError(name)
        self._materialise()
        return self.__dict__[name]

    def is_empty(self) -> bool:
        return self._empty

    def edits_nothing(self) -> bool:
        return self._edits_nothing

    def _materialise(self) -> None:
        """Every link of the chain not yet combined, from the innermost out (no recursion:
        chains are as long as the findings are many)."""
        links = []
        f: Fix = self
        while isinstance(f, _Chained) and "cost_calls" not in f.__dict__:
            links.append(f)
            f = f.first
        for link in reversed(links):
            both = Fix.combine([link.first, link.second])
            for name in _Chained._LAZY:
                link.__dict__[name] = getattr(both, name)
            link.first = link.second = None  # the parts' arrays are not kept twice


@dataclass(frozen=True)
class Outcome:
    end_ns: int  # when the replayed window ends (capture clock)
    cpu_end_ns: int  # when the last CPU call returns
    gpu_end_ns: int  # when the last GPU operation ends


class CallSide:
    """What a window's calls are without replaying anything: each thread's calls in time order
    (``order``, ``first_of_thread``), the CPU time before each call no fix of a CUDA call
    changes (``gap``: since the latest end of the thread's earlier calls), and whether it
    waits for the GPU (``waits``: a blocking call, unless it returned before its own GPU
    operation ended; ``waits_own``: for that operation, ``own_row``, else for every operation
    launched before it; an event sync, and a stream sync that left other work running, for
    the operation that ended last by its return, :func:`zym.analysis.waits.partial_waits`).
    ``Facts.calls`` order throughout (``gpu``: the operations, ``gpu_idx`` order). The
    timeline builds on it; the fix models read it (also where the fixes are replayed on a
    sample of the window). ``partial``: False leaves what the partial waits waited for out
    (``own_row`` is then the calls' own operations; which calls wait, and their gaps, are the
    same either way: a partial wait's operation ended by its return)."""

    def __init__(self, calls: pl.DataFrame, gpu: pl.DataFrame, w0: int,
                 partial: bool = True) -> None:
        gpu_end, n_gpu = gpu["end_ns"].to_numpy(), gpu.height
        c = calls.select("call_idx", "_thread", "ts_ns", "dur_ns", "end_ns", "kind", "blocking")
        thread = c["_thread"].to_numpy()
        self.n_calls = calls.height
        self.call_ts = c["ts_ns"].to_numpy()
        self.dur = c["dur_ns"].to_numpy().astype(np.int64, copy=False)
        end = c["end_ns"].to_numpy()
        # Per thread, in time order: the calls are in time order already (``Facts.calls``), so
        # a stable sort by thread alone is the (thread, time) order.
        if len(self.call_ts) < 2 or bool((self.call_ts[1:] >= self.call_ts[:-1]).all()):
            order = thread_order(thread)  # by radix (argsort of the ids: ~0.9 s at 12.5 M)
        else:
            order = np.lexsort((self.call_ts, thread))
        self.order = narrow_index(order, len(order))
        del order
        order = self.order
        t_sorted = thread[order]
        first = np.ones(len(order), bool)
        first[1:] = t_sorted[1:] != t_sorted[:-1]
        del t_sorted, thread
        self.first_of_thread = first
        # The previous calls' latest end on the thread (overlapping calls nest). (Each
        # per-call temporary is freed once read: ~100 MB each at 10 M calls.)
        run_max = _segmented_cummax(end[order], first)
        prev_end = np.empty_like(run_max)
        prev_end[1:] = run_max[:-1]
        del run_max
        prev_end[first] = w0
        gap = self.call_ts[order]
        gap -= prev_end
        del prev_end
        np.clip(gap, 0, None, out=gap)
        self.gap = np.empty(len(order), np.int64)
        self.gap[order] = gap
        del gap
        # What each waiting call waited for: its own GPU operation (a blocking copy), one
        # operation (an event sync, a stream sync beside other streams' work), else every
        # operation launched before it (a sync).
        blocking = c["blocking"].to_numpy()
        own_row = calls["own_row"].fill_null(-1).to_numpy()
        at, awaited = partial_waits(calls, gpu, blocking) if partial else (own_row[:0],) * 2
        if len(at):
            own_row = own_row.copy()
            own_row[at] = awaited
        self.own_row = narrow_index(own_row, n_gpu)
        del own_row
        has_own = self.own_row >= 0
        self.own_end = np.where(has_own, gpu_end[np.maximum(self.own_row, 0)] if len(gpu_end)
                                else -1, -1)
        returned_early = has_own & (end < self.own_end - RETURN_SLACK_NS)
        self.waits = blocking & ~returned_early
        self.waits_own = self.waits & has_own


class Timeline:
    """The replayable timeline of one analysis window (see the module doc).

    ``overhead_ns``: CPU time the recording itself added before each call (one figure for all,
    or one per call in ``Facts.calls`` order); it is taken out of the gaps, so predictions are
    of the run without the profiler.
    """

    def __init__(self, facts: Facts, overhead_ns: int | np.ndarray = 0,
                 step_threads: np.ndarray | Callable[[], np.ndarray] | None = None) -> None:
        self.facts = facts
        calls = facts.calls
        oh = np.broadcast_to(np.asarray(overhead_ns, np.int64), (calls.height,))
        self.overhead_ns = np.clip(oh, 0, None) if oh.size and oh.min() < 0 else oh
        self.n_calls = calls.height
        self.w0, self.w1 = facts.window
        # the columns read here, then the work rows (not every column of every operation)
        gpu = facts.gpu.select("gpu_idx", "ts_ns", "dur_ns", "end_ns", "device_id",
                               "stream_id", "call_idx", "work")
        self._build_gpu(gpu.filter("work"), calls, facts.gpu.height)
        self._build_calls(calls, facts.gpu)
        # The threads whose ends are the window's, among several (by rank in thread order):
        # those that run the step function, where the window is made of steps (the workers
        # of a pool); else every thread's. None: every thread. (``step_threads``: their
        # ``_thread`` keys, or what finds them, called only where there are several.)
        self.end_threads: np.ndarray | None = None
        if step_threads is not None and self.threads > 1:
            if callable(step_threads):
                step_threads = step_threads()
            keys = calls["_thread"].to_numpy()[self.order[self.first_of_thread]]
            mine = np.isin(keys, np.asarray(step_threads))
            if mine.any() and not mine.all():
                self.end_threads = mine
        # Operations replayed at a fixed time, not after their call (``op_anchor``): the
        # unlaunched ones, at their recorded start. With the window's threads known, the
        # other threads' operations are left out of the replay (``op_exo``: no duration, no
        # gap, never ready, so no wait awaits them). Those threads run beside the steps at
        # their own pace (a monitor's sleep, a queue), not the steps': a fix that removes
        # their waits makes them run more often, not sooner, and a fix that speeds the steps
        # up does not make them launch sooner. Replayed as a closed loop, a monitoring
        # thread's later launches crept ever earlier in the shared stream's queue and the
        # steps' operations queued behind them ran sooner (on the H200 sidecar service its
        # .item() "saved" 4% of the window; measured: nothing); pinned at their recorded
        # times, they pinned the steps to the recorded timeline (every sync of the steps
        # waited for the monitor's last launch). What their GPU work takes from the steps'
        # is not modelled: the replay's error against the recording says how much it was.
        self.op_exo = np.zeros(len(self.op_call), bool)
        self.op_anchor = self.op_start
        if self.end_threads is not None and len(self.op_call):
            rank = np.empty(self.n_calls, np.int64)
            rank[self.order] = np.cumsum(self.first_of_thread) - 1
            call = self.op_call.astype(np.int64)
            self.op_exo = (call >= 0) & ~self.end_threads[rank[np.maximum(call, 0)]]
            if self.op_exo.any():
                self.op_dur = np.where(self.op_exo, 0, self.op_dur)
                self.op_gap = np.where(self.op_exo, 0, self.op_gap)
                self.op_anchor = np.where(self.op_exo, self.w0 - (1 << 60), self.op_start)

    # -- model --------------------------------------------------------------------------------

    @staticmethod
    def _adopt_orphans(gpu: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
        """GPU work no call claims (its launch went unrecorded or unjoined) follows the last
        call that started before it, so it moves with the timeline: pinned at its recorded
        time, one such kernel would hold every later operation back and hide every saving."""
        orphan = gpu["call_idx"].is_null()
        if not orphan.any() or calls.height == 0:
            return gpu
        ts = calls["ts_ns"].to_numpy()
        order = np.argsort(ts, kind="stable")
        k = np.searchsorted(ts[order], gpu.filter(orphan)["ts_ns"].to_numpy(), side="right") - 1
        idx = np.where(k >= 0, calls["call_idx"].to_numpy()[order][np.maximum(k, 0)], -1)
        adopted = np.full(gpu.height, -1, np.int64)
        adopted[np.nonzero(orphan.to_numpy())[0]] = idx
        return gpu.with_columns(pl.when(orphan & (pl.Series(adopted) >= 0))
                                .then(pl.Series(adopted)).otherwise(pl.col("call_idx"))
                                .alias("call_idx"))

    def _build_gpu(self, gpu: pl.DataFrame, calls: pl.DataFrame, n_gpu: int) -> None:
        """GPU operations in stream order, their launching call, and what held each one back.

        An operation starts when it is ready (its call started, plus the launch latency) and
        the stream is free (the previous operation ended, plus the gap the GPU leaves between
        two queued operations). Whichever was later is what held it back, and that delay is
        kept as recorded; the other gets the capture's typical value (or its own, when
        smaller). So the unfixed replay reproduces every start, and a fix moves an operation
        by what actually bound it: a queued kernel follows its predecessor, a kernel that
        waited for its launch follows its call."""
        gpu = self._adopt_orphans(gpu, calls)
        launch_ts = calls["ts_ns"].gather(gpu["call_idx"])
        g = gpu.select(
            "gpu_idx", "ts_ns", "dur_ns", "end_ns",
            (pl.col("device_id").cast(pl.Int64) * (1 << 40)
             + pl.col("stream_id").fill_null(0).cast(pl.Int64)).alias("stream"),
            pl.col("call_idx").fill_null(-1),
            pl.coalesce(launch_ts, pl.col("ts_ns")).alias("launch_ts"),
        )
        g = g[_stream_order(g)]
        start = g["ts_ns"].to_numpy()
        end = g["end_ns"].to_numpy()
        stream = g["stream"].to_numpy()
        g = g.drop("end_ns", "stream")  # read once: not held with the frame
        first = np.r_[True, stream[1:] != stream[:-1]] if len(stream) else np.zeros(0, bool)
        prev_end = np.r_[0, end[:-1]] if len(end) else end
        del end
        # (per-operation temporaries freed once read: ~80 MB each at 10 M operations)
        gap_obs = np.where(first, np.iinfo(np.int64).max, np.maximum(start - prev_end, 0))
        del prev_end
        launched = g["call_idx"].to_numpy() >= 0
        lat_obs = np.where(launched, start - g["launch_ts"].to_numpy(), 0)
        self.skewed_ops = int((lat_obs < 0).sum())
        lat_obs = np.maximum(lat_obs, 0)
        by_launch = launched & (lat_obs < gap_obs)  # it waited for its launch
        by_stream = ~by_launch & ~first  # it waited for the one before it
        self.launch_latency_ns = median_int(lat_obs[by_launch])
        self.queue_gap_ns = median_int(gap_obs[by_stream])
        lat = np.where(by_launch, lat_obs, np.minimum(lat_obs, self.launch_latency_ns))
        del lat_obs
        gap = np.where(by_stream, gap_obs,
                       np.where(first, 0, np.minimum(gap_obs, self.queue_gap_ns)))
        del gap_obs, by_launch, by_stream
        op_gpu_idx = g["gpu_idx"].to_numpy()
        self.op_call = narrow_index(g["call_idx"].to_numpy(), self.n_calls)
        self.op_dur = g["dur_ns"].to_numpy().astype(np.int64, copy=False)
        self.op_start = start
        self.op_lat = np.where(launched, lat, 0).astype(np.int64, copy=False)
        del lat
        self.op_gap = gap.astype(np.int64, copy=False)
        self.op_launch = g["launch_ts"].to_numpy()
        # Streams are few and the operations sorted by stream: ids by counting the changes.
        self.op_sid = np.cumsum(_starts(stream)) - 1
        self.n_streams = int(self.op_sid[-1]) + 1 if len(stream) else 0
        # position of each gpu_idx in stream order
        self.pos_of_gpu = np.full(n_gpu, -1, index_dtype(len(op_gpu_idx)))  # -1: not work
        self.pos_of_gpu[op_gpu_idx] = np.arange(len(op_gpu_idx))

    def _build_calls(self, calls: pl.DataFrame, gpu: pl.DataFrame) -> None:
        """Per call: its thread, gap, intrinsic cost, and whether (and for what) it waits
        (``gpu``: the operations, by ``gpu_idx``)."""
        c = CallSide(calls, gpu, self.w0)
        self.call_ts, self.order, self.first_of_thread, self.gap = c.call_ts, c.order, \
            c.first_of_thread, c.gap
        self.own_row, self.waits, self.waits_own = c.own_row, c.waits, c.waits_own
        dur, own_end = c.dur, c.own_end
        del c
        g_all = self._completed_before(self.call_ts)
        awaited = np.where(self.waits_own, own_end, g_all)
        del g_all, own_end
        awaited -= self.call_ts
        np.clip(awaited, 0, dur, out=awaited)
        wait_obs = np.where(self.waits, awaited, 0)
        del awaited
        self.intrinsic = dur - wait_obs

    def _completed_before(self, ts: np.ndarray) -> np.ndarray:
        """For each time, the latest end among GPU operations launched before it (observed;
        every process's: the replay does not model other processes' work)."""
        order = np.argsort(self.op_launch, kind="stable")
        ends = self.op_start[order]  # (gathered, then summed in place)
        ends += self.op_dur[order]
        return latest_end_before(self.op_launch[order], ends, ts, overwrite=True)

    # -- replay -------------------------------------------------------------------------------

    @cached_property
    def baseline(self) -> Outcome:
        """The unfixed replay: the incremental state's, once fixes have been replayed from it;
        else one whole replay that keeps no state (all that ``--no-rules`` needs)."""
        if "_base_state" in self.__dict__:
            return self._base.outcome
        return self.replay(Fix(), incremental=False)

    @property
    def fidelity(self) -> dict:
        """How well the unfixed replay reproduces the recorded window (``error_pct``, with the
        recording's own cost left in), and how long the window would have lasted without that
        cost (``uninstrumented_ns``: the baseline savings are taken from)."""
        obs = self.w1 - self.w0
        # Without a recording cost to take out, the replay as recorded is the baseline.
        sim = (self.replay(Fix(), deflate=False) if self.overhead_ns.any()
               else self.baseline).end_ns - self.w0
        # The replay ends with the last call or GPU operation; the window's CPU work after
        # both (the last step's post-processing) is not a call to replay: it is counted as
        # recorded, not as the replay's error.
        after = self.trailing_ns
        sim += after
        return {"recorded_ns": int(obs), "replayed_ns": int(sim),
                "error_pct": round(100 * (sim - obs) / obs, 2) if obs else 0.0,
                "uninstrumented_ns": self.uninstrumented_ns,
                "profiler_overhead_ns": int(self.overhead_ns.sum()),
                "launch_latency_ns": self.launch_latency_ns, "queue_gap_ns": self.queue_gap_ns,
                "skewed_ops": self.skewed_ops}

    @property
    def uninstrumented_ns(self) -> int:
        """How long the window would have lasted without the recording's own cost: the
        unfixed replay's end (the CPU work after the last call and operation as recorded)."""
        return int(self.baseline.end_ns - self.w0 + self.trailing_ns)

    @property
    def trailing_ns(self) -> int:
        """The window's time after its last CUDA call returned and its last GPU operation
        ended (as recorded): CPU work that ends it, which no call starts (0 where a call or an
        operation ends the window)."""
        ends = self.facts.calls["end_ns"]
        last = max(int(ends.max()) if len(ends) else self.w0,
                   int((self.op_start + self.op_dur).max()) if len(self.op_dur) else self.w0)
        return max(self.w1 - last, 0)

    @property
    def usable(self) -> bool:
        """Whether the capture has a GPU side to replay against: without it, waiting for the
        GPU cannot be told from a call's own cost, so nothing is estimated."""
        return len(self.op_dur) > 0 and self.n_calls > 0

    def saving(self, fix: Fix, reference: bool = False, alone: bool = False) -> int:
        """Nanoseconds the window would end sooner with ``fix`` applied (never negative).
        ``reference``: the fixes chained to this one are replayed next on this thread, from
        it: replayed sparse however many its edits, so that they can be. ``alone``: no replay
        to come on this thread is related to it (the findings' own fixes): run from the
        unfixed replay, and its checkpoints not kept (~10 MB a million GPU operations)."""
        if fix.is_empty():
            return 0
        gain = 0
        if not fix.edits_nothing():
            # first: it builds the state the baseline then comes from
            fixed = self.replay(fix, reference=reference, alone=alone)
            gain = max(self.baseline.end_ns - fixed.end_ns, 0)
        if fix.tail_ns:
            # work after the last call ends the window where the GPU is done before it
            b = self.baseline
            gain += max(fix.tail_ns - max(b.gpu_end_ns - b.cpu_end_ns, 0), 0)
        return gain

    def replay(self, fix: Fix, deflate: bool = True, incremental: bool = True,
               reference: bool = False, alone: bool = False) -> Outcome:
        """The window replayed with ``fix`` (``deflate``: without the recording's own cost).

        ``incremental``: from the unfixed replay's state (``_base``), recomputing only what the
        fix moves (the same outcome as the whole replay, which runs for graph fixes and
        gapless operations, for ``deflate=False``, and when ``incremental`` is off)."""
        if self.n_calls == 0:  # nothing on the CPU side to move: the window is what was recorded
            return Outcome(self.w1, self.w0, self.w1)
        if incremental and deflate and not len(fix.graph_first) and not len(fix.gapless_ops):
            return self._base.replay(self, fix, reference, alone)
        return self._replay_whole(fix, deflate)

    def _edit(self, fix: Fix, deflate: bool):
        """The timeline's arrays with ``fix`` applied (copies): gaps, costs, which calls wait,
        and per operation its duration, launch latency, queue gap, the call it follows and
        whether it is gone (its call removed)."""
        if fix.edits_nothing():  # the unfixed replay reads the timeline's own arrays (no copies)
            gap = (np.clip(self.gap - self.overhead_ns, 0, None)
                   if deflate and self.overhead_ns.any() else self.gap)  # gaps are >= 0
            return (gap, self.intrinsic, self.waits, self.op_dur, self.op_lat, self.op_gap,
                    self.op_call, np.zeros(len(self.op_dur), bool))
        gap = np.clip(self.gap - (self.overhead_ns if deflate else 0), 0, None)
        cost = self.intrinsic.copy()
        waits = self.waits.copy()
        op_dur = self.op_dur.copy()
        op_lat = self.op_lat.copy()
        op_gap = self.op_gap.copy()
        op_ready_call = self.op_call.copy()  # the call whose start the operation follows

        if len(fix.gap_calls):
            gap[fix.gap_calls] = np.minimum(gap[fix.gap_calls], fix.gap_ns)
        if len(fix.cost_calls):
            cost[fix.cost_calls] = np.minimum(cost[fix.cost_calls], fix.cost_ns)
        if len(fix.unblock_calls):
            waits[fix.unblock_calls] = False
        gone = np.zeros(len(op_dur), bool)
        if len(fix.remove_calls):
            cost[fix.remove_calls] = 0
            waits[fix.remove_calls] = False
            removed = np.zeros(self.n_calls + 1, bool)  # the last: no call (-1)
            removed[fix.remove_calls] = True
            gone = removed[self.op_call]
            op_dur[gone] = 0
        if len(fix.gpu_ops):
            pos = self.pos_of_gpu[fix.gpu_ops]
            ok = pos >= 0
            op_dur[pos[ok]] = np.minimum(op_dur[pos[ok]], fix.gpu_dur_ns[ok])
        if len(fix.gapless_ops):
            pos = self.pos_of_gpu[fix.gapless_ops]
            op_gap[pos[pos >= 0]] = 0
        if len(fix.graph_first):
            self._apply_graphs(fix, gap, cost, waits, op_dur, op_lat, op_ready_call, op_gap)
        op_gap = np.where(gone, 0, op_gap)
        return gap, cost, waits, op_dur, op_lat, op_gap, op_ready_call, gone

    def _replay_whole(self, fix: Fix, deflate: bool = True, keep: dict | None = None
                      ) -> Outcome:
        """Every call and operation replayed (``keep``: filled with the intermediate arrays,
        from which ``_Base`` replays later fixes incrementally)."""
        n = self.n_calls
        gap, cost, waits, op_dur, op_lat, op_gap, op_ready_call, gone = self._edit(fix, deflate)

        order = self.order
        # Per thread: start of each call if nothing waited (C), relative to the window start.
        step = (gap + cost)[order]
        first = self.first_of_thread
        csum = _segmented_cumsum(step, first)
        c_sorted = csum - cost[order]  # start = everything before it + its own gap
        del step, csum  # at millions of calls, each of these is ~100 MB of the peak
        start_nowait = np.empty(n, np.int64)
        start_nowait[order] = c_sorted
        del c_sorted
        # Epochs: a waiting call ends its epoch. Epoch ids are global, in thread order.
        thread_rank = np.empty(n, np.int64)
        thread_rank[order] = np.cumsum(first) - 1
        n_threads = int(thread_rank.max()) + 1 if n else 0
        if n_threads > 1:
            epoch, epoch_base, epoch_key, wait_ts = self._pieces(waits)
        else:
            before = np.empty(n, np.int64)
            before[order] = _segmented_exclusive_cumsum(waits[order].astype(np.int64), first)
            epoch_base = np.zeros(n_threads + 1, np.int64)
            if n:
                epochs_per_thread = np.bincount(thread_rank, weights=waits, minlength=n_threads)
                epoch_base[1:] = np.cumsum(epochs_per_thread.astype(np.int64) + 1)
            epoch = epoch_base[thread_rank] + before if n else before
            del before
            epoch_key = None
        n_epochs = int(epoch_base[-1])

        # GPU side: per stream, S (summed gaps and durations) up to each operation, and each
        # operation's contribution ready - gap - S_before (the epoch's shift is added in the
        # loop): its end is then S + the running max of the contributions.
        sid = self.op_sid
        span = op_gap + op_dur
        s_incl = _segmented_cumsum(span, _starts(sid))
        s_before = s_incl - span
        launched = (op_ready_call >= 0) & ~self.op_exo
        ready_rel = np.where(launched, start_nowait[np.maximum(op_ready_call, 0)] + op_lat,
                             self.op_anchor - self.w0)
        contrib = np.where(gone, -(1 << 62), ready_rel - op_gap - s_before)  # removed: no start
        op_epoch = np.where(launched, epoch[np.maximum(op_ready_call, 0)], -1)
        del s_before, ready_rel, op_dur, op_lat, op_gap, op_ready_call, gone
        # Unlaunched (anchored) operations join the epoch running at their recorded launch
        # (an unjoined one's is its start): what waits after it awaits it.
        epoch_start = None  # (several threads: their epochs are ordered by their intervals)
        if epoch_key is None:
            epoch_start = np.full(n_epochs, np.iinfo(np.int64).max, np.int64)
            if n:
                np.minimum.at(epoch_start, epoch, self.call_ts)
        epoch_order = np.argsort(epoch_start if epoch_key is None else epoch_key, kind="stable")
        several = epoch_key is not None
        rank_of_epoch = np.empty(n_epochs, np.int64)
        rank_of_epoch[epoch_order] = np.arange(n_epochs)
        if (~launched).any() and not several:
            k = np.searchsorted(epoch_start[epoch_order], self.op_launch[~launched],
                                side="right")
            op_epoch[~launched] = epoch_order[np.clip(k - 1, 0, max(n_epochs - 1, 0))] \
                if n_epochs else -1
        elif (~launched).any():  # the first piece of the interval of its recorded launch
            q = np.searchsorted(wait_ts, self.op_launch[~launched], side="right")
            k = np.searchsorted(epoch_key[epoch_order], 2 * q, side="left")
            op_epoch[~launched] = epoch_order[np.clip(k, 0, max(n_epochs - 1, 0))] \
                if n_epochs else -1
        del epoch_key
        # The waiting call that ends each epoch, and each epoch's thread (before the groups:
        # the per-call epochs and thread ranks are not held through their sort).
        wait_idx = np.nonzero(waits)[0]
        epoch_wait = np.full(n_epochs, -1, np.int64)
        epoch_wait[epoch[wait_idx]] = wait_idx
        thread_of_epoch = np.zeros(n_epochs, np.int64)
        if n:
            thread_of_epoch[epoch] = thread_rank
        # With several threads, each call's epoch by thread position (``_Base``: an edited
        # call's epoch is not its count of waits before it there).
        epoch_of_pos = (narrow_index(epoch[order], n_epochs)
                        if keep is not None and several else None)
        del epoch, thread_rank
        # Group maxima per (epoch, stream, anchored?).
        groups = _group_max(rank_of_epoch[np.maximum(op_epoch, 0)] if n_epochs else op_epoch,
                            sid, (~launched).astype(np.int64), contrib, keep)
        del contrib, op_epoch

        # For a sync: per stream, S up to the newest operation launched before the call;
        # for a blocking copy: its own operation's stream and S.
        s_at, own_pos = self._awaited_prefix(wait_idx, s_incl, keep)
        if keep is not None:
            keep.update(gap=gap, cost=cost, start_nowait=start_nowait, span=span, s_incl=s_incl,
                        launched=launched, epoch_start=epoch_start, epoch_order=epoch_order,
                        epoch_wait=epoch_wait, thread_of_epoch=thread_of_epoch,
                        wait_idx=wait_idx, own_pos=own_pos, n_threads=n_threads, groups=groups,
                        epoch_base=epoch_base, epoch_of_pos=epoch_of_pos)
        total = self._loop(n_epochs, epoch_order, groups, epoch_wait, thread_of_epoch,
                           start_nowait, cost, s_at, own_pos, wait_idx, sid, s_incl, n_threads)
        return total

    @property
    def _base(self) -> _Base:
        """The unfixed replay's state, built once (replays run on several threads)."""
        base = self.__dict__.get("_base_state")
        if base is None:
            with _BUILD:
                base = self.__dict__.get("_base_state")
                if base is None:
                    base = self.__dict__["_base_state"] = _Base(self)
        return base

    @cached_property
    def _end_masks(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Which threads' last calls and which streams' last operations end the window (by
        thread rank, by stream; None: all). Where it ends with ``end_threads``' work: those
        threads, and the streams whose last operation one of them launched (their
        operations queued before another thread's last ones end earlier than the stream;
        they are left out)."""
        if self.end_threads is None:
            return None, None
        streams = np.zeros(self.n_streams, bool)
        if self.n_streams:
            sid = self.op_sid
            last = np.nonzero(np.append(sid[1:] != sid[:-1], True))[0]
            # launched by one of them: launched, and not another thread's (``op_exo``)
            streams[sid[last]] = (self.op_call[last] >= 0) & ~self.op_exo[last]
        return self.end_threads, streams

    @property
    def threads(self) -> int:
        """How many CPU threads made calls in the window."""
        return int(self.first_of_thread.sum())

    @cached_property
    def _call_rank(self) -> np.ndarray | None:
        """Each call's rank in (start, ``call_idx``) order; None when that is ``call_idx``
        order (calls in time order, as ``Facts.calls`` holds them)."""
        ts = self.call_ts
        if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()):
            return None
        rank = np.empty(len(ts), np.int64)
        rank[np.lexsort((np.arange(len(ts)), ts))] = np.arange(len(ts))
        return rank

    def _pieces(self, waits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                  np.ndarray]:
        """The epochs of several threads. One thread's calls between two of its own waits
        can hold calls it made after another thread's wait: folded into the streams before
        that wait as one unit, its operations launched after the wait would count as
        awaited, and the other thread would wait for work not yet launched (on a thread-pool
        service, the unfixed replay ran 22% long). So an epoch here is one thread's calls
        between two consecutive waits of *any* thread (in time order; a waiting call closes
        the interval it is in): no thread waits inside one, so its calls move by one amount,
        and each wait comes after exactly the operations launched before it. Epochs in the
        order of their intervals, the waiting one of each interval last; with one thread
        these are its epochs in start order.

        Returns each call's epoch (global, in thread order), each thread's first epoch (and
        their count last), each epoch's order key (2 * interval, + 1 where it waits), and the
        waits' start times in time order."""
        n, order = self.n_calls, self.order
        wait_idx = np.nonzero(waits)[0]
        rank = self._call_rank
        # How many waits came before each call, in time order (a call's rank: its call_idx
        # where the calls are in time order), gathered in thread order.
        if rank is None:
            before = np.cumsum(waits, dtype=np.int64)
            before -= waits
            interval = before[order]
        else:
            w_time = np.zeros(n, bool)
            w_time[rank[wait_idx]] = True
            before = np.cumsum(w_time, dtype=np.int64)
            before -= w_time
            del w_time
            interval = before[rank[order]]
        del before
        new = self.first_of_thread.copy()
        new[1:] |= interval[1:] != interval[:-1]
        e_sorted = np.cumsum(new, dtype=index_dtype(n)) - 1
        epoch = np.empty(n, e_sorted.dtype)
        epoch[order] = e_sorted
        n_epochs = int(e_sorted[-1]) + 1 if n else 0
        epoch_base = np.append(e_sorted[self.first_of_thread], n_epochs).astype(np.int64)
        key = 2 * interval[new]
        del interval, new, e_sorted
        key[epoch[wait_idx]] += 1
        wait_ts = self.call_ts[wait_idx] if rank is None else \
            self.call_ts[wait_idx[np.argsort(rank[wait_idx], kind="stable")]]
        return epoch, epoch_base, key, wait_ts

    def _awaited_prefix(self, wait_idx: np.ndarray, s_incl: np.ndarray, keep: dict | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Per waiting call: ``s_at[k, stream]``, the summed durations on each stream up to the
        newest operation launched before the call (-1: none), and ``own_pos``, the stream
        position of its own operation when it waits for that (a blocking copy), else -1
        (``keep``: gets the awaited operations, ``at``)."""
        at, own_pos = self._awaited_positions(wait_idx)
        if keep is not None:
            keep["at"] = at
        return np.where(at >= 0, s_incl[np.maximum(at, 0)], -1) if at.size else at, own_pos

    def _awaited_positions(self, wait_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_awaited_prefix``'s operations (stream positions, -1: none), which no fix moves."""
        at = np.full((len(wait_idx), self.n_streams), -1, np.int64)
        own_pos = np.full(len(wait_idx), -1, np.int64)
        if not len(wait_idx) or not self.n_streams:
            return at, own_pos
        for s in range(self.n_streams):
            on = np.nonzero(self.op_sid == s)[0]
            k = np.searchsorted(self.op_launch[on], self.call_ts[wait_idx], side="left")
            has = k > 0
            at[has, s] = on[k[has] - 1]
        own = self.own_row[wait_idx]
        ok = (own >= 0) & self.waits_own[wait_idx]
        own_pos[ok] = self.pos_of_gpu[own[ok]]
        return at, own_pos

    def _loop(self, n_epochs, epoch_order, groups, epoch_wait, thread_of_epoch, start_nowait,
              cost, s_at, own_pos, wait_idx, sid, s_incl, n_threads) -> Outcome:
        neg = -(1 << 62)
        _, g_stream, g_fixed, g_val, g_rank = groups
        # Per waiting call (a row of wait_idx): its start if nothing had waited, and, when it
        # waits for its own operation, that operation's stream and summed durations.
        row_of_epoch = np.full(n_epochs, -1, np.int64)
        ends_wait = epoch_wait >= 0
        row_of_epoch[ends_wait] = np.searchsorted(wait_idx, epoch_wait[ends_wait])
        own_ok = own_pos >= 0
        own_sid = np.full(len(own_pos), -1, np.int64)
        own_prefix = np.zeros(len(own_pos), np.int64)
        own_sid[own_ok] = sid[own_pos[own_ok]]
        own_prefix[own_ok] = s_incl[own_pos[own_ok]]
        args = (epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream, g_fixed, g_val,
                start_nowait[wait_idx], own_sid, own_prefix, s_at.reshape(-1),
                np.zeros(max(n_threads, 1), np.int64), np.full(self.n_streams, neg, np.int64))
        d, r = _run_epochs(args)
        return self._outcome(start_nowait, cost, d, r, s_incl)

    def _outcome(self, start_nowait, cost, d, r, s_incl) -> Outcome:
        """The replay's ends from each thread's delay ``d`` and each stream's running max
        ``r``: each thread's last call; each stream's last operation."""
        neg = -(1 << 62)
        sid = self.op_sid
        threads, streams = self._end_masks
        cpu_end = neg
        if self.n_calls:
            # Each thread's last call (thread order), and its thread's rank: the k-th of them
            # ends the k-th thread (gathered first: no per-call temporaries, ~400 MB of the
            # unfixed replay's peak at 10 M calls).
            last = np.nonzero(np.append(self.first_of_thread[1:], True))[0]
            at = self.order[last]
            ends = start_nowait[at] + cost[at] + d[np.arange(len(last))]
            cpu_end = _max_of(ends, threads)
        gpu_end = neg
        if len(sid):
            last_pos = np.nonzero(np.append(sid[1:] != sid[:-1], True))[0]
            gpu_end = _max_of(s_incl[last_pos] + r[sid[last_pos]], streams)
        end = max(cpu_end, gpu_end)
        return Outcome(end_ns=self.w0 + end, cpu_end_ns=self.w0 + cpu_end,
                       gpu_end_ns=self.w0 + gpu_end)

    def _apply_graphs(self, fix, gap, cost, waits, op_dur, op_lat, op_ready_call,
                      op_gap) -> None:
        """A CUDA graph replays each segment ``[first, last]`` of a thread's calls with one
        launch (costing ``graph_launch_ns`` of that segment): the CPU work inside it (gaps and
        launch costs) goes, every operation it launched follows the one graph launch, and the
        GPU leaves ``graph_node_ns`` between two of them (instead of the eager gap)."""
        order = self.order
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        inside = np.zeros(len(order), bool)  # by rank
        head = np.full(len(order), -1, np.int64)  # by rank: the segment's first call
        for a, b in zip(fix.graph_first.tolist(), fix.graph_last.tolist()):
            ra, rb = rank[a], rank[b]
            inside[ra + 1:rb + 1] = True
            head[ra:rb + 1] = a
        members = order[inside]
        gap[members] = 0
        cost[members] = 0
        waits[members] = False
        firsts = fix.graph_first
        cost[firsts] = fix.graph_launch_ns
        call_head = np.full(len(order), -1, np.int64)
        call_head[order] = head
        op_head = np.where(op_ready_call >= 0, call_head[np.maximum(op_ready_call, 0)], -1)
        in_graph = op_head >= 0
        op_ready_call[in_graph] = op_head[in_graph]
        op_lat[in_graph] = self.launch_latency_ns
        op_gap[in_graph] = fix.graph_node_ns


class _Base:
    """The unfixed replay's state, from which a fix is replayed by what it moves.

    A fix edits a few calls (their gap or cost, or whether they wait) and a few operations
    (their duration, or they are gone). Every other call starts later by the summed edits
    before it on its thread, and every other operation's contribution moves by that, less the
    summed edits before it on its stream: a group of operations (one epoch, one stream) with
    no edit among its members keeps its maximum, shifted. Only groups holding an edit are
    recomputed, and the epochs are renumbered only where a wait went. So a replay costs the
    size of the fix, plus one pass over the groups, not a sort of every operation.
    """

    def __init__(self, tl: Timeline) -> None:
        k: dict = {}
        self.outcome = tl._replay_whole(Fix(), keep=k)
        # Unfixed, the costs are the timeline's own, and so are the gaps where there is no
        # recording cost to take out: shared, not kept as copies (~100 MB each at 10 M calls).
        self.gap = tl.gap if np.array_equal(k["gap"], tl.gap) else k["gap"]
        self.cost = tl.intrinsic if np.array_equal(k["cost"], tl.intrinsic) else k["cost"]
        self.start_nowait, self.span, self.s_incl = k["start_nowait"], k["span"], k["s_incl"]
        n, n_ops = tl.n_calls, len(tl.op_dur)
        # Positions (of epochs, calls, waiting calls, operations, threads, streams) narrowed
        # as the timeline's are; times and sums stay int64.
        self.epoch_start = k["epoch_start"]  # (None with several threads: not merged)
        n_epochs = len(k["epoch_order"])
        self.epoch_order = narrow_index(k.pop("epoch_order"), n_epochs)
        self.epoch_wait = narrow_index(k.pop("epoch_wait"), n)
        self.thread_of_epoch = narrow_index(k.pop("thread_of_epoch"), n)
        self.wait_idx = narrow_index(k.pop("wait_idx"), n)
        self.own_pos = narrow_index(k.pop("own_pos"), n_ops)
        self.n_threads = k["n_threads"]
        g_rank, g_stream, g_fixed, self.g_val, _ = k.pop("groups")
        self.g_rank = narrow_index(g_rank, n_epochs)
        self.g_stream = narrow_index(g_stream, n_ops)
        self.g_fixed = g_fixed.astype(np.int8)  # 0 or 1
        del g_rank, g_stream, g_fixed
        # Calls: position in thread order; each thread's last call.
        self.pos = np.empty(n, index_dtype(n))
        self.pos[tl.order] = np.arange(n)
        self.last_calls = tl.order[np.nonzero(np.append(tl.first_of_thread[1:], True))[0]]
        self.last_thread = (np.cumsum(tl.first_of_thread) - 1)[self.pos[self.last_calls]]
        # Operations (stream positions): where their stream starts; each stream's last.
        starts = _starts(tl.op_sid)
        self.last_ops = np.nonzero(np.append(starts[1:], True))[0] if n_ops else starts
        self.launched = k["launched"]
        self.anchored = np.nonzero(~self.launched)[0]
        # Groups: members (in group order), one member's call and position, and the span of
        # call and stream positions they cover.
        order = narrow_index(k.pop("group_order"), n_ops)
        gs = narrow_index(k.pop("group_start"), len(order))
        self.members, self.member_start = order, gs
        self.member_end = np.append(gs[1:], len(order)).astype(gs.dtype)
        if len(order):
            mcall = np.where(self.launched[order], self.pos[np.maximum(tl.op_call[order], 0)], -1)
            self.g_op = order[gs]
            self.g_call_pos = np.where(self.g_fixed == 0,
                                       self.pos[np.maximum(tl.op_call[self.g_op], 0)], -1)
            self.g_lo_op = np.minimum.reduceat(order, gs)
            self.g_hi_op = np.maximum.reduceat(order, gs)
            self.g_lo_call = np.minimum.reduceat(mcall, gs)
            self.g_hi_call = np.maximum.reduceat(mcall, gs)
        else:
            self.g_op = self.g_call_pos = self.g_lo_op = self.g_hi_op = order
            self.g_lo_call = self.g_hi_call = order
        # Epochs: the first of each thread; each waiting call's row and its epoch.
        self.epoch_of_pos = k.pop("epoch_of_pos")
        self.epoch_first = np.zeros(n_epochs, bool)
        self.epoch_first[k["epoch_base"][:-1]] = True
        self.row_of_epoch = np.full(n_epochs, -1, index_dtype(len(self.wait_idx)))
        ends = self.epoch_wait >= 0
        self.row_of_epoch[ends] = np.searchsorted(self.wait_idx, self.epoch_wait[ends])
        at = k.pop("at")  # what the waiting calls await (no fix moves it)
        own_ok = self.own_pos >= 0
        self.own_sid = (np.where(own_ok, tl.op_sid[np.maximum(self.own_pos, 0)], -1)
                        if len(tl.op_sid) else np.full(len(self.own_pos), -1, np.int64))
        # What a replay moves by its edits, unfixed: per waiting call, the stream sums it
        # waits for (``s_at``, -1: none on that stream; ``own_prefix``) and its start.
        self.at_has = at >= 0
        self.at_0 = narrow_index(np.maximum(at, 0), n_ops)
        self.s_at = np.full(at.shape, -1, np.int64)
        self.s_at[self.at_has] = self.s_incl[at[self.at_has]]
        self.own_prefix = np.zeros(len(self.own_pos), np.int64)
        self.own_prefix[own_ok] = self.s_incl[self.own_pos[own_ok]]
        self.wait_pos = self.pos[self.wait_idx]
        self.wait_start = self.start_nowait[self.wait_idx]
        self.g_has_call = self.g_call_pos >= 0
        self.g_call_pos_0 = np.maximum(self.g_call_pos, 0)
        # Threads (calls by thread position) and streams (operations by stream position):
        # where each run starts, and its length.
        self.thread_heads = np.flatnonzero(tl.first_of_thread)
        self.thread_lens = np.diff(np.append(self.thread_heads, n))
        self.stream_heads = np.flatnonzero(starts)
        self.first_pos, self.stream_first = tl.first_of_thread, starts
        self._buffers: tuple[np.ndarray, ...] | None = None
        self._wait_buffers: tuple[np.ndarray, ...] | None = None
        self._sparse: _SparseState | None = None
        self._dense = threading.Lock()     # the dense kernels' buffers: one replay at a time
        self._mine = threading.local()     # each thread's last replay (``_last``, stats)
        self.stream_lens = np.diff(np.append(self.stream_heads, n_ops))

    @property
    def _last(self) -> dict | None:
        """This thread's last sparse replay: its edits and checkpoints (a reference)."""
        return getattr(self._mine, "last", None)

    @_last.setter
    def _last(self, value: dict | None) -> None:
        self._mine.last = value

    @property
    def sparse_stats(self) -> tuple[int, int, bool] | None:
        """This thread's last sparse replay: its jumps, epochs run, and whether it ran from
        the replay before it."""
        return getattr(self._mine, "stats", None)

    @sparse_stats.setter
    def sparse_stats(self, value: tuple[int, int, bool] | None) -> None:
        self._mine.stats = value

    def edits(self, tl: Timeline, fix: Fix) -> _Edits:
        """What ``fix`` changes, at the calls and operations it names only (``Timeline._edit``
        applies the same edits, in the same order, to copies of every array)."""
        e = sorted_unique(fix.gap_calls, fix.cost_calls, fix.remove_calls).astype(np.int64)
        gap, cost = self.gap[e], self.cost[e]
        if len(fix.gap_calls):
            _min_at(gap, np.searchsorted(e, fix.gap_calls), fix.gap_ns)
        if len(fix.cost_calls):
            _min_at(cost, np.searchsorted(e, fix.cost_calls), fix.cost_ns)
        surv = np.ones(len(self.wait_idx), bool)  # the waiting calls that still wait
        for calls in (fix.unblock_calls, fix.remove_calls):
            if len(calls) and len(self.wait_idx):
                k = np.minimum(np.searchsorted(self.wait_idx, calls), len(self.wait_idx) - 1)
                surv[k[self.wait_idx[k] == calls]] = False
        n_ops = len(tl.op_dur)
        gone = np.zeros(n_ops, bool)
        gone_ops = np.zeros(0, np.int64)
        if len(fix.remove_calls):
            cost[np.searchsorted(e, fix.remove_calls)] = 0
            removed = np.zeros(tl.n_calls + 1, bool)  # the last: no call (-1)
            removed[fix.remove_calls] = True
            gone = removed[tl.op_call]
            gone_ops = np.flatnonzero(gone)
        pos = tl.pos_of_gpu[fix.gpu_ops] if len(fix.gpu_ops) else np.zeros(0, np.int64)
        ok = pos >= 0
        q = sorted_unique(gone_ops, pos[ok])
        dur = tl.op_dur[q]
        dur[np.searchsorted(q, gone_ops)] = 0
        if ok.any():
            _min_at(dur, np.searchsorted(q, pos[ok]), fix.gpu_dur_ns[ok])
        span = np.where(gone[q], 0, tl.op_gap[q]) + dur
        return _Edits(e, gap, cost, surv, gone, q, span, bool(len(gone_ops)))

    def replay(self, tl: Timeline, fix: Fix, reference: bool = False, alone: bool = False
               ) -> Outcome:
        if fix.edits_nothing():
            return self.outcome
        if isinstance(fix, _Chained):
            out = self._replay_chained(tl, fix)
            if out is not None:
                return out
        ed = self.edits(tl, fix)
        gone = ed.gone
        # Edited calls: each moves the start of the later calls of its thread by its change of
        # gap + cost, and its own start by its change of gap. ``d_start``: by thread position.
        e = ed.calls
        d_step = (ed.gap + ed.cost) - (self.gap[e] + self.cost[e])
        d_own = ed.gap - self.gap[e]
        # Edited operations: each moves its stream's sums from itself on by its change of span.
        q = ed.ops
        d_span = ed.span - self.span[q]
        keep = (d_span != 0) | gone[q]
        q, d_span = q[keep], d_span[keep]
        big = len(self.epoch_order) >= JIT_MIN_EPOCHS and len(self.g_val)
        # (not where other threads' operations are anchored beside the window's: an edit's
        # effect there is no translation of every thread and stream, which the sparse
        # replay's stopping rule assumes)
        if big and SPARSE and not tl.op_exo.any() and _compiled_sparse() is not None:
            out = self._replay_sparse(tl, ed, e, d_step, d_own, q, d_span, fix, reference,
                                      alone)
            if out is not None:
                return out
        self._last = None  # the next sparse replay starts from the unfixed one
        with self._dense:
            return self._replay_dense(tl, ed, e, d_step, d_own, q, d_span, big)

    def _replay_dense(self, tl: Timeline, ed: _Edits, e: np.ndarray, d_step: np.ndarray,
                      d_own: np.ndarray, q: np.ndarray, d_span: np.ndarray, big: bool
                      ) -> Outcome:
        """``replay`` over every group (the compiled kernels into the kept buffers when
        ``big``, numpy otherwise), renumbering the epochs where a wait went."""
        neg = -(1 << 62)
        n, n_ops = tl.n_calls, len(tl.op_dur)
        gone = ed.gone
        fused = _compiled_shifts() if big else None
        if fused is not None:
            # One compiled pass per side and one over the groups (the same sums as below).
            d_start, moved, d_incl, d_excl, marked = self._scratch(n, n_ops)
            val = np.empty(len(self.g_val), np.int64)
            e_pos = self.pos[e]
            by_pos = np.argsort(e_pos, kind="stable")
            fused(e_pos[by_pos], d_step[by_pos], d_own[by_pos], self.first_pos, q, d_span, gone,
                  self.stream_first, self.g_val, self.g_op, self.g_has_call, self.g_call_pos_0,
                  self.g_lo_op, self.g_hi_op, self.g_lo_call, self.g_hi_call, self.member_start,
                  self.member_end, self.members, tl.op_call, self.launched, self.pos,
                  self.start_nowait, tl.op_lat, tl.op_anchor, tl.w0, self.s_incl, self.span,
                  tl.op_gap, d_start, moved, d_incl, d_excl, marked, val)
            y = None

            def at_call(pos: np.ndarray) -> np.ndarray | int:
                return d_start[pos]

            def incl(ops: np.ndarray) -> np.ndarray | int:
                return d_incl[ops]

            def excl(ops: np.ndarray) -> np.ndarray | int:
                return d_excl[ops]
        else:
            d_start, d_incl, y, val = self._shifts(tl, e, d_step, d_own, q, d_span, gone)

            def at_call(pos: np.ndarray) -> np.ndarray | int:
                return d_start[pos] if d_start is not None else 0

            def incl(ops: np.ndarray) -> np.ndarray | int:
                return d_incl[ops] if d_incl is not None else 0

            def excl(ops: np.ndarray) -> np.ndarray | int:
                return d_incl[ops] - y[ops] if d_incl is not None else 0

        def contrib(ops: np.ndarray) -> np.ndarray:
            return self._contrib(tl, ops, gone, at_call, excl)

        # Epochs: where a wait went, its epoch and the next one of its thread are one.
        surv = ed.surv
        if surv.all():
            epoch_order, thread_of_epoch = self.epoch_order, self.thread_of_epoch
            row_of_epoch, wait_rows = self.row_of_epoch, slice(None)
            g_rank, g_stream, g_fixed = self.g_rank, self.g_stream, self.g_fixed
        elif self.n_threads > 1:
            # Several threads: the epochs stay as they are (an epoch whose wait went just
            # waits no more). Merged with its thread's next one, it would be folded before the
            # other threads' waits in between (see ``Timeline._pieces``).
            epoch_order, thread_of_epoch = self.epoch_order, self.thread_of_epoch
            g_rank, g_stream, g_fixed = self.g_rank, self.g_stream, self.g_fixed
            new_row = np.cumsum(surv) - 1
            row = self.row_of_epoch.astype(np.int64)
            kept = row >= 0
            kept[kept] = surv[row[kept]]
            row_of_epoch = np.where(kept, new_row[np.maximum(row, 0)], -1)
            wait_rows = surv
        else:
            ew = self.epoch_wait
            sw = np.zeros(len(ew), bool)
            sw[ew >= 0] = surv[self.row_of_epoch[ew >= 0]]
            head = self.epoch_first.copy()
            head[1:] |= sw[:-1]
            nid = np.cumsum(head) - 1
            n_new = int(nid[-1]) + 1
            thread_of_epoch = np.zeros(n_new, np.int64)
            thread_of_epoch[nid[head]] = self.thread_of_epoch[head]
            new_row = np.cumsum(surv) - 1
            row_of_epoch = np.full(n_new, -1, np.int64)
            row_of_epoch[nid[sw]] = new_row[self.row_of_epoch[sw]]
            is_head = head[self.epoch_order]
            epoch_order = nid[self.epoch_order[is_head]]
            rank_new = np.empty(n_new, np.int64)
            rank_new[epoch_order] = np.arange(n_new)
            rank_of_base_rank = rank_new[nid[self.epoch_order]]
            lau = self.g_fixed == 0
            r = [rank_of_base_rank[self.g_rank[lau]]]
            st, fx, vv = [self.g_stream[lau]], [self.g_fixed[lau]], [val[lau]]
            if len(self.anchored):
                a = self.anchored
                head_start = self.epoch_start[self.epoch_order[is_head]]
                k = np.searchsorted(head_start, tl.op_launch[a], side="right")
                r.append(np.clip(k - 1, 0, n_new - 1))
                st.append(tl.op_sid[a])
                fx.append(np.ones(len(a), np.int64))
                vv.append(contrib(a))
            g_rank, g_stream, g_fixed, val, _ = _group_max_dense(
                np.concatenate(r), np.concatenate(st), np.concatenate(fx), np.concatenate(vv),
                n_new, tl.n_streams)
            wait_rows = surv

        if fused is not None:  # the same, in one compiled pass into kept buffers
            s_at, own_sid, own_prefix, wait_start = self._waits_scratch(tl.n_streams)
            k = _compiled_waits()(surv, self.s_at, self.at_has, self.at_0, d_incl,
                                  self.own_sid, self.own_prefix, self.own_pos, self.wait_start,
                                  self.wait_pos, d_start, s_at, own_sid, own_prefix, wait_start)
            s_at, own_sid = s_at[:k * tl.n_streams], own_sid[:k]
            own_prefix, wait_start = own_prefix[:k], wait_start[:k]
        else:
            s_at = self.s_at[wait_rows]
            if d_incl is not None:
                s_at = np.where(self.at_has[wait_rows], s_at + d_incl[self.at_0[wait_rows]],
                                s_at)
            s_at = s_at.reshape(-1)
            own_sid = self.own_sid[wait_rows]
            own_prefix = self.own_prefix[wait_rows]
            if d_incl is not None:
                own_prefix = np.where(own_sid >= 0, own_prefix
                                      + d_incl[np.maximum(self.own_pos[wait_rows], 0)], 0)
            wait_start = self.wait_start[wait_rows]
            if d_start is not None:
                wait_start = wait_start + d_start[self.wait_pos[wait_rows]]
        args = (epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream, g_fixed, val,
                wait_start, own_sid, own_prefix, s_at,
                np.zeros(max(self.n_threads, 1), np.int64), np.full(tl.n_streams, neg, np.int64))
        d, r_end = _run_epochs(args)
        last = self.last_calls
        cost_last = self._last_costs(e, ed)
        threads, streams = tl._end_masks
        cpu_end = _max_of(self.start_nowait[last] + at_call(self.pos[last]) + cost_last
                          + d[self.last_thread], threads)
        gpu_end = neg
        if len(self.last_ops):
            lo = self.last_ops
            gpu_end = _max_of(self.s_incl[lo] + incl(lo) + r_end[tl.op_sid[lo]], streams)
        end = max(cpu_end, gpu_end)
        return Outcome(end_ns=tl.w0 + end, cpu_end_ns=tl.w0 + cpu_end,
                       gpu_end_ns=tl.w0 + gpu_end)

    def _last_costs(self, e: np.ndarray, ed: _Edits) -> np.ndarray:
        """Each thread's last call's own cost under the fix (``e``: the edited calls, sorted;
        ``ed.cost``: their costs)."""
        last = self.last_calls
        cost_last = self.cost[last].copy()
        k = np.searchsorted(e, last)
        hit = k < len(e)
        hit[hit] = e[k[hit]] == last[hit]
        cost_last[hit] = ed.cost[k[hit]]
        return cost_last

    def _sparse_state(self, tl: Timeline) -> _SparseState:
        """What ``_replay_sparse`` reads besides the state (built at its first use, once)."""
        if self._sparse is not None:
            return self._sparse
        with _BUILD:
            if self._sparse is None:
                self._sparse = self._build_sparse(tl)
        return self._sparse

    def _build_sparse(self, tl: Timeline) -> _SparseState:
        sparse = _compiled_sparse()
        n_epochs, n_ops = len(self.epoch_order), len(tl.op_dur)
        rank_of_epoch = np.empty(n_epochs, index_dtype(n_epochs))
        rank_of_epoch[self.epoch_order] = np.arange(n_epochs)
        # every rank reading each operation: its group's, the waiting calls' awaiting it
        op_rank = np.empty(n_ops, rank_of_epoch.dtype)
        op_rank[self.members] = np.repeat(self.g_rank,
                                          (self.member_end - self.member_start).astype(np.int64))
        ends = self.epoch_wait >= 0
        row_rank = np.empty(len(self.wait_idx), np.int64)
        row_rank[self.row_of_epoch[ends]] = rank_of_epoch[np.flatnonzero(ends)]
        own = self.own_sid >= 0
        rows = np.nonzero(self.at_has)
        refs = np.concatenate([self.at_0[rows], self.own_pos[own]]).astype(np.int64)
        ref_rank = np.concatenate([row_rank[rows[0]], row_rank[own]])
        ref_lo, ref_hi = np.empty_like(op_rank), np.empty_like(op_rank)
        sparse[2](op_rank, tl.op_sid, refs, ref_rank, ref_lo, ref_hi)
        del op_rank, refs, ref_rank
        n_threads, n_streams = max(self.n_threads, 1), tl.n_streams
        every = 4 * max(1, (n_threads + n_streams) // 8)
        n_ck = n_epochs // every + 1
        ck_delay = np.zeros((n_ck, n_threads), np.int64)
        ck_ready = np.zeros((n_ck, n_streams), np.int64)
        fin_delay = np.zeros(n_threads, np.int64)
        fin_ready = np.full(n_streams, -(1 << 62), np.int64)
        sparse[1](every, self.epoch_order, self.thread_of_epoch, self.row_of_epoch, self.g_rank,
                  self.g_stream, self.g_fixed, self.g_val, self.wait_start, self.own_sid,
                  self.own_prefix, self.s_at, ck_delay, ck_ready, fin_delay, fin_ready)
        return _SparseState(rank_of_epoch, np.sort(self.wait_pos), ref_lo, ref_hi, every,
                            ck_delay, ck_ready, fin_delay, fin_ready, row_rank)

    def _replay_sparse(self, tl: Timeline, ed: _Edits, e: np.ndarray, d_step: np.ndarray,
                       d_own: np.ndarray, q: np.ndarray, d_span: np.ndarray, fix: Fix,
                       reference: bool = False, alone: bool = False) -> Outcome | None:
        """``replay`` of ``fix`` (``_sparse_epochs``), run where it differs from a reference:
        the unfixed replay, or the last replay made here when it differs from that by fewer
        edits (the rules replay each finding's fix with those of the
        findings ranked above it: one finding's edits more than the replay before). None
        where the differences are too many (``SPARSE_EDITS_PER_EPOCH``), unless ``reference``:
        the dense kernels. The same outcome as the dense kernels and the whole replay (tests
        compare them)."""
        mine = self._edit_set(tl, ed, e, d_step, d_own, q, d_span)
        # a chained fix may merge its edits into these (mins of changes: no removed call)
        mine["fix"] = fix if not len(fix.remove_calls) else None
        return self._run_sparse(tl, mine, None, reference, alone)

    def _replay_chained(self, tl: Timeline, fix: _Chained) -> Outcome | None:
        """``Fix.chain(together, more)`` replayed right after ``together`` (sparse): its edit
        set is the last replay's with ``more``'s merged in (each call's and operation's
        smallest change: what ``Fix.combine`` then ``edits`` give), and the differences
        between the two are where the merge changed a value. One pass over the kept edits,
        and ``more``'s sorted; no sort or search of every edit. None where it does not apply
        (the fix is then combined and replayed as any other)."""
        last, more = self._last, fix.second
        if last is None or fix.first is None or last.get("fix") is not fix.first:
            return None
        if len(more.remove_calls) or len(more.graph_first):
            return None
        more = Fix.combine([more])  # each edit once, its smallest (as ``Fix.combine``)
        ed = self.edits(tl, more)
        # the waits ``more`` takes away (rows of ``wait_idx``), and those not taken before
        # (both sorted and unique: merged in linear time, not sorted again as union1d would)
        taken = np.flatnonzero(~ed.surv)
        x_unwait = taken[~in_sorted(last["unwait"], taken)]
        unwait = sorted_unique(last["unwait"], x_unwait).astype(np.int64, copy=False)
        e = ed.calls
        e_pos = self.pos[e].astype(np.int64)
        by_pos = np.argsort(e_pos, kind="stable")
        e_pos = e_pos[by_pos]
        d_step = ((ed.gap + ed.cost) - (self.gap[e] + self.cost[e]))[by_pos]
        d_own = (ed.gap - self.gap[e])[by_pos]
        q = ed.ops.astype(np.int64, copy=False)
        d_span = ed.span - self.span[q]
        keep = d_span != 0  # nothing is gone: no call is removed
        q, d_span = q[keep], d_span[keep]
        merge_calls, merge_ops = _compiled_sparse()[4:6]
        n_e = len(last["e_pos"]) + len(e_pos)
        out = [np.empty(n_e, np.int64) for _ in range(3)] + [np.empty(n_e + 1, np.int64),
                                                              np.empty(n_e, np.bool_)]
        x_e, x_de = np.empty(len(e_pos), np.int64), np.empty(len(e_pos), np.int64)
        k, k_x = merge_calls(last["e_pos"], last["d_step"], last["d_own"], e_pos, d_step, d_own,
                             *out, x_e, x_de)
        m_pos, m_step, m_own, m_moved = out[0][:k], out[1][:k], out[2][:k], out[4][:k]
        m_pe = out[3][:k + 1]
        n_q = len(last["q"]) + len(q)
        q_out, dq_out, pq_out = (np.empty(n_q, np.int64), np.empty(n_q, np.int64),
                                 np.empty(n_q + 1, np.int64))
        x_q, x_dq = np.empty(len(q), np.int64), np.empty(len(q), np.int64)
        kq, kq_x = merge_ops(last["q"], last["d_span"], q, d_span, q_out, dq_out, pq_out, x_q,
                             x_dq)
        mine = {"e_pos": m_pos, "d_step": m_step, "d_own": m_own, "pe": m_pe, "moved": m_moved,
                "ebase": np.append(np.searchsorted(m_pos, self.thread_heads),
                                   k).astype(np.int64),
                "q": q_out[:kq], "d_span": dq_out[:kq], "pq": pq_out[:kq + 1],
                "q_gone": np.zeros(kq, bool),
                "qbase": np.append(np.searchsorted(q_out[:kq], self.stream_heads),
                                   kq).astype(np.int64),
                "gone": np.zeros(0, bool), "unwait": unwait, "fix": fix}
        st = self._sparse_state(tl)
        return self._run_sparse(tl, mine, self._in_play(st, x_e[:k_x], x_de[:k_x], x_q[:kq_x],
                                                        x_dq[:kq_x], x_unwait))

    def _run_sparse(self, tl: Timeline, mine: dict, x_last: dict | None,
                    reference: bool = False, alone: bool = False) -> Outcome | None:
        """``_replay_sparse`` of the edit set ``mine`` (``x_last``: its differences from the
        last replay's, where known; ``alone``: from the unfixed replay, not kept)."""
        neg = -(1 << 62)
        st = self._sparse_state(tl)
        n_ranks = len(self.epoch_order)
        empty = self._no_edits(tl)
        ref, x = empty, None
        # differences from the unfixed replay
        n_x = int(mine["moved"].sum()) + len(mine["q"]) + len(mine["unwait"])
        if alone:
            self._last = None   # what this thread kept is no reference for what comes next
        if self._last is not None and n_x:
            if x_last is None:
                x_last = self._differences(st, mine, self._last)
            if len(x_last["lo"]) < n_x:
                ref, x, n_x = self._last, x_last, len(x_last["lo"])
        if n_x * SPARSE_EDITS_PER_EPOCH >= n_ranks and not reference:
            return None
        if x is None:
            x = self._differences(st, mine, empty)
        ck = (st.ck_delay, st.ck_ready, st.fin_delay, st.fin_ready) if ref is empty else \
            (ref["ck_delay"], ref["ck_ready"], ref["fin_delay"], ref["fin_ready"])
        # checkpoints of this replay, for the next to start from (none where it is alone: it
        # is no reference, and writing them is a pass over every checkpoint)
        ck_delay_out = np.empty_like(ck[0]) if not alone else np.empty((0, ck[0].shape[1]),
                                                                       np.int64)
        ck_ready_out = np.empty_like(ck[1]) if not alone else np.empty((0, ck[1].shape[1]),
                                                                       np.int64)
        delay = np.zeros(len(st.fin_delay), np.int64)
        ready = np.full(tl.n_streams, neg, np.int64)
        out = np.zeros(2, np.int64)
        names = ("gone", "e_pos", "pe", "d_own", "moved", "ebase", "q", "pq", "d_span", "qbase",
                 "unwait")
        base = (self.epoch_order, self.thread_of_epoch, self.row_of_epoch, self.g_rank,
                self.g_stream, self.g_fixed, self.g_val, self.g_op, self.g_call_pos,
                self.g_has_call, self.g_hi_op, self.g_lo_call, self.g_hi_call, self.member_start,
                self.member_end, self.members, tl.op_call, self.launched, self.pos,
                self.start_nowait, tl.op_lat, tl.op_anchor, tl.w0, self.s_incl, self.span,
                tl.op_gap, self.wait_start, self.wait_pos, self.own_sid, self.own_prefix,
                self.own_pos, self.s_at, self.at_has, self.at_0)
        _compiled_sparse()[0](
            base, tuple(mine[k] for k in names), st.every, *ck, x["lo"], x["hi"], x["pe"],
            x["ebase"], x["e_rank"], x["pq"], x["qbase"], x["q_hi"], ck_delay_out, ck_ready_out,
            delay, ready, out, not alone)
        self.sparse_stats = (int(out[0]), int(out[1]), ref is not empty)
        if not alone:
            mine.update(ck_delay=ck_delay_out, ck_ready=ck_ready_out, fin_delay=delay.copy(),
                        fin_ready=ready.copy())
            self._last = mine
        e_pos, pe, d_own, ebase = mine["e_pos"], mine["pe"], mine["d_own"], mine["ebase"]
        q, pq, qbase = mine["q"], mine["pq"], mine["qbase"]
        last = self.last_calls
        lp = self.pos[last].astype(np.int64)
        j = np.searchsorted(e_pos, lp)
        own = np.zeros(len(lp), np.int64)
        cost_last = self.cost[last].copy()  # each thread's last call's own cost under the fix
        m = j < len(e_pos)
        m[m] = e_pos[j[m]] == lp[m]
        own[m] = d_own[j[m]]
        cost_last[m] += mine["d_step"][j[m]] - d_own[j[m]]
        t_of = np.searchsorted(self.thread_heads, lp, side="right") - 1
        at_last = pe[j] - pe[ebase[t_of]] + own
        threads, streams = tl._end_masks
        cpu_end = _max_of(self.start_nowait[last] + at_last + cost_last
                          + delay[self.last_thread], threads)
        gpu_end = neg
        if len(self.last_ops):
            lo = self.last_ops.astype(np.int64)
            s_of = tl.op_sid[lo]
            incl = pq[np.searchsorted(q, lo, side="right")] - pq[qbase[s_of]]
            gpu_end = _max_of(self.s_incl[lo] + incl + ready[s_of], streams)
        end = max(cpu_end, gpu_end)
        return Outcome(end_ns=tl.w0 + end, cpu_end_ns=tl.w0 + cpu_end,
                       gpu_end_ns=tl.w0 + gpu_end)

    def _edit_set(self, tl: Timeline, ed: _Edits, e: np.ndarray, d_step: np.ndarray,
                  d_own: np.ndarray, q: np.ndarray, d_span: np.ndarray) -> dict:
        """A fix's edits as ``_sparse_epochs`` reads them: the calls by thread position with
        their moves (``d_step`` after them, ``d_own`` of their own start) and running sums;
        the operations by stream position with their change of span and running sums; where
        each thread's and stream's run starts (``ebase``/``qbase``); the gone operations."""
        e_pos = self.pos[e].astype(np.int64)
        by_pos = np.argsort(e_pos, kind="stable")
        e_pos, d_step, d_own = e_pos[by_pos], d_step[by_pos], d_own[by_pos]
        pe = np.zeros(len(e_pos) + 1, np.int64)
        np.cumsum(d_step, out=pe[1:])
        q = q.astype(np.int64, copy=False)
        pq = np.zeros(len(q) + 1, np.int64)
        np.cumsum(d_span, out=pq[1:])
        gone = ed.gone if ed.gone_any else np.zeros(0, bool)
        unwait = np.flatnonzero(~ed.surv) if not ed.surv.all() else np.zeros(0, np.int64)
        return {"e_pos": e_pos, "d_step": d_step, "d_own": d_own, "pe": pe,
                "moved": (d_step != 0) | (d_own != 0),
                "ebase": np.append(np.searchsorted(e_pos, self.thread_heads),
                                   len(e_pos)).astype(np.int64),
                "q": q, "d_span": d_span, "pq": pq,
                "q_gone": gone[q] if len(gone) else np.zeros(len(q), bool),
                "qbase": np.append(np.searchsorted(q, self.stream_heads), len(q)).astype(np.int64),
                "gone": gone, "unwait": unwait.astype(np.int64)}

    def _no_edits(self, tl: Timeline) -> dict:
        """``_edit_set`` of no fix (the unfixed replay)."""
        z = np.zeros(0, np.int64)
        return {"e_pos": z, "d_step": z, "d_own": z, "pe": np.zeros(1, np.int64),
                "moved": np.zeros(0, bool), "ebase": np.zeros(len(self.thread_heads) + 1, np.int64),
                "q": z, "d_span": z, "pq": np.zeros(1, np.int64), "q_gone": np.zeros(0, bool),
                "qbase": np.zeros(len(self.stream_heads) + 1, np.int64),
                "gone": np.zeros(0, bool), "unwait": z}

    def _differences(self, st: _SparseState, a: dict, b: dict) -> dict:
        """Where edit sets ``a`` and ``b`` differ: the calls whose moves differ and the
        operations whose span or removal differ, by position, with the running sums of
        ``a``'s change less ``b``'s, the waits taken away by one and not the other, and the
        ranks where each is in play (``lo``/``hi``, sorted by ``lo``)."""
        if not len(b["e_pos"]) and not len(b["q"]) and not len(b["unwait"]):
            # from the unfixed replay: every edit
            e_pos, de = a["e_pos"][a["moved"]], a["d_step"][a["moved"]]
            return self._in_play(st, e_pos, de, a["q"], a["d_span"], a["unwait"])

        diff = _compiled_sparse()[3]

        def side(pa, va, pb, vb):
            out_p = np.empty(len(pa) + len(pb), np.int64)
            out_d = np.empty(len(pa) + len(pb), np.int64)
            n = diff(pa, va[0], va[1].astype(np.int64), pb, vb[0], vb[1].astype(np.int64),
                     out_p, out_d)
            return out_p[:n], out_d[:n]

        e_pos, de = side(a["e_pos"], (a["d_step"], a["d_own"]), b["e_pos"],
                         (b["d_step"], b["d_own"]))
        q, dq = side(a["q"], (a["d_span"], a["q_gone"]), b["q"], (b["d_span"], b["q_gone"]))
        return self._in_play(st, e_pos, de, q, dq, np.setxor1d(a["unwait"], b["unwait"]))

    def _in_play(self, st: _SparseState, e_pos: np.ndarray, de: np.ndarray, q: np.ndarray,
                 dq: np.ndarray, unwait: np.ndarray | None = None) -> dict:
        """``_differences``' result for the differing calls ``e_pos`` (moves ``de``),
        operations ``q`` (changes of span ``dq``) and waits (rows of ``wait_idx`` that wait
        in one replay and not the other: in play at their epoch's rank)."""
        pe = np.zeros(len(e_pos) + 1, np.int64)
        np.cumsum(de, out=pe[1:])
        pq = np.zeros(len(q) + 1, np.int64)
        np.cumsum(dq, out=pq[1:])
        if self.epoch_of_pos is None:  # one thread: its waits before it, + its thread's
            t_of = np.searchsorted(self.thread_heads, e_pos, side="right") - 1
            e_rank = st.rank_of_epoch[np.searchsorted(st.wait_pos_sorted, e_pos) + t_of]
        else:
            e_rank = st.rank_of_epoch[self.epoch_of_pos[e_pos]]
        e_rank = e_rank.astype(np.int64)
        q_lo, q_hi = st.ref_lo[q].astype(np.int64), st.ref_hi[q].astype(np.int64)
        w_rank = st.row_rank[unwait] if unwait is not None else np.zeros(0, np.int64)
        lo = np.concatenate([e_rank, q_lo, w_rank])
        hi = np.concatenate([e_rank, q_hi, w_rank])
        by = np.argsort(lo, kind="stable")
        return {"lo": lo[by], "hi": hi[by], "e_pos": e_pos, "pe": pe, "e_rank": e_rank,
                "ebase": np.append(np.searchsorted(e_pos, self.thread_heads),
                                   len(e_pos)).astype(np.int64),
                "q": q, "pq": pq, "q_hi": q_hi,
                "qbase": np.append(np.searchsorted(q, self.stream_heads), len(q)).astype(np.int64)}

    def _scratch(self, n: int, n_ops: int) -> tuple[np.ndarray, ...]:
        """The compiled kernel's outputs, allocated once and overwritten by every replay (it
        writes each position): fresh arrays of every call and operation cost page faults."""
        if self._buffers is None:
            self._buffers = (np.empty(n, np.int64), np.empty(n + 1, np.int32),
                             np.empty(n_ops, np.int64), np.empty(n_ops, np.int64),
                             np.empty(n_ops + 1, np.int32))
        return self._buffers

    def _waits_scratch(self, n_streams: int) -> tuple[np.ndarray, ...]:
        """Buffers for the waiting calls' inputs to the epoch loop (``_waits_kernel``)."""
        if self._wait_buffers is None:
            w = len(self.wait_idx)
            self._wait_buffers = (np.empty(w * n_streams, np.int64), np.empty(w, np.int64),
                                  np.empty(w, np.int64), np.empty(w, np.int64))
        return self._wait_buffers

    def _contrib(self, tl: Timeline, ops: np.ndarray, gone: np.ndarray, at_call, excl
                 ) -> np.ndarray:
        """Exact contributions of ``ops`` (stream positions) under a fix (``at_call``,
        ``excl``: its moves of call starts and of the streams' sums before an operation)."""
        call = np.maximum(tl.op_call[ops], 0)
        lau = self.launched[ops]
        ready = np.where(lau, self.start_nowait[call] + at_call(self.pos[call])
                         + tl.op_lat[ops], tl.op_anchor[ops] - tl.w0)
        s_before = self.s_incl[ops] + excl(ops) - self.span[ops]
        # a gone operation's own gap is 0 (``Timeline._edit``), but it contributes nothing
        return np.where(gone[ops], -(1 << 62), ready - tl.op_gap[ops] - s_before)

    def _shifts(self, tl: Timeline, e: np.ndarray, d_step: np.ndarray, d_own: np.ndarray,
                q: np.ndarray, d_span: np.ndarray, gone: np.ndarray):
        """What a fix moves, in numpy: ``d_start`` (by thread position; None: nothing), the
        streams' sums ``d_incl`` with the edits ``y`` (by stream position; None: nothing) and
        the groups' maxima (``_shifts_kernel`` computes the same, compiled)."""
        n, n_ops = tl.n_calls, len(tl.op_dur)
        e_pos = self.pos[e[(d_step != 0) | (d_own != 0)]]
        d_start = None
        if len(e_pos):
            p = self.pos[e]
            x = np.zeros(n, np.int64)
            x[p] = d_step
            d_start = np.cumsum(x)
            d_start -= x
            _from_heads(d_start, self.thread_heads, self.thread_lens)
            d_start[p] += d_own
        d_incl = y = None  # by stream position: the change of the stream's sum up to and with it
        if len(q):
            y = np.zeros(n_ops, np.int64)
            y[q] = d_span
            d_incl = np.cumsum(y)
            _from_heads(d_incl, self.stream_heads, self.stream_lens, y)

        def at_call(pos: np.ndarray) -> np.ndarray | int:
            return d_start[pos] if d_start is not None else 0

        def excl(ops: np.ndarray) -> np.ndarray | int:
            return d_incl[ops] - y[ops] if d_incl is not None else 0

        # Group maxima: shifted where no member was edited, recomputed where one was.
        dirty = np.zeros(len(self.g_val), bool)
        if len(q):
            dirty |= _any_marked(q, n_ops, self.g_lo_op, self.g_hi_op)
        if len(e_pos):
            lau = self.g_lo_call >= 0
            dirty[lau] |= _any_marked(e_pos, n, self.g_lo_call[lau], self.g_hi_call[lau])
        val = self.g_val
        if d_start is not None or d_incl is not None:  # dirty groups are recomputed below
            val = val - excl(self.g_op)
            if d_start is not None:
                val += np.where(self.g_has_call, d_start[self.g_call_pos_0], 0)
        else:
            val = val.copy()
        redo = np.nonzero(dirty)[0]
        if len(redo):
            lens = self.member_end[redo] - self.member_start[redo]
            offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
            idx = np.repeat(self.member_start[redo] - offs, lens) + np.arange(lens.sum())
            val[redo] = np.maximum.reduceat(
                self._contrib(tl, self.members[idx], gone, at_call, excl), offs)
        return d_start, d_incl, y, val


@dataclass
class _SparseState:
    """``_Base._replay_sparse``'s own reading of the unfixed replay: each epoch's rank; the
    waiting calls' thread positions, sorted (a call's epoch is the waits before it, plus its
    thread's rank); per stream position the first and last rank reading its stream at or
    after it, and up to it; the unfixed state every ``every`` ranks, and at the end."""

    rank_of_epoch: np.ndarray
    wait_pos_sorted: np.ndarray
    ref_lo: np.ndarray
    ref_hi: np.ndarray
    every: int
    ck_delay: np.ndarray
    ck_ready: np.ndarray
    fin_delay: np.ndarray
    fin_ready: np.ndarray
    row_rank: np.ndarray  # each waiting call's (row of ``wait_idx``) epoch's rank


@dataclass
class _Edits:
    """A fix's edits, sparse (:meth:`_Base.edits`): the calls whose gap, cost or removal it
    edits (sorted) with their new gap and cost; which waiting calls still wait (by row of
    ``_Base.wait_idx``); the operations gone with their calls (a mask by stream position);
    the operations whose span (queue gap + duration) it may change (sorted), with the new
    span."""

    calls: np.ndarray
    gap: np.ndarray
    cost: np.ndarray
    surv: np.ndarray
    gone: np.ndarray
    ops: np.ndarray
    span: np.ndarray
    gone_any: bool = True  # whether any operation is gone (else ``gone`` is all False)


def _min_at(values: np.ndarray, at: np.ndarray, new: np.ndarray) -> None:
    """``values[at] = min(values[at], new)`` in place; of repeated positions the last holds,
    as in ``Timeline._edit``'s fancy assignment."""
    values[at] = np.minimum(values[at], new)


def _from_heads(a: np.ndarray, heads: np.ndarray, lens: np.ndarray,
                y: np.ndarray | None = None) -> None:
    """Turn a running sum ``a`` into a running sum per segment, in place: subtract from each
    segment (``heads``: first positions, ``lens``: lengths, consecutive) what ``a`` held
    before its head (``a - y`` there, or ``a`` itself where ``a`` is already exclusive)."""
    base = a[heads] - (y[heads] if y is not None else 0)
    if len(heads) == 1:
        a -= base[0]
    elif len(heads):
        a -= np.repeat(base, lens)


def _any_marked(marked: np.ndarray, n: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per range ``[lo, hi]`` of positions (``0..n-1``): whether any of ``marked`` lies in it."""
    c = np.zeros(n + 1, np.int32)
    c[marked + 1] = 1
    np.cumsum(c, dtype=np.int32, out=c)
    return c[hi + 1] > c[lo]


class GapCounter:
    """Per call (``Facts.calls`` order, :attr:`total`), the spans (or their weights) that
    start on its thread in the gap before it: after the previous call of the thread started
    (its first call: any time before it), up to and with its own start. Spans are added a
    part at a time, in any order: a trace's spans are never held whole. One search per
    thread and part (threads are few), none per event. ``kinds``: weights counted apart in
    the same search (a weight per span and kind; :attr:`total` then a column a kind)."""

    def __init__(self, calls: pl.DataFrame, kinds: int = 1) -> None:
        key = thread_ids(calls)
        self._keys = np.unique(key) if len(key) and key.min() != key.max() else key[:1]
        thread = np.searchsorted(self._keys, key) if len(self._keys) > 1 else None
        ts = calls["ts_ns"].to_numpy()
        # the calls per thread in time order (ties in row order); calls already in time
        # order (the facts') need no sort on it
        if thread is None:
            order = None if calls["ts_ns"].is_sorted() else np.argsort(ts, kind="stable")
        elif calls["ts_ns"].is_sorted():
            order = np.argsort(thread.astype(np.int32), kind="stable")
        else:
            order = np.lexsort((ts, thread))
        self._ts = ts if order is None else ts[order]
        call = calls["call_idx"].to_numpy()
        self._call = call if order is None else call[order]
        self._bounds = (np.array([0, len(ts)]) if thread is None else np.searchsorted(
            thread if order is None else thread[order], np.arange(len(self._keys) + 1)))
        # by position in ``order``; a row a kind (``np.add.at`` into a column of a 2-D array
        # was ~20x slower than into a row)
        self._sum = np.zeros(calls.height if kinds == 1 else (kinds, calls.height), np.int64)

    @property
    def total(self) -> np.ndarray:
        if self._sum.ndim == 1:
            out = np.zeros_like(self._sum)
            out[self._call] = self._sum
            return out
        out = np.zeros(self._sum.shape[::-1], np.int64)
        out[self._call] = self._sum.T
        return out

    def add(self, spans: pl.DataFrame, weight: np.ndarray | int = 1) -> None:
        """Count ``spans`` (``pid, tid, ts_ns``), each ``weight`` (one per span, a row per
        span with ``kinds``, or one for all), into :attr:`total`."""
        if spans.height == 0 or not len(self._ts):
            return
        key = thread_ids(spans)
        ts = spans["ts_ns"].to_numpy()
        w = np.asarray(weight, np.int64)
        if len(self._keys) == 1:  # the usual trace: every call on one thread
            mine = key == self._keys[0]
            groups = [(0, None if mine.all() else mine)]
        else:
            pos = np.minimum(np.searchsorted(self._keys, key), len(self._keys) - 1)
            thread = np.where(self._keys[pos] == key, pos, -1)  # -1: a thread with no call
            groups = [(k, thread == k) for k in np.unique(thread[thread >= 0])]
        for k, sel in groups:
            lo, hi = self._bounds[k], self._bounds[k + 1]
            t, wk = (ts, w) if sel is None else (ts[sel], w[sel] if w.ndim else w)
            # the call whose gap holds each span: the first of the thread starting at or
            # after it (none: after the thread's last call, in no gap), searched among the
            # calls from the part's first span to its last (a part of a time-ordered file
            # covers a few of them: a search in cache, ~2x faster at 7 M calls)
            if not len(t):
                continue
            a = lo + int(np.searchsorted(self._ts[lo:hi], t.min(), side="left"))
            b = lo + int(np.searchsorted(self._ts[lo:hi], t.max(), side="left"))
            j = np.searchsorted(self._ts[a:min(b + 1, hi)], t, side="left") + (a - lo)
            ok = j < hi - lo
            if not ok.all():
                j, wk = j[ok], wk[ok] if wk.ndim else wk
            at = j + lo if lo else j
            if self._sum.ndim == 1:
                np.add.at(self._sum, at, wk)
            else:
                for k, row in enumerate(self._sum):
                    np.add.at(row, at, wk[:, k] if wk.ndim else wk)


def thread_ids(rows: pl.DataFrame) -> np.ndarray:
    """Each row's thread as one int64 (pid and tid, as ``facts.thread_key``; null ids one
    value of their own)."""
    from .facts import thread_key

    return rows.select(thread_key().fill_null(np.iinfo(np.int64).min)).to_series().to_numpy()


# Epochs from which one replay runs its epoch loop compiled (numba) rather than interpreted:
# the loop costs ~5-15 us an epoch interpreted, numba's import ~0.5 s (once a process).
JIT_MIN_EPOCHS = 20_000


@writes("delay", "ready")
def _epochs(epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream, g_fixed, g_val,
            wait_start, own_sid, own_prefix, s_at, delay, ready) -> None:
    """The replay's one sequential part, epoch by epoch in start order: fold the epoch's
    operations into each stream's running max ``ready`` (shifted by the thread's ``delay`` so
    far), then, if a waiting call ends the epoch, delay its thread by how long the GPU work it
    waits for outlasts it. ``delay`` (per thread) and ``ready`` (per stream) are updated in
    place. ``s_at`` is the waiting calls' per-stream prefix, row-major. Written for both the
    interpreter (lists) and numba (arrays): the same source runs either way."""
    neg = -(1 << 62)
    n_streams = len(ready)
    gi, ng = 0, len(g_val)
    for rank in range(len(epoch_order)):
        e = epoch_order[rank]
        t = thread_of_epoch[e]
        d = delay[t]
        while gi < ng and g_rank[gi] == rank:
            s = g_stream[gi]
            v = g_val[gi] if g_fixed[gi] else g_val[gi] + d
            ready[s] = max(ready[s], v)
            gi += 1
        row = row_of_epoch[e]
        if row < 0:
            continue
        start = wait_start[row] + d
        if own_sid[row] >= 0:
            g = own_prefix[row] + ready[own_sid[row]]
        else:
            g = neg
            for s in range(n_streams):
                prefix = s_at[row * n_streams + s]
                if prefix >= 0 and prefix + ready[s] > g:
                    g = prefix + ready[s]
        if g > start:
            delay[t] = d + (g - start)


def _run_epochs(args: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``_epochs`` on ``args``, compiled when there are many epochs: the threads' delays and
    the streams' running maxima after the last epoch."""
    compiled = _compiled_epochs() if len(args[0]) >= JIT_MIN_EPOCHS else None
    if compiled is not None:
        compiled(*_epoch_types(args))
    else:  # few epochs (lists in the interpreter beat numba's import, ~0.5 s), or no numba
        args = tuple(a.tolist() for a in args)
        _epochs(*args)
    return np.asarray(args[-2], np.int64), np.asarray(args[-1], np.int64)


def _epoch_types(args: tuple) -> tuple:
    """``_epochs``' arguments in one set of types, whichever replay built them (the unfixed
    one's int64 positions, a fix's narrowed ones): numba compiles a loop once per set of
    argument types, ~0.3-0.45 s each on a first run. Positions (the first five: epochs,
    threads, waiting rows, ranks, streams) as narrow as the counts they index allow, whether
    an operation's value is fixed as int8, the values int64; ``delay`` and ``ready`` (the
    last two, written in place) as they are."""
    bound = max(len(args[0]), len(args[7]), len(args[11]), len(args[12]))
    idx = index_dtype(bound)
    return (*(a.astype(idx, copy=False) for a in args[:5]), args[5].astype(np.int8, copy=False),
            *(a.astype(np.int64, copy=False) for a in args[6:11]), *args[11:])


@functools.cache
def _compiled_epochs():
    """``_epochs`` compiled by numba (a dependency); None without numba: the same
    loop then runs interpreted, the same results, slower on captures with many syncs."""
    compiled = njit(_epochs)
    return compiled[0] if compiled else None


@writes("d_start", "moved", "d_incl", "d_excl", "marked", "val")
def _shifts_kernel(e_pos, d_step, d_own, first_pos, q, d_span, gone, stream_first, g_val,
                   g_op, g_has_call, g_call_pos, g_lo_op, g_hi_op, g_lo_call, g_hi_call,
                   member_start, member_end, members, op_call, launched, pos, start_nowait,
                   op_lat, op_start, w0, s_incl, span, op_gap, d_start, moved, d_incl, d_excl,
                   marked, val) -> None:
    """``_Base._shifts`` in three passes, for numba (compiled only). Edits: calls at thread
    positions ``e_pos`` (sorted) with ``d_step`` and ``d_own``; operations at stream positions
    ``q`` (sorted) with ``d_span``. Outputs, every position written: ``d_start``, by thread
    position, the move of each call's start (the ``d_step`` before it on its thread, and its
    own ``d_own``); ``d_incl`` and ``d_excl``, by stream position, the move of the stream's sum
    up to an operation, with and without its own ``d_span``; ``moved`` and ``marked``, running
    counts of the calls with a change and of the edited operations (``[i]``: before ``i``);
    ``val``, each group's maximum: shifted, or recomputed from its members where one of them
    moved."""
    neg = -(1 << 62)
    n, n_ops = len(d_start), len(d_incl)
    acc = 0
    j = 0
    moved[0] = 0
    for i in range(n):
        if first_pos[i]:
            acc = 0
        own = 0
        step = 0
        if j < len(e_pos) and e_pos[j] == i:
            own = d_own[j]
            step = d_step[j]
            j += 1
        d_start[i] = acc + own
        acc += step
        moved[i + 1] = moved[i] + (1 if (step != 0 or own != 0) else 0)
    acc = 0
    j = 0
    marked[0] = 0
    for i in range(n_ops):
        if stream_first[i]:
            acc = 0
        y = 0
        hit = 0
        if j < len(q) and q[j] == i:
            y = d_span[j]
            hit = 1
            j += 1
        d_excl[i] = acc
        acc += y
        d_incl[i] = acc
        marked[i + 1] = marked[i] + hit
    for g in range(len(val)):
        dirty = marked[g_hi_op[g] + 1] > marked[g_lo_op[g]]
        if not dirty and g_lo_call[g] >= 0:
            dirty = moved[g_hi_call[g] + 1] > moved[g_lo_call[g]]
        if not dirty:
            v = g_val[g] - d_excl[g_op[g]]
            if g_has_call[g]:
                v += d_start[g_call_pos[g]]
            val[g] = v
            continue
        best = neg
        first = True
        for k in range(member_start[g], member_end[g]):
            op = members[k]
            if gone[op]:
                c = neg
            else:
                if launched[op]:
                    call = op_call[op]
                    ready = start_nowait[call] + d_start[pos[call]] + op_lat[op]
                else:
                    ready = op_start[op] - w0
                c = ready - op_gap[op] - (s_incl[op] + d_excl[op] - span[op])
            if first or c > best:
                best = c
                first = False
        val[g] = best


@writes("out_s_at", "out_own_sid", "out_own_prefix", "out_wait_start")
def _waits_kernel(surv, s_at, at_has, at_0, d_incl, own_sid, own_prefix, own_pos,
                  wait_start, wait_pos, d_start, out_s_at, out_own_sid, out_own_prefix,
                  out_wait_start) -> int:
    """The surviving waiting calls' (``surv``) inputs to the epoch loop under a fix, moved by
    ``d_incl`` (stream sums, by stream position) and ``d_start`` (call starts, by thread
    position): per stream the sum each one waits for (``s_at``, -1: none), its own
    operation's stream and sum, and its start. For numba; returns how many survive."""
    n_streams = s_at.shape[1]
    k = 0
    for r in range(len(surv)):
        if not surv[r]:
            continue
        for s in range(n_streams):
            v = s_at[r, s]
            if at_has[r, s]:
                v += d_incl[at_0[r, s]]
            out_s_at[k * n_streams + s] = v
        sid = own_sid[r]
        out_own_sid[k] = sid
        out_own_prefix[k] = own_prefix[r] + d_incl[max(own_pos[r], 0)] if sid >= 0 else 0
        out_wait_start[k] = wait_start[r] + d_start[wait_pos[r]]
        k += 1
    return k


@functools.cache
def _compiled_waits():
    """``_waits_kernel`` compiled by numba (used with ``_compiled_shifts``); None without."""
    compiled = njit(_waits_kernel)
    return compiled[0] if compiled else None


@functools.cache
def _compiled_shifts():
    """``_shifts_kernel`` compiled by numba; None without numba (``_Base._shifts`` then)."""
    compiled = njit(_shifts_kernel)
    return compiled[0] if compiled else None


def _lower(keys, lo, hi, x):
    """The first position in ``keys[lo:hi]`` (sorted) holding ``x`` or more."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _seek(keys, cur, seg, x):
    """``_lower(keys, 0, len(keys), x)``, searched from ``cur[seg]`` (the answer last given
    for segment ``seg``, which keeps it): a few steps either way, else a binary search."""
    j = cur[seg]
    n = len(keys)
    if j > 0 and keys[j - 1] >= x:
        k = 0
        while j > 0 and keys[j - 1] >= x:
            j -= 1
            k += 1
            if k == 8:
                j = _lower(keys, 0, j, x)
                break
    else:
        k = 0
        while j < n and keys[j] < x:
            j += 1
            k += 1
            if k == 8:
                j = _lower(keys, j, n, x)
                break
    cur[seg] = j
    return j


def _base_rank(rank, gi, epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream, g_fixed,
               g_val, wait_start, own_sid, own_prefix, s_at, delay, ready):
    """One epoch (by start ``rank``) of the unfixed replay, as ``_epochs`` runs it, its groups
    from ``gi`` on; returns the first group of the next rank."""
    neg = -(1 << 62)
    ep = epoch_order[rank]
    t = thread_of_epoch[ep]
    d = delay[t]
    while gi < len(g_val) and g_rank[gi] == rank:
        s = g_stream[gi]
        v = g_val[gi] if g_fixed[gi] else g_val[gi] + d
        ready[s] = max(ready[s], v)
        gi += 1
    row = row_of_epoch[ep]
    if row >= 0:
        start = wait_start[row] + d
        sid = own_sid[row]
        if sid >= 0:
            g = own_prefix[row] + ready[sid]
        else:
            g = neg
            for s in range(len(ready)):
                prefix = s_at[row, s]
                if prefix >= 0 and prefix + ready[s] > g:
                    g = prefix + ready[s]
        if g > start:
            delay[t] = d + (g - start)
    return gi


@writes("ck_delay", "ck_ready", "delay", "ready")
def _checkpoints(every, epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream, g_fixed,
                 g_val, wait_start, own_sid, own_prefix, s_at, ck_delay, ck_ready, delay, ready):
    """The unfixed replay's state (threads' delays, streams' maxima) before every ``every``-th
    rank, into ``ck_delay``/``ck_ready``; ``delay``/``ready`` end as after the last rank."""
    gi = 0
    for rank in range(len(epoch_order)):
        if rank % every == 0:  # (loops: numba compiles a slice assignment's error text, ~1 s)
            for k in range(len(delay)):
                ck_delay[rank // every, k] = delay[k]
            for k in range(len(ready)):
                ck_ready[rank // every, k] = ready[k]
        gi = _base_rank(rank, gi, epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream,
                        g_fixed, g_val, wait_start, own_sid, own_prefix, s_at, delay, ready)
    n = len(epoch_order)
    if n % every == 0 and n // every < len(ck_delay):
        for k in range(len(delay)):
            ck_delay[n // every, k] = delay[k]
        for k in range(len(ready)):
            ck_ready[n // every, k] = ready[k]


def _sparse_group(g, t, s, member_start, member_end, members, op_call, launched, pos,
                  start_nowait, op_lat, op_start, w0, s_incl, span, op_gap, gone, e_pos, pe,
                  d_own, ebase, e0, e1, q, pq, qbase, q0, q1):
    """Group ``g``'s maximum recomputed from its members under the fix (as
    ``_shifts_kernel`` does), each move found by a binary search in the edits inside the
    group's spans (``e_pos[e0:e1]``, ``q[q0:q1]``; those before are summed whole)."""
    neg = -(1 << 62)
    best = neg
    first = True
    for k in range(member_start[g], member_end[g]):
        op = members[k]
        if len(gone) and gone[op]:
            c = neg
        else:
            if launched[op]:
                call = op_call[op]
                p = pos[call]
                j = _lower(e_pos, e0, e1, p)
                ds = pe[j] - pe[ebase[t]]
                if j < e1 and e_pos[j] == p:
                    ds += d_own[j]
                ready = start_nowait[call] + ds + op_lat[op]
            else:
                ready = op_start[op] - w0
            j = _lower(q, q0, q1, op)
            c = ready - op_gap[op] - (s_incl[op] + pq[j] - pq[qbase[s]] - span[op])
        if first or c > best:
            best = c
            first = False
    return best


@writes("ck_delay_out", "ck_ready_out", "delay", "ready", "out")
def _sparse_epochs(base, mine, every, ck_delay, ck_ready, fin_delay, fin_ready, iv_lo, iv_hi,
                   x_pe, x_ebase, x_e_rank, x_pq, x_qbase, x_q_hi, ck_delay_out, ck_ready_out,
                   delay, ready, out, keep) -> None:
    """The replay under a fix (``mine``: its edits, as ``_edit_set`` reads them; the waits it
    takes away, as rows of the waiting calls, sorted: their epochs end waiting for nothing, as
    the dense replay's do with several threads, which with one thread is the same as merging
    each with the next), run only where it differs from a reference replay (the unfixed one, or
    another fix's) known by its state every ``every`` ranks (``ck_*``) and at the end
    (``fin_*``).

    The edits that differ from the reference's (``x_*``: the running sums of the differences)
    are each in play over a span of ranks (``iv_lo``/``iv_hi``, sorted): a call's, its
    epoch's; an operation's, from the first epoch that reads its stream at or after it to
    the last that reads its stream up to it. Outside them, once the replay's state is the
    reference's translated by one amount ``c`` for every thread and stream (less the
    differences applied so far), it stays so: every later step is a max or a sum of
    translated values. That is tested at checkpoints; from there the loop jumps to the
    checkpoint before the next span, with the reference's state there translated; past the
    last span, to the reference's final state translated. Writes this replay's checkpoints
    into ``ck_*_out`` (a reference for a replay to come; only with ``keep``: else a pass over
    every checkpoint for nothing) and its final state into ``delay``/``ready``; ``out``: the
    jumps and the ranks run."""
    (epoch_order, thread_of_epoch, row_of_epoch, g_rank, g_stream, g_fixed, g_val, g_op,
     g_call_pos, g_has_call, g_hi_op, g_lo_call, g_hi_call, member_start, member_end, members,
     op_call, launched, pos, start_nowait, op_lat, op_start, w0, s_incl, span, op_gap,
     wait_start, wait_pos, own_sid, own_prefix, own_pos, s_at, at_has, at_0) = base
    (gone, e_pos, pe, d_own, e_moved, ebase, q, pq, d_span, qbase, unwait) = mine
    neg = -(1 << 62)
    n_streams, n_threads = len(ready), len(delay)
    n_ranks, ng, n_iv = len(epoch_order), len(g_rank), len(iv_lo)
    n_ck = len(ck_delay)
    ct = ebase[:-1].copy()
    cs = qbase[:-1].copy()
    ea = x_ebase[:-1].copy()  # per thread: differences applied (their rank passed)
    qa = x_qbase[:-1].copy()  # per stream: likewise
    c = 0
    k = 0
    hi_cur = -1
    ran = 0
    jumps = 0
    r = 0  # the replay's state is the reference's, translated by c, at rank r
    while True:
        target = iv_lo[k] if k < n_iv else n_ranks
        cp = target // every
        # checkpoints of the translated stretch [r, cp * every], then the jump
        for i in range((r + every - 1) // every, min(cp + 1, n_ck) if keep else 0):
            for t in range(n_threads):
                ck_delay_out[i, t] = ck_delay[i, t] + c - (x_pe[ea[t]] - x_pe[x_ebase[t]])
            for s in range(n_streams):
                ck_ready_out[i, s] = ck_ready[i, s] + c - (x_pq[qa[s]] - x_pq[x_qbase[s]])
        if k >= n_iv:
            break
        if cp * every > r:
            jumps += 1
            r = cp * every
            for t in range(n_threads):
                delay[t] = ck_delay[cp, t] + c - (x_pe[ea[t]] - x_pe[x_ebase[t]])
            for s in range(n_streams):
                ready[s] = ck_ready[cp, s] + c - (x_pq[qa[s]] - x_pq[x_qbase[s]])
        elif r == 0:
            for t in range(n_threads):
                delay[t] = ck_delay[0, t]
            for s in range(n_streams):
                ready[s] = ck_ready[0, s]
        gi = _lower(g_rank, 0, ng, r)
        converged = False
        while r < n_ranks:
            while k < n_iv and iv_lo[k] <= r:
                hi_cur = max(hi_cur, iv_hi[k])
                k += 1
            if keep and r % every == 0 and r // every < n_ck:
                i = r // every
                for t in range(n_threads):
                    ck_delay_out[i, t] = delay[t]
                for s in range(n_streams):
                    ck_ready_out[i, s] = ready[s]
            # the epoch at this rank (as ``_epochs``), under the fix's edits
            ep = epoch_order[r]
            t = thread_of_epoch[ep]
            d = delay[t]
            t_edits = ebase[t + 1] > ebase[t]
            while gi < ng and g_rank[gi] == r:
                s = g_stream[gi]
                v = g_val[gi]
                dirty = False
                if qbase[s + 1] > qbase[s]:
                    j = _seek(q, cs, s, g_op[gi])  # g_op: the group's first stream position
                    v -= pq[j] - pq[qbase[s]]
                    dirty = j < qbase[s + 1] and q[j] <= g_hi_op[gi]
                if g_has_call[gi] and t_edits:
                    j = _seek(e_pos, ct, t, g_lo_call[gi])
                    while not dirty and j < ebase[t + 1] and e_pos[j] <= g_hi_call[gi]:
                        dirty = e_moved[j]
                        j += 1
                    if not dirty:
                        p = g_call_pos[gi]
                        j = ct[t]  # at the group's first call: a few edits at most before p
                        while j < ebase[t + 1] and e_pos[j] < p:
                            j += 1
                        v += pe[j] - pe[ebase[t]]
                        if j < ebase[t + 1] and e_pos[j] == p:
                            v += d_own[j]
                if dirty:
                    # the edits inside the group's spans
                    q0 = _lower(q, qbase[s], qbase[s + 1], g_op[gi])
                    q1 = q0
                    while q1 < qbase[s + 1] and q[q1] <= g_hi_op[gi]:
                        q1 += 1
                    e0, e1 = ebase[t], ebase[t]
                    if g_has_call[gi]:
                        e0 = _lower(e_pos, ebase[t], ebase[t + 1], g_lo_call[gi])
                        e1 = e0
                        while e1 < ebase[t + 1] and e_pos[e1] <= g_hi_call[gi]:
                            e1 += 1
                    v = _sparse_group(gi, t, s, member_start, member_end, members, op_call, launched,
                                      pos, start_nowait, op_lat, op_start, w0, s_incl, span, op_gap,
                                      gone, e_pos, pe, d_own, ebase, e0, e1, q, pq, qbase, q0, q1)
                if not g_fixed[gi]:
                    v += d
                ready[s] = max(ready[s], v)
                gi += 1
            row = row_of_epoch[ep]
            if row >= 0 and len(unwait):  # a wait the fix takes away waits no more
                j = _lower(unwait, 0, len(unwait), row)
                if j < len(unwait) and unwait[j] == row:
                    row = -1
            if row >= 0:
                start = wait_start[row] + d
                if t_edits:
                    p = wait_pos[row]
                    j = _seek(e_pos, ct, t, p)
                    start += pe[j] - pe[ebase[t]]
                    if j < ebase[t + 1] and e_pos[j] == p:
                        start += d_own[j]
                sid = own_sid[row]
                if sid >= 0:
                    g = own_prefix[row] + ready[sid]
                    if qbase[sid + 1] > qbase[sid]:
                        x = own_pos[row]
                        j = _seek(q, cs, sid, x)
                        g += pq[j] - pq[qbase[sid]]
                        if j < qbase[sid + 1] and q[j] == x:
                            g += d_span[j]
                else:
                    g = neg
                    for s in range(len(ready)):
                        prefix = s_at[row, s]
                        if at_has[row, s] and qbase[s + 1] > qbase[s]:
                            x = at_0[row, s]
                            j = _seek(q, cs, s, x)
                            prefix += pq[j] - pq[qbase[s]]
                            if j < qbase[s + 1] and q[j] == x:
                                prefix += d_span[j]
                        if prefix >= 0 and prefix + ready[s] > g:
                            g = prefix + ready[s]
                if g > start:
                    delay[t] = d + (g - start)
            r += 1
            ran += 1
            if r % every or r // every >= n_ck or hi_cur >= r or r >= n_ranks:
                continue
            # a checkpoint with no difference in play: the reference's state, translated?
            for tt in range(n_threads):
                while ea[tt] < x_ebase[tt + 1] and x_e_rank[ea[tt]] < r:
                    ea[tt] += 1
            for ss in range(n_streams):
                while qa[ss] < x_qbase[ss + 1] and x_q_hi[qa[ss]] < r:
                    qa[ss] += 1
            i = r // every
            c = delay[0] + (x_pe[ea[0]] - x_pe[x_ebase[0]]) - ck_delay[i, 0]
            same = True
            for tt in range(n_threads):
                if delay[tt] + (x_pe[ea[tt]] - x_pe[x_ebase[tt]]) - ck_delay[i, tt] != c:
                    same = False
                    break
            if same:
                for ss in range(n_streams):
                    if ready[ss] + (x_pq[qa[ss]] - x_pq[x_qbase[ss]]) - ck_ready[i, ss] != c:
                        same = False
                        break
            if same and (k >= n_iv or iv_lo[k] // every > i):
                converged = True
                break
        if not converged:  # ran to the last rank: the state is final
            out[0], out[1] = jumps, ran
            return
    # past the last span: the reference's final state, translated (every difference applied)
    for t in range(n_threads):
        delay[t] = fin_delay[t] + c - (x_pe[x_ebase[t + 1]] - x_pe[x_ebase[t]])
    for s in range(n_streams):
        ready[s] = fin_ready[s] + c - (x_pq[x_qbase[s + 1]] - x_pq[x_qbase[s]])
    out[0], out[1] = jumps, ran


@writes("out_pos", "out_delta")
def _sorted_differences(pa, a1, a2, pb, b1, b2, out_pos, out_delta) -> int:
    """Where two edit sets (positions ``pa``/``pb``, sorted, unique; two values each, 0 where
    absent) differ: the positions (sorted) and ``a1 - b1`` there. One merge; returns how many."""
    i = j = n = 0
    while i < len(pa) or j < len(pb):
        if j >= len(pb) or (i < len(pa) and pa[i] < pb[j]):
            p, x1, x2, y1, y2 = pa[i], a1[i], a2[i], 0, 0
            i += 1
        elif i >= len(pa) or pb[j] < pa[i]:
            p, x1, x2, y1, y2 = pb[j], 0, 0, b1[j], b2[j]
            j += 1
        else:
            p, x1, x2, y1, y2 = pa[i], a1[i], a2[i], b1[j], b2[j]
            i += 1
            j += 1
        if x1 != y1 or x2 != y2:
            out_pos[n] = p
            out_delta[n] = x1 - y1
            n += 1
    return n


@writes("lo", "hi")
def _ref_ranks(op_rank, op_sid, refs, ref_rank, lo, hi) -> None:
    """Per stream position: ``lo``, the first rank that reads its stream at or after it;
    ``hi``, the last that reads its stream up to it (an operation is read by its group's
    rank, and by the ranks of the waiting calls that await it: ``refs``/``ref_rank``)."""
    n = len(op_rank)
    for i in range(n):  # (a loop: numba compiles a slice assignment's error text, ~1 s)
        lo[i] = op_rank[i]
        hi[i] = op_rank[i]
    for i in range(len(refs)):
        x = refs[i]
        lo[x] = min(lo[x], ref_rank[i])
        hi[x] = max(hi[x], ref_rank[i])
    for i in range(1, n):
        if op_sid[i] == op_sid[i - 1] and hi[i - 1] > hi[i]:
            hi[i] = hi[i - 1]
    for i in range(n - 2, -1, -1):
        if op_sid[i] == op_sid[i + 1] and lo[i + 1] < lo[i]:
            lo[i] = lo[i + 1]


@writes("out_p", "out_s", "out_o", "out_pe", "out_moved", "x_p", "x_d")
def _merge_calls(pa, sa, oa, pb, sb, ob, out_p, out_s, out_o, out_pe, out_moved, x_p, x_d):
    """Edit set ``a`` (thread positions ``pa``, sorted, unique; changes ``sa`` of the step
    after the call, ``oa`` of its own start) with ``b``'s merged in: where both edit a call,
    its smallest gap and smallest cost, i.e. the smaller change of each (``s - o`` is the
    change of cost). Writes the union, its running sums of ``s`` (``out_pe``) and which
    move; and where the result differs from ``a`` (``x_p``, with the change of ``s``).
    Returns the union's length and the differences'."""
    i = j = n = nx = 0
    acc = 0
    out_pe[0] = 0
    while i < len(pa) or j < len(pb):
        if j >= len(pb) or (i < len(pa) and pa[i] < pb[j]):
            p, s, o = pa[i], sa[i], oa[i]
            i += 1
        elif i >= len(pa) or pb[j] < pa[i]:
            p, s, o = pb[j], sb[j], ob[j]
            j += 1
            if s != 0 or o != 0:
                x_p[nx] = p
                x_d[nx] = s
                nx += 1
        else:
            p = pa[i]
            o = min(oa[i], ob[j])
            s = o + min(sa[i] - oa[i], sb[j] - ob[j])
            if s != sa[i] or o != oa[i]:
                x_p[nx] = p
                x_d[nx] = s - sa[i]
                nx += 1
            i += 1
            j += 1
        out_p[n] = p
        out_s[n] = s
        out_o[n] = o
        out_moved[n] = s != 0 or o != 0
        acc += s
        n += 1
        out_pe[n] = acc
    return n, nx


@writes("out_q", "out_d", "out_pq", "x_q", "x_d")
def _merge_ops(qa, da, qb, db, out_q, out_d, out_pq, x_q, x_d):
    """``_merge_calls`` for operations (stream positions, changes of span: the smaller
    holds)."""
    i = j = n = nx = 0
    acc = 0
    out_pq[0] = 0
    while i < len(qa) or j < len(qb):
        if j >= len(qb) or (i < len(qa) and qa[i] < qb[j]):
            p, d = qa[i], da[i]
            i += 1
        elif i >= len(qa) or qb[j] < qa[i]:
            p, d = qb[j], db[j]
            j += 1
            x_q[nx] = p
            x_d[nx] = d
            nx += 1
        else:
            p = qa[i]
            d = min(da[i], db[j])
            if d != da[i]:
                x_q[nx] = p
                x_d[nx] = d - da[i]
                nx += 1
            i += 1
            j += 1
        out_q[n] = p
        out_d[n] = d
        acc += d
        n += 1
        out_pq[n] = acc
    return n, nx


@functools.cache
def _compiled_sparse():
    """``_sparse_epochs``, ``_checkpoints`` and ``_ref_ranks`` compiled by numba (with the
    helpers they call); None without numba (the dense path then)."""
    g = globals()
    helpers = [name for name in ("_lower", "_seek", "_base_rank", "_sparse_group")
               if not hasattr(g[name], "py_func")]  # (not compiled yet)
    inlined = njit(*(g[name] for name in helpers), inline=True)
    if inlined is None:
        return None
    g.update(zip(helpers, inlined))
    return njit(_sparse_epochs, _checkpoints, _ref_ranks, _sorted_differences, _merge_calls,
                _merge_ops)


def _stream_order(g: pl.DataFrame) -> np.ndarray | pl.Series:
    """Rows of ``g`` by (stream, ts_ns, gpu_idx): numpy's lexsort of the three int64 keys,
    ~6x faster than polars' multi-key sort here (which stays for keys with nulls)."""
    keys = [g[c] for c in ("gpu_idx", "ts_ns", "stream")]
    if any(k.null_count() for k in keys):
        return g.with_row_index("_r").sort("stream", "ts_ns", "gpu_idx")["_r"]
    return np.lexsort([k.to_numpy() for k in keys])


def sorted_unique(*parts: np.ndarray) -> np.ndarray:
    """``np.unique`` of ``parts`` together (integers): a stable sort, which merges the sorted
    runs that fixes are made of in linear time (numpy's hashed ``unique`` was ~50x slower on
    them), then the first of each value."""
    x = np.concatenate(parts) if len(parts) != 1 else np.asarray(parts[0])
    if len(x) and (len(x) == 1 or bool((x[1:] > x[:-1]).all())):
        return x.copy()
    x = np.sort(x, kind="stable")
    return x[_starts(x)]


def in_sorted(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Whether each of ``x`` is in ``values`` (sorted): a binary search each, no sort."""
    if not len(values):
        return np.zeros(len(x), bool)
    at = np.minimum(np.searchsorted(values, x), len(values) - 1)
    return values[at] == x


def _starts(keys: np.ndarray) -> np.ndarray:
    first = np.ones(len(keys), bool)
    first[1:] = keys[1:] != keys[:-1]
    return first


def _segmented_cumsum(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running sum of ``x`` restarting where ``first`` is set (and at 0)."""
    if not len(x):
        return x.astype(np.int64)
    c = np.cumsum(x, dtype=np.int64)
    heads = np.flatnonzero(first)
    if not len(heads) or heads[0] != 0:
        heads = np.concatenate([[0], heads])
    _from_heads(c, heads, np.diff(np.append(heads, len(x))), x)
    return c


def _segmented_exclusive_cumsum(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    return _segmented_cumsum(x, first) - x


def _segmented_cummax(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running maximum of ``x`` within each segment (``first``: where one starts)."""
    if not len(x):
        return x
    # Offset each segment above all earlier ones so one running max stays inside segments
    # (in place: two whole-length arrays, not six), unless the offsets would not fit in
    # int64 (times spread over centuries: a capture with damaged clocks): then segment by
    # segment.
    lo, hi = int(x.min()), int(x.max())
    span = hi - lo + 1
    if (int(first.sum()) + 1) * span >= 1 << 63:
        out = np.maximum.accumulate(x)   # (before the first segment: one run)
        heads = np.flatnonzero(first)
        for a, b in zip(heads, np.append(heads[1:], len(x)), strict=True):
            np.maximum.accumulate(x[a:b], out=out[a:b])
        return out
    off = np.cumsum(first, dtype=np.int64)
    off -= 1
    off *= span
    shifted = x - lo
    shifted += off
    np.maximum.accumulate(shifted, out=shifted)
    shifted -= off
    shifted += lo
    return shifted


def _group_max_dense(rank: np.ndarray, stream: np.ndarray, fixed: np.ndarray,
                     value: np.ndarray, n_rank: int, n_streams: int):
    """``_group_max`` through a table of every (rank, stream, fixed), when that table is not
    much larger than the values (a scatter-max and a scan instead of a sort)."""
    size = n_rank * max(n_streams, 1) * 2
    if size > 8 * len(value) + 1024:
        return _group_max(rank, stream, fixed, value)
    flat = (rank * n_streams + stream) * 2 + fixed
    table = np.full(size, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(table, flat, value)
    present = np.zeros(size, bool)
    present[flat] = True
    at = np.nonzero(present)[0]
    r = at // (2 * n_streams)
    return r, (at // 2) % n_streams, at % 2, table[at], r


def _group_max(rank: np.ndarray, stream: np.ndarray, fixed: np.ndarray, value: np.ndarray,
               keep: dict | None = None):
    """Max of ``value`` per (rank, stream, fixed), sorted by rank: five parallel arrays
    (rank, stream, fixed, max, rank again for the loop's cursor). ``keep``: also gets the
    members' order (``group_order``) and where each group starts in it (``group_start``)."""
    if not len(value):
        z = np.zeros(0, np.int64)
        if keep is not None:
            keep.update(group_order=z, group_start=z)
        return z, z, z, z, z
    # One int64 key in (rank, stream, fixed) order: one sort instead of a three-key lexsort.
    key = (rank * (int(stream.max()) + 1) + stream) * 2 + fixed
    order = np.argsort(key, kind="stable")
    key = key[order]
    new = np.ones(len(key), bool)
    new[1:] = key[1:] != key[:-1]
    del key
    idx = np.nonzero(new)[0]
    vmax = np.maximum.reduceat(value[order], idx)
    if keep is not None:
        keep.update(group_order=order, group_start=idx)
    heads = order[idx]  # one member of each group: its rank, stream and fixed
    r = rank[heads]
    return r, stream[heads], fixed[heads], vmax, r.copy()
