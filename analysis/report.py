"""One function assembles an analysis (:func:`analyze`); :class:`Analysis` holds it and says it
as plain data (what ``zym analyze --format json`` prints and every renderer reads).

capture file -> facts of the whole capture -> phases (steps, warm-up, startup) -> the analysis
window (steady state unless asked otherwise) -> facts of the window -> call paths, utilization,
the replayable timeline; rules read the same facts (:mod:`zym.analysis.relations`).
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from zym.schemas.errors import InputError
from zym.schemas.memory import release_freed_memory

from .callpath import UNKNOWN_STACK, CallPaths, build_call_paths, stack_nodes
from .facts import Facts
from .instances import UserFrameSpans
from .load import UNREAD, CaptureData, api_codes, cut_short, load_capture
from .phases import Phases, Steps, find_phases, parse_window, step_threads
from .replay import GapCounter, Timeline
from .sample import SampledTimeline, window_timeline

if TYPE_CHECKING:
    from .budget import Sample
    from .relations import Relations

Progress = Callable[[str], None]


_BUILDING = threading.Lock()   # the timeline: built once, whichever thread asks first


@dataclass
class Analysis:
    """The analysis of one window of a capture.

    ``data``/``facts``: the window's tables and facts; ``whole``: the facts of the whole
    capture (the same object when the window is the whole capture); ``phases``: steps,
    warm-up and startup found in the whole capture.
    """

    data: CaptureData
    facts: Facts
    call_paths: CallPaths
    phases: Phases
    whole: Facts
    window_spec: str = "steady"
    _steps: Steps | None = field(default=None, repr=False)
    # per call of the whole capture (``whole.calls`` order): the CPU time torch.profiler's
    # recording of the events in the gap before it added (:func:`recorded_events_ns`); None
    # where the capture's producer is not torch.profiler or states its own cost
    recorded_ns: np.ndarray | None = field(default=None, repr=False)
    # how much slower than the reference host the trace's ops dispatched (its median
    # ``KINETO_SPEED_OP`` span over ``KINETO_SPEED_REF_NS``, at least 1): the recording's
    # cost of an op and of a runtime call, in ``recorded_ns`` too, are scaled by it
    # (:func:`recorded_events_ns`, :func:`capture_overhead`)
    recording_slowdown: float = 1.0
    # the whole capture's spans of the calls' user frames, from the pass that checked the
    # spans (:class:`~zym.analysis.instances.UserFrameSpans`); None: queried where wanted
    user_spans: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def window(self) -> tuple[int, int]:
        return self.facts.window

    @property
    def sample(self) -> Sample | None:
        """How the capture was sampled to fit the memory budget
        (:class:`zym.analysis.budget.Sample`), or None: the whole capture."""
        return self.whole.data.sample

    def sample_facts(self) -> dict | None:
        """How the capture was sampled (:meth:`zym.analysis.budget.Sample.to_dict`) and, in
        ``sync_copy_lines``, the capture's lines that sync or copy: how many, how many its
        sample holds, those outside it and those it holds short, with the whole capture's
        counts (:func:`zym.analysis.census.sync_copy_lines`); None: the whole capture."""
        sample = self.sample
        if sample is None:
            return None
        facts = sample.to_dict()
        if sample.census is not None and sample.held is not None:
            from .census import sync_copy_lines

            facts["sync_copy_lines"] = sync_copy_lines(
                self.whole, sample.census, sample.held, sample.extent[1] - sample.extent[0],
                sum(b - a for a, b in sample.slices))
        return facts

    @cached_property
    def capture_launches(self) -> pl.DataFrame | None:
        """Where the analysis is of a sample: per kernel and grid, how many times the whole
        capture ran it (:func:`zym.analysis.census.launch_census`, one pass over the capture's
        GPU operations, a part of its time at a time, made where first asked for); None: the
        whole capture."""
        sample = self.sample
        if sample is None or sample.source is None:
            return None
        from .census import launch_census

        return launch_census(sample.source)

    @property
    def utilization(self) -> dict:
        """The window and each GPU's busy and idle time within it."""
        lo, hi = self.window
        window = hi - lo
        busy = (self.facts.busy.group_by("device_id")
                .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns"))
                .sort("device_id"))
        devices = [{"device_id": r["device_id"], "busy_ns": r["busy_ns"],
                    "idle_ns": max(window - r["busy_ns"], 0),
                    "busy_pct": round(100 * r["busy_ns"] / window, 2) if window else 0.0}
                   for r in busy.iter_rows(named=True)]
        return {"window_ns": window, "activity_ns": self.facts.gpu_ns, "devices": devices}

    def steps_in_window(self) -> Steps | None:
        """The steps that start inside the window (None without steps)."""
        steps = self.phases.steps
        if steps is None:
            return None
        lo, hi = self.window
        # a step belongs to the window when most of it lies inside (a step starts a little
        # before its first CUDA call, the window's edge for a whole capture)
        mid = steps.start_ns + (steps.end_ns - steps.start_ns) // 2
        keep = (mid >= lo) & (mid < hi)
        if not keep.any():
            return None
        return Steps(steps.function, steps.file, steps.name, np.maximum(steps.start_ns[keep], lo),
                     np.minimum(steps.end_ns[keep], hi), steps.source, steps.thread,
                     None if steps.returns_ns is None else
                     np.clip(steps.returns_ns[keep], lo, hi))

    @cached_property
    def timeline(self) -> Timeline | SampledTimeline:
        """The window's replayable timeline (what-if estimates), with the capture's own CPU
        cost taken out where it is known (:func:`capture_overhead`). Built once, also when
        the rules start building it ahead on a thread (``rules.engine``)."""
        with _BUILDING:
            tl = self.__dict__.get("_timeline")
            if tl is None:
                steps = self.steps_in_window() if self.window_spec == "steady" or \
                    self.window_spec.startswith("steps:") else None
                threads = None if steps is None else functools.cache(
                    lambda: step_threads(self.facts.calls, self.facts.nodes, steps))
                sample = self.sample  # (a capture's sample: replayed in two halves)
                tl = self.__dict__["_timeline"] = window_timeline(
                    self.facts, self.recording_cost,
                    None if steps is None else steps.start_ns, threads,
                    sample.in_sample_clock() if sample is not None else None)
            return tl

    @cached_property
    def recording_cost(self) -> np.ndarray:
        """Per call of the window (``Facts.calls`` order), the CPU time the recording itself
        added before it (:func:`capture_overhead`): what the replay takes out, and what the
        rules' shares of a step's time leave out."""
        return capture_overhead(self)

    def drop_derived(self) -> None:
        """Let go of the rules' relations, the replayable timeline and the facts' derived
        tables (:meth:`Facts.drop_derived`); the capture's tables, call paths and phases stay.
        Anything dropped is built again if asked for."""
        for name in ("relations", "timeline", "_timeline"):
            self.__dict__.pop(name, None)
        self.facts.drop_derived()
        self.whole.drop_derived()

    @cached_property
    def relations(self) -> Relations:
        """The relations rules read (:mod:`zym.analysis.relations`), one per analysis: the rule
        engine, the fix models and ``--what-if`` share its tables instead of each building
        its own (at 1 M GPU operations one ``call_instance`` build is seconds)."""
        from .relations import Relations

        return Relations(self)

    def to_dict(self, top: int | None = None) -> dict:
        """Capture facts, phases, GPU utilization, the call paths ranked two ways and the top
        kernels. ``top`` limits each ranking; None keeps every path (machines usually want all).
        """
        paths = self.call_paths.paths
        total_gpu = self.facts.gpu_ns
        by_gpu = paths.filter(pl.col("gpu_ns") > 0).sort("gpu_ns", "path_id",
                                                         descending=[True, False])
        by_blocked = paths.filter(pl.col("cpu_blocked_ns") > 0).sort(
            "cpu_blocked_ns", "path_id", descending=[True, False])
        kernels = self.top_kernels()
        if top is not None:
            by_gpu, by_blocked, kernels = by_gpu.head(top), by_blocked.head(top), kernels[:top]
        ops = self._gpu_ops_by_path()
        sample = self.sample_facts()
        sampled = {"sample": sample} if sample is not None else {}
        return sampled | {
            "capture": self.capture_facts(),
            "phases": self.phase_facts(),
            "gpu": self.utilization | {"attributed_ns": total_gpu - self._unknown_gpu_ns(),
                                       "python_line_ns": self._python_line_gpu_ns()},
            "paths_by_gpu_time": [self._path_dict(r, total_gpu, ops)
                                  for r in by_gpu.iter_rows(named=True)],
            "paths_by_cpu_blocked": [self._path_dict(r, total_gpu, ops)
                                     for r in by_blocked.iter_rows(named=True)],
            "top_kernels": kernels,
        }

    def top_kernels(self) -> list[dict]:
        """GPU operations by name, costliest first, with their class and share of GPU time."""
        g = self.facts.gpu.filter("work")
        if g.height == 0:
            return []
        total = self.facts.gpu_ns
        rows = (g.group_by("name").agg(
            pl.col("kind").first(), pl.col("op_class").first(), pl.col("precision").first(),
            pl.col("tensor_core").first(), pl.len().alias("count"),
            pl.col("dur_ns").sum().alias("gpu_ns"), pl.col("dur_ns").mean().alias("mean_ns"))
            .sort("gpu_ns", "name", descending=[True, False]))
        return [r | {"mean_ns": round(r["mean_ns"]),
                     "gpu_share_pct": round(100 * r["gpu_ns"] / total, 3) if total else 0.0}
                for r in rows.iter_rows(named=True)]

    def _gpu_ops_by_path(self) -> dict[int, list[dict]]:
        """Each path's GPU operations (the leaves), read in one pass."""
        by_path: dict[int, list[dict]] = {}
        for row in self.call_paths.gpu_ops.filter(pl.col("kind") != "sync").select(
                "stack_id", "name", "kind", "count", "gpu_ns", "bytes").iter_rows(named=True):
            by_path.setdefault(row.pop("stack_id"), []).append(row)
        return by_path

    def capture_facts(self) -> dict:
        d, m = self.data, self.data.meta
        counts = self.facts.counts
        out = {
            "source": str(d.source), "producer": m.producer, "host": m.host,
            "gpus": m.gpus, "driver_version": m.driver_version,
            "runtime_version": m.runtime_version, "cupti_version": m.cupti_version,
            "clock_domain": m.clock_domain, "dropped": m.dropped,
            **counts, "paths": self.call_paths.paths.height,
        }
        cut = cut_short(m)
        if cut:
            out["cut_short"] = cut
        cost = capture_cost(m)
        if cost:
            # what the estimate adds up to over the analyzed window (the run-wide
            # estimated_overhead_pct counts the target's start-up and idle time too)
            per_call, window_ns = cost.get("total_ns_per_call"), self.facts.window_ns
            if per_call and window_ns:
                cost["window_pct"] = round(100 * per_call * self.facts.calls.height
                                           / window_ns, 2)
            out["capture_cost"] = cost
        return out

    def phase_facts(self) -> dict:
        """The window analyzed, the steps found, and what happened outside it."""
        ph = self.phases
        lo, hi = self.window
        w0, w1 = ph.window
        steps = self.steps_in_window()
        out: dict = {
            "capture_ns": w1 - w0, "window": self.window_spec,
            "window_from_ns": lo - w0, "window_to_ns": hi - w0, "window_ns": hi - lo,
            "steps": None, "startup": None, "warmup": None, "notes": list(ph.notes),
        }
        if ph.steps is not None:
            durs = steps.durations() if steps is not None else np.zeros(0)
            out["steps"] = {
                "function": ph.steps.function, "found": ph.steps.count,
                "how": ph.steps.source, "in_window": 0 if steps is None else steps.count,
                "median_ns": int(np.median(durs)) if len(durs) else None,
                "mean_ns": int(durs.mean()) if len(durs) else None,
                "min_ns": int(durs.min()) if len(durs) else None,
                "max_ns": int(durs.max()) if len(durs) else None,
            }
        for name, span in (("startup", ph.startup), ("warmup", ph.warmup)):
            if span and span[1] > span[0]:
                out[name] = self.whole_summary(*span) | (
                    {"steps": ph.warmup_steps} if name == "warmup" else {})
        if ph.compile_calls:
            out["compile"] = {"calls": ph.compile_calls, "span_ns": ph.compile_ns}
        return out

    def whole_summary(self, t0: int, t1: int) -> dict:
        """What the whole capture did between ``t0`` and ``t1``: its length, GPU time, bytes
        copied host to device, and its costliest call sites (GPU time plus blocked time)."""
        w = self.whole
        calls = w.calls.filter((pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1))
        gpu = w.gpu.filter(pl.col("work") & (pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1))
        per_call_gpu = gpu.group_by("call_idx").agg(pl.col("dur_ns").sum().alias("g"))
        c = (calls.join(per_call_gpu, on="call_idx", how="left")
             .with_columns(*w.site_of(calls["stack_id"], ("site",))))
        top = (c.group_by("site").agg(
            (pl.col("g").fill_null(0) + pl.when("blocking").then("dur_ns").otherwise(0))
            .sum().alias("cost_ns"), pl.len().alias("calls"))
            .sort("cost_ns", "site", descending=[True, False]).head(3))
        htod = calls.filter(pl.col("copy_kind") == "HtoD")["bytes"].sum()
        return {"from_ns": t0 - w.window[0], "to_ns": t1 - w.window[0], "dur_ns": t1 - t0,
                "gpu_ns": int(gpu["dur_ns"].sum() or 0), "bytes_htod": int(htod or 0),
                "calls": calls.height,
                "top_sites": [r for r in top.iter_rows(named=True) if r["cost_ns"]]}

    def _python_line_gpu_ns(self) -> int:
        """GPU time whose call path reaches a line of user code (a path of torch operators
        and CUDA calls alone, as in a trace recorded without Python stacks, does not)."""
        paths = self.call_paths.paths
        return int(paths.filter(pl.col("user_function").is_not_null())["gpu_ns"].sum() or 0)

    def _unknown_gpu_ns(self) -> int:
        unknown = self.call_paths.paths.filter(pl.col("path_id") == UNKNOWN_STACK)
        return int(unknown["gpu_ns"].sum() or 0)

    def _path_dict(self, row: dict, total_gpu: int, ops: dict[int, list[dict]]) -> dict:
        graph = self.call_paths.graph
        rows = graph.path_rows(row["path_id"])
        kind, name, file, line, user = (graph.column(c) for c in (
            "kind", "name", "file", "line", "is_user"))
        node = graph.node(row["path_id"]) or {}
        return {
            "path_id": row["path_id"],
            "site": row["site"],
            "user_frame": None if row["user_function"] is None else {
                "file": row["user_file"], "line": row["user_line"],
                "function": row["user_function"], "module": row["user_module"],
                "source": row["user_source"]},
            "mechanism": row["mechanism"],
            "user_chain": [f"{file[r]}:{line[r]} {name[r]}" for r in rows if user[r]],
            "torch_op": row["torch_op"], "api": row["api"],
            "gpu_ns": row["gpu_ns"],
            # Self: GPU work of calls whose stack ends exactly here; total: with the subtree.
            "gpu_self_ns": node.get("self_gpu_ns", 0), "gpu_total_ns": node.get("total_gpu_ns", 0),
            "gpu_share_pct": round(100 * row["gpu_ns"] / total_gpu, 3) if total_gpu else 0.0,
            "kernels": row["kernels"], "copies": row["copies"], "memsets": row["memsets"],
            "bytes": {"HtoD": row["bytes_htod"], "DtoH": row["bytes_dtoh"],
                      "DtoD": row["bytes_dtod"]},
            "calls": row["calls"], "launches": row["launches"], "syncs": row["syncs"],
            "cpu_call_ns": row["cpu_call_ns"], "cpu_blocked_ns": row["cpu_blocked_ns"],
            "gpu_ops": ops.get(row["path_id"], []),
            "stack": [{"kind": kind[r], "name": name[r], "file": file[r], "line": line[r]}
                      for r in rows],
        }


