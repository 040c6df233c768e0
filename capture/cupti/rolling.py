"""The GPU side of a continuous capture (``zym capture --rotate``): CUPTI's records shared out
among the interval files, nothing lost or given twice at a boundary.

The target's agent writes its spool in segments (``cupti-<pid>-<n>.spool``, a new one every
``ZYM_CUPTI_ROLL_S`` seconds, each starting with the session's header). ``GpuPool.take`` runs
when an interval is finalized (one worker thread, intervals in order): it reads what the
segments hold beyond what it read before, decodes only that, and adds it to the records not
given to a file yet; a segment read to its end and closed (a newer one exists, or its footer
is written) is removed, so the spool's disk use stays near two segments per process.

An interval (eBPF calls by end, ``capture/rotate.py``) gets, from the pool:

* the API records its calls join (``join_calls``: the same join as a one-file capture), and
  those no call joins that ended before the interval's end (no later call can join them: a
  record contains its call);
* the GPU records of those API records (by process and correlation id), and GPU records whose
  API record the pool does not hold (no API record: graph work, APIs not recorded, or a record
  written to an earlier file), by start time before the interval's end;
* NVTX ranges that overlap it, cut at its bounds (paired over the whole run: the start
  markers of ranges still open stay pooled); operator shapes that start before its end.

The last interval takes everything left. Kernel names: CUPTI's records carry pointers to
names in the target's memory; the agent names them at stop, and while the target runs the
pool reads them through ``/proc/<pid>/mem`` (zym runs as root for eBPF).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from zym.analysis.join import LEAD_NS, SEQ_WINDOW_NS, join_calls

from .agent import read_chunks
from .clock import ClockFit, fit_clock
from .decode import CuptiTables, Spool, decode_spool, demangle
from .layouts import cupti_major
from .nvtx import empty_ranges, pair_ranges
from .opshapes import empty_shapes

SEGMENT = re.compile(r"cupti-(\d+)(?:-(\d+))?\.spool$")
MAX_CALIBRATIONS = 512   # the newest kept per process: the fit follows drift on long runs
REACH_NS = 2 * max(LEAD_NS, SEQ_WINDOW_NS)   # how far past its call a call's record may start
NAME_LIMIT = 65536       # bytes of one kernel name read at most


@dataclass
class _Segment:
    """What has been read of one segment file."""

    header: dict = field(default_factory=dict)
    chunks: int = 0          # chunks consumed
    activity: int = 0        # of which activity chunks (marker names count buffers per segment)
    footer: dict | None = None


@dataclass
class GpuPool:
    """CUPTI records read from ``spool_dir`` and not yet written to an interval's file."""

    spool_dir: Path
    keep_raw: bool = False
    window_from_ns: int | None = None   # an attach: CUPTI on from here (set when switched on)
    window_to_ns: int | None = None     # and off here (set when switched off)
    _segments: dict[Path, _Segment] = field(default_factory=dict)
    _calibrations: dict[int, list] = field(default_factory=dict)
    _names: dict[int, dict[int, str]] = field(default_factory=dict)   # pid -> ptr -> name
    _parts: list[CuptiTables] = field(default_factory=list)
    _headers: dict[int, dict] = field(default_factory=dict)
    _stats: dict[int, dict] = field(default_factory=dict)
    unnamed_kernels: int = 0   # kernel pointers no name was found for, since the last take
    totals: dict[str, int] = field(default_factory=dict)   # over the files written (integrate)
    # NVTX records not yet spent, with the clock fits that timed them (per process)
    _markers: list[tuple[dict[int, ClockFit], pl.DataFrame]] = field(default_factory=list)
    _first_ns: int | None = None   # when recording began (the first header's start)
    _stopped_ns: int = 0           # when it ended (the latest footer's stop)

    # ---- reading the spools
    def read(self, final: bool = False) -> None:
        """Decode what the segments hold beyond the last read; remove segments read through.
        An open segment's last activity chunk waits for the next read (its NVTX names chunk
        follows it), unless ``final``."""
        files = sorted(self._files(), key=lambda p: self._order(p))
        newest: dict[int, Path] = {}
        for p in files:
            newest[self._order(p)[0]] = p
        for p in files:
            seg = self._segments.setdefault(p, _Segment())
            chunks = list(read_chunks(str(p)))
            closed = final or newest[self._order(p)[0]] != p
            new = chunks[seg.chunks:]
            if new and not closed and new[-1][0] == "activity" and \
                    not any(k == "footer" for k, _, _ in new):
                new = new[:-1]
            self._consume(p, seg, new)
            if (closed or seg.footer is not None) and seg.chunks == len(chunks) and \
                    not self.keep_raw:
                p.unlink(missing_ok=True)
                self._segments.pop(p, None)

    def _files(self) -> list[Path]:
        return [p for p in Path(self.spool_dir).glob("cupti-*.spool") if SEGMENT.search(p.name)]

    @staticmethod
    def _order(p: Path) -> tuple[int, int]:
        m = SEGMENT.search(p.name)
        return int(m.group(1)), int(m.group(2) or 0)

    def _consume(self, path: Path, seg: _Segment, chunks: list) -> None:
        if not seg.header:   # the header tells how to decode the segment: nothing before it
            seg.header = next((json.loads(p) for k, _, p in chunks if k == "header"), {})
            if not seg.header:
                return
        pid = int(seg.header.get("pid", self._order(path)[0]))
        activity, markers, shapes, dropped = [], {}, [], 0
        for kind, _, payload in chunks:
            if kind == "activity":
                activity.append(payload)
            elif kind == "dropped":
                dropped += int(payload)
            elif kind == "calib":
                cal = self._calibrations.setdefault(pid, [])
                cal.append(json.loads(payload))
                del cal[:-MAX_CALIBRATIONS]
            elif kind == "names":
                named = {int(k): v for k, v in json.loads(payload).items()}
                self._names.setdefault(pid, {}).update(demangle(named))
            elif kind == "marker_names":
                doc = json.loads(payload)
                markers[int(doc["buffer"]) - seg.activity] = {
                    int(k): v for k, v in doc["names"].items()}
            elif kind == "footer":
                seg.footer = json.loads(payload)
                self._stopped_ns = max(self._stopped_ns,
                                       int(seg.footer.get("stopped_mono_ns") or 0))
            elif kind == "op_shapes":
                shapes.append(payload)
        seg.chunks += len(chunks)
        seg.activity += len(activity)
        self._headers.setdefault(pid, seg.header)
        # described from its header at once: a process may spool before any GPU activity
        # (CUDA started, nothing launched yet), and its interval files still name it
        version = int(seg.header.get("cupti_api_version", 130001))
        st = self._stats.setdefault(pid, {
            "pid": pid, "records": 0, "undecoded_bytes": 0, "incomplete": 0, "buffers": 0,
            "nvtx_records": 0, "dropped": 0, "clean_stop": False, "callback_ns": 0, "facts": {},
            "op_shapes": None, "cupti_major": cupti_major(version),
            "nvtx": seg.header.get("nvtx", "off: this agent predates NVTX recording")})
        st["dropped"] += dropped   # this read's (the footer's total spans every interval)
        if not (activity or shapes or any(k == "footer" for k, _, _ in chunks)):
            return
        if self._first_ns is None and seg.header.get("started_mono_ns"):
            self._first_ns = int(seg.header["started_mono_ns"])
        spool = Spool(path, seg.header, activity, self._calibrations.get(pid, []),
                      {}, seg.footer, markers, shapes)
        # timed by the calibrations known now; a later take times them again by its own fit
        t = decode_spool(spool, fit_clock(self._calibrations.get(pid, [])))
        t.gpu = self._name_kernels(t.gpu, pid)
        if t.markers is not None:   # paired when an interval is taken (ranges span reads)
            self._markers.append((t.clock, t.markers))
        self._parts.append(t)
        for k in ("records", "undecoded_bytes", "incomplete", "buffers", "nvtx_records"):
            st[k] = st.get(k, 0) + int(t.stats.get(k, 0) or 0)
        for k in ("pid", "cupti_major", "nvtx"):
            st[k] = t.stats.get(k)
        if seg.footer is not None:
            st |= {"clean_stop": True,
                   "callback_ns": t.stats["callback_ns"], "facts": t.stats["facts"],
                   "op_shapes": t.stats.get("op_shapes")}

    def _name_kernels(self, gpu: pl.DataFrame, pid: int) -> pl.DataFrame:
        """Names for the kernels decoded as ``kernel@<pointer>``: the agent's names chunks,
        else the target's memory while it runs."""
        if not gpu.height or "name" not in gpu.columns:
            return gpu
        unnamed = (gpu.filter(pl.col("name").str.starts_with("kernel@"))["name"]
                   .unique().to_list())
        if not unnamed:
            return gpu
        known = self._names.setdefault(pid, {})
        ptrs = [int(n.removeprefix("kernel@")) for n in unnamed]
        missing = [p for p in ptrs if p not in known]
        if missing:
            known.update(demangle(read_c_strings(pid, missing)))
        mapping = {f"kernel@{p}": known[p] for p in ptrs if p in known}
        self.unnamed_kernels += len(ptrs) - len(mapping)
        return gpu.with_columns(pl.col("name").replace(mapping)) if mapping else gpu

    def _name_pending(self) -> None:
        """Kernels decoded unnamed in an earlier read (the target exiting while its memory was
        read) take the names that arrived since: the agent writes every name at its stop.
        Only names already known: no second read of the target's memory, no second count."""
        for part in self._parts:
            gpu = part.gpu
            if not gpu.height or "name" not in gpu.columns or "pid" not in gpu.columns:
                continue
            unnamed = gpu.filter(pl.col("name").str.starts_with("kernel@"))
            if not unnamed.height:
                continue
            mapping = {}
            for pid, name in unnamed.select("pid", "name").unique().iter_rows():
                known = self._names.get(int(pid), {}).get(int(name.removeprefix("kernel@")))
                if known is not None:
                    mapping[(int(pid), name)] = known
            if mapping:
                keys = pl.DataFrame({"pid": [k[0] for k in mapping], "name": [k[1] for k in mapping],
                                     "_named": list(mapping.values())},
                                    schema={"pid": gpu.schema["pid"], "name": pl.String,
                                            "_named": pl.String})
                part.gpu = (gpu.join(keys, on=["pid", "name"], how="left", maintain_order="left")
                            .with_columns(pl.coalesce("_named", "name").alias("name"))
                            .drop("_named"))

    # ---- sharing out
    def take(self, calls: pl.DataFrame | None, end_ns: int | None, final: bool = False,
             start_ns: int | None = None) -> tuple[CuptiTables, list[dict], dict]:
        """The records of the interval [``start_ns``, ``end_ns``) whose eBPF calls are
        ``calls`` (``final``: every record left); returns them, their spools' headers, and
        counts."""
        self.read(final)
        self._name_pending()
        pool = self._pooled()
        self._markers = [(pool.clock, retimed(m, ("ts_ns",), fits, pool.clock))
                         for fits, m in self._markers]
        self._reset_counts()
        unnamed, self.unnamed_kernels = self.unnamed_kernels, 0   # named by this read
        if final or end_ns is None:
            pool.ranges = self._share_ranges(start_ns, None)
            self._parts = []
            return pool, list(self._headers.values()), {"gpu_ops": pool.gpu.height,
                                                        "kernels_unnamed": unnamed}
        api, gpu = pool.api, pool.gpu
        keys = ["pid", "correlation_id"]
        mine = api.head(0).select(keys)
        window = self.window()
        if calls is not None and window is not None:   # calls CUPTI did not see have no record
            calls = calls.filter(pl.col("ts_ns").is_between(*window))
        # records that could be these calls' (a record starts at most a join window after its
        # call): the records of later intervals would only give the join false candidates
        near = api.filter(pl.col("ts_ns") < end_ns + REACH_NS)
        if calls is not None and calls.height and near.height:
            joined, _ = join_calls(calls.with_columns(pl.lit(True).alias("_iv")), near)
            mine = (joined.filter(pl.col("_iv") & pl.col("correlation_id").is_not_null())
                    .select(pl.col("pid").cast(api["pid"].dtype),
                            pl.col("correlation_id").cast(api["correlation_id"].dtype)))
        mine_api = api.join(mine.unique(), on=keys, how="semi")
        ended = api.join(mine_api.select(keys), on=keys, how="anti").filter(
            pl.col("ts_ns") + pl.col("dur_ns") < end_ns)
        taken_api = pl.concat([mine_api, ended])
        taken_keys, api_keys = taken_api.select(keys).unique(), api.select(keys).unique()
        if gpu.height:
            g = gpu.with_columns(pl.col("pid").cast(api["pid"].dtype),
                                 pl.col("correlation_id").cast(api["correlation_id"].dtype))
            with_api = g.join(api_keys, on=keys, how="semi")
            no_api = g.join(api_keys, on=keys, how="anti")   # null ids too
            by_time = no_api.filter(pl.col("ts_ns") < end_ns)
            taken_gpu = pl.concat([with_api.join(taken_keys, on=keys, how="semi"),
                                   by_time]).sort("ts_ns")
            rest_gpu = pl.concat([with_api.join(taken_keys, on=keys, how="anti"),
                                  no_api.filter(pl.col("ts_ns") >= end_ns)])
        else:
            taken_gpu = rest_gpu = by_time = gpu
        shapes_before = pl.col("start_ns") < end_ns
        taken = CuptiTables(api=taken_api, gpu=taken_gpu,
                            ranges=self._share_ranges(start_ns, end_ns),
                            clock=pool.clock, stats=pool.stats,
                            shapes=pool.shapes.filter(shapes_before))
        self._parts = [CuptiTables(
            api=api.join(taken_keys, on=keys, how="anti"), gpu=rest_gpu, clock=pool.clock,
            shapes=pool.shapes.filter(~shapes_before))]
        return taken, list(self._headers.values()), {
            "gpu_ops": taken_gpu.height, "gpu_ops_by_time": by_time.height,
            "gpu_ops_held": rest_gpu.height, "api_records_held": self._parts[0].api.height,
            "kernels_unnamed": unnamed}

    def _pooled(self) -> CuptiTables:
        from .decode import _api_frame

        parts = self._parts
        clock = {pid: fit_clock(c) for pid, c in self._calibrations.items() if c}
        # Records read early were timed by the few calibration points known then (one, maybe
        # taken with the process descheduled: microseconds off, enough to join a call to its
        # neighbour's record); the records still pooled are timed again by today's fit.
        apis = [retimed(t.api, ("ts_ns",), t.clock, clock) for t in parts if t.api.height]
        gpus = [retimed(t.gpu, ("ts_ns",), t.clock, clock) for t in parts if t.gpu.height]
        return CuptiTables(
            api=pl.concat(apis, how="diagonal_relaxed") if apis else _api_frame({}, {}, None),
            gpu=pl.concat(gpus, how="diagonal_relaxed") if gpus else pl.DataFrame(),
            shapes=pl.concat([t.shapes for t in parts]) if parts else empty_shapes(),
            clock=clock, stats={"spools": [dict(s) for s in self._stats.values()]})

    def _share_ranges(self, start_ns: int | None, end_ns: int | None) -> pl.DataFrame:
        """The NVTX ranges of the interval [``start_ns``, ``end_ns``): the pooled markers
        paired (a range may have started in an earlier read, or interval), each range that
        overlaps the interval cut to its bounds (``clipped`` says which ends were cut);
        the markers of ranges not over by ``end_ns`` stay pooled (None: the last interval)."""
        markers = (pl.concat([m for _, m in self._markers], how="vertical_relaxed")
                   if self._markers else None)
        if markers is None or markers.height == 0:
            self._markers = []
            return empty_ranges()
        first = min(self._first_ns or int(markers["ts_ns"].min()), int(markers["ts_ns"].min()))
        last = max(self._stopped_ns if end_ns is None else end_ns, int(markers["ts_ns"].max()))
        ranges = pair_ranges(markers, first, last)
        lo = first if start_ns is None else start_ns
        hi = 2**63 - 1 if end_ns is None else end_ns
        stop = pl.col("ts_ns") + pl.col("dur_ns")
        mark = pl.col("kind") == "nvtx_mark"
        inside = pl.when(mark).then(pl.col("ts_ns").is_between(lo, hi, closed="left")) \
            .otherwise((pl.col("ts_ns") < hi) & (stop > lo))
        cut_start = ~mark & (pl.col("ts_ns") < lo)
        cut_end = ~mark & (stop > hi)
        was_start = pl.col("clipped").is_in(["start", "both"]).fill_null(False)
        was_end = pl.col("clipped").is_in(["end", "both"]).fill_null(False)
        head, tail = cut_start | was_start, cut_end | was_end
        mine = ranges.filter(inside).with_columns(
            pl.max_horizontal("ts_ns", pl.lit(lo)).alias("ts_ns"),
            pl.when(cut_start | cut_end)
            .then(pl.min_horizontal(stop, pl.lit(hi)) - pl.max_horizontal("ts_ns", pl.lit(lo)))
            .otherwise(pl.col("dur_ns")).alias("dur_ns"),
            pl.when(head & tail).then(pl.lit("both")).when(head).then(pl.lit("start"))
            .when(tail).then(pl.lit("end")).alias("clipped"))
        if end_ns is None:
            self._markers = []
        else:   # kept: markers from end_ns on, and the starts of ranges still open at end_ns
            going = ranges.filter(~mark & (pl.col("ts_ns") < end_ns) & (stop >= end_ns)
                                  & ~pl.col("clipped").is_in(["start"]).fill_null(False))
            starts = markers.join(going.select("pid", "tid", "ts_ns"),
                                  on=["pid", "tid", "ts_ns"], how="semi")
            fits = self._markers[0][0] if self._markers else {}
            self._markers = [(fits, pl.concat([starts, markers.filter(pl.col("ts_ns") >= end_ns)]))]
        return mine.select(ranges.columns)

    def _reset_counts(self) -> None:
        """Each file's statistics count the records read for it."""
        for st in self._stats.values():
            for k in ("records", "undecoded_bytes", "incomplete", "buffers", "nvtx_records",
                      "dropped"):
                st[k] = 0

    def pids(self) -> list[int]:
        """The processes that write spools here."""
        return sorted(set(self._headers) | {self._order(p)[0] for p in self._files()})

    def window(self) -> tuple[int, int] | None:
        """CUPTI's recording window of an attach (None: it recorded throughout)."""
        if self.window_from_ns is None:
            return None
        return self.window_from_ns, self.window_to_ns or 2**63 - 1


