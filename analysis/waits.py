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
# Streams up to this many are told apart by a mask each; past it, by one sort of the work.
FEW_STREAMS = 16


def sync_rows(calls: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``calls`` that are event syncs (``cudaEventSynchronize``) and stream syncs
    (API names by :data:`zym.schemas.apis.EVENT_SYNC_PATTERN` and ``STREAM_SYNC_PATTERN``,
    tested once per distinct name)."""
    def which(names: pl.Series) -> pl.Series:
        name = pl.lit(names)
        return pl.select(pl.when(is_event_sync(name)).then(1).when(is_stream_sync(name))
                         .then(2).otherwise(0).cast(pl.Int8)).to_series()

    code = per_distinct(calls["api"], which).fill_null(0).to_numpy()
    return np.flatnonzero(code == 1), np.flatnonzero(code == 2)


def partial_waits(calls: pl.DataFrame, gpu: pl.DataFrame,
                  blocking: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The waiting calls that waited for part of the queued work, and for which operation
    (rows of ``calls`` and of ``gpu``; ``blocking``: whether each call blocks): event syncs,
    and stream syncs that left work running (another stream's); each waited for the
    operation :func:`event_awaited` finds. Where none is found (nothing had ended by its
    return) the call is left out: read as waiting for every operation before it."""
    events, streams = sync_rows(calls)
    events, streams = events[blocking[events]], streams[blocking[streams]]
    if not len(events) and not len(streams):
        return events, events
    work = _launched_work(gpu)
    if len(streams):
        streams = streams[left_work_running(calls, gpu, streams, work)]
    at = np.sort(np.concatenate([events, streams])).astype(np.int64)  # (disjoint)
    op = event_awaited(calls, gpu, at, work)
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


def _streams(calls: pl.DataFrame, gpu: pl.DataFrame, rows: np.ndarray,
             call: np.ndarray) -> list[np.ndarray]:
    """Positions in ``rows``/``call`` (the launched work, in launch order) of each stream's
    work (a stream: of one process, on one device), in launch order."""
    if not len(rows):
        return []
    keys = {k: gpu[c].fill_null(-1).to_numpy()[rows]
            for k, c in (("s", "stream_id"), ("d", "device_id"))}
    pid = calls["pid"].to_numpy()
    if pid.min() != pid.max():
        keys["p"] = pid[call]
    if all(k.min() == k.max() for k in keys.values()):
        return [np.arange(len(rows))]
    frame = pl.DataFrame(keys)
    distinct = frame.unique()
    if distinct.height <= FEW_STREAMS:  # a mask each (a pass per stream over the work)
        out = []
        for row in distinct.iter_rows(named=True):
            mask = np.ones(len(rows), bool)
            for name, value in row.items():
                mask &= keys[name] == value
            out.append(np.flatnonzero(mask))
        return out
    group = frame.select(pl.struct(list(keys)).rank("dense")).to_series()
    group = group.to_numpy().astype(np.uint16 if group.max() < 1 << 16 else np.int64)
    order = np.argsort(group, kind="stable")  # (radix on 16 bits: launch order kept)
    cuts = np.flatnonzero(np.diff(group[order])) + 1
    return np.split(order, cuts)


def event_awaited(calls: pl.DataFrame, gpu: pl.DataFrame, at: np.ndarray,
                  work: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """For each of the calls at rows ``at`` (event syncs, stream syncs beside another stream's
    work), the operation (row of ``gpu``) it waited for: among the work its process launched before it (by earlier calls), the one
    that ended last by its return (plus :data:`RETURN_SLACK_NS`; the later row where two end
    together); -1 where none did. A stream runs its work in launch order, so on each stream
    that is the last of a prefix: the streams' candidates are compared, no operation is
    sorted by its end. ``work``: :func:`_launched_work` of ``gpu``, where at hand."""
    neg = -(1 << 62)
    best_end = np.full(len(at), neg, np.int64)
    best = np.full(len(at), -1, np.int64)
    if not len(at) or not gpu.height:
        return best
    rows, call, end = work if work is not None else _launched_work(gpu)
    c_end = calls["end_ns"].to_numpy()[at] + RETURN_SLACK_NS
    pid = calls["pid"].to_numpy()
    for g in _streams(calls, gpu, rows, call):
        sel = np.flatnonzero(pid[at] == pid[call[g[0]]])
        call_g, end_g = call[g], end[g]
        latest = np.maximum.accumulate(end_g)  # (ends in launch order: sorted unless skewed)
        j = np.minimum(np.searchsorted(latest, c_end[sel], side="right"),
                       np.searchsorted(call_g, at[sel], side="left")) - 1
        ok = j >= 0
        j = np.maximum(j, 0)
        e, r = np.where(ok, end_g[j], neg), rows[g][j]
        better = ok & ((e > best_end[sel]) | ((e == best_end[sel]) & (r > best[sel])))
        best_end[sel[better]], best[sel[better]] = e[better], r[better]
    return best


# What :func:`latest_end_before` gives where no work was launched before.
NO_END = -(1 << 62)


def latest_end_before(launched: np.ndarray, end: np.ndarray, at: np.ndarray,
                      overwrite: bool = False) -> np.ndarray:
    """The latest end of work launched before each of ``at``: ``launched``, when each
    operation was launched (its launching call's row, or its time; in order), ``end`` when it
    ended; ``at`` in the same terms (calls' rows, or times). :data:`NO_END` where nothing was
    launched before. ``overwrite``: ``end`` may be overwritten (no copy of it is made). (The
    fact both the waits here and the replay's waiting calls read.)"""
    if not len(launched):
        return np.full(len(at), NO_END, np.int64)
    latest = np.maximum.accumulate(end, out=end if overwrite else None)
    k = np.searchsorted(launched, at, side="left") - 1
    out = latest[np.maximum(k, 0)]
    out[k < 0] = NO_END
    return out


def left_work_running(calls: pl.DataFrame, gpu: pl.DataFrame, at: np.ndarray,
                      work: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """For each of the calls at rows ``at``, whether work its process launched before it (by
    earlier calls) was still running when it returned (past :data:`RETURN_SLACK_NS`): it
    waited for some of the queued work, not all of it. ``work``: :func:`_launched_work` of
    ``gpu``, where at hand."""
    out = np.zeros(len(at), bool)
    if not len(at) or not gpu.height:
        return out
    _, call, end = work if work is not None else _launched_work(gpu)
    c_end = calls["end_ns"].to_numpy()[at] + RETURN_SLACK_NS
    for ops, sel in _by_process(calls, call, at):
        out[sel] = latest_end_before(call[ops], end[ops], at[sel]) > c_end[sel]
    return out
