"""Encoding the Perfetto export's events: one packet shape at a time, column-wise.

The exporter (:mod:`.perfetto`) hands over an :class:`EventPlan`: every event in write order
(time, type, track, packet shape, row of its payload) and one payload table per shape. Each
shape's packets are laid out with :mod:`.protowire` from just that shape's columns and written
straight into their places in one buffer per chunk. Field numbers come from the generated
classes of the ``perfetto`` package, and fields are written in field-number order, so the bytes
are what those classes would serialize.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    DebugAnnotation,
    Trace,
    TracePacket,
    TrackEvent,
)

from . import protowire as pw

SEQ = 1  # trusted_packet_sequence_id of every packet
# Debug annotations: (argument name, payload column(s), kind). They land in Perfetto's args
# table as ``debug.<name>``.
ANNOTATIONS = [
    ("correlation", "correlation_id", "int"), ("bytes", "size_bytes", "int"),
    ("direction", "copy_kind", "str"), ("src", "src_mem", "str"), ("dst", "dst_mem", "str"),
    ("grid", ("grid_x", "grid_y", "grid_z"), "xyz"),
    ("block", ("block_x", "block_y", "block_z"), "xyz"), ("graph id", "graph_id", "int"),
    ("device", "device_id", "int"), ("stream", "stream_id", "int"),
    ("gpu ns", "gpu_ns", "int"), ("shapes", "op_shapes", "str"),
    ("rule", "rule_id", "str"), ("severity", "severity", "str"), ("site", "site", "str"),
    ("message", "message", "str"), ("domain", "domain", "str"), ("clipped", "clipped", "str"),
]


@dataclass
class EventPlan:
    """Events in write order (``order``: ``ts_ns, type, track, shape, src``) and, per packet
    shape, the table of payload columns that ``src`` indexes (END packets have none)."""

    order: pl.DataFrame
    tables: dict[int, pl.DataFrame]



_K = pw.tag
_TE, _DA, _TP = TrackEvent, DebugAnnotation, TracePacket


# Which event columns each packet shape uses (the ``shape`` column of the events frame).
SHAPE_END, SHAPE_SPAN, SHAPE_CALL, SHAPE_GPU, SHAPE_FINDING, SHAPE_COUNTER, SHAPE_RANGE = range(7)
_COMMON = ["ts_ns", "type", "track", "name_iid", "cat_iid"]
SHAPE_COLUMNS = {
    SHAPE_END: ["ts_ns", "type", "track"],
    SHAPE_SPAN: _COMMON + ["op_shapes"],
    SHAPE_CALL: _COMMON + ["correlation_id", "size_bytes", "copy_kind", "device_id", "stream_id",
                           "gpu_ns", "op_shapes", "flow_out", "cs_iid", "weight"],
    SHAPE_GPU: _COMMON + ["correlation_id", "size_bytes", "copy_kind", "src_mem", "dst_mem",
                          "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                          "graph_id", "device_id", "stream_id", "flow_in",
                          "cs_iid", "weight"],
    SHAPE_FINDING: _COMMON + ["correlation_id", "rule_id", "severity", "site", "message"],
    SHAPE_COUNTER: ["ts_ns", "type", "track", "value"],
    SHAPE_RANGE: _COMMON + ["domain", "clipped"],
}


def encode_events(plan: EventPlan, annotation_iids: dict[str, int], start: int,
                   count: int) -> bytes:
    """Events ``start .. start+count`` of ``plan`` as ``Trace.packet`` entries, in order;
    ``annotation_iids`` maps argument names to their interned ids.

    Each packet shape is encoded on its own rows with only its own columns, straight into its
    rows' places in one output buffer."""
    order = plan.order.slice(start, count)
    n = order.height
    if n == 0:
        return b""
    shape = order["shape"].to_numpy()
    ts, typ, track = (order[c].to_numpy() for c in ("ts_ns", "type", "track"))
    src = order["src"].to_numpy()
    groups = []
    lengths = np.zeros(n, np.int64)
    for sh in np.unique(shape).tolist():
        idx = np.flatnonzero(shape == sh)
        base = pl.DataFrame({"ts_ns": ts[idx], "type": typ[idx], "track": track[idx]})
        if sh in plan.tables:
            base = pl.concat([base, plan.tables[sh][src[idx]]], how="horizontal")
        packet = _packet_field(base, annotation_iids, head=sh != SHAPE_END)
        lengths[idx] = packet.lengths(len(idx))
        groups.append((idx, packet))
    offsets = np.cumsum(lengths) - lengths
    buf = np.empty(int(lengths.sum()), np.uint8)
    for idx, packet in groups:
        packet.write(buf, offsets[idx])
    return buf.tobytes()


