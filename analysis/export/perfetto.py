"""Perfetto export: a capture as a native Perfetto trace (``.pftrace``), for ui.perfetto.dev.

What the trace holds (one packet sequence, so interning works across it):

* a process track per process; a thread track per CPU thread with the Python frame and torch op
  spans and a slice per CUDA API call, nested; work that overlaps without nesting goes to
  "overlap" tracks (see :mod:`.lanes`), never into an improperly nested slice;
* per process and GPU a "GPU n" track group, one track per stream, a slice per kernel, copy and
  memset (grid, block, bytes, direction as arguments), syncs on a "sync" track beside the stream;
* a flow from every call to each piece of GPU work it caused (same process, correlation id);
* interned callstacks: each call carries its stack (leaf: the GPU operation it caused), weighted
  by the GPU time it caused; each GPU slice carries the same stack weighted by its own duration.
  Area-selecting thread or stream tracks in the UI shows a GPU-time flamegraph;
* an "NVTX" track under each thread that opened NVTX ranges: a slice per range, nested as the
  ranges nested (ranges that cross go to overlap tracks), an instant per ``nvtxMark``; the
  slice carries the range's full name, its domain and, for a range the capture cut at its
  start or end, ``clipped``;
* a "zym findings" track per process: one instant per finding occurrence;
* counters per GPU: busy % and copy bandwidth (GB/s).

Writing: track descriptors and interned data are built with the generated classes of the
``perfetto`` package; the events are encoded column-wise by :mod:`.protowire` and streamed to the
file in chunks, sorted by time (:mod:`.encoding`).

>>> from zym.analysis.export.source import load_export_source      # doctest: +SKIP
>>> export_perfetto(load_export_source("trace.json.gz"), "out.pftrace")  # doctest: +SKIP
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackDescriptor

from .encoding import (
    ANNOTATIONS,
    SEQ,
    SHAPE_CALL,
    SHAPE_COLUMNS,
    SHAPE_COUNTER,
    SHAPE_END,
    SHAPE_FINDING,
    SHAPE_GPU,
    SHAPE_RANGE,
    SHAPE_SPAN,
    EventPlan,
    encode_events,
)
from .flamegraph import UNKNOWN, frame_label
from .interning import Interner
from .lanes import END, INSTANT, lanes_for, nesting_violations, ordered_events
from .source import ExportSource

COUNTER = 4  # TrackEvent.TYPE_COUNTER
CHUNK_EVENTS = 1 << 20  # events encoded and written per step
# What the export of a capture's whole timeline holds at its peak, a call, GPU operation, span
# or range of the capture (peak RSS less the fixed part, by rows; docs/benchmarks.md, fortieth
# round): with spans recorded, the bundled trace x60's capture (8.6 M rows) 389 B; without
# (eBPF captures: spans rebuilt from the calls' stacks, which the row count does not hold), the
# synthetic 1 M capture 515 B, the bundled eBPF capture x100 (1.4 M rows, long kernel names)
# 847 B (the round before: 1,177 B, where 480 B was assumed for every capture).
TIMELINE_ROW_BYTES = 500
TIMELINE_ROW_BYTES_NO_SPANS = 900
TIMELINE_FIXED_BYTES = 300 << 20
# The Perfetto UI in a browser holds a trace in ~2 GB of memory, taking 2-4x the trace's size
# (perfetto.dev/docs/visualization/large-traces): a larger trace than this seldom opens there;
# Perfetto's trace_processor --httpd opens any size for the same UI.
UI_TRACE_BYTES = 1 << 30
CATEGORY = {"python": "python_function", "native": "python_function", "torch_op": "cpu_op",
            "nvtx": "nvtx",
            "kernel": "kernel", "copy": "gpu_memcpy", "memset": "gpu_memset", "sync": "cuda_sync"}


@dataclass
class PerfettoStats:
    path: Path
    events: int  # slices, instants and counter samples written
    packets: int
    bytes: int
    seconds: float
    overlap_tracks: int  # extra tracks opened for work that did not nest


def check_timeline_fits(cap, then: str) -> None:
    """A one-line error where the whole timeline of the zym capture ``cap`` would take more
    memory than is available now (estimated from its rows, :func:`timeline_row_bytes`): it
    names the capture's length and ``then``, what to do instead (export a part of it)."""
    from zym.schemas.errors import InputError
    from zym.schemas.memory import available_bytes
    from zym.schemas.output import display

    from ..budget import rows_and_time

    available = available_bytes()
    everything = cap.file_rows()
    if available is None or \
            TIMELINE_FIXED_BYTES + TIMELINE_ROW_BYTES_NO_SPANS * everything <= available:
        return  # (fits, whatever its tables: the row groups' metadata is not read)
    rows, clock = rows_and_time(cap)
    events = sum(rows.values())  # (the capture's rows)
    need = TIMELINE_FIXED_BYTES + timeline_row_bytes(rows) * events
    if need <= available:
        return
    lasts = f" (it lasts {(clock[1] - clock[0]) / 1e9:.1f} s)" if clock else ""
    raise InputError(f"{display(cap.path)}: its whole timeline ({events:,} calls, GPU operations, "
                     f"spans and ranges) would take "
                     f"~{need / 1e9:.1f} GB, more than the {available / 1e9:.1f} GB available: "
                     f"{then}{lasts}")


