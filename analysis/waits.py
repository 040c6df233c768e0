"""What a call that waits for the GPU waited for, read from when it returned.

A device or stream sync waits for every operation launched before it (on its device or
stream); a blocking copy for its own copy. An event sync (``cudaEventSynchronize``) waits for
the work before the event it names, and a trace holds no event handles: which work that was
is read from the sync's return instead. The operation it waited for is the one of its
process, launched before it, that ended last by the time it returned. Where work launched
before the sync was still running when it returned, the sync did not drain the queue: the
event was recorded before that work (a copy's event waited for once the next step is queued,
as the sync rules advise).

Both facts are read by position: ``calls`` and ``gpu`` are a window's calls (in time order)
and operations, each row's position its ``call_idx``/``gpu_idx``.
"""
from __future__ import annotations

import numpy as np
import polars as pl
from zym.schemas.apis import is_event_sync
from zym.schemas.lookup import per_distinct

# A call that returned this long before an operation ended did not wait for it (timestamps of
# the CPU and GPU sides agree to about a microsecond).
RETURN_SLACK_NS = 2_000


def event_syncs(calls: pl.DataFrame) -> np.ndarray:
    """Rows of ``calls`` that are event syncs (``cudaEventSynchronize``: API names by
    :data:`zym.schemas.apis.EVENT_SYNC_PATTERN`, tested once per distinct name)."""
    hit = per_distinct(calls["api"], lambda names: pl.select(is_event_sync(pl.lit(names)))
                       .to_series())
    return np.flatnonzero(hit.fill_null(False).to_numpy())


def _launched_work(calls: pl.DataFrame, gpu: pl.DataFrame) -> tuple[np.ndarray, ...]:
    """The work operations a call of the window launched: their rows, their launching call's
    row, start and process, and their ends."""
    g = gpu.select("call_idx", "end_ns", "work").with_row_index("_row").filter(
        pl.col("work") & pl.col("call_idx").is_not_null())
    row = g["_row"].to_numpy().astype(np.int64)
    call = g["call_idx"].to_numpy().astype(np.int64)
    launch = calls["ts_ns"].to_numpy()[call]
    pid = calls["pid"].to_numpy()[call]
    return row, launch, pid, g["end_ns"].to_numpy()


def event_awaited(calls: pl.DataFrame, gpu: pl.DataFrame, at: np.ndarray) -> np.ndarray:
    """For each of the calls at rows ``at`` (event syncs), the operation (row of ``gpu``) it
    waited for: among the work its process launched before it, the one that ended last by
    its return (plus :data:`RETURN_SLACK_NS`); -1 where none did, or where that one was
    launched after the call started (another thread's: the call is then read as waiting
    for every operation before it, as a sync)."""
    out = np.full(len(at), -1, np.int64)
    if not len(at) or not gpu.height:
        return out
    row, launch, pid, end = _launched_work(calls, gpu)
    c_ts = calls["ts_ns"].to_numpy()[at]
    c_end = calls["end_ns"].to_numpy()[at]
    c_pid = calls["pid"].to_numpy()[at]
    for p in np.unique(c_pid):
        mine = pid == p
        by_end = np.argsort(end[mine], kind="stable")
        ends = end[mine][by_end]
        rows, starts = row[mine][by_end], launch[mine][by_end]
        sel = np.flatnonzero(c_pid == p)
        j = np.searchsorted(ends, c_end[sel] + RETURN_SLACK_NS, side="right") - 1
        ok = j >= 0
        ok[ok] = starts[j[ok]] < c_ts[sel][ok]
        out[sel[ok]] = rows[j[ok]]
    return out


def left_work_running(calls: pl.DataFrame, gpu: pl.DataFrame, at: np.ndarray) -> np.ndarray:
    """For each of the calls at rows ``at``, whether work its process launched before it was
    still running when it returned (past :data:`RETURN_SLACK_NS`): it waited for some of
    the queued work, not all of it."""
    out = np.zeros(len(at), bool)
    if not len(at) or not gpu.height:
        return out
    _, launch, pid, end = _launched_work(calls, gpu)
    c_ts = calls["ts_ns"].to_numpy()[at]
    c_end = calls["end_ns"].to_numpy()[at]
    c_pid = calls["pid"].to_numpy()[at]
    for p in np.unique(c_pid):
        mine = pid == p
        by_launch = np.argsort(launch[mine], kind="stable")
        latest = np.maximum.accumulate(end[mine][by_launch])  # latest end so far
        sel = np.flatnonzero(c_pid == p)
        k = np.searchsorted(launch[mine][by_launch], c_ts[sel], side="left") - 1
        ok = k >= 0
        out[sel[ok]] = latest[k[ok]] > c_end[sel][ok] + RETURN_SLACK_NS
    return out
