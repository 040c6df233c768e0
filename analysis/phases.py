"""Steps and phases: where a capture repeats itself, and what is one-time work around that.

A service or a generation loop repeats a *step* (a request, a batch, a decoding step): one call
of a user function. :func:`find_steps` finds the outermost such function and its calls from
the call stacks:

* Kineto traces record a span for every Python call: a step is a span of the step function;
* ``zym capture`` records stacks at CUDA calls only, with the **executing line** of every
  frame: within one call of a function the line moves forward, and a new call starts where
  the line goes back to the first line of the function that issues CUDA work.

The step function is the user function present in the stacks of most calls of the main thread
(the one that launches most GPU work) that is called at least ``MIN_STEPS`` times (or twice,
where the function so found takes less than half of such a function's time: a trace of two
requests that run the model a few times each among work of their own). Where the
stacks name none (a trace without Python stacks), the ``ProfilerStep#N`` ranges of a trace
recorded with torch.profiler's ``schedule`` (one per ``prof.step()``) are the steps. The steps
then split the capture into phases:

* **startup**: before the first step (model loading, compilation outside the loop);
* **warm-up**: the leading steps markedly slower than the later steps' pace (first-time
  compilation, autotuning, allocator growth, cuDNN plans), when such slow steps gather at the
  start rather than recur all along;
* **steady state**: the remaining steps, what findings are ranked on (:func:`choose_window`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from .load import SpanTable
from .statements import statement_lines
from .trie import NONE, Trie, take_rows, values_at

MIN_STEPS = 3
# A function called twice (a trace of two requests) on the stacks of as many calls as the
# step function found (called MIN_STEPS times or more: the model, once per window of an
# image) is the step where the found one's calls take less than this share of its time: the
# requests' own work around the model is then most of what they do.
MIN_OUTER_STEPS = 2
MIN_INNER_SHARE = 0.5
PROFILER_STEP = r"^ProfilerStep#\d+$"  # the range torch.profiler's prof.step() opens
MIN_COVERAGE = 0.5  # a step function is on the stack of at least this share of main-thread calls
WARMUP_FACTOR = 1.25  # a leading step this much slower than the median is warm-up
# Frames of compilers at work (not of compiled code running): their calls are compilation.
COMPILE_FRAMES = re.compile(
    r"torch/_dynamo/(?:convert_frame|symbolic_convert|output_graph)\.py"
    r"|torch/_inductor/(?:compile_fx|graph|codecache|select_algorithm|autotune_process"
    r"|async_compile)\.py|torch/_inductor/runtime/(?:triton_heuristics|benchmarking)\.py"
    r"|triton/compiler/|triton/testing\.py")
# Functions in those files that run compiled code on every call (CUDA-graph replay, the Triton
# launcher): steady-state work, not compilation. Matched on "file:name". Kineto names a
# function by its bare name (``run``: compile_fx's cudagraphify.<locals>.run, triton_heuristics'
# CachingAutotuner.run), zym's captures by its qualified name; a ``run`` elsewhere (Dynamo's
# InstructionTranslatorBase.run traces bytecode) is compilation. The compile work below them
# (autotuning's benchmarks) has frames of its own.
RUNTIME_FUNCTIONS = re.compile(
    r"(?:torch/_inductor/(?:compile_fx|(?:runtime/)?triton_heuristics)\.py:(?:.*\.)?run"
    r"|launcher)$")


@dataclass
class Steps:
    """The calls of the step function: ``start_ns``/``end_ns`` per step (a step ends where the
    next begins; the last where its last call ends)."""

    function: str  # "file function", as users read it
    file: str
    name: str
    start_ns: np.ndarray
    end_ns: np.ndarray
    source: str  # "spans" (Kineto), "lines" (executing lines of eBPF stacks) or
    # "profiler steps" (Kineto's ProfilerStep#N ranges, where no step function is found)
    thread: int  # _thread key of the main thread
    # where each step's function returned (its span's end: steps from spans); None where the
    # capture does not say (a step then ends where the next begins)
    returns_ns: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.start_ns)

    def durations(self) -> np.ndarray:
        return self.end_ns - self.start_ns


@dataclass
class Phases:
    """How the capture divides: the whole window, the steps, and the parts outside steady
    state (all times in the capture's clock)."""

    window: tuple[int, int]
    steps: Steps | None = None
    warmup_steps: int = 0
    steady: tuple[int, int] | None = None
    compile_ns: int = 0  # CPU time between the first and last compiler call (startup/warm-up)
    compile_calls: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def startup(self) -> tuple[int, int] | None:
        if self.steps is None or not self.steps.count:
            return None
        return (self.window[0], int(self.steps.start_ns[0]))

    @property
    def warmup(self) -> tuple[int, int] | None:
        if self.steps is None or not self.warmup_steps:
            return None
        return (int(self.steps.start_ns[0]), int(self.steps.start_ns[self.warmup_steps]))

    def steady_steps(self) -> int:
        return 0 if self.steps is None else self.steps.count - self.warmup_steps


def _frame_mask(nodes: pl.DataFrame, file: str, name: str) -> np.ndarray:
    """The user frames of ``file``'s function ``name``."""
    return nodes.select(pl.col("is_user") & (pl.col("file") == file) & (pl.col("name") == name))\
        .to_series().fill_null(False).to_numpy()


def step_threads(calls: pl.DataFrame, nodes: pl.DataFrame, steps: Steps) -> np.ndarray:
    """The threads (``_thread`` keys) that run the step function: its thread, and any other
    with a call under it (the workers of a pool that each run it). Without a step function
    (torch.profiler's own steps), the steps' thread alone."""
    if steps.source == "profiler steps":
        return np.array([steps.thread], np.int64)
    trie = Trie.of(nodes)
    under = pl.Series(trie.ids[trie.under(_frame_mask(nodes, steps.file, steps.name))],
                      dtype=pl.Int64)
    hit = calls.filter(pl.col("stack_id").is_in(under.implode()))
    return np.union1d(hit["_thread"].unique().to_numpy(), [steps.thread]).astype(np.int64)


def under_step(nodes: pl.DataFrame, steps: Steps, trie: Trie) -> tuple[np.ndarray, pl.Series]:
    """Per stack node (row of ``nodes``, ``trie`` built on them), where under the step function
    it is: its outermost user frame (ancestor-or-self) below the outermost step frame, where it
    has one (the user's function the step led to, past library wrappers such as a
    ``torch.no_grad`` decorator); else its ancestor-or-self that the step function called (a
    library function, a module, a built-in or an op it ran itself); NONE outside the step
    function or at it. And each row's label (``file:line function`` for a frame with a file,
    its name else)."""
    from .sites import short_paths

    outer = trie.outermost(_frame_mask(nodes, steps.file, steps.name))
    parent = trie.parent
    # a child of the outermost step frame: its parent is that frame itself
    child = (parent != NONE) & (outer[np.maximum(parent, 0)] == parent)
    below = trie.under(child)
    user = trie.outermost(below & nodes["is_user"].fill_null(False).to_numpy())
    short = short_paths(nodes["file"])
    file = nodes["file"].replace_strict(short, default=None, return_dtype=pl.String)
    name = pl.when((pl.col("name") == "forward") & pl.col("module").is_not_null()).then(
        pl.col("module") + ".forward").otherwise(pl.col("name"))   # as site labels show it
    labels = (pl.DataFrame({"file": file, "line": nodes["line"], "name": nodes["name"],
                            "module": nodes["module"]})
              .select(pl.when(pl.col("file").is_not_null() & pl.col("line").is_not_null())
                      .then(pl.format("{}:{} {}", "file", "line", name))
                      .otherwise(pl.col("name")).alias("label"))["label"])
    return np.where(user != NONE, user, trie.outermost(child)), labels


def _coverage(trie: Trie, nodes: pl.DataFrame, per_stack: pl.DataFrame) -> pl.DataFrame:
    """Per user function (``file``, ``name``) on the stacks of ``per_stack`` (``stack_id``,
    ``len``: calls): the calls whose stack has it (``n``, each stack counted once however
    often the function recurs on it) and how far inside the stacks it is called (``depth``:
    the most user frames above it on one of them)."""
    user = nodes["is_user"].fill_null(False).to_numpy()
    inside = trie.count_above(user)     # user frames above each node
    rows = trie.rows_of(per_stack["stack_id"].cast(pl.Int64).to_numpy())
    which = np.arange(len(rows))
    stack_of, frame_of = [], []
    while len(rows):                    # every node above each stack, one level a round
        keep = rows != NONE
        rows, which = rows[keep], which[keep]
        hit = user[rows]
        stack_of.append(which[hit])
        frame_of.append(rows[hit])
        rows = trie.parent[rows]
    stack_of = np.concatenate(stack_of) if stack_of else np.zeros(0, np.int64)
    frame_of = np.concatenate(frame_of) if frame_of else np.zeros(0, np.int64)
    pairs = pl.DataFrame({
        "stack": stack_of, "n": per_stack["len"].cast(pl.Int64).to_numpy()[stack_of],
        "depth": inside[frame_of],
        "file": nodes["file"].cast(pl.String).gather(frame_of),
        "name": nodes["name"].cast(pl.String).gather(frame_of)})
    return pairs.group_by("file", "name").agg(
        pl.col("n").filter(pl.struct("stack", "file", "name").is_first_distinct()).sum(),
        pl.col("depth").max())


def main_thread(calls: pl.DataFrame, gpu: pl.DataFrame) -> int | None:
    """The thread that launched the most GPU time (else made the most calls)."""
    if calls.height == 0:
        return None
    work = gpu.filter(pl.col("work") & pl.col("call_idx").is_not_null())
    launched = (pl.DataFrame({"_thread": calls["_thread"].gather(work["call_idx"]),
                              "dur_ns": work["dur_ns"]})
                .group_by("_thread").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True))
    if launched.height:
        return int(launched["_thread"][0])
    return int(calls.group_by("_thread").len().sort("len", descending=True)["_thread"][0])


