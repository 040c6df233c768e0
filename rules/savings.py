"""What fixing a finding would save: each rule names a fix model (``saving:`` in its YAML), the
model turns the finding's events into an edit of the capture's timeline
(:class:`zym.analysis.replay.Fix`), and the replay says how much sooner the window ends.

Every model takes ``only: WHERE``: the fix edits only the finding's events that match it (an
attention's softmax and scaling go, its matmuls stay).

Models (``saving: {model: NAME, ...}``):

* ``batch``: one call per enclosing call (or step) instead of many: in each instance the
  ``keep: first`` (default) or ``last`` blocking call of the finding stays, with the
  non-blocking calls that lead to it; the finding's other calls go (their CPU cost, their wait,
  their GPU copies, the CPU work right before each, except before a call that opens its
  instance: that time is the caller's). The kept call still waits for the GPU: what it waited
  for is not saved. ``alone: unblock``: where every instance has one blocking call
  (nothing to batch), those calls stop waiting, as ``unblock`` (the fix reads the value a
  step later, after the next step's work is queued).
* ``remove``: the finding's calls go entirely, with the CPU work before each (``work: keep``:
  that work stays, for calls made inside other work, e.g. an allocation inside an op).
* ``unblock``: the finding's blocking calls stop waiting (for gaps: the call the CPU was
  blocked in); their own CPU cost stays.
* ``pin``: copies through pageable memory become pinned, non-blocking copies: the call costs
  what a pinned async copy costs in this capture, the GPU copy runs at the host link's
  bandwidth, and host-to-device copies stop blocking (device-to-host copies still wait: the
  host needs the data).
* ``async``: synchronous copies/memsets become their async forms (cost of an async call, no
  wait).
* ``speedup``: the finding's kernels run in another precision (``to: tf32|fp16|bf16``:
  :mod:`zym.analysis.throughput`), or ``factor: MEASURE`` times faster.
* ``shorten-gaps``: the CPU work before each launch that ended a GPU idle gap shrinks to the
  median CPU time before calls of the same site.
* ``cpu-work``: the CPU work of each of the finding's stretches without a CUDA call (a step's
  longest, on the steps relation) leaves the step (an upper bound: the work done on the GPU, or
  ahead of time in another process): the CPU time before the call that ended the stretch
  shrinks by it.
* ``cuda-graph``: the finding's steps run their launches as CUDA graphs: each run of
  consecutive launches costs one graph launch on the CPU, and each kernel ``GRAPH_NODE_NS``
  more on the GPU. The steps that repeat another's kernels and grids; where none does, the
  runs that repeat another run's (a graph captured once for each set of shapes).
* ``autograd-off``: the finding's steps run without autograd (``torch.inference_mode()``):
  the CPU time before each call shrinks by what recording the torch ops autograd recorded in
  it costs (:data:`zym.analysis.training.AUTOGRAD_NS_PER_OP` each, measured).
* ``eval-mode``: the finding's steps run their modules in eval mode: the training-mode
  kernels eval mode does without (dropout's, batch norm's statistics and counter) go, with
  their launches and the CPU time their ops spent before each launch.
* ``items``: the finding's steps call their item function (the items relation's
  ``item_function``: :meth:`zym.analysis.relations.Relations.item_calls`) once on all the
  items: each step's first call of it from each place that calls it once per item stays; in
  the others, every CUDA call loses its own CPU
  time and the CPU work before it inside the function (with spans, the work before the call
  entered the function stays: the loop's own), and their waits go; their GPU operations run
  back to back (no queue gap between them), each kernel for its share of the batch's work: a
  GEMM at the rate measured for the batch's size, another kernel for the share of the GPU its
  thread blocks fill (:func:`_batched_kernels`).
* ``fused-attention``: each of the finding's attentions written out by hand (the attention
  relation) runs as one fused kernel: its softmax, scaling, element-wise and copy kernels go
  with their calls, their waits and the CPU work that led to each (their ops' dispatch; the
  matmuls' stays), and its two
  matmuls stand for the fused kernel, which takes ``fused_ns`` on the GPU (what such a kernel
  takes over those matmuls, measured by math and size): shortened to it where it is faster;
  where it is slower, the kernels that would go carry the difference, longest first, their
  calls kept.
* ``none``: no estimate (the finding is context, e.g. a utilization summary).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl
from zym.analysis.facts import per_name
from zym.analysis.instances import first_of_each
from zym.analysis.replay import Fix, in_sorted, sorted_unique
from zym.schemas.lookup import first_row_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from zym.analysis import Analysis

MODELS = ("batch", "remove", "unblock", "pin", "async", "speedup", "shorten-gaps", "cpu-work",
          "cuda-graph", "autograd-off", "eval-mode", "items", "fused-attention", "none")
# CPU cost of one async copy call, when the capture has no pinned copy to measure it from;
# and of one graph replay (its cost grows with the graph's kernels) and the GPU time each
# graph node adds, when it has no graph launch. Measured on the H200 by
# bench/whatif/calibrate.py (bench/whatif/results/h200/, docs/benchmarks.md).
ASYNC_COPY_CALL_NS = 6_500
GRAPH_LAUNCH_NS = 7_000  # per replay: 16.5 us for 20 kernels, 86 us for 200, 404 us for 1,000
GRAPH_LAUNCH_NODE_NS = 400  # per kernel node of the replayed graph
GRAPH_NODE_NS = 500  # GPU time between two kernels of a graph (0.15-0.54 us measured)
MIN_GRAPH_RUN = 4  # consecutive launches a CUDA graph would replace


class NoEstimate(Exception):
    """A fix model that cannot estimate this finding; the message says why."""


def fix_for(model: dict, relation: str, rows: pl.DataFrame, analysis: Analysis,
            measures: dict) -> Fix | None:
    """The timeline edit of one finding (``rows``: its events, with the relation's row key),
    or None when its model makes no estimate."""
    name = model.get("model", "none")
    if name != "none" and model.get("only"):  # the fix edits only these of the events
        from .compile import where_expr

        sites = analysis.relations.sites if "stack_id" in rows.columns else None
        rows = rows.filter(where_expr(model["only"], sites))
    if name == "none" or rows.height == 0:
        return None
    calls = _call_rows(relation, rows, analysis)
    if name == "batch":
        fix = _batch(calls, analysis, model.get("keep", "first"), model.get("body") == "once")
        if fix.is_empty() and model.get("alone") == "unblock" and len(calls):
            # every instance has one blocking call already, so there is nothing to batch: the
            # value is read a step later, once the next step's work is queued
            return _unblock(calls, analysis, "one wait per call of the enclosing function "
                            "already: ", " (the value read a step later, after the next "
                            "step's work is queued)")
        return fix
    if name == "remove" and model.get("work") == "keep":
        return Fix(remove_calls=_idx(calls),
                   describe=f"replayed without these {len(calls):,} calls (their own time and "
                            "waits; the CPU work before each stays)")
    if name == "remove":
        return Fix(remove_calls=_idx(calls), gap_calls=_idx(calls),
                   gap_ns=np.zeros(len(calls), np.int64),
                   describe=f"replayed without these {len(calls):,} calls and the CPU work that "
                            "led to each (the Python and framework time before it)")
    if name == "unblock":
        return _unblock(calls, analysis)
    if name == "pin":
        return _pin(calls, analysis)
    if name == "async":
        cost = _async_copy_cost(analysis, None)
        return Fix(unblock_calls=calls, cost_calls=calls, cost_ns=np.full(len(calls), cost),
                   describe=f"replayed with these {len(calls):,} calls async "
                            f"({cost / 1e3:.1f} µs each, not waiting)")
    if name == "speedup":
        return _speedup(model, relation, rows, analysis, measures)
    if name == "shorten-gaps":
        return _shorten_gaps(calls, analysis)
    if name == "cpu-work":
        return _cpu_work(rows, analysis)
    if name == "cuda-graph":
        return _cuda_graph(relation, rows, analysis)
    if name == "autograd-off":
        return _autograd_off(rows, analysis)
    if name == "eval-mode":
        return _eval_mode(rows, analysis)
    if name == "items":
        return _items(rows, analysis)
    if name == "fused-attention":
        return _fused_attention(rows)
    raise ValueError(f"unknown saving model {name!r}")


def _waiting(calls: np.ndarray, analysis: Analysis) -> np.ndarray:
    """The calls of ``calls`` that waited for the GPU."""
    return calls[analysis.timeline.waits[calls]] if len(calls) else calls


def _unblock(calls: np.ndarray, analysis: Analysis, why: str = "", how: str = "") -> Fix:
    """The ``unblock`` model (also ``batch``'s ``alone: unblock``): the calls of ``calls``
    that waited for the GPU replayed not waiting; ``why`` and ``how`` frame its text."""
    waiting = _waiting(calls, analysis)
    return Fix(unblock_calls=waiting, describe=f"{why}replayed with these {len(waiting):,} "
                                               f"calls not waiting for the GPU{how}")


def _idx(s) -> np.ndarray:
    return np.asarray(s, dtype=np.int64)


def _call_rows(relation: str, rows: pl.DataFrame, analysis: Analysis) -> np.ndarray:
    """The ``call_idx`` of each event of a finding (its own call, or the gap's call)."""
    if "call_idx" in rows.columns:
        return sorted_unique(rows["call_idx"].drop_nulls().to_numpy().astype(np.int64))
    return np.zeros(0, np.int64)


def _batch(calls: np.ndarray, analysis: Analysis, keep: str, body: bool = False) -> Fix:
    """One blocking call per instance (see the module doc); ``body``: the loop around the
    calls done once on the batch too (:func:`loop_body`)."""
    if not len(calls):
        return Fix()
    rel = analysis.relations
    by_row = rel.shared("call_instance by call_idx", rel.every_call_instance)
    idx = sorted_unique(calls)
    group = by_row[idx]
    opens = _opens_instance(rel, by_row, idx)
    keep_mask, instances = kept_per_instance(group, idx, blocked(idx, analysis), keep)
    gone = idx[~keep_mask]
    kept = int(keep_mask.sum())
    # A call that opens its instance (its enclosing call's first CUDA call, e.g. a sync at
    # the top of a request handler) was led to by the caller's work, or by idle time between
    # requests, not by work that batching removes: that CPU time stays.
    opening = int(opens[~keep_mask].sum())
    lead = gone[~opens[~keep_mask]]
    syncs = own_syncs(gone, idx, analysis)
    looped, loops = (loop_body(idx, group, syncs, by_row, analysis) if body
                     else (np.zeros(0, np.int64), 0))
    # the loop's other ops lose their CPU time (the launches and the work before each), not
    # their GPU work: one op on the batch does what its items' ops did on the GPU
    gaps = sorted_unique(lead, syncs, looped)
    return Fix(remove_calls=sorted_unique(gone, syncs), gap_calls=gaps,
               gap_ns=np.zeros(len(gaps), np.int64), cost_calls=looped,
               cost_ns=np.zeros(len(looped), np.int64), describe=(
        f"replayed with {kept:,} of these {len(idx):,} calls kept, the {keep} wait of each of "
        f"{instances:,} {rel.instance_plural()} (its wait for the GPU work before it "
        f"stays), and the other {len(gone):,} removed with the CPU work that led to each"
        + (f" ({opening:,} of them the first call of their enclosing call: the CPU time "
           "before those stays)" if opening else "")
        + (f", and the {len(syncs):,} waits their torch ops made after them" if len(syncs)
           else "")
        + (f"; in {loops:,} of the {instances:,}, whose calls from the first of these to the "
           "loop's end are all the enclosing function's own torch ops (no other function's, no "
           f"other wait), those ops are done once on the batch: {len(looped):,} calls lose "
           "their CPU time and the CPU work before each (their GPU work stays), each call "
           "site's first stays as it was" if len(looped) else "")))


def loop_body(idx: np.ndarray, group: np.ndarray, syncs: np.ndarray, by_row: np.ndarray,
              analysis: Analysis) -> tuple[np.ndarray, int]:
    """The calls a loop's body no longer makes once the finding's calls ``idx`` (in
    ``group``'s instances; ``syncs``: their ops' waits; ``by_row``: every call's instance)
    are one call on the whole batch, and in how many instances. The loop, per instance: on
    its thread, from its first finding call to the last call of its own at a call site (a
    stack) seen up to its last finding call (the last item's ops after its copy). Where every
    call there is the instance's own (no call from another user function, e.g. a model's
    forward, which batching the copies does not touch) and none waits but the finding's,
    the loop's other torch ops (a dtype cast, an offset added, a fill per item) run once on
    the batch: each call site's first stays, the rest are returned (the caller takes their
    CPU time away and keeps their GPU work). Vectorised over the instances."""
    none = np.zeros(0, np.int64), 0
    if not len(idx):
        return none
    calls = analysis.facts.calls
    thread = calls["_thread"].to_numpy()
    stack = calls["stack_id"].fill_null(-1).to_numpy()
    order = np.lexsort((idx, group))
    g, s = group[order], idx[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    ids, lo = g[starts], s[starts]
    hi = s[np.r_[starts[1:], len(s)] - 1]
    end = _loop_ends(ids, lo, hi, by_row, thread, stack)
    length = end - lo + 1
    inst = np.repeat(np.arange(len(starts)), length)
    rows = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length) + lo[inst]
    on = thread[rows] == thread[lo][inst]   # the instance's thread's calls in its loop
    rows, inst = rows[on], inst[on]
    mine = sorted_unique(idx, syncs, own_syncs(idx, idx, analysis))
    finding = in_sorted(mine, rows)
    # a wait elsewhere in the loop (a value read per item) is not the copies': their own
    # syncs are known by their op, or by their stack where the op was not recorded
    other_wait = analysis.timeline.waits[rows] & ~in_sorted(sorted_unique(stack[mine]),
                                                            stack[rows])
    foreign = (by_row[rows] != ids[inst]) | other_wait
    bad = np.zeros(len(starts), bool)
    bad[inst[foreign]] = True
    body = ~bad[inst] & ~finding
    rows, inst = rows[body], inst[body]
    if not len(rows):
        return none
    at = stack[rows]
    o = np.lexsort((rows, at, inst))            # per instance and call site, in time order
    first = np.r_[True, (inst[o][1:] != inst[o][:-1]) | (at[o][1:] != at[o][:-1])]
    return np.sort(rows[o][~first]).astype(np.int64), len(sorted_unique(inst))


def _loop_ends(ids: np.ndarray, lo: np.ndarray, hi: np.ndarray, by_row: np.ndarray,
               thread: np.ndarray, stack: np.ndarray) -> np.ndarray:
    """Per instance (``ids``, its finding calls from ``lo`` to ``hi``): the last of its calls
    on ``lo``'s thread at a stack it made a call at from ``lo`` to ``hi`` (at least ``hi``)."""
    # the instances' calls: one search of every call in ``ids`` (sorted, distinct), no sort
    # of every call as ``np.isin`` would make with many instances
    at = np.minimum(np.searchsorted(ids, by_row), len(ids) - 1)
    rows = np.flatnonzero(ids[at] == by_row)
    k = at[rows]
    keep = (thread[rows] == thread[lo][k]) & (rows >= lo[k])
    rows, k = rows[keep], k[keep]
    inside = rows <= hi[k]
    width = int(stack.max(initial=0)) + 2
    key = k * width + stack[rows] + 1
    seen = in_sorted(sorted_unique(key[inside]), key)
    end = hi.copy()
    np.maximum.at(end, k[seen], rows[seen])
    return end


def blocked(idx: np.ndarray, analysis: Analysis) -> np.ndarray:
    """Whether each call of ``idx`` (a finding's, sorted) made the CPU wait for the GPU,
    itself or through a wait its torch op made after it that is not one of ``idx`` (a
    pageable copy's ``cudaMemcpyAsync`` returns once queued and its op's stream sync waits:
    where the finding holds the copies only, the copy is what blocked; where it holds the
    sync too, the sync is): the blocking calls a batching fix keeps one of."""
    waits = analysis.timeline.waits
    out = waits[idx]
    calls = analysis.facts.calls
    if not len(idx) or "op_id" not in calls.columns:
        return out
    op = calls["op_id"]
    # binary searches in the sorted ids, not numpy's set operations: its hashed ``unique``
    # (numpy 2.3+) took ~0.5 s a million calls, 8 s of a 10 M analysis's 159 findings
    waiting = np.flatnonzero(waits)
    waiting = waiting[~in_sorted(idx, waiting)]
    ops = sorted_unique(op.gather(waiting).drop_nulls().to_numpy())
    return out | in_sorted(ops, op.gather(idx).fill_null(-1).to_numpy())


def own_syncs(gone: np.ndarray, finding: np.ndarray, analysis: Analysis) -> np.ndarray:
    """The waiting calls (outside the finding's ``finding`` calls, sorted) that the torch op
    instances of the ``gone`` calls made: a copy's ``cudaStreamSynchronize`` after its
    ``cudaMemcpyAsync`` (torch's ``copy_`` without ``non_blocking`` waits for the stream
    once the copy is queued). The op goes with its copy, and so does that wait; kept, each
    still made the CPU wait for all the GPU work before it."""
    calls = analysis.facts.calls
    if not len(gone) or "op_id" not in calls.columns:
        return np.zeros(0, np.int64)
    # the op ids of the removed calls and of the waiting calls only, not every call's
    op = calls["op_id"]
    ops = sorted_unique(op.gather(gone).drop_nulls().to_numpy())
    if not len(ops):
        return np.zeros(0, np.int64)
    waiting = np.flatnonzero(analysis.timeline.waits)
    hit = waiting[in_sorted(ops, op.gather(waiting).fill_null(-1).to_numpy())]
    return hit[~in_sorted(finding, hit)].astype(np.int64)


def _opens_instance(rel, by_row: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """For the calls ``idx``: whether each is the first call (in time order: ``call_idx``
    order) of its instance (``by_row``: every call's instance, by ``call_idx``)."""
    # by call_idx, whether the call is its instance's first: one hashing pass (a sort of
    # every call, np.unique, took seconds at 10 M calls)
    first = rel.shared("first call of each instance", lambda: first_of_each(by_row))
    return first[idx]


def kept_per_instance(group: np.ndarray, idx: np.ndarray, waits: np.ndarray, keep: str
                      ) -> tuple[np.ndarray, int]:
    """Which calls a batching fix keeps, and how many instances there are. Per instance
    (``group``; calls in ``idx`` order, i.e. time order): its first or last (``keep``) blocking
    call (``waits``), and the calls since the instance's previous blocking call that lead to it
    (e.g. the copy before its sync). Vectorised: one pass over the calls, not per instance."""
    n = len(idx)
    mask = np.zeros(n, bool)
    if not n:
        return mask, 0
    order = np.lexsort((idx, group))
    g, w = group[order], waits[order].astype(bool)
    first = np.r_[True, g[1:] != g[:-1]]
    starts = np.flatnonzero(first)
    seg = np.cumsum(first) - 1                      # instance of each sorted row
    rows = np.arange(n)
    blocking = np.flatnonzero(w)
    if not len(blocking):
        return mask, len(starts)
    b_seg = seg[blocking]
    if keep == "first":
        pick = np.r_[True, b_seg[1:] != b_seg[:-1]]   # the first blocking row of an instance
        k_rows = blocking[pick]
        lo = starts[b_seg[pick]]
    else:
        pick = np.r_[b_seg[1:] != b_seg[:-1], True]   # the last blocking row of an instance
        k_rows = blocking[pick]
        at = np.flatnonzero(pick)
        prev = np.where(at > 0, blocking[np.maximum(at - 1, 0)], -1)
        same = (at > 0) & (b_seg[np.maximum(at - 1, 0)] == b_seg[at])
        lo = np.where(same, prev + 1, starts[b_seg[at]])
    span = np.zeros(n + 1, np.int64)                 # rows lo..k of each instance kept
    np.add.at(span, lo, 1)
    np.add.at(span, k_rows + 1, -1)
    mask[order[rows[np.cumsum(span[:-1]) > 0]]] = True
    return mask, len(starts)


def _async_copy_cost(analysis: Analysis, direction: str | None) -> int:
    """CPU cost of an async copy that does not wait: the median of such calls in the
    capture (same direction), else :data:`ASYNC_COPY_CALL_NS`."""
    return analysis.relations.shared(f"async_copy_cost:{direction}",
                                     lambda: _measure_async_copy_cost(analysis, direction))


def _measure_async_copy_cost(analysis: Analysis, direction: str | None) -> int:
    c = analysis.facts.calls
    ok = c.filter((pl.col("kind") == "copy") & ~pl.col("blocking"))
    if direction is not None:
        ok = ok.filter(pl.col("copy_kind") == direction)
    if ok.height >= 3:
        return int(ok["dur_ns"].median())
    return ASYNC_COPY_CALL_NS


def _host_bandwidth(analysis: Analysis, direction: str) -> tuple[float, str]:
    """Bytes per ns of a pinned copy in ``direction``: measured on this capture's pinned
    copies of 1 MB or more, else the GPU's host link (``gpus.yaml``)."""
    return analysis.relations.shared(f"host_bandwidth:{direction}",
                                     lambda: _measure_host_bandwidth(analysis, direction))


def _measure_host_bandwidth(analysis: Analysis, direction: str) -> tuple[float, str]:
    from zym.analysis.throughput import gpu_spec

    g = analysis.facts.gpu.filter((pl.col("kind") == "copy") & (pl.col("copy_kind") == direction)
                                  & ((pl.col("src_mem") == "pinned") | (pl.col("dst_mem") == "pinned"))
                                  & (pl.col("size_bytes") >= 1 << 20))
    if g.height >= 3:
        bw = float((g["size_bytes"] / g["dur_ns"]).median())
        return bw, f"{bw:.1f} GB/s, this capture's pinned {direction} copies"
    spec, _ = gpu_spec(_gpu_name(analysis))
    return spec["host_gbs"], f"{spec['host_gbs']:g} GB/s host link (datasheet)"


def _gpu_name(analysis: Analysis) -> str | None:
    gpus = analysis.data.meta.gpus or []
    return gpus[0].get("name") if gpus else None


class _Copies(NamedTuple):
    """What the pinned-memory model reads of the copy calls, as arrays (read once per
    analysis: per finding, a few gathers instead of polars queries over the calls table,
    ~2 ms a finding). The copies' own columns only; ``at`` is the one array over every call
    (4 bytes a call, 50 MB at 12.5 M, read while the findings are ranked, after the rules'
    relations, which set the peak): a finding's copies found by a gather, where a search
    of each finding's calls took ~0.3 s of 10 M GPU operations' 79 findings."""

    at: np.ndarray  # int32 per call_idx: the call's row in the arrays below, -1 if no copy
    kind: np.ndarray  # int8: 1 host-to-device, 2 device-to-host
    own_row: np.ndarray  # the GPU operation the call made, -1 where none
    nbytes: np.ndarray  # 0 where unknown


_DIRECTIONS = {"HtoD": 1, "DtoH": 2}


def _copies(analysis: Analysis) -> _Copies:
    c = analysis.facts.calls  # a call's row is its call_idx
    kind = pl.col("copy_kind")
    code = pl.lit(0, pl.Int8)  # compared on the categories (a cast to text costs 2x at 10 M)
    for direction, value in _DIRECTIONS.items():
        code = pl.when(kind == direction).then(pl.lit(value, pl.Int8)).otherwise(code)
    copies = c.filter(kind.is_not_null()).select(
        pl.col("call_idx").cast(pl.Int64), code.alias("kind"),
        pl.col("own_row").cast(pl.Int64).fill_null(-1),
        pl.col("bytes").cast(pl.Int64).fill_null(0)).filter(pl.col("kind") > 0)
    at = np.full(c.height, -1, np.int32)
    at[copies["call_idx"].to_numpy()] = np.arange(copies.height, dtype=np.int32)
    return _Copies(at, *(copies[k].to_numpy() for k in ("kind", "own_row", "bytes")))


def _pin(calls: np.ndarray, analysis: Analysis) -> Fix:
    every = analysis.relations.shared("copies by call_idx", lambda: _copies(analysis))
    calls = np.asarray(calls, dtype=np.int64)
    at = every.at[calls]
    found = at >= 0
    calls, at = calls[found], at[found]  # the finding's copies, in call order
    parts = []
    costs, cost_calls, unblock, ops, op_dur = [], [], [], [], []
    for direction, code in _DIRECTIONS.items():
        mine = every.kind[at] == code
        if not mine.any():
            continue
        idx, rows = calls[mine], at[mine]
        cost = _async_copy_cost(analysis, direction)
        bw, where = _host_bandwidth(analysis, direction)
        cost_calls.append(idx)
        costs.append(np.full(len(idx), cost))
        if direction == "HtoD":
            unblock.append(idx)
        own = rows[every.own_row[rows] >= 0]
        ops.append(every.own_row[own])
        op_dur.append((every.nbytes[own] / bw + 1_000).astype(np.int64))
        parts.append(f"{len(idx):,} {direction} copies at {cost / 1e3:.1f} µs a call and "
                     f"{where}" + (", not blocking" if direction == "HtoD" else ""))
    cat = (lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64))
    return Fix(cost_calls=cat(cost_calls), cost_ns=cat(costs), unblock_calls=cat(unblock),
               gpu_ops=cat(ops), gpu_dur_ns=cat(op_dur),
               describe="replayed with pinned memory: " + "; ".join(parts))


def _speedup(model: dict, relation: str, rows: pl.DataFrame, analysis: Analysis,
             measures: dict) -> Fix | None:
    from zym.analysis.throughput import speedup_durations

    if "gpu_idx" not in rows.columns or "dur_ns" not in rows.columns:
        return None
    ops, durs, hows = [], [], []
    if "factor" in model:
        factor = measures.get(model["factor"])
        if not factor or factor <= 1:
            return None
        d = rows["dur_ns"].to_numpy()
        return Fix(gpu_ops=rows["gpu_idx"].to_numpy(), gpu_dur_ns=(d / factor).astype(np.int64),
                   describe=f"replayed with these {rows.height:,} kernels {factor:.1f}x faster "
                            f"({model['factor']})")
    target = model["to"]
    part_cols = [c for c in ("precision", "op_class") if c in rows.columns]
    rows = rows.with_columns([pl.col(c).fill_null("fp32" if c == "precision" else "gemm")
                              for c in part_cols])
    for col, default in (("precision", "fp32"), ("op_class", "gemm")):
        if col not in rows.columns:
            rows = rows.with_columns(pl.lit(default).alias(col))
    # (in key order: the description and the edits do not depend on the hash order)
    for (precision, op_class), part in sorted(rows.group_by("precision", "op_class"),
                                              key=lambda kv: kv[0]):
        d = part["dur_ns"].to_numpy()
        flops = part["flops"].cast(pl.Float64).to_numpy() if "flops" in part.columns else None
        new, how = speedup_durations(d, precision, target, _gpu_name(analysis), flops, op_class)
        ops.append(part["gpu_idx"].to_numpy())
        durs.append(new)
        hows.append(how)
    return Fix(gpu_ops=np.concatenate(ops), gpu_dur_ns=np.concatenate(durs),
               describe=f"replayed with these {rows.height:,} kernels in {target}: "
                        + "; ".join(hows))


def _shorten_gaps(calls: np.ndarray, analysis: Analysis) -> Fix | None:
    """The CPU time before each of ``calls`` cut to the median before calls of its site."""
    if not len(calls):
        return None
    tl = analysis.timeline
    site = analysis.facts.site_of(analysis.facts.calls["stack_id"], ("code_site",))[0]
    per_site = (pl.DataFrame({"site": site, "gap": tl.gap})
                .group_by("site").agg(pl.col("gap").median().cast(pl.Int64).alias("typical")))
    target = (pl.DataFrame({"site": site.gather(calls)})
              .join(per_site, on="site", how="left", maintain_order="left")["typical"]
              .fill_null(0).to_numpy())
    before = int(tl.gap[calls].sum())
    return Fix(gap_calls=calls, gap_ns=target, describe=(
        f"replayed with the CPU time before these {len(calls):,} launches ({before / 1e6:.3g} ms"
        f" in all) cut to the median before calls of the same site"))


def _cpu_work(rows: pl.DataFrame, analysis: Analysis) -> Fix | None:
    """Each stretch without a CUDA call (the stretches relation's rows, or each step's
    longest: the steps relation's), its CPU work (``quiet_py_ns``: before the torch op that
    ended it began), taken out of the CPU time before the call that ended it (``quiet_idx``;
    a step's work after its last call and the next step's before its first both end at that
    step's first call: their sum). A stretch no call ends that lies after the window's last
    call (the last step's post-processing, up to where its function returned) is the fix's
    tail (:attr:`Fix.tail_ns`), taken out as the replayed stretches' work is (their share
    left once what recording them cost is out)."""
    if "quiet_idx" not in rows.columns:
        return None
    ended = (rows.filter(pl.col("quiet_idx").is_not_null() & (pl.col("quiet_py_ns") > 0))
             .group_by("quiet_idx").agg(pl.col("quiet_py_ns").sum()).sort("quiet_idx"))
    tail = _tail_work(rows, analysis)
    if ended.height == 0 and not tail:
        raise NoEstimate("no call ends these stretches inside the window")
    calls = ended["quiet_idx"].to_numpy().astype(np.int64)
    work = ended["quiet_py_ns"].to_numpy().astype(np.int64)
    tl = analysis.timeline
    gap = tl.gap[calls]
    left = np.clip(gap - work, 0, None)
    # The replay leaves out what recording the capture cost (torch.profiler's cost of each
    # event it recorded, Python calls included): that part of the work is not counted.
    recorded = np.clip(gap - tl.overhead_ns[calls], 0, None) - left
    kept = int(np.clip(recorded, 0, None).sum())
    recording = int(work.sum() - kept)
    # the tail: its work less what recording it cost, at the replayed stretches' rate
    tail_ns = round(tail * kept / work.sum()) if work.sum() else tail
    recording += tail - tail_ns
    total = int(work.sum()) + tail
    note = (f"; ~{recording / 1e6:.3g} ms of it is what recording its events cost the capture "
            "(torch.profiler's cost per event), not counted" if recording > 0.1 * total
            else "")
    after = (f", the last step's {tail / 1e6:.3g} ms after the window's last call among them"
             if tail else "")
    stretches = len(calls) + bool(tail)
    return Fix(gap_calls=calls, gap_ns=left, tail_ns=tail_ns, describe=(
        f"replayed with the CPU work of {stretches:,} stretches without a CUDA call "
        f"({total / 1e6:.3g} ms in all{after}) taken out{note}: an upper "
        "bound, as if that work ran on the GPU or ahead of time in another process"))


def _tail_work(rows: pl.DataFrame, analysis: Analysis) -> int:
    """The CPU work of the stretches of ``rows`` that no call ends and that end after the
    window's last CUDA call (the last step's post-processing): 0 where there is none, or
    where the rows do not say where they end."""
    if "end_ns" not in rows.columns:
        return 0
    calls = analysis.facts.calls
    if calls.height == 0:
        return 0
    last = int(calls.select((pl.col("ts_ns") + pl.col("dur_ns")).max()).item())
    return int(rows.filter(pl.col("quiet_idx").is_null() & (pl.col("quiet_py_ns") > 0)
                           & (pl.col("end_ns") >= last))["quiet_py_ns"].sum())


def _deflated_gap(calls: np.ndarray, analysis: Analysis) -> np.ndarray:
    """The CPU time before each of ``calls`` as the replay runs it: without what recording
    the capture cost."""
    tl = analysis.timeline
    return np.clip(tl.gap[calls] - tl.overhead_ns[calls], 0, None)


def _autograd_off(rows: pl.DataFrame, analysis: Analysis) -> Fix | None:
    """The CPU time before each call of the finding's steps, less what autograd's recording
    of the ops in it cost."""
    from zym.analysis.training import AUTOGRAD_NS_PER_OP, grad_ops_before_calls

    if "step" not in rows.columns:
        return None
    ops = grad_ops_before_calls(analysis)
    step = analysis.relations.call_steps()
    mine = step.is_in(rows["step"].cast(step.dtype).implode()).fill_null(False).to_numpy()
    calls = np.flatnonzero(mine & (ops > 0)).astype(np.int64)
    if not len(calls):
        raise NoEstimate("no call of these steps follows an op autograd recorded")
    cut = ops[calls] * AUTOGRAD_NS_PER_OP
    return Fix(gap_calls=calls, gap_ns=np.clip(_deflated_gap(calls, analysis) - cut, 0, None),
               describe=(f"replayed with the CPU time before {len(calls):,} calls cut by what "
                         f"autograd's recording of their {int(ops[calls].sum()):,} ops cost "
                         f"({AUTOGRAD_NS_PER_OP / 1e3:.2f} µs an op, measured on an H100 "
                         "host: another host's CPU differs)"))


def _eval_mode(rows: pl.DataFrame, analysis: Analysis) -> Fix | None:
    """The finding's steps without the training-mode kernels eval mode does without: their
    launches go (and the kernels with them), and the CPU time before each launch loses the
    time its op spent before it."""
    from zym.analysis.training import train_mode_launches

    if "step" not in rows.columns:
        return None
    drop = train_mode_launches(analysis, rows["step"].to_numpy())
    if drop.height == 0:
        raise NoEstimate("no kernel eval mode does without (dropout's, batch norm's "
                         "statistics) has its launch in these steps")
    calls = drop["call_idx"].to_numpy().astype(np.int64)
    in_op = drop["in_op_ns"].to_numpy()
    note = ("" if in_op.any() else " (the capture has no op spans: the ops' own CPU time "
            "before each launch stays)")
    return Fix(remove_calls=calls, gap_calls=calls,
               gap_ns=np.clip(_deflated_gap(calls, analysis) - in_op, 0, None),
               describe=(f"replayed without {len(calls):,} kernels eval mode does without "
                         f"(dropout's, batch norm's statistics), their launches and their ops' "
                         f"CPU time before each launch{note}"))


def _items(rows: pl.DataFrame, analysis: Analysis) -> Fix | None:
    """The ``items`` model (the module doc): the finding's steps (``rows``: items relation)
    with their item function called once on all the items (once from each place that calls
    it once per item)."""
    if "step" not in rows.columns or "item_function" not in rows.columns:
        return None
    items = analysis.relations.item_calls()
    table = items.table.join(rows.select(pl.col("step").cast(pl.Int64), "item_function")
                             .unique(), on=["step", "item_function"], how="semi")
    if table.height == 0:
        return None
    # a loop inside one call of a function (eBPF stacks): its iterations are the items
    call, run = (("iteration", "run") if table["item_loop"].fill_null(False).any()
                 else ("call", "called"))
    # a (step, function's stack node) as one key: the finding's, and each member call's
    nodes = sorted_unique(items.table["item_node"].to_numpy())
    n_nodes = len(nodes)
    key_of = table["step"].to_numpy() * n_nodes + np.searchsorted(nodes, table["item_node"]
                                                                  .to_numpy())
    member = items.step * n_nodes + np.searchsorted(nodes, items.node)
    take = in_sorted(sorted_unique(key_of), member)
    at, inst, step, key = (items.call_idx[take], items.instance[take], items.step[take],
                           member[take])
    if not len(at):
        return None
    # each step's first call of the function from each place: the call of its earliest CUDA
    # call (``at`` is in time order)
    first = np.full(int(key.max()) + 1, -1, np.int64)
    first[key[::-1]] = inst[::-1]
    later = inst != first[key]
    gone, inst = at[later], inst[later]
    if not len(gone):
        return None
    looped = np.zeros(int(max(key.max(), key_of.max())) + 1, bool)
    looped[key_of] = table["item_loop"].fill_null(False).to_numpy()
    in_loop = looped[key[later]]
    opening = np.r_[True, inst[1:] != inst[:-1]]   # each call's first CUDA call
    tl = analysis.timeline
    gap = np.zeros(len(gone), np.int64)
    spans = analysis.data.span_table is not None and analysis.data.span_table.height > 0
    calls = analysis.facts.calls
    if spans:
        # the loop's own work before the call entered the function stays (instance ids are
        # the spans' starts)
        ts = calls["ts_ns"].gather(gone[opening]).to_numpy()
        start = inst[opening]
        before = tl.gap[gone[opening]]
        # (a call outside any span of the function, its own instance: its time stays; the
        # loop's own ops before the call, part of its item, keep the time before the first)
        gap[opening] = np.where(start >= 0, np.clip(before - np.maximum(ts - start, 0), 0,
                                                    None), before)
    else:   # no span: where the call began is not known, and the time before it stays;
        # but in a loop inside one call (eBPF) the time before an iteration's first CUDA call
        # is the loop body's own work, which one pass on all the items does once: it goes
        gap[opening] = np.where(in_loop[opening], 0, tl.gap[gone[opening]])
    waits = gone[tl.waits[gone]]
    # their GPU operations run back to back, as one batched kernel's work would, each
    # kernel for the share of the GPU its blocks fill (the batch fills the rest)
    op_call = analysis.facts.gpu["call_idx"].fill_null(-1).to_numpy()
    ops = np.flatnonzero(in_sorted(gone, op_call))
    per_key = np.zeros(int(key.max()) + 1, np.int64)
    inside = key_of <= key.max()
    per_key[key_of[inside]] = table["item_calls"].to_numpy()[inside]
    op_key = key[later][np.searchsorted(gone, op_call[ops])]
    scaled, dur, sms = _batched_kernels(ops, per_key[op_key], analysis)
    n_calls = int(opening.sum())
    steps = len(sorted_unique(step))
    n_places = len(sorted_unique(key)) // max(steps, 1)
    places = f" (its first from each of the {n_places} places that call it)" if n_places > 1 \
        else ""
    what = (rows["item_function"].drop_nulls().first() if "item_function" in rows.columns
            else None) or "the item function"
    before = int(analysis.facts.gpu["dur_ns"].gather(scaled).sum()) if len(scaled) else 0
    return Fix(cost_calls=gone, cost_ns=np.zeros(len(gone), np.int64), gap_calls=gone,
               gap_ns=gap, unblock_calls=waits, gapless_ops=ops, gpu_ops=scaled,
               gpu_dur_ns=dur, describe=(
        f"replayed with {what} {run} once a step on all the items: in each of {steps:,} "
        f"steps its first {call} stays{places}, and the {len(gone):,} CUDA calls of its other "
        f"{n_calls:,} {call}s are made without their CPU time or the CPU work before each "
        "inside it" + (" (the loop's work before each call stays)" if spans else
                       " (the CPU time before each call's first stays)" if call == "call"
                       else ", the loop's own work between them too")
        + (f", {len(waits):,} of them not waiting" if len(waits) else "")
        + f"; their {len(ops):,} GPU operations run back to back (without the gaps between "
          "launched kernels), as a batch's kernels would"
        + (f", {len(scaled):,} kernels among them faster on the batch ({before / 1e6:.3g} -> "
           f"{int(dur.sum()) / 1e6:.3g} ms): a GEMM for its share of one GEMM on all the "
           "items, at the rate measured for that size"
           + (f", any other for the share of the GPU's {sms} multiprocessors its thread "
              "blocks fill, one block an SM at a time (the batch's kernel fills the rest)"
              if sms else "") if len(scaled) else "")))


def _fused_attention(rows: pl.DataFrame) -> Fix | None:
    """The ``fused-attention`` model (see the module doc) on the attention relation's rows of
    a finding (``role``, ``attention``, ``dur_ns``, ``fused_ns``)."""
    from zym.analysis.attention import FUSED_AWAY

    rows = rows.select("gpu_idx", "call_idx", "role", "attention", "dur_ns", "fused_ns")
    matmul = rows.filter(pl.col("role").is_in(["scores", "output"]))
    per = matmul.group_by("attention").agg(pl.col("dur_ns").sum().alias("pair"),
                                           pl.col("fused_ns").first().alias("fused"))
    if per.height == 0:
        return None
    # faster than the matmuls: they are shortened to it
    faster = (matmul.join(per, on="attention").filter(pl.col("fused") < pl.col("pair"))
              .select("gpu_idx", (pl.col("dur_ns") * pl.col("fused") / pl.col("pair"))
                      .round().cast(pl.Int64).alias("dur")))
    # slower: the kernels that would go carry the difference, longest first, their calls kept
    away = (rows.filter(pl.col("role").is_in(list(FUSED_AWAY)))
            .join(per.select("attention", (pl.col("fused") - pl.col("pair")).clip(0)
                             .alias("extra")), on="attention", how="left")
            .sort("attention", "dur_ns", "gpu_idx", descending=[False, True, False])
            .with_columns((pl.col("dur_ns").cum_sum().over("attention") - pl.col("dur_ns"))
                          .alias("before")))
    carry = away.filter(pl.col("before") < pl.col("extra"))
    kept = carry.select("gpu_idx", pl.min_horizontal("dur_ns", pl.col("extra")
                                                     - pl.col("before")).alias("dur"))
    gone = away.filter(pl.col("before") >= pl.col("extra"))
    ops = pl.concat([faster, kept])
    calls = sorted_unique(gone["call_idx"].drop_nulls().to_numpy().astype(np.int64))
    ratio = per["fused"].sum() / max(per["pair"].sum(), 1)
    how = (f"replayed without the softmax, scaling and copy kernels of these {per.height:,} "
           f"attentions ({len(calls):,} calls, with their waits and the CPU work that led to "
           "each: their ops' dispatch; the matmuls' stays), their matmuls standing for one "
           f"fused kernel that takes {ratio:.2f}x their GPU time (measured by math and size: "
           "analysis/attention_costs.yaml)")
    if kept.height:
        how += f"; {kept.height:,} of the kernels kept, shortened, to carry the rest of it"
    return Fix(remove_calls=calls, gap_calls=calls, gap_ns=np.zeros(len(calls), np.int64),
               gpu_ops=ops["gpu_idx"].to_numpy().astype(np.int64),
               gpu_dur_ns=ops["dur"].to_numpy().astype(np.int64), describe=how)


def _batched_kernels(ops: np.ndarray, items: np.ndarray, analysis: Analysis
                     ) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Of the GPU operations ``ops`` (an item's kernels, the batch doing their work;
    ``items``: the items of each one's step), the kernels a batch runs faster, with their
    durations there, and the GPU's multiprocessors (None where not known): a GEMM for its
    share of one GEMM on all the items (:func:`zym.analysis.throughput
    .batched_gemm_durations`: the measured rate at the batch's size), any other kernel whose
    thread blocks fill under all of the multiprocessors for the share it fills
    (:func:`zym.analysis.throughput.wave_fill`)."""
    from zym.analysis.throughput import batched_gemm_durations, sm_count, wave_fill

    none = np.zeros(0, np.int64)
    gpus = analysis.data.meta.gpus or []
    one = gpus[0] if len(gpus) == 1 else None   # one GPU: whose, unambiguous
    sms = sm_count(one)
    gpu = analysis.facts.gpu
    if not len(ops):
        return none, none, sms
    sel = gpu[ops].select("kind", "dur_ns", "op_class", "precision", *(
        [(pl.col("grid_x").cast(pl.Int64) * pl.col("grid_y").fill_null(1).cast(pl.Int64)
          * pl.col("grid_z").fill_null(1).cast(pl.Int64)).fill_null(0).alias("blocks")]
        if "grid_x" in gpu.columns else []))
    dur = sel["dur_ns"].to_numpy().astype(np.int64)
    new = dur.astype(float)
    kernel = (sel["kind"] == "kernel").fill_null(False).to_numpy()
    if sms is not None and "blocks" in sel.columns:
        new = np.minimum(new, dur * wave_fill(sel["blocks"].to_numpy(), sms))
    gemm = kernel & sel["op_class"].is_in(["gemm", "gemv"]).fill_null(False).to_numpy()
    if gemm.any():
        # (a GEMM whose name says no math runs in float32, torch's default)
        math = sel["precision"].cast(pl.String).fill_null("fp32").to_numpy()
        batched = batched_gemm_durations(dur[gemm], math[gemm],
                                         items[gemm], one.get("name") if one else None)
        new[gemm] = np.where(np.isnan(batched), new[gemm], np.minimum(new[gemm], batched))
    keep = kernel & (new < dur)
    return ops[keep].astype(np.int64), np.floor(new[keep]).astype(np.int64), sms


def _cuda_graph(relation: str, rows: pl.DataFrame, analysis: Analysis) -> Fix | None:
    """Runs of at least ``MIN_GRAPH_RUN`` consecutive non-blocking launches (and memsets) in
    the finding's steps, each replayed as one graph launch."""
    if "step" not in rows.columns:
        return None
    if "size_syncs" in rows.columns and rows["size_syncs"].sum():
        per = rows["size_syncs"].sum() / rows.height
        raise NoEstimate(f"its steps wait {per:.3g} times each for an output size that depends "
                         "on their data (syncs.data-dependent-size): their shapes change with "
                         "the data, and a CUDA graph needs fixed shapes first; fix those, "
                         "then capture again")
    rel = analysis.relations
    c = analysis.facts.calls.with_columns(rel.call_steps())
    mine = set(rows["step"].drop_nulls().to_list())
    steps = repeating_steps(c, analysis.facts.gpu, mine, lambda: analysis.capture_launches)
    per_shape = not steps
    runs, members = _graph_runs(c, steps or mine, per_shape)
    if per_shape:
        # no step repeats another: the runs whose launches do (a per-frame model call with
        # the same number of crops, a per-item update of the same shapes), each a graph
        # captured once for its shapes (torch.compile's "reduce-overhead" records one a shape)
        runs = _repeated_runs(runs, members, analysis.facts.gpu)
        if runs.height == 0:
            raise NoEstimate("no two steps launch the same kernels with the same grids, nor do "
                             "any two runs of launches between their waits (shapes change "
                             "throughout); a CUDA graph needs fixed shapes first")
    if runs.height == 0:
        return None
    base, per_node, where = _graph_launch_cost(analysis)
    sizes = runs["n"].to_numpy()
    n = int(sizes.sum())
    return Fix(graph_first=runs["first"].to_numpy(), graph_last=runs["last"].to_numpy(),
               graph_launch_ns=(base + per_node * sizes).astype(np.int64),
               graph_node_ns=GRAPH_NODE_NS, describe=(
                   f"replayed with {n:,} launches in {runs.height:,} runs as CUDA graph "
                   f"replays, each costing {base / 1e3:.1f} µs + {per_node:g} ns a kernel of CPU "
                   f"({where}) and {GRAPH_NODE_NS:g} ns of GPU between its kernels"
                   + (": no two steps launch the same kernels with the same grids, so only "
                      "the runs whose launches repeat another run's (a graph captured once "
                      "for each set of shapes)" if per_shape else "")))


def _graph_runs(calls: pl.DataFrame, steps: set[int], with_members: bool = True
                ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The runs of at least ``MIN_GRAPH_RUN`` consecutive graphable calls of ``steps`` on a
    thread (``_run``; ``first``, ``last``: their ``call_idx``; ``n``: their calls), and
    (``with_members``; else None: a row a call, not kept where unread) each of their calls'
    run (``call_idx``, ``kind``, ``_run``). Launches, memsets and the runtime's own queries
    (cudaGetDevice...) replay inside a graph; a blocking call or a copy to or from the host
    ends a run."""
    c = (calls.select("_thread", "ts_ns", "call_idx", "step", "kind", "blocking")
         .filter(pl.col("step").is_in(list(steps))).sort("_thread", "ts_ns"))
    graphable = (pl.col("kind").is_in(["launch", "memset", "other"]) & ~pl.col("blocking"))
    members = (c.with_columns(graphable.alias("_g"))
               .with_columns(((pl.col("_g") != pl.col("_g").shift(1))
                              | (pl.col("step") != pl.col("step").shift(1))
                              | (pl.col("_thread") != pl.col("_thread").shift(1)))
                             .fill_null(True).cum_sum().alias("_run"))
               .filter("_g").select("call_idx", "kind", "_run"))
    runs = (members.group_by("_run").agg(pl.col("call_idx").first().alias("first"),
                                         pl.col("call_idx").last().alias("last"),
                                         pl.len().alias("n"))
            .filter(pl.col("n") >= MIN_GRAPH_RUN).sort("first"))
    if not with_members:
        return runs, None
    return runs, members.join(runs.select("_run"), on="_run", how="semi")


def _repeated_runs(runs: pl.DataFrame, members: pl.DataFrame, gpu: pl.DataFrame
                   ) -> pl.DataFrame:
    """The runs of ``runs`` whose launches (each launch's kernel and grid, in order: their
    ``members``) are another run's too."""
    if runs.height == 0:
        return runs
    launches = members.filter(pl.col("kind") == "launch").sort("call_idx")
    work = gpu.select("work", "call_idx", "name", "grid_x", "grid_y", "grid_z").filter("work")
    kernel = work.select(pl.struct(pl.col("name").hash(), "grid_x", "grid_y", "grid_z").hash()
                         .alias("launch"))[first_row_of(work["call_idx"], launches["call_idx"])]
    sig = (launches.select("_run").hstack(kernel)
           .group_by("_run", maintain_order=True).agg("launch")
           .select("_run", pl.col("launch").hash().alias("sig")))
    counts = sig.group_by("sig").len().filter(pl.col("len") >= 2)
    keep = sig.join(counts, on="sig", how="semi").select("_run")
    return runs.join(keep, on="_run", how="semi").sort("first")


def repeating_steps(calls: pl.DataFrame, gpu: pl.DataFrame, steps: set[int],
                    capture: Callable[[], pl.DataFrame | None] | None = None) -> set[int]:
    """The steps among ``steps`` whose launches repeat another step's exactly (same kernels
    and grids, in order): what a CUDA graph captured once can replay. Steps whose shapes
    change from step to step launch other grids and are left out. Not the call sites: a
    profiler's stacks of one code path differ now and then (torch.profiler dropped a
    ``forward`` frame in 18 of the H200 sidecar trace's 24 identical steps, which left them
    out and the graph's saving at a third of the measured one).

    ``capture``: where the analysis is of a sample of a capture (:mod:`zym.analysis.budget`),
    the whole capture's launches per kernel and grid
    (:attr:`zym.analysis.report.Analysis.capture_launches`), asked for only where some step's
    launches are not repeated in the sample: a step the sample holds once may repeat outside
    it (a sample of a tenth of a trace whose batch sizes vary holds most sizes once: its graph
    estimate fell from 26.4% to 17.0% of the window, 24.8% with this). Such a step counts
    as repeating where the capture runs each of its kernels with its grid at least twice as
    often as the step does (:func:`_repeat_elsewhere`)."""
    c = calls.select("call_idx", "step", "kind").filter(
        pl.col("step").is_in(list(steps)) & (pl.col("kind") == "launch"))
    if c.height == 0:
        return set()
    if not c["call_idx"].is_sorted():
        c = c.sort("call_idx")
    # each launch's first GPU operation (by an array lookup: a group-by of every operation and
    # a join took ~0.4 of ~0.6 s at the bundled trace x200), its name hashed (they are long)
    work = gpu.select("work", "call_idx", "name", "grid_x", "grid_y", "grid_z").filter("work")
    kernel = work.select(pl.col("name").hash(), "grid_x", "grid_y", "grid_z")[
        first_row_of(work["call_idx"], c["call_idx"])]
    # A step's signature: the hash of its launches' hashes in order (the calls' order; a
    # launch's text joined per step was ~250 MB at 16 k launches a step x 40)
    sig = (c.select("step").hstack(kernel)
           .select("step", pl.struct("name", "grid_x", "grid_y", "grid_z").hash()
                   .alias("launch"))
           .group_by("step", maintain_order=True).agg("launch")
           .select("step", pl.col("launch").hash().alias("sig")))
    counts = sig.group_by("sig").len()
    repeated = set(sig.join(counts.filter(pl.col("len") >= 2), on="sig")["step"].to_list())
    once = set(sig["step"].to_list()) - repeated
    if not once or capture is None or (whole := capture()) is None:
        return repeated
    at = first_row_of(work["call_idx"], c["call_idx"])
    launched = c.select("step").hstack(work.select(
        pl.col("name").cast(pl.String), "grid_x", "grid_y", "grid_z")[at])
    return repeated | _repeat_elsewhere(launched.filter(pl.col("step").is_in(list(once))),
                                        whole)


def _repeat_elsewhere(launched: pl.DataFrame, capture: pl.DataFrame) -> set[int]:
    """The steps of ``launched`` (a step's launches: ``step``, and the kernel's ``name`` and
    grid) each of whose kernels, with its grid, ``capture`` (per kernel and grid, its
    ``launches``) ran at least twice as often as the step did: room for another step that
    launches the same (a necessary condition for a repeat, checked without the capture's
    steps). A launch without its kernel (no GPU side) does not count against its step."""
    key = ["name", "grid_x", "grid_y", "grid_z"]
    grids = [pl.col(k).cast(pl.Int64) for k in key[1:]]
    per = (launched.filter(pl.col("name").is_not_null()).with_columns(grids)
           .group_by("step", *key).len()
           .join(capture.with_columns(grids), on=key, how="left", nulls_equal=True)
           .group_by("step").agg((pl.col("launches").fill_null(0) >= 2 * pl.col("len")).all()
                                 .alias("room")))
    steps = set(launched["step"].unique().to_list())
    return steps - set(per.filter(~pl.col("room"))["step"].to_list())


def _graph_launch_cost(analysis: Analysis) -> tuple[int, int, str]:
    """CPU cost of a graph replay: base and per kernel node. From this capture's own graph
    launches where it has some (their median, the kernels they replay counted in), else the
    H200 measurements."""
    facts = analysis.facts
    # each API name tested once (every call's name cast to text was +75 MB and 0.06 s at the
    # bundled trace x200)
    c = facts.calls.filter(per_name(facts.calls["api"],
                                    lambda api: api.str.contains("GraphLaunch")).fill_null(False))
    if c.height >= 3:
        nodes = (facts.gpu.filter(pl.col("call_idx").is_in(c["call_idx"].implode()) & pl.col("work"))
                 .group_by("call_idx").len()["len"])
        per = int(c["dur_ns"].median())
        mean_nodes = float(nodes.mean()) if nodes.len() else 0.0
        return per, 0, f"this capture's {c.height:,} graph launches, ~{mean_nodes:.0f} kernels each"
    return GRAPH_LAUNCH_NS, GRAPH_LAUNCH_NODE_NS, "measured on the H200"
