"""Continuous capture: one capture file per interval (``zym capture --rotate 60s``).

The eBPF session runs once; only its raw writer turns over. Intervals are half-open ranges
``[start, end)`` of CLOCK_MONOTONIC (the clock of the calls' ``ts_ns``), back to back from the
capture's start, so each call belongs to exactly one: the interval in which it **ended**
(``ts_ns + dur_ns``; a call is sent when it returns, or at entry when its return is not
probed, so a call's end is never later than its arrival). At a boundary a new raw writer
takes the calls that end after it; the previous one stays open until ``GRACE_S`` after its
end for the calls still in flight that end inside it (each call goes to the open interval that
holds its end), then is finalized into its file in a background thread (the ring buffer keeps
being read meanwhile). A call that arrives later than that (it would have to wait ``GRACE_S``
in the ring) goes to the oldest open interval and is counted in
``meta.extra.interval.late_calls``.

The GPU side (``gpu``, from ``capture/cupti/rolling.py``) is added to an interval's tables
before they are written; CUPTI hands its records over once per flush period, so with it an
interval stays open ``grace_s`` (longer than ``GRACE_S``).

Stacks are interned once per capture (the kernel sends a stack the first time it is seen):
every frame row recorded so far is written again into each new interval's raw stream, so each
file resolves its own stacks. ``keep``: only the newest ``keep`` files of this run are kept.
"""
from __future__ import annotations

import copy
import functools
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from zym.schemas.errors import CaptureError
from zym.schemas.meta import CaptureMeta

from .sink import RawWriter, finalize, write_raw_meta

GRACE_S = 1.0
MIN_ROTATE_S = 0.1
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

Log = Callable[[str], None]