@functools.cache
def _cupti_costs() -> dict:
    from .bundled import bundled_yaml

    return bundled_yaml("capture_costs.yaml")["cupti"]


def capture_cost(meta) -> dict:
    """What a zym capture added to each CUDA call of its target: the collector's own estimate
    for the eBPF probes (``capture_cost`` in the metadata) and CUPTI's, measured for the way
    it was started (with the process, or attached to it: ``extra.gpu_window``), and their sum
    (``total_ns_per_call``). Empty for other producers."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    cost = dict(extra.get("capture_cost") or {})
    if not cost:
        return {}
    probes = cost.get("added_ns_per_call")
    total = int(probes) if isinstance(probes, (int, float)) and probes > 0 else 0
    if extra.get("cupti", {}).get("spools"):
        started = "attach" if extra.get("gpu_window") else "launch"
        cost["cupti_started"] = started
        cost["cupti_ns_per_call"] = int(_cupti_costs()[started]["ns_per_call"])
        total += cost["cupti_ns_per_call"]
    cost["total_ns_per_call"] = total
    return cost


def capture_overhead(analysis: Analysis) -> np.ndarray:
    """CPU time the recording itself added before each call of the window (``Facts.calls``
    order), so replays predict the run without the profiler: a zym capture states its own
    cost per call (``extra.capture_cost.added_ns_per_call``); a torch.profiler trace costs
    :data:`zym.analysis.replay.KINETO_NS_PER_EVENT` per recorded event (its torch ops and
    Python calls that start in the gap, and the runtime call itself), an op's and the runtime
    call's times the trace's ``recording_slowdown``."""
    from .replay import KINETO_NS_PER_EVENT as COST

    meta = analysis.data.meta
    n = analysis.facts.calls.height
    per_call = capture_cost(meta).get("total_ns_per_call")
    if per_call:  # one figure for every call: a read-only view, not n copies of it
        return np.broadcast_to(np.int64(per_call), (n,))
    if not counts_events(meta):
        return np.zeros(n, np.int64)
    slow = analysis.recording_slowdown
    out = np.full(n, round(COST["cuda_runtime"] * slow), np.int64)
    events = analysis.recorded_ns
    if events is not None and n:
        if analysis.facts is analysis.whole:
            return out + events
        # the window's calls are the whole capture's that start in it: a run of them in
        # time order, from the first at or after the window's start
        first = int(analysis.whole.calls["ts_ns"].search_sorted(analysis.window[0], "left"))
        out += events[first:first + n]
        # a thread's first call in the window: its gap (what the replay deflates) starts
        # at the window's start, not at the thread's previous call
        at, ns = _events_since_window_start(analysis)
        out[at] = round(COST["cuda_runtime"] * slow) + ns
    return out


def builtin_stacks(data: CaptureData) -> np.ndarray:
    """The stack nodes (``stack_id``, sorted) whose frame is a C built-in call's: its name
    starts with :data:`~zym.analysis.replay.KINETO_BUILTIN_PREFIX` (torch.profiler's
    ``<built-in method lower of str object>``), what :func:`_span_cost` prices as
    ``python_builtin``."""
    from .replay import KINETO_BUILTIN_PREFIX

    if "name" not in data.frames.columns or not data.stacks.height:
        return np.zeros(0, np.int64)
    builtin = data.frames.filter(pl.col("name").cast(pl.String)
                                 .str.starts_with(KINETO_BUILTIN_PREFIX))["frame_id"]
    return np.sort(data.stacks.filter(pl.col("frame_id").is_in(builtin.implode()))["stack_id"]
                   .to_numpy().astype(np.int64))


def speed_stacks(data: CaptureData) -> np.ndarray:
    """The stack nodes (``stack_id``, sorted) whose frame is the op that says how fast the
    trace's host dispatched (:data:`~zym.analysis.replay.KINETO_SPEED_OP`)."""
    from .replay import KINETO_SPEED_OP

    if "name" not in data.frames.columns or not data.stacks.height:
        return np.zeros(0, np.int64)
    op = data.frames.filter(pl.col("name").cast(pl.String) == KINETO_SPEED_OP)["frame_id"]
    return np.sort(data.stacks.filter(pl.col("frame_id").is_in(op.implode()))["stack_id"]
                   .to_numpy().astype(np.int64))


