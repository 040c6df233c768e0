"""What a call that waits for the GPU waited for, read from when it returned.

A device sync waits for every operation launched before it; a blocking copy for its own copy.
An event sync (``cudaEventSynchronize``) waits for the work before the event it names, and a
stream sync for its stream's; a trace holds no event or stream handles, so which work that
was is read from the sync's return instead: the operation of its process, launched before
it, that ended last by the time it returned. Where work launched before a sync was still
running when it returned, the sync did not drain the queue: the event was recorded before
that work (a copy's event waited for once the next step is queued, as the sync rules
advise), or the work is another stream's.

Both facts are read by position: ``calls`` and ``gpu`` are a window's calls (in time order)
and operations, each row's position its ``call_idx``/``gpu_idx``.
"""
from __future__ import annotations

import numpy as np
import polars as pl
from zym.schemas.apis import is_event_sync, is_stream_sync
from zym.schemas.lookup import per_distinct

# A call that returned this long before an operation ended did not wait for it (timestamps of
# the CPU and GPU sides agree to about a microsecond).
RETURN_SLACK_NS = 2_000


def event_syncs(calls: pl.DataFrame, test=is_event_sync) -> np.ndarray:
    """Rows of ``calls`` that are event syncs (``cudaEventSynchronize``: API names by
    :data:`zym.schemas.apis.EVENT_SYNC_PATTERN`, tested once per distinct name; ``test``:
    another test of the names)."""
    hit = per_distinct(calls["api"], lambda names: pl.select(test(pl.lit(names))).to_series())
    return np.flatnonzero(hit.fill_null(False).to_numpy())


def partial_waits(calls: pl.DataFrame, gpu: pl.DataFrame,
                  blocking: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The waiting calls that waited for part of the queued work, and for which operation
    (rows of ``calls`` and of ``gpu``; ``blocking``: whether each call blocks): event syncs,
    and stream syncs that left work running (another stream's); each waited for the
    operation :func:`event_awaited` finds. Where none is found the call is left out (read
    as waiting for every operation before it)."""
    events = event_syncs(calls)
    streams = event_syncs(calls, is_stream_sync)
    events, streams = events[blocking[events]], streams[blocking[streams]]
    if len(streams):
        streams = streams[left_work_running(calls, gpu, streams)]
    at = np.union1d(events, streams).astype(np.int64)
    op = event_awaited(calls, gpu, at)
    return at[op >= 0], op[op >= 0]


def _launched_work(gpu: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The work operations a call of the window launched, in the order of their calls (the
    calls are in time order): their rows, their launching call's row and their ends."""
    call = gpu["call_idx"].fill_null(-1).to_numpy()
    rows = np.flatnonzero(gpu["work"].fill_null(False).to_numpy() & (call >= 0))
    call, end = call[rows], gpu["end_ns"].to_numpy()[rows]
    if len(call) > 1 and not bool((call[1:] >= call[:-1]).all()):
        order = np.argsort(call, kind="stable")  # (nearly in order: GPU start order)
        rows, call, end = rows[order], call[order], end[order]
    return rows, call, end


def _by_process(calls: pl.DataFrame, call: np.ndarray, at: np.ndarray):
    """(operations, calls of ``at``) per process, as masks or slices: the work of one
    process is not what another's calls wait for."""
    pid = calls["pid"].to_numpy()
    if not len(at) or pid.min() == pid.max():
        yield slice(None), np.arange(len(at))
        return
    of_op, of_at = pid[call], pid[at]
    for p in np.unique(of_at):
        yield of_op == p, np.flatnonzero(of_at == p)


def event_awaited(calls: pl.DataFrame, gpu: pl.DataFrame, at: np.ndarray) -> np.ndarray:
    """For each of the calls at rows ``at`` (event syncs), the operation (row of ``gpu``) it
    waited for: among the work its process launched before it (by earlier calls), the one
    that ended last by its return (plus :data:`RETURN_SLACK_NS`; the last of those in launch
    order where several end together); -1 where none did, or where that one was launched
    after it (by another thread: the call is then read as waiting for every operation
    before it, as a sync)."""
    out = np.full(len(at), -1, np.int64)
    if not len(at) or not gpu.height:
        return out
    rows, call, end = _launched_work(gpu)
    c_end = calls["end_ns"].to_numpy()[at] + RETURN_SLACK_NS
    for ops, sel in _by_process(calls, call, at):
        by_end = np.argsort(end[ops], kind="stable")
        ends = end[ops][by_end]
        j = np.searchsorted(ends, c_end[sel], side="right") - 1
        ok = j >= 0
        op = by_end[np.maximum(j, 0)]
        ok &= call[ops][op] < at[sel]
        out[sel[ok]] = rows[ops][op[ok]]
    return out


def left_work_running(calls: pl.DataFrame, gpu: pl.DataFrame, at: np.ndarray) -> np.ndarray:
    """For each of the calls at rows ``at``, whether work its process launched before it (by
    earlier calls) was still running when it returned (past :data:`RETURN_SLACK_NS`): it
    waited for some of the queued work, not all of it."""
    out = np.zeros(len(at), bool)
    if not len(at) or not gpu.height:
        return out
    _, call, end = _launched_work(gpu)
    c_end = calls["end_ns"].to_numpy()[at] + RETURN_SLACK_NS
    for ops, sel in _by_process(calls, call, at):
        latest = np.maximum.accumulate(end[ops])  # the latest end launched so far
        k = np.searchsorted(call[ops], at[sel], side="left") - 1
        ok = k >= 0
        out[sel[ok]] = latest[k[ok]] > c_end[sel][ok]
    return out