def find_steps(calls: pl.DataFrame, gpu: pl.DataFrame, nodes: pl.DataFrame,
               spans: SpanTable | None) -> Steps | None:
    """The repeated step of the capture, or None (see the module doc)."""
    thread = main_thread(calls, gpu)
    if thread is None:
        return None
    mine = calls.filter((pl.col("_thread") == thread) & pl.col("stack_id").is_not_null())
    if mine.height < MIN_STEPS:
        return None
    trie = Trie.of(nodes)
    # Functions on the stacks of main-thread calls, counted once per distinct stack.
    covered = _coverage(trie, nodes, mine.group_by("stack_id").len()).filter(
        pl.col("n") >= MIN_COVERAGE * mine.height)
    depth = {(f, fn): d for f, fn, d in covered.select("file", "name", "depth").iter_rows()}
    # the widest coverage first; among equals (main and <module> on every stack) the innermost,
    # then by name: never the order of a set of strings, which varies from run to run
    ranked = sorted(((n, (f, fn)) for f, fn, n in covered.select("file", "name", "n").iter_rows()),
                    key=lambda x: (-x[0], -depth[x[1]], x[1]))
    have_spans = spans is not None and spans.height > 0
    for n, (file, name) in ranked:
        returns = None
        if have_spans:
            ids = nodes.filter((pl.col("file") == file) & (pl.col("name") == name))["stack_id"]
            starts, ends, returns = _span_steps(spans, ids, mine)
            source = "spans"
        else:
            starts, ends = _line_steps(mine, trie, nodes, file, name)
            source = "lines"
        if len(starts) >= MIN_STEPS:
            if have_spans:
                outer = _outer_step(spans, nodes, mine, ranked, n, (file, name), starts, returns)
                if outer is not None:
                    file, name, starts, ends, returns = outer
            from .sites import short_paths

            shown = short_paths(nodes.filter(pl.col("is_user"))["file"]).get(file, file)
            return Steps(function=f"{shown} {name}", file=file, name=name, start_ns=starts,
                         end_ns=ends, source=source, thread=thread, returns_ns=returns)
    return _profiler_steps(spans, nodes, mine, thread) if have_spans else None