def ui_size_note(size: int, name: str) -> str | None:
    """What to do with a trace of ``size`` bytes (file ``name``) too large for the Perfetto UI
    in a browser (:data:`UI_TRACE_BYTES`); None for one it opens."""
    if size <= UI_TRACE_BYTES:
        return None
    return (f"{name} is {size / 1e9:.1f} GB: more than the Perfetto UI opens in a browser "
            f"(~{UI_TRACE_BYTES / 1e9:.1f} GB; it holds 2-4x a trace's size in ~2 GB). Open it "
            f"with Perfetto's trace_processor --httpd {name} (ui.perfetto.dev then uses it), "
            "or export a part: zym export CAPTURE --window FROM:TO")


def timeline_row_bytes(rows: dict[str, int]) -> int:
    """Bytes a row of a capture with ``rows`` rows per table takes in the export of its whole
    timeline: more where it records no spans (they are rebuilt from the calls' stacks)."""
    return TIMELINE_ROW_BYTES if rows.get("span") else TIMELINE_ROW_BYTES_NO_SPANS


def export_perfetto(src: ExportSource, out: str | Path, chunk_events: int = CHUNK_EVENTS
                    ) -> PerfettoStats:
    """Write ``src`` as a Perfetto trace to ``out``, a chunk of events at a time. Not atomic by
    itself: a user's file is written through ``schemas.output.atomic_output`` (`zym export`
    passes its temporary file). A second temporary file of its own here, renamed onto that
    one, was once left behind by an interrupted `zym export` (1 of 150 rounds of
    bench/interrupts.py), where no later write removes it."""
    t0 = time.perf_counter()
    out = Path(out)
    builder = _TraceBuilder(src)
    events = builder.events()
    packets, size = 0, 0
    with open(out, "wb") as f:
        head = builder.header_packets()
        f.write(head)
        size += len(head)
        packets += builder.n_header_packets
        for start in range(0, events.order.height, chunk_events):
            chunk = encode_events(events, builder.annotation_iids, start, chunk_events)
            f.write(chunk)
            size += len(chunk)
        packets += events.order.height
    return PerfettoStats(out, events.order.height, packets, size, time.perf_counter() - t0,
                         builder.overlap_tracks)


def perfetto_bytes(src: ExportSource) -> bytes:
    """The whole trace in memory (tests, small captures)."""
    builder = _TraceBuilder(src)
    events = builder.events()
    return builder.header_packets() + encode_events(events, builder.annotation_iids, 0,
                                                     events.order.height)


# ---------------------------------------------------------------------------------------------
# Building the tables