def parse_interval(text: str) -> float:
    """'60s', '5m', '1h', '500ms' or plain seconds -> seconds; CaptureError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text or "")
    if not m:
        raise CaptureError(f"--rotate {text!r}: give an interval such as 60s, 5m or 1h")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds < MIN_ROTATE_S:
        raise CaptureError(f"--rotate {text!r}: the interval must be at least "
                           f"{MIN_ROTATE_S * 1000:.0f} ms")
    return seconds


def interval_path(output: Path, start_unix_ns: int, index: int) -> Path:
    """``out.parquet`` -> ``out-20261201T181500.123Z-0003.parquet`` (start time, UTC)."""
    t = datetime.fromtimestamp(start_unix_ns / 1e9, timezone.utc)
    stamp = t.strftime("%Y%m%dT%H%M%S") + f".{t.microsecond // 1000:03d}Z"
    suffix = output.suffix or ".parquet"
    return output.with_name(f"{output.name.removesuffix(output.suffix)}-{stamp}-{index:04d}"
                            f"{suffix}")


@dataclass
class _Interval:
    index: int
    start_ns: int  # CLOCK_MONOTONIC
    end_ns: int
    raw_dir: Path
    writer: RawWriter
    calls: int = 0
    late_calls: int = 0
    close_at: float = 0.0  # monotonic seconds: finalize after this
    final: bool = False    # the run's last interval (it takes every GPU record left)


@dataclass
class RotatingWriter:
    """Stands in for the session's ``RawWriter``: same ``add_calls``/``add``/``flush``/
    ``maybe_flush``/``close``, turning over every ``period_s``.

    ``meta_for(dropped_before)`` gives the metadata of an interval being finalized (the
    session's counters at that moment); the interval's bounds and labels are added here.
    """

    output: Path
    period_s: float
    meta_for: Callable[[], CaptureMeta]
    labels: dict[str, str] = field(default_factory=dict)
    keep: int | None = None
    log: Log = print
    start_ns: int = field(default_factory=time.monotonic_ns)
    written: list[Path] = field(default_factory=list)
    rows: dict = field(default_factory=dict)
    # The GPU side (capture/cupti/rolling.py): gives an interval's tables its share of CUPTI's
    # records, ``gpu(tables, meta, *, start_ns, end_ns, final) -> tables``; None: CPU side only.
    gpu: Callable[..., dict] | None = None
    grace_s: float = GRACE_S

    def __post_init__(self) -> None:
        import polars  # noqa: F401  (imported now: an import in the writing thread would
        import pyarrow.parquet  # noqa: F401  hold the interpreter while the ring fills)

        self._unix_offset = time.time_ns() - time.monotonic_ns()
        self._frames: list[tuple[str, dict]] = []
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="zym-rotate")
        self._pending: list[Future] = []
        self._lock = threading.Lock()
        # Intervals still taking calls, oldest first; the last one is the current interval.
        self._open_ivs: list[_Interval] = []
        self._dropped_before: dict[str, int] = {}
        self._open_ivs.append(self._open(0, self.start_ns))

    @property
    def _current(self) -> _Interval:
        return self._open_ivs[-1]

    # ---- the RawWriter interface the collector uses
    def add_calls(self, records: np.ndarray) -> None:
        self.rotate_if_due(time.monotonic_ns())
        if not len(records):
            return
        end = records["ts_ns"].astype(np.int64) + records["dur_ns"].astype(np.int64)
        starts = np.array([iv.start_ns for iv in self._open_ivs], np.int64)
        at = np.searchsorted(starts, end, side="right") - 1
        late = at < 0  # ended before every open interval: kept, in the oldest, and counted
        if late.any():
            self._open_ivs[0].late_calls += int(late.sum())
            at[late] = 0
        for i, iv in enumerate(self._open_ivs):
            mine = at == i
            n = int(mine.sum())
            if n:
                iv.writer.add_calls(records if n == len(records) else records[mine])
                iv.calls += n

    def add(self, table: str, **row) -> None:
        if table in ("frames", "natives", "maps"):
            self._frames.append((table, row))
        for iv in self._open_ivs:
            iv.writer.add(table, **row)

    def maybe_flush(self) -> None:
        now = time.monotonic_ns()
        self.rotate_if_due(now)
        for iv in self._open_ivs:
            iv.writer.maybe_flush()
        while len(self._open_ivs) > 1 and now / 1e9 >= self._open_ivs[0].close_at:
            iv = self._open_ivs.pop(0)
            self._submit(iv, iv.end_ns)

    def flush(self) -> None:
        for iv in self._open_ivs:
            iv.writer.flush()

    def close(self) -> None:
        """Stop writing (the session calls this once the target is done)."""
        self.flush()

    # ---- turning over
    def _open(self, index: int, start_ns: int) -> _Interval:
        end_ns = self.start_ns + int((index + 1) * self.period_s * 1e9)
        raw_dir = self.output.with_name(f"{self.output.name}.raw-{index:04d}")
        if raw_dir.exists():
            shutil.rmtree(raw_dir)
        writer = RawWriter(raw_dir)
        for table, row in self._frames:  # each file resolves its own stacks and native paths
            writer.add(table, **row)
        return _Interval(index, start_ns, end_ns, raw_dir, writer)

    def begin(self, now_ns: int) -> None:
        """Recording starts now (the probes are in): the first interval starts here, not when
        the writer was made (compiling the probes takes seconds, more on a loaded host: those
        would be files of nothing). Once a call is in, the intervals stay where they are."""
        iv = self._current
        if len(self._open_ivs) == 1 and iv.index == 0 and iv.calls == 0:
            self.start_ns = iv.start_ns = now_ns
            iv.end_ns = now_ns + int(self.period_s * 1e9)

    def rotate_if_due(self, now_ns: int) -> None:
        while now_ns >= self._current.end_ns:
            old = self._current
            old.close_at = old.end_ns / 1e9 + self.grace_s
            self._open_ivs.append(self._open(old.index + 1, old.end_ns))

    def _submit(self, iv: _Interval, end_ns: int) -> None:
        iv.writer.close()
        meta = self._interval_meta(iv, end_ns)
        self._pending.append(self._pool.submit(self._write, iv, meta))

    def _interval_meta(self, iv: _Interval, end_ns: int) -> CaptureMeta:
        meta = copy.deepcopy(self.meta_for())
        totals = dict(meta.dropped)
        meta.dropped = {k: v - self._dropped_before.get(k, 0) for k, v in totals.items()}
        self._dropped_before = totals
        meta.extra["labels"] = dict(self.labels)
        meta.extra["interval"] = {
            "index": iv.index, "period_s": self.period_s,
            "start_mono_ns": iv.start_ns, "end_mono_ns": end_ns,
            "start_unix_ns": iv.start_ns + self._unix_offset,
            "end_unix_ns": end_ns + self._unix_offset,
            "calls": iv.calls, "late_calls": iv.late_calls,
            "rule": "a call belongs to the interval in which it ended as its probes saw it "
                    "(ts_ns + dur_ns; the entry when its return is not probed)",
        }
        meta.extra.pop("capture_cost", None)  # measured over the whole run, not this file
        return meta

    def _write(self, iv: _Interval, meta: CaptureMeta) -> Path | None:
        path = interval_path(self.output, iv.start_ns + self._unix_offset, iv.index)
        write_raw_meta(iv.raw_dir, meta)
        add = None if self.gpu is None else functools.partial(
            self.gpu, start_ns=iv.start_ns, end_ns=iv.end_ns, final=iv.final)
        try:
            tables = finalize(iv.raw_dir, path, meta, add)
        except Exception as e:  # noqa: BLE001 (keep the raw interval for --finalize)
            self.log(f"interval {iv.index}: cannot write {path.name} ({e}); its raw calls are "
                     f"kept in {iv.raw_dir}")
            return None
        shutil.rmtree(iv.raw_dir, ignore_errors=True)
        with self._lock:
            self.written.append(path)
            self.rows[path] = tables["call"].height
            self._prune()
        self.log(f"interval {iv.index}: {tables['call'].height} calls -> {path}")
        return path

    def _prune(self) -> None:
        if self.keep is None:
            return
        while len(self.written) > self.keep:
            old = self.written.pop(0)
            old.unlink(missing_ok=True)

    def finish(self, stop_ns: int) -> list[Path]:
        """Finalize the intervals still open (the last one ends at ``stop_ns``) and wait for
        every file to be written; returns the files kept."""
        cur = self._current
        cur.end_ns = max(stop_ns, cur.start_ns)
        cur.final = True
        for iv in self._open_ivs:
            self._submit(iv, iv.end_ns)
        self._open_ivs = []
        for f in self._pending:
            f.result()
        self._pool.shutdown()
        return list(self.written)

    def abandon(self) -> None:
        """A capture that failed: close the writers, remove their raw folders."""
        for iv in self._open_ivs:
            iv.writer.close()
            shutil.rmtree(iv.raw_dir, ignore_errors=True)
        self._pool.shutdown(wait=True)