def read_c_strings(pid: int, pointers: list[int]) -> dict[int, str]:
    """NUL-terminated strings at ``pointers`` in process ``pid`` (those that can be read)."""
    from zym.capture.process import ProcessMemory

    out: dict[int, str] = {}
    try:
        mem = ProcessMemory(pid)
    except OSError:
        return out
    try:
        for ptr in pointers:
            data, addr = b"", ptr
            while len(data) < NAME_LIMIT and b"\0" not in data:
                step = 4096 - addr % 4096   # never across a page it may not map
                try:
                    data += mem.read(addr, step)
                except OSError:
                    break
                addr += step
            if b"\0" in data or len(data) >= NAME_LIMIT:   # a longer name is cut at the limit
                out[ptr] = data.split(b"\0", 1)[0][:NAME_LIMIT].decode(errors="replace")
    finally:
        mem.close()
    return out


def retimed(frame: pl.DataFrame, columns: tuple[str, ...], old: dict[int, ClockFit],
            new: dict[int, ClockFit]) -> pl.DataFrame:
    """``frame``'s times (``columns``, CLOCK_MONOTONIC as each process's fit in ``old``
    converted them) as the fits in ``new`` convert them."""
    moved = {pid: (fit, new[pid]) for pid, fit in old.items() if pid in new and fit != new[pid]}
    if not moved or not frame.height or "pid" not in frame.columns:
        return frame
    pids = frame["pid"].to_numpy()
    out = []
    for col in (c for c in columns if c in frame.columns):
        t = frame[col].to_numpy().astype(np.int64)
        for pid, (was, now) in moved.items():
            mine = pids == pid
            if mine.any():
                t[mine] += was.delta_to(now, t[mine])
        out.append(pl.Series(col, t, dtype=frame.schema[col]))
    return frame.with_columns(out)