class _TraceBuilder:
    def __init__(self, src: ExportSource) -> None:
        self.src = src
        self.data = src.data
        self.intern = Interner()
        self.tracks: dict[tuple, TrackDescriptor] = {}
        self.overlap_tracks = 0
        self.n_header_packets = 0
        self.annotation_iids: dict[str, int] = {}
        self.t_first = self._first_ts()

    # --- tracks ---------------------------------------------------------------------------
    def _track(self, key: tuple, fill) -> int:
        if key not in self.tracks:
            d = TrackDescriptor()
            d.uuid = len(self.tracks) + 1  # small uuids: short varints on every event
            fill(d)
            self.tracks[key] = d
        return self.tracks[key].uuid

    def process_track(self, pid: int) -> int:
        def fill(d):
            d.process.pid = _int32(pid)
            d.process.process_name = f"{Path(self.data.meta.source or 'python').name} ({pid})"
        return self._track(("process", pid), fill)

    def thread_track(self, pid: int, tid: int, lane: int) -> int:
        parent = self.process_track(pid)
        if lane:
            self.overlap_tracks += ("thread", pid, tid, lane) not in self.tracks

            def fill_overlap(d):
                d.parent_uuid, d.name = parent, f"Thread {tid} (overlap {lane})"
                d.description = f"Work of thread {tid} that overlaps its other slices without nesting"
            return self._track(("thread", pid, tid, lane), fill_overlap)

        def fill(d):
            d.parent_uuid = parent
            d.thread.pid, d.thread.tid = _int32(pid), _int32(tid)
            d.thread.thread_name = "main thread" if tid == pid else f"thread {tid}"
        return self._track(("thread", pid, tid, 0), fill)

    def nvtx_track(self, pid: int, tid: int, lane: int) -> int:
        parent = self.thread_track(pid, tid, 0)
        self.overlap_tracks += bool(lane) and ("nvtx", pid, tid, lane) not in self.tracks

        def fill(d):
            d.parent_uuid = parent
            d.name = "NVTX" + (f" (overlap {lane})" if lane else "")
            d.description = f"NVTX ranges opened on thread {tid}"
        return self._track(("nvtx", pid, tid, lane), fill)

    def gpu_track(self, pid: int, device: int) -> int:
        parent = self.process_track(pid)
        gpus = {g.get("id"): g.get("name") for g in self.data.meta.gpus}

        def fill(d):
            d.parent_uuid = parent
            d.name = f"GPU {device}" + (f" ({gpus[device]})" if gpus.get(device) else "")
            d.child_ordering = TrackDescriptor.EXPLICIT
            d.sibling_order_rank = 1000 + int(device)
        return self._track(("gpu", pid, device), fill)

    def stream_track(self, pid: int, device: int, stream: int, sync: bool, lane: int) -> int:
        parent = self.gpu_track(pid, device)
        self.overlap_tracks += bool(lane) and ("stream", pid, device, stream, sync, lane) \
            not in self.tracks
        label = f"Stream {stream}" + (" sync" if sync else "") + (f" (overlap {lane})" if lane
                                                                  else "")

        def fill(d):
            d.parent_uuid, d.name = parent, label
            d.description = f"CUDA stream {stream} on device {device}"
            d.sibling_order_rank = min(max(int(stream), 0), 1 << 24) * 64 + 32 * sync + lane
            d.sibling_merge_behavior = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
        return self._track(("stream", pid, device, stream, sync, lane), fill)

    def findings_track(self, pid: int) -> int:
        parent = self.process_track(pid)

        def fill(d):
            d.parent_uuid, d.name = parent, "zym findings"
            d.description = "One instant per occurrence of a zym rule finding"
            d.sibling_order_rank = -1
        return self._track(("findings", pid), fill)

    def counter_track(self, pid: int, device: int, name: str, unit: str) -> int:
        parent = self.gpu_track(pid, device)

        def fill(d):
            d.parent_uuid, d.name = parent, name
            d.counter.unit_name = unit
            d.sibling_order_rank = -1
        return self._track(("counter", pid, device, name), fill)

    # --- events ---------------------------------------------------------------------------
    def _first_ts(self) -> int:
        d = self.data
        firsts = [int(t.min()) for t in (self.src.spans["ts_ns"], d.calls["ts_ns"], d.gpu["ts_ns"],
                                          self.src.ranges["ts_ns"]) if t.len()]
        return min(firsts) if firsts else 0

    def events(self) -> EventPlan:
        """Every event (slice begin/end, instant, counter sample) in write order, with the
        payload tables of each packet shape."""
        tables, order = self._slices()
        orders = [order.select("ts_ns", "type", "track", "rank", "tie", "shape", "src")]
        for shape, df in ((SHAPE_FINDING, self._finding_events()),
                          (SHAPE_COUNTER, self._counter_events())):
            if df.height:
                orders.append(df.select("ts_ns", "type", "track", "rank", "tie",
                                        pl.lit(shape, pl.Int8).alias("shape"),
                                        pl.int_range(pl.len(), dtype=pl.Int64).alias("src")))
                tables[shape] = df.drop("ts_ns", "type", "track", "rank", "tie", "shape",
                                        strict=False)
        self.annotation_iids = {name: self.intern.iid("debug_annotation_names", name)
                                for name, _col, _kind in ANNOTATIONS}
        tables = {k: self._intern_strings(v) for k, v in tables.items()}
        order = orders[0]
        if len(orders) > 1:  # merge the few other events into the sorted slice events
            extra = pl.concat(orders[1:], how="vertical_relaxed").sort("ts_ns", "rank", "tie",
                                                                        maintain_order=True)
            order = _merge_by_time(order, extra)
        return EventPlan(order.select("ts_ns", "type", "track", "shape", "src"), tables)

    def _intern_strings(self, table: pl.DataFrame) -> pl.DataFrame:
        """String arguments replaced by their interned ids (defined in the first packet)."""
        cols = [c for _n, c, kind in ANNOTATIONS if kind == "str" and c in table.columns]
        return table.with_columns(
            self.intern.column("debug_annotation_string_values", table[c].cast(pl.String))
            .alias(c) for c in cols)

    def _sources(self) -> list[tuple[int, pl.DataFrame]]:
        """Per packet shape, its slices with their payload columns (one row per slice)."""
        d, intern = self.data, self.intern
        nodes = self.src.analysis.call_paths.nodes.select("stack_id", "kind", "name", "file",
                                                          "line")
        node_names = nodes.select(
            "stack_id", _span_label().alias("label"),
            pl.col("kind").replace_strict(CATEGORY, default="python_function").alias("cat"))
        node_names = node_names.select(
            "stack_id", intern.column("event_names", node_names["label"]).alias("name_iid"),
            intern.column("event_categories", node_names["cat"]).alias("cat_iid"))
        spans = self.src.spans.select("pid", "tid", "ts_ns", "dur_ns", "stack_id", "op_shapes"
                                      ).join(node_names, on="stack_id", how="left",
                                             maintain_order="left")
        unknown_name = intern.iid("event_names", "(unknown frame)")
        spans = spans.with_columns(pl.col("name_iid").fill_null(unknown_name),
                                   pl.col("cat_iid").fill_null(
                                       intern.iid("event_categories", "python_function")))
        calls, gpu = _flows_and_weights(d.calls, d.gpu)
        calls = calls.select(
            "pid", "tid", "ts_ns", "dur_ns", "correlation_id", "size_bytes", "copy_kind",
            "device_id", "stream_id", "gpu_ns", pl.col("gpu_ns").alias("weight"), "flow_out",
            (pl.col("op_shapes") if "op_shapes" in calls.columns
             else pl.lit(None, pl.String)).alias("op_shapes"),   # zym capture --shapes
            intern.column("event_names", calls["name"]).alias("name_iid"),
            pl.lit(intern.iid("event_categories", "cuda_api"), pl.UInt64).alias("cat_iid"),
            self._callstack_iids(calls["stack_id"], calls["leaf"]).alias("cs_iid"))
        gpu = gpu.select(
            "pid", "device_id", "stream_id", "ts_ns", "dur_ns",
            (pl.col("kind") == "sync").alias("sync"), "correlation_id", "size_bytes",
            "copy_kind", "src_mem", "dst_mem", "graph_id",
            "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
            "flow_in",
            pl.when(pl.col("kind") == "sync").then(0).otherwise("dur_ns").alias("weight"),
            intern.column("event_names", gpu["name"]).alias("name_iid"),
            intern.column("event_categories", gpu["kind"].replace_strict(
                CATEGORY, default="kernel")).alias("cat_iid"),
            self._callstack_iids(gpu["stack_id"], gpu["name"]).alias("cs_iid"))
        ranges = self.src.ranges.select(
            "pid", "tid", "ts_ns", "dur_ns", "domain", "clipped", pl.lit(1).alias("nvtx"),
            intern.column("event_names", self.src.ranges["name"]).alias("name_iid"),
            pl.lit(intern.iid("event_categories", "nvtx"), pl.UInt64).alias("cat_iid"))
        return [(SHAPE_SPAN, spans), (SHAPE_CALL, calls), (SHAPE_GPU, gpu), (SHAPE_RANGE, ranges)]

    def _slices(self) -> tuple[dict[int, pl.DataFrame], pl.DataFrame]:
        """Per shape, the slices with their payload and ``track``; and the begin/end events
        of all slices in write order (``ts_ns, type, rank, tie, track, shape, src``)."""
        sources = self._sources()
        ivs, infos, n_groups = [], [], 0
        for shape, df in sources:
            cols = (["pid", "device_id", "stream_id", "sync"] if shape == SHAPE_GPU
                    else ["pid", "tid", "nvtx"] if shape == SHAPE_RANGE else ["pid", "tid"])
            keyed = df.select(cols).with_columns(pl.col(c).fill_null(0) for c in cols
                                                 if c not in ("sync", "nvtx"))
            info = keyed.unique(maintain_order=True).with_row_index("group", offset=n_groups)
            n_groups += info.height
            infos.append(info.with_columns(pl.lit(int(shape == SHAPE_GPU)).alias("gpu")))
            group = keyed.join(info, on=cols, how="left", maintain_order="left")["group"]
            ivs.append(df.select(group, "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns").clip(0))
                                 .alias("end_ns"), pl.lit(shape, pl.Int8).alias("shape"),
                                 pl.int_range(pl.len(), dtype=pl.Int64).alias("src")))
        iv = pl.concat(ivs, how="vertical_relaxed").with_row_index("row")
        groups = pl.concat(infos, how="diagonal_relaxed")
        narrow = iv.select("group", "row", "ts_ns", "end_ns")
        events = ordered_events(narrow)
        bad = nesting_violations(events)
        lanes = lanes_for(narrow, bad.tolist()) if len(bad) else None  # overlapping groups only
        self._row_groups = narrow.select("row", "group")
        tracks = self._track_uuids(groups, lanes)
        if lanes is None:
            by_group = np.zeros(n_groups, np.uint64)
            by_group[tracks["group"].to_numpy()] = tracks["track"].to_numpy()
            iv = iv.with_columns(pl.Series("track", by_group[iv["group"].to_numpy()]))
        else:
            iv = (iv.join(lanes, on="row", how="left", maintain_order="left")
                  .with_columns(pl.col("lane").fill_null(0))
                  .join(tracks, on=["group", "lane"], how="left", maintain_order="left"))
        keys = iv.select("track", "shape", "src")[events["row"]]
        order = pl.concat([events.select("ts_ns", "type", "rank", "tie"), keys],
                          how="horizontal").with_columns(
            pl.when(pl.col("type") == END).then(SHAPE_END).otherwise("shape").cast(pl.Int8)
            .alias("shape"))
        tables = {shape: df.select([c for c in SHAPE_COLUMNS[shape] if c in df.columns
                                    and c not in ("ts_ns", "type", "track")])
                  for shape, df in sources}
        return tables, order

    def _track_uuids(self, groups: pl.DataFrame, lanes: pl.DataFrame | None) -> pl.DataFrame:
        """``group, lane, track`` for every group's own track and its overlap lanes."""
        keys = groups.with_columns(pl.lit(0, pl.Int32).alias("lane"))
        if lanes is not None:
            used = lanes.join(self._row_groups, on="row").select("group", "lane").unique()
            keys = pl.concat([keys, used.join(groups, on="group")], how="diagonal_relaxed"
                             ).unique(["group", "lane"])
        keys = keys.sort("group", "lane")
        uuids = []
        for r in keys.iter_rows(named=True):
            if r["gpu"]:
                uuids.append(self.stream_track(r["pid"], r["device_id"], r["stream_id"],
                                               r["sync"], r["lane"]))
            elif r.get("nvtx"):
                uuids.append(self.nvtx_track(r["pid"], r["tid"], r["lane"]))
            else:
                uuids.append(self.thread_track(r["pid"], r["tid"], r["lane"]))
        return keys.select("group", "lane", pl.Series("track", uuids, pl.UInt64))

    def _callstack_iids(self, stack_id: pl.Series, leaf: pl.Series) -> pl.Series:
        """Interned callstack per row: the stack, then the GPU operation ``leaf`` (if any)."""
        keys = pl.DataFrame({"stack_id": stack_id.fill_null(-1), "leaf": leaf})
        distinct = keys.unique().sort("stack_id", "leaf")
        if not hasattr(self, "_chains"):
            self._chains = self._stack_chains()
        unknown = self.intern.frame(UNKNOWN, None, None)
        ids = []
        for sid, name in distinct.iter_rows():
            frames = self._chains.get(sid, (unknown,))
            if name is not None:
                frames = frames + (self.intern.frame(name, "[GPU]", None),)
            ids.append(self.intern.callstack(frames))
        table = distinct.with_columns(pl.Series("cs_iid", ids, pl.UInt64))
        return keys.join(table, on=["stack_id", "leaf"], how="left", nulls_equal=True,
                         maintain_order="left")["cs_iid"]

    def _stack_chains(self) -> dict[int, tuple[int, ...]]:
        """Frame iids of every stack, outermost first (a walk over the trie: one step per node)."""
        nodes = self.src.analysis.call_paths.nodes.sort("depth")
        chains: dict[int, tuple[int, ...]] = {}
        for sid, parent, name, file, line, kind in nodes.select(
                "stack_id", "parent_id", "name", "file", "line", "kind").iter_rows():
            label = frame_label(name, file, line, kind)
            frame = self.intern.frame(label, file, line)
            chains[sid] = chains.get(parent, ()) + (frame,)
        return chains

    def _finding_events(self) -> pl.DataFrame:
        """One instant per finding occurrence, on the findings track of its process."""
        default_pid = int(self.data.calls["pid"].first()) if self.data.calls.height else 0
        parts = []
        for f in self.src.findings:
            occ = f["occurrences"].filter(pl.col("ts_ns").is_not_null())
            if occ.height == 0:
                continue
            label = f"{f['rule_id']}: {f.get('title') or ''}".rstrip(": ")
            parts.append(occ.select(
                "ts_ns", pl.col("pid").fill_null(default_pid), "correlation_id",
                pl.lit(label).alias("label"), pl.lit(f["rule_id"]).alias("rule_id"),
                pl.lit(_text(f.get("severity")), pl.String).alias("severity"),
                pl.lit(_text(f.get("site")), pl.String).alias("site"),
                pl.lit(_text(f.get("message")), pl.String).alias("message")))
        if not parts:
            return pl.DataFrame()
        df = pl.concat(parts)
        pids = df["pid"].unique().sort().to_list()
        tracks = pl.DataFrame({"pid": pids, "track": [self.findings_track(p) for p in pids]},
                              schema={"pid": pl.Int64, "track": pl.UInt64})
        df = df.join(tracks, on="pid", how="left", maintain_order="left").drop("pid")
        return df.with_columns(
            pl.lit(SHAPE_FINDING, pl.Int8).alias("shape"),
            pl.lit(INSTANT, pl.Int8).alias("type"), pl.lit(1, pl.Int8).alias("rank"),
            pl.lit(0, pl.Int64).alias("tie"),
            self.intern.column("event_names", df["label"]).alias("name_iid"),
            pl.lit(self.intern.iid("event_categories", "zym_finding"), pl.UInt64)
            .alias("cat_iid")).drop("label")

    def _counter_events(self) -> pl.DataFrame:
        from .counters import gpu_counters

        samples = gpu_counters(self.data.gpu)
        if samples.height == 0:
            return pl.DataFrame()
        keys = samples.select("pid", "device_id", "counter", "unit").unique().sort(
            "pid", "device_id", "counter")
        uuids = [self.counter_track(p, dev, name, unit) for p, dev, name, unit in keys.iter_rows()]
        keys = keys.with_columns(pl.Series("track", uuids, pl.UInt64))
        return samples.join(keys, on=["pid", "device_id", "counter", "unit"]).select(
            "ts_ns", "track", pl.lit(COUNTER, pl.Int8).alias("type"),
            pl.lit(SHAPE_COUNTER, pl.Int8).alias("shape"),
            pl.lit(1, pl.Int8).alias("rank"), pl.lit(0, pl.Int64).alias("tie"),
            pl.col("value").cast(pl.Float64))

    # --- header ---------------------------------------------------------------------------
    def header_packets(self) -> bytes:
        """The sequence's first packet (all interned data) and the track descriptors."""
        b = Trace()
        first = b.packet.add()
        first.trusted_packet_sequence_id = SEQ
        first.first_packet_on_sequence = True
        first.sequence_flags = (TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                                | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
        first.timestamp = self.t_first
        self.intern.fill(first.interned_data)
        for desc in self.tracks.values():
            p = b.packet.add()
            p.trusted_packet_sequence_id = SEQ
            p.timestamp = self.t_first
            p.track_descriptor.CopyFrom(desc)
        self.n_header_packets = len(b.packet)
        return b.SerializeToString()


def _int32(value: int) -> int:
    """Perfetto's pid and tid fields are int32: larger ids (some runtimes' thread ids) are
    folded into range; track names keep the real id."""
    value = int(value)
    return value if -(1 << 31) <= value < 1 << 31 else value % (1 << 31)


def _merge_by_time(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
    """Both frames (each sorted by ``ts_ns``) as one, by time; at equal times ``second``'s rows
    come first (they sit on their own tracks, so this order never affects nesting)."""
    a, b = first["ts_ns"].to_numpy(), second["ts_ns"].to_numpy()
    at = np.searchsorted(a, b, side="left") + np.arange(len(b))
    take = np.empty(len(a) + len(b), np.int64)
    is_b = np.zeros(len(take), bool)
    is_b[at] = True
    take[is_b] = len(a) + np.arange(len(b))
    take[~is_b] = np.arange(len(a))
    return pl.concat([first, second.cast(first.schema)], how="vertical")[take]


def _text(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _span_label() -> pl.Expr:
    """Slice names of frames, as in the flamegraphs (``flamegraph.frame_label``)."""
    base = pl.col("file").str.split("/").list.last()
    domain = pl.when(pl.col("file").is_not_null()).then(pl.lit(" ") + pl.col("file")).otherwise(
        pl.lit(""))
    return pl.when((pl.col("kind") == "python") & pl.col("file").is_not_null()).then(
        pl.format("{} ({}:{})", "name", base, pl.col("line").fill_null(0))
    ).when(pl.col("kind") == "nvtx").then(pl.format("[nvtx{}] {}", domain, "name")
    ).otherwise(pl.col("name").fill_null("(unknown frame)"))


def _flows_and_weights(calls: pl.DataFrame, gpu: pl.DataFrame
                       ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Calls with ``flow_out`` (flow ids of the GPU work they caused), ``gpu_ns`` and ``leaf``
    (their costliest GPU operation); GPU work with ``flow_in`` and its call's ``stack_id``."""
    calls = calls.with_row_index("call_row")
    gpu = gpu.with_row_index("gpu_row")
    launcher = (calls.filter(pl.col("correlation_id").is_not_null())
                .select("pid", "correlation_id", "call_row", "stack_id")
                .unique(["pid", "correlation_id"], keep="first"))
    gpu = gpu.join(launcher, on=["pid", "correlation_id"], how="left", maintain_order="left")
    gpu = gpu.with_columns(
        pl.when(pl.col("call_row").is_not_null()).then(pl.col("gpu_row") + 1)
        .cast(pl.UInt64).alias("flow_in"))
    work = pl.col("kind") != "sync"  # sync records time host waits: not GPU time
    caused = (gpu.filter(pl.col("call_row").is_not_null()).sort("gpu_row")
              .group_by("call_row").agg(
                  pl.col("flow_in").alias("flow_out"),
                  pl.col("dur_ns").filter(work).sum().alias("gpu_ns"),
                  pl.col("name").sort_by(pl.when(work).then("dur_ns").otherwise(-1))
                  .last().alias("leaf")))
    calls = calls.join(caused, on="call_row", how="left", maintain_order="left").with_columns(
        pl.col("gpu_ns").fill_null(0))
    return calls, gpu