def _outer_step(spans: SpanTable, nodes: pl.DataFrame, mine: pl.DataFrame,
                ranked: list[tuple[int, tuple[str, str]]], n: int, chosen: tuple[str, str],
                starts: np.ndarray, returns: np.ndarray
                ) -> tuple[str, str, np.ndarray, np.ndarray, np.ndarray] | None:
    """A function on the stacks of as many calls as the step function ``chosen`` (``n``),
    called :data:`MIN_OUTER_STEPS` times but fewer than :data:`MIN_STEPS`, whose calls the
    chosen one's (``starts`` to ``returns``) take less than :data:`MIN_INNER_SHARE` of: the
    requests of a trace of two, each running the model a few times among its own work
    (``(file, name, starts, ends, returns)``); None where there is none."""
    for m, (file, name) in ranked:
        if m < n or (file, name) == chosen:
            continue
        ids = nodes.filter((pl.col("file") == file) & (pl.col("name") == name))["stack_id"]
        o_starts, o_ends, o_returns = _span_steps(spans, ids, mine)
        if not MIN_OUTER_STEPS <= len(o_starts) < MIN_STEPS:
            continue
        whole = float((o_returns - o_starts).sum())
        if whole > 0 and float((returns - starts).sum()) < MIN_INNER_SHARE * whole:
            return file, name, o_starts, o_ends, o_returns
    return None