def slowdown(durations: np.ndarray) -> float:
    """How much slower than the reference host a trace's ops dispatched, from the spans of its
    :data:`~zym.analysis.replay.KINETO_SPEED_OP` ops (``durations``, ns): their median over
    :data:`~zym.analysis.replay.KINETO_SPEED_REF_NS`, at least 1; 1 with fewer than
    :data:`~zym.analysis.replay.KINETO_SPEED_MIN_SPANS` of them."""
    from .replay import KINETO_SPEED_MIN_SPANS, KINETO_SPEED_REF_NS

    if len(durations) < KINETO_SPEED_MIN_SPANS:
        return 1.0
    return max(float(np.median(durations)) / KINETO_SPEED_REF_NS, 1.0)


def _in_sorted(ids: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Whether each of ``ids`` is one of ``sorted_ids``."""
    if not len(sorted_ids):
        return np.zeros(len(ids), bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return sorted_ids[at] == ids


def _span_cost(part: pl.DataFrame, builtin: np.ndarray, slow: float = 1.0) -> np.ndarray:
    """Per span of ``part``: what torch.profiler's recording of it cost
    (:data:`~zym.analysis.replay.KINETO_NS_PER_EVENT`): a torch op's (it has an op id; times
    ``slow``, the trace's :func:`slowdown`), a C built-in call's (its stack node is one of
    ``builtin``, sorted), else a Python call's."""
    from .replay import KINETO_NS_PER_EVENT as COST

    cost = np.full(part.height, COST["python_function"], np.int64)
    if len(builtin) and "stack_id" in part.columns:
        cost[_in_sorted(part["stack_id"].fill_null(-1).to_numpy(), builtin)] = \
            COST["python_builtin"]
    if "op_id" in part.columns:
        cost[part["op_id"].is_not_null().to_numpy()] = round(COST["cpu_op"] * slow)
    return cost


def _events_since_window_start(analysis: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Each thread's first call in the window (``Facts.calls`` positions), and what the
    profiler's events on its thread from the window's start up to it cost (as
    :func:`recorded_events_ns` counts them). One query of the spans in that stretch (a
    capture's row groups outside it are skipped), their costs summed per thread."""
    from .facts import thread_key
    from .replay import thread_ids

    calls = analysis.facts.calls
    keys, at = np.unique(thread_ids(calls), return_index=True)  # (calls in time order)
    until = calls["ts_ns"].to_numpy()[at]
    spans = analysis.whole.data.span_table  # the whole capture's: not cut to the window
    kinds = [c for c in ("op_id", "stack_id") if c in spans.columns]
    bounds = pl.LazyFrame({"_thread": keys, "_until": until})
    got = spans.collect(
        spans.lazy().filter((pl.col("ts_ns") >= analysis.window[0])
                            & (pl.col("ts_ns") <= int(until.max())))
        .select(thread_key().fill_null(np.iinfo(np.int64).min), "ts_ns", *kinds)
        .join(bounds, on="_thread").filter(pl.col("ts_ns") <= pl.col("_until")))
    ns = np.zeros(len(keys), np.int64)
    if got.height:
        thread = np.searchsorted(keys, got["_thread"].to_numpy())
        ns += np.bincount(thread, _span_cost(got, builtin_stacks(analysis.whole.data),
                                             analysis.recording_slowdown),
                          len(keys)).astype(np.int64)
    return at, ns


def counts_events(meta) -> bool:
    """Whether the capture's own CPU cost comes from its recorded events (torch.profiler's,
    which states none): :func:`recorded_events_ns` is then read."""
    return (not capture_cost(meta).get("total_ns_per_call")
            and "kineto" in (meta.producer or "").lower())


def recorded_events_ns(data: CaptureData, whole: Facts, also: UserFrameSpans | None = None
                       ) -> tuple[np.ndarray | None, float]:
    """Per call of the whole capture (``whole.calls`` order), what torch.profiler's recording
    of the events that start on its thread in the gap before it (after the thread's previous
    call started) cost: each span a ``cpu_op``'s (an op: it has an op id), a C built-in
    call's or a Python call's (:func:`_span_cost`), an op's times how much slower than the
    reference host the trace's ops dispatched (:func:`slowdown`, from the same pass; returned
    with it). None (and 1) without spans. The spans are read once, a part at a time, and
    checked in the same pass where they were not yet
    (:meth:`~zym.analysis.load.SpanTable.each_part`); ``also`` is given each part too."""
    spans = data.span_table
    if spans is None or spans.height == 0:
        return None, 1.0
    from concurrent.futures import ThreadPoolExecutor

    from .replay import KINETO_NS_PER_EVENT as COST

    counter = GapCounter(whole.calls, kinds=2)  # the ops, and the Python calls' costs
    builtin = builtin_stacks(data)
    speed = speed_stacks(data)
    timed: list[np.ndarray] = []  # the speed op's spans' durations, a part at a time

    def count(part: pl.DataFrame) -> None:
        cost = _span_cost(part, builtin)
        op = (part["op_id"].is_not_null().to_numpy() if "op_id" in part.columns
              else np.zeros(part.height, bool))
        counter.add(part, np.column_stack((op, np.where(op, 0, cost))))
        if len(speed) and "dur_ns" in part.columns:
            mine = _in_sorted(part["stack_id"].fill_null(-1).to_numpy(), speed)
            timed.append(part["dur_ns"].to_numpy()[mine])
        if also is not None:
            also.add(part)

    # each part counted on a thread while the next is read and checked (the search releases
    # the interpreter; the reading keeps ~1.3 of 2 cores busy): ~0.35 s less at the bundled
    # trace x200; one part in flight at a time
    with ThreadPoolExecutor(1, thread_name_prefix="zym-spans") as pool:
        counted = None
        wanted = {"pid", "tid", "ts_ns", "op_id", "stack_id", "dur_ns",
                  *(also.COLUMNS if also is not None else ())}
        for part in spans.each_part([c for c in spans.columns if c in wanted]):
            if counted is not None:
                counted.result()
            counted = pool.submit(count, part)
        if counted is not None:
            counted.result()
    slow = slowdown(np.concatenate(timed) if timed else np.zeros(0, np.int64))
    ops, other = counter.total.T
    return ops * round(COST["cpu_op"] * slow) + other, slow


def restrict(data: CaptureData, whole: Facts, t0: int, t1: int) -> CaptureData:
    """The capture's rows of the window ``[t0, t1)``: calls that start in it, the GPU work they
    launched (or, with no captured launch, that starts in it), spans that overlap it."""
    calls = whole.calls
    keep_calls = calls.filter((pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1))["_orig"]
    in_window = pl.Series([False] * calls.height).scatter(
        calls.filter((pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1))["call_idx"], True) \
        if calls.height else pl.Series([], dtype=pl.Boolean)
    g = whole.gpu
    launched_in = in_window.gather(g["call_idx"]) if calls.height else pl.Series(
        [None] * g.height, dtype=pl.Boolean)
    keep_gpu = g.filter(pl.coalesce(launched_in, (pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1))
                        .fill_null(False))["gpu_idx"]
    spans = data.span_table
    return CaptureData(data.source, data.meta, data.frames, data.stacks,
                       data.calls[keep_calls.sort()], data.gpu[keep_gpu.sort()],
                       spans.within(t0, t1) if spans is not None else None)


def analyze(path: str | Path, progress: Progress | None = None, window: str = "steady",
            budget: int | None = None, budget_given: bool = True) -> Analysis:
    """Load a capture (or Kineto trace), find its phases, and analyze ``window`` of it
    (``steady``: steady state; ``all``; ``FROM:TO``; ``steps:A:B``: see
    :func:`zym.analysis.phases.parse_window`). ``budget``: bytes the analysis may hold; a
    capture that would take more is sampled to fit (:mod:`zym.analysis.budget`); None: no
    budget. ``budget_given``: see :func:`zym.analysis.load.load_capture`."""
    data = api_codes(load_capture(path, progress, codes=True, skip=UNREAD, budget=budget,
                                  budget_given=budget_given))
    check_window(data, window)
    if progress:
        progress("attributing GPU work to call paths")
    analysis = analyze_data(data, window)
    release_freed_memory(data.calls.height + data.gpu.height)  # before the rules' peak
    return analysis


def check_window(data: CaptureData, window: str) -> None:
    """A one-line error where ``window`` names times or steps of a capture that ``data``
    holds a sample of (:mod:`zym.analysis.budget`): they are not the sample's."""
    if data.sample is not None and window not in ("steady", "all"):
        raise InputError(f"--window {window}: its times and steps are the capture's, which "
                         "is analysed on a sample of its time (its analysis would not fit the "
                         "memory budget): give a larger --memory-budget")


def analyze_data(data: CaptureData, window: str = "steady") -> Analysis:
    """:func:`analyze` on tables already in memory."""
    nodes = stack_nodes(data.frames, data.stacks)
    whole = Facts(data, nodes)
    # every span checked, a part at a time, before any query reads them: in the pass that
    # counts the profiler's events where they are counted, else in one of its own; either
    # pass also keeps the spans of the calls' user frames
    spans = data.span_table
    user_spans = None
    if spans is not None and spans.height:
        user_spans = UserFrameSpans(whole.site_of(whole.calls["stack_id"], ("user_node",))[0]
                                    .drop_nulls().unique().cast(pl.Int64))
    counted = counts_events(data.meta)
    recorded, slow = (recorded_events_ns(data, whole, user_spans) if counted
                      else (None, 1.0))
    if user_spans is not None and not counted:
        for part in spans.each_part(UserFrameSpans.COLUMNS):
            user_spans.add(part)
    if spans is not None:
        spans.check()
    cut = cut_short(data.meta)
    phases = find_phases(whole.calls, whole.gpu, nodes, data.span_table, whole.window,
                         cut.get("complete_until_ns") if cut else None)
    t0, t1 = parse_window(window, phases)
    if (t0, t1) == whole.window or (t0 <= whole.window[0] and t1 >= whole.window[1]):
        facts, part = whole, data
    else:
        part = restrict(data, whole, t0, t1)
        facts = Facts(part, nodes, window=(t0, t1))
        facts.__dict__["sites"] = whole.sites  # same stacks: the site table is shared,
        facts.__dict__["_site_rows"] = whole._site_rows  # with its lookup
        facts.__dict__["_site_padded"] = whole._site_padded
        facts.__dict__["kernel_table"] = whole.kernel_table  # and the kernel classes
    return Analysis(part, facts, build_call_paths(facts), phases, whole, window,
                    recorded_ns=recorded, recording_slowdown=slow,
                    user_spans=user_spans.frame() if user_spans is not None else None)