def _column(ev: pl.DataFrame, name: str, dtype=None):
    """``(values, present)`` of a column as numpy; ``present`` is None when no value is null,
    and ``values`` None when the column is absent or all null."""
    if name not in ev.columns:
        return None, None
    s = ev[name]
    nulls = s.null_count()
    if nulls == s.len():
        return None, None
    if nulls:
        present = s.is_not_null().to_numpy()
        values = s.fill_null(0).to_numpy()
    else:
        present, values = None, s.to_numpy()
    return (values if dtype is None else values.astype(dtype, copy=False)), present


def _packet_field(ev: pl.DataFrame, annotation_iids: dict[str, int], head: bool) -> pw.Message:
    """``Trace.packet`` for rows of one shape; ``head``: begins, instants and counters (the
    rows that carry a payload)."""
    fields: list[pw.Field] = []

    def varint(field: str, column: str) -> None:
        values, present = _column(ev, column)
        if values is not None:
            fields.append(pw.Varint(_K(_TE, field), values, present))

    if head:
        varint("category_iids", "cat_iid")
        for name, column, kind in ANNOTATIONS:
            ann = _annotation(ev, annotation_iids[name], column, kind)
            if ann is not None:
                fields.append(ann)
    fields.append(pw.Varint(_K(_TE, "type"), ev["type"].to_numpy().astype(np.int64)))
    if head:
        varint("name_iid", "name_iid")
    fields.append(pw.Varint(_K(_TE, "track_uuid"), ev["track"].to_numpy()))
    if head:
        value, present = _column(ev, "value", np.float64)
        if value is not None:
            fields.append(pw.Fixed64(_K(_TE, "double_counter_value"), value, present))
        if "flow_out" in ev.columns:
            fields.append(_repeated_fixed64(ev["flow_out"], _K(_TE, "flow_ids")))
        flow_in, present = _column(ev, "flow_in")
        if flow_in is not None:
            fields.append(pw.Fixed64(_K(_TE, "terminating_flow_ids"), flow_in, present))
        cs, present = _column(ev, "cs_iid")
        if cs is not None:
            weight = ev["weight"].fill_null(0).to_numpy().astype(np.float64)
            fields.append(pw.Varint(_K(_TE, "callstack_iid"), cs, present))
            fields.append(pw.Fixed64(_K(_TE, "callstack_weight"), weight, present))
    packet = [pw.Varint(_K(_TP, "timestamp"), ev["ts_ns"].to_numpy()),
              pw.Const(_K(_TP, "trusted_packet_sequence_id") + pw.varint_bytes(SEQ)),
              pw.Message(_K(_TP, "track_event"), fields)]
    if head:
        packet.append(pw.Const(_K(_TP, "sequence_flags")
                               + pw.varint_bytes(TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)))
    return pw.Message(_K(Trace, "packet"), packet)


def _annotation(ev: pl.DataFrame, name_iid: int, column, kind: str):
    """One debug annotation per row where ``column`` is set (a Message field), or None.
    ``column`` names three columns for ``xyz`` (a dict ``{x, y, z}``)."""
    outer = _K(_TE, "debug_annotations")
    if kind == "xyz":
        cols = [_column(ev, c) for c in column]
        if any(v is None for v, _ in cols):
            return None
        masks = [p for _, p in cols if p is not None]
        present = np.logical_and.reduce(masks) if masks else None
        key = pw.Const(_K(_DA, "name_iid") + pw.varint_bytes(name_iid), present)
        entries = [pw.Message(_K(_DA, "dict_entries"), [
            pw.Varint(_K(_DA, "int_value"), v, present),
            pw.Const(_K(_DA, "name") + pw.varint_bytes(1) + axis.encode(), present)], present)
            for (v, _), axis in zip(cols, "xyz")]
        return pw.Message(outer, [key, *entries], present)
    values, present = _column(ev, column)
    if values is None:
        return None
    key = pw.Const(_K(_DA, "name_iid") + pw.varint_bytes(name_iid), present)
    # "str" columns hold string iids (see _TraceBuilder._intern_strings)
    field = "int_value" if kind == "int" else "string_value_iid"
    return pw.Message(outer, [key, pw.Varint(_K(_DA, field), values, present)], present)


def _repeated_fixed64(lists: pl.Series, key: bytes) -> pw.RepeatedFixed64:
    """Per row, the entries of a repeated fixed64 field (e.g. ``flow_ids``)."""
    counts = lists.list.len().fill_null(0).to_numpy().astype(np.int64)
    flat = lists.explode().drop_nulls().to_numpy()
    return pw.RepeatedFixed64(key, counts, flat)