def _profiler_steps(spans: SpanTable, nodes: pl.DataFrame, mine: pl.DataFrame, thread: int
                    ) -> Steps | None:
    """torch.profiler's own steps: the ``ProfilerStep#N`` ranges ``prof.step()`` opens on the
    main thread (a trace recorded with a ``schedule``), where the stacks name no step function
    (a trace without Python stacks, or a step function called fewer than ``MIN_STEPS``
    times)."""
    ids = nodes.filter((pl.col("kind") == "torch_op")
                       & pl.col("name").str.contains(PROFILER_STEP))["stack_id"]
    if ids.len() == 0:
        return None
    starts, ends, _ = _span_steps(spans, ids, mine)
    if len(starts) < MIN_STEPS:
        return None
    return Steps(function="ProfilerStep#N", file="", name="ProfilerStep#N", start_ns=starts,
                 end_ns=ends, source="profiler steps", thread=thread)


def _line_steps(mine: pl.DataFrame, trie: Trie, nodes: pl.DataFrame, file: str, name: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """Calls of ``file:name`` from executing lines: a new call starts where the function's
    line goes back to its first CUDA-issuing line, or after calls outside it. The line of a
    call is that of the function's outermost frame on its stack (a recursive call is part of
    its caller's), taken as its statement's first (:func:`statement_starts`: a call written
    over several lines, ``self.net(ids.to(dev),\n keep.to(dev))``, runs its arguments' CUDA
    calls at their lines and then its own at the first: not a new call of the function)."""
    outer = trie.outermost(_frame_mask(nodes, file, name))
    rows = trie.rows_of(mine["stack_id"].cast(pl.Int64).to_numpy())
    lines = values_at(nodes["line"].cast(pl.Int64), take_rows(outer, rows))
    has = lines.is_not_null().to_numpy()
    ln = lines.fill_null(-1).to_numpy()
    if not has.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if "source" in nodes.columns:   # a statement over several lines is its first line's
        at = take_rows(outer, rows)
        ln = np.where(has, statement_lines(nodes, at, has), -1)
    first_line = int(ln[has].min())
    prev_has = np.concatenate([[False], has[:-1]])
    prev_ln = np.concatenate([[-1], ln[:-1]])
    new = has & (~prev_has | ((ln == first_line) & (prev_ln != first_line)))
    ts = mine["ts_ns"].to_numpy()
    end = (mine["ts_ns"] + mine["dur_ns"]).to_numpy()
    inv = np.cumsum(new) - 1
    starts = ts[new]
    last_end = np.full(len(starts), -1, np.int64)
    np.maximum.at(last_end, inv[has], end[has])
    ends = np.append(starts[1:], last_end[-1]) if len(starts) else starts
    return starts.astype(np.int64), np.maximum(ends, starts).astype(np.int64)


def _span_steps(spans: SpanTable, ids: pl.Series, mine: pl.DataFrame
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The spans of the stack nodes ``ids`` (a step function's frames, or ProfilerStep ops) on
    the main thread, outermost only (a recursive call is part of its caller's step): each
    step's start, its end (the next one's start; the last: its span's end) and where its
    span ended (the function returned)."""
    pid, tid = mine["pid"][0], mine["tid"][0]
    sp = spans.collect(spans.lazy().filter(pl.col("stack_id").is_in(ids.implode())
                                           & (pl.col("pid") == pid) & (pl.col("tid") == tid))
                       .select("ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
                       ).sort("ts_ns")
    if sp.height == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if sp["ts_ns"].null_count() == 0 and sp["end"].null_count() == 0:  # one numpy pass
        ts, end = sp["ts_ns"].to_numpy(), sp["end"].to_numpy()
        reach = np.concatenate([[-(1 << 62)], np.maximum.accumulate(end)[:-1]])
        starts, returns = ts[ts >= reach], end[ts >= reach]
        return (starts.astype(np.int64), np.append(starts[1:], returns[-1]).astype(np.int64),
                returns.astype(np.int64))
    outer = sp["ts_ns"] >= sp["end"].cum_max().shift(1).fill_null(-(1 << 62))
    sp = sp.filter(outer)
    starts = sp["ts_ns"].to_numpy()
    ends = np.append(starts[1:], sp["end"][-1]) if sp.height else starts
    returns = (sp.select(pl.col("end").fill_null(pl.col("ts_ns")))["end"].to_numpy()
               if sp.height else starts)
    return starts.astype(np.int64), ends.astype(np.int64), returns.astype(np.int64)


def warmup_steps(steps: Steps) -> int:
    """How many leading steps are warm-up: where the first step is slower than
    ``WARMUP_FACTOR`` x the median of the second half (the steady pace), in the first half up
    to the last step so slow, when such slow steps gather at the start: at least twice as
    common in the first half as in the second, or their time beyond the pace at least twice
    as large there (one first request 50x slower than the rest, planning cuDNN's kernels, is
    warm-up even if a later step is a little slow); steps that are slow now and then all
    along (a new shape every few requests), or a slow step after a first one at the pace (a
    trace of a service already warm), are steady state."""
    d = steps.durations()
    if len(d) < MIN_STEPS:
        return 0
    half = len(d) // 2
    pace = float(np.median(d[half:]))
    slow = d > WARMUP_FACTOR * pace
    # first-time work (a first request's cuDNN plans, allocations, lazy loading) slows the
    # first step: where it is as fast as the pace, a slow step after it is not warm-up
    if not half or not slow[0]:
        return 0
    excess = np.where(slow, d - pace, 0.0)
    gathers = (slow[:half].mean() > 2 * slow[half:].mean()
               or excess[:half].sum() / half > 2 * excess[half:].sum() / (len(d) - half))
    return int(np.nonzero(slow[:half])[0].max()) + 1 if gathers else 0


def compile_activity(calls: pl.DataFrame, nodes: pl.DataFrame) -> tuple[int, int, int]:
    """Calls made by compilers (torch.compile, Inductor autotuning, Triton): ``(calls,
    first_ts, last_end)``; ``(0, 0, 0)`` when there are none."""
    where = pl.concat_str([pl.col("file"), pl.lit(":"), pl.col("name")])
    frames = nodes.filter(pl.col("file").str.contains(COMPILE_FRAMES.pattern).fill_null(False)
                          & ~where.str.contains(RUNTIME_FUNCTIONS.pattern).fill_null(False))
    if frames.height == 0:
        return 0, 0, 0
    under = _descendants(nodes, frames["stack_id"])
    hit = calls.filter(pl.col("stack_id").is_in(under.implode()))
    if hit.height == 0:
        return 0, 0, 0
    return hit.height, int(hit["ts_ns"].min()), int((hit["ts_ns"] + hit["dur_ns"]).max())


def _descendants(nodes: pl.DataFrame, roots: pl.Series) -> pl.Series:
    """Stack nodes at or below any of ``roots``."""
    trie = Trie.of(nodes)
    inside = trie.under(np.isin(trie.ids, roots.cast(pl.Int64).to_numpy()))
    return pl.Series("stack_id", np.sort(trie.ids[inside]), dtype=pl.Int64)


def find_phases(calls: pl.DataFrame, gpu: pl.DataFrame, nodes: pl.DataFrame,
                spans: SpanTable | pl.DataFrame | None, window: tuple[int, int],
                whole_until: int | None = None) -> Phases:
    """Steps, warm-up, startup and the steady-state window of a capture. ``whole_until``: a
    trace cut short is whole up to there (:func:`zym.analysis.load.cut_short`): a step that
    ends after it is not a step (what ran in it after the cut is missing)."""
    if isinstance(spans, pl.DataFrame):
        spans = SpanTable(held=spans)
    steps = find_steps(calls, gpu, nodes, spans)
    if steps is not None and whole_until is not None:
        whole = steps.end_ns <= whole_until
        steps = (replace(steps, start_ns=steps.start_ns[whole], end_ns=steps.end_ns[whole],
                         returns_ns=(steps.returns_ns[whole] if steps.returns_ns is not None
                                     else None))
                 if whole.any() else None)
    phases = Phases(window=window, steps=steps)
    n, first, last = compile_activity(calls, nodes)
    if n:
        phases.compile_calls, phases.compile_ns = n, last - first
    if steps is None:
        phases.steady = window
        if calls.height == 0 and gpu.height == 0:  # e.g. a CPU-only torch.profiler trace
            ops = spans.height if spans is not None else 0
            phases.notes.append(f"no CUDA call and no GPU work recorded ({ops:,} CPU spans): "
                                "nothing for zym to rank; its capture span is that of CUDA "
                                "calls and GPU work")
            return phases
        phases.notes.append("no repeated step found: the whole capture is analyzed "
                            "(--window FROM:TO picks a part)")
        return phases
    phases.warmup_steps = warmup_steps(steps)
    if n:  # a step that compiled is warm-up, whatever its length
        while (phases.warmup_steps < steps.count - 1
               and steps.start_ns[phases.warmup_steps] < last):
            phases.warmup_steps += 1
    phases.steady = (int(steps.start_ns[phases.warmup_steps]), int(steps.end_ns[-1]))
    return phases


def parse_window(spec: str, phases: Phases) -> tuple[int, int]:
    """``--window``: ``steady`` (default), ``all``, ``FROM:TO`` in seconds from the capture's
    start (units ``s``, ``ms``, ``us``; either end may be empty), or ``steps:A:B`` (steps A to
    B-1, 0-based; the steps :func:`find_steps` found)."""
    from zym.schemas.errors import InputError

    lo, hi = phases.window
    spec = spec.strip()
    if spec in ("", "steady"):
        return phases.steady or phases.window
    if spec == "all":
        return phases.window
    if spec.startswith("steps:"):
        if phases.steps is None:
            raise InputError(f"--window {spec}: this capture has no repeated steps")
        a, _, b = spec[len("steps:"):].partition(":")
        n = phases.steps.count
        try:
            i = int(a) if a else 0
            j = int(b) if b else n
        except ValueError:
            raise InputError(f"--window {spec}: steps:A:B takes step numbers") from None
        if not (0 <= i < j <= n):
            raise InputError(f"--window {spec}: steps run from 0 to {n}")
        return int(phases.steps.start_ns[i]), int(phases.steps.end_ns[j - 1])
    a, sep, b = spec.partition(":")
    if not sep:
        raise InputError(f"--window {spec}: use steady, all, FROM:TO (e.g. 1.5s:3s) or "
                         "steps:A:B")
    t0 = lo + _duration(a, spec) if a else lo
    t1 = min(lo + _duration(b, spec) if b else hi, hi)
    if t1 <= t0:
        raise InputError(f"--window {spec}: the window is empty (the capture lasts "
                         f"{(hi - lo) / 1e9:.3f} s)")
    return t0, t1


def _duration(text: str, spec: str) -> int:
    from zym.schemas.errors import InputError

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|ms|us|µs|ns)?\s*", text)
    if not m:
        raise InputError(f"--window {spec}: {text!r} is not a time (e.g. 2.5s, 300ms)")
    scale = {"s": 1e9, "ms": 1e6, "us": 1e3, "µs": 1e3, "ns": 1, None: 1e9}[m.group(2)]
    return int(float(m.group(1)) * scale)
