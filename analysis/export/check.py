"""Structural checks of a Perfetto trace: what a viewer relies on, read back with the ``perfetto``
package's generated classes (no trace processor needed).

:func:`check_trace` raises :class:`TraceCheckError` on the first violation and otherwise returns
the slices per track, so tests can compare them with the capture:

* every interned id (names, categories, argument names and values, frames, callstacks) is
  defined by an earlier or the same packet of its sequence, after the incremental state was
  cleared;
* every event's track was described before it, and every track's parent exists;
* on each track, every ``SLICE_END`` closes an open slice at or after its begin, and no slice is
  left open: slices nest properly;
* every flow id leaves exactly one slice and ends at exactly one other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent
from zym.schemas.errors import InputError


class TraceCheckError(InputError):
    """The trace breaks a rule that Perfetto viewers rely on."""


@dataclass
class Slice:
    ts_ns: int
    dur_ns: int
    name: str
    category: str
    args: dict
    depth: int
    callstack: tuple[str, ...] | None = None
    weight: float | None = None


@dataclass
class CheckedTrace:
    tracks: dict[int, dict]  # uuid -> {"name", "parent", "kind"}
    slices: dict[int, list[Slice]] = field(default_factory=dict)  # uuid -> slices (+ instants)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    flows: int = 0
    packets: int = 0

    def track_name(self, uuid: int) -> str:
        return self.tracks[uuid]["name"]

    def path(self, uuid: int) -> list[str]:
        """Names from the root track down to ``uuid``."""
        out = []
        while uuid:
            out.append(self.tracks[uuid]["name"])
            uuid = self.tracks[uuid]["parent"]
        return out[::-1]


_KINDS = ("event_names", "event_categories", "debug_annotation_names",
          "debug_annotation_string_values", "function_names", "source_paths", "frames",
          "callstacks")


def check_trace(data: bytes) -> CheckedTrace:
    """Parse ``data`` and check it (see module doc); the slices, counters and tracks it holds."""
    try:
        trace = Trace.FromString(data)
    except DecodeError as e:
        raise TraceCheckError(f"not a Perfetto protobuf trace ({e})") from None
    out = CheckedTrace(tracks={}, packets=len(trace.packet))
    interned: dict[int, dict[str, dict]] = {}
    stacks: dict[int, list[tuple[int, Slice]]] = {}
    flows_out: dict[int, int] = {}
    flows_in: dict[int, int] = {}
    for i, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            interned[seq] = {k: {} for k in _KINDS}
        if p.HasField("interned_data"):
            _define(interned, seq, p.interned_data, i)
        if p.HasField("track_descriptor"):
            _describe(out, p.track_descriptor, i)
        if p.HasField("track_event"):
            _event(out, interned.get(seq), p, i, stacks, flows_out, flows_in)
    open_ = {u: s for u, s in stacks.items() if s}
    if open_:
        u, s = next(iter(open_.items()))
        raise TraceCheckError(f"track {out.track_name(u)!r}: {len(s)} slice(s) never ended")
    if set(flows_out) != set(flows_in):
        missing = set(flows_out) ^ set(flows_in)
        raise TraceCheckError(f"{len(missing)} flow(s) with one end only, e.g. {min(missing)}")
    many = [f for f, c in flows_out.items() if c != 1] + [f for f, c in flows_in.items() if c != 1]
    if many:
        raise TraceCheckError(f"flow {many[0]} has more than one start or end")
    out.flows = len(flows_out)
    return out


def _define(interned, seq, d, i) -> None:
    if seq not in interned:
        raise TraceCheckError(f"packet {i}: interned data before the sequence state was cleared")
    t = interned[seq]
    for e in d.event_names:
        t["event_names"][e.iid] = e.name
    for e in d.event_categories:
        t["event_categories"][e.iid] = e.name
    for e in d.debug_annotation_names:
        t["debug_annotation_names"][e.iid] = e.name
    for kind in ("debug_annotation_string_values", "function_names", "source_paths"):
        for e in getattr(d, kind):
            t[kind][e.iid] = e.str.decode()
    for f in d.frames:
        _need(t, "function_names", f.function_name_id, i)
        if f.source_path_iid:
            _need(t, "source_paths", f.source_path_iid, i)
        t["frames"][f.iid] = t["function_names"][f.function_name_id]
    for c in d.callstacks:
        t["callstacks"][c.iid] = tuple(_need(t, "frames", fid, i) for fid in c.frame_ids)


def _need(t, kind: str, iid: int, i: int):
    if t is None or iid not in t[kind]:
        raise TraceCheckError(f"packet {i}: {kind} iid {iid} used before it is defined")
    return t[kind][iid]


def _describe(out: CheckedTrace, d, i) -> None:
    if d.parent_uuid and d.parent_uuid not in out.tracks:
        raise TraceCheckError(f"packet {i}: track {d.uuid} names parent {d.parent_uuid} "
                              "before it is described")
    if d.HasField("thread"):
        name, kind = d.thread.thread_name or f"thread {d.thread.tid}", "thread"
    elif d.HasField("process"):
        name, kind = d.process.process_name or f"process {d.process.pid}", "process"
    else:
        name, kind = d.name, "counter" if d.HasField("counter") else "track"
    out.tracks[d.uuid] = {"name": name, "parent": d.parent_uuid, "kind": kind}


def _event(out: CheckedTrace, t, p, i, stacks, flows_out, flows_in) -> None:
    e = p.track_event
    if e.track_uuid not in out.tracks:
        raise TraceCheckError(f"packet {i}: event on track {e.track_uuid} before its descriptor")
    stack = stacks.setdefault(e.track_uuid, [])
    if e.type == TrackEvent.TYPE_SLICE_END:
        if not stack:
            raise TraceCheckError(f"packet {i}: slice end with no open slice on track "
                                  f"{out.track_name(e.track_uuid)!r}")
        begin, s = stack.pop()
        if p.timestamp < begin:
            raise TraceCheckError(f"packet {i}: slice {s.name!r} ends before it begins")
        s.dur_ns = p.timestamp - begin
        return
    if e.type == TrackEvent.TYPE_COUNTER:
        value = e.double_counter_value if e.HasField("double_counter_value") else e.counter_value
        out.counters.setdefault(e.track_uuid, []).append((p.timestamp, value))
        return
    if e.name_iid:
        name = _need(t, "event_names", e.name_iid, i)
    else:
        name = e.name
    cats = [_need(t, "event_categories", c, i) for c in e.category_iids]
    args = {}
    for a in e.debug_annotations:
        key = _need(t, "debug_annotation_names", a.name_iid, i) if a.name_iid else a.name
        if a.HasField("string_value_iid"):
            args[key] = _need(t, "debug_annotation_string_values", a.string_value_iid, i)
        elif a.dict_entries:
            args[key] = {d.name: d.int_value for d in a.dict_entries}
        elif a.HasField("string_value"):
            args[key] = a.string_value
        else:
            args[key] = a.int_value
    callstack = (_need(t, "callstacks", e.callstack_iid, i) if e.callstack_iid else None)
    s = Slice(p.timestamp, 0, name, ",".join(cats), args, len(stack), callstack,
              e.callstack_weight if e.HasField("callstack_weight") else None)
    out.slices.setdefault(e.track_uuid, []).append(s)
    for f in e.flow_ids:
        flows_out[f] = flows_out.get(f, 0) + 1
    for f in e.terminating_flow_ids:
        flows_in[f] = flows_in.get(f, 0) + 1
    if e.type == TrackEvent.TYPE_SLICE_BEGIN:
        stack.append((p.timestamp, s))
