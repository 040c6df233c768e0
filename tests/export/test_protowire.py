"""The column-wise protobuf encoder writes what the generated classes write."""
from __future__ import annotations

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    DebugAnnotation,
    Trace,
    TracePacket,
    TrackEvent,
)
from zym.analysis.export import protowire as pw

K = pw.tag


@pytest.fixture(params=["numpy", "compiled"])
def writes(request, monkeypatch):
    """Each test's fields written both ways: the numpy passes, and the compiled loops (numba,
    a dependency) that write columns of at least ``JIT_MIN_ROWS`` rows."""
    if request.param == "compiled":
        assert pw._loops() is not None
        monkeypatch.setattr(pw, "JIT_MIN_ROWS", 0)
    else:
        monkeypatch.setattr(pw, "JIT_MIN_ROWS", 1 << 62)
    return request.param


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1, -1, -(2**40)])
def test_varint_matches_protobuf(value, writes):
    got = pw.encode(1, [pw.Varint(K(DebugAnnotation, "int_value"), np.array([value]))])
    assert got.data.tobytes() == DebugAnnotation(int_value=value).SerializeToString()


def test_nested_messages_optional_and_repeated_fields_round_trip(writes):
    n = 6
    rng = np.random.default_rng(7)
    ts = rng.integers(0, 2**62, n)
    track = rng.integers(1, 10**6, n)
    present = np.array([1, 0, 1, 1, 0, 1], bool)
    counts = np.array([0, 2, 1, 0, 3, 1])
    flat = rng.integers(1, 2**63, int(counts.sum())).astype(np.uint64)
    weight = rng.random(n) * 1e6
    ann = pw.Message(K(TrackEvent, "debug_annotations"), [
        pw.Const(K(DebugAnnotation, "name_iid") + pw.varint_bytes(3), present),
        pw.Varint(K(DebugAnnotation, "int_value"), track * -1, present)], present)
    te = pw.Message(K(TracePacket, "track_event"), [
        ann,
        pw.Varint(K(TrackEvent, "type"), np.full(n, 1)),
        pw.Varint(K(TrackEvent, "track_uuid"), track),
        pw.RepeatedFixed64(K(TrackEvent, "flow_ids"), counts, flat),
        pw.Fixed64(K(TrackEvent, "callstack_weight"), weight, present)])
    packets = pw.Message(K(Trace, "packet"), [pw.Varint(K(TracePacket, "timestamp"), ts), te])
    data = pw.encode(n, [packets]).data.tobytes()
    trace = Trace.FromString(data)
    assert trace.SerializeToString() == data  # byte for byte what the generated classes write
    flows = np.split(flat, np.cumsum(counts)[:-1])
    for i, p in enumerate(trace.packet):
        e = p.track_event
        assert p.timestamp == ts[i] and e.track_uuid == track[i]
        assert list(e.flow_ids) == flows[i].tolist()
        assert bool(e.debug_annotations) == present[i]
        if present[i]:
            assert e.debug_annotations[0].int_value == -track[i]
            assert e.callstack_weight == weight[i]
        else:
            assert not e.HasField("callstack_weight")


def test_ragged_take_and_bytes_field(writes):
    r = pw.Ragged.from_list([b"a", b"", b"xyz"])
    assert r.take(np.array([2, 0])).to_list() == [b"xyz", b"a"]
    got = pw.encode(3, [pw.Bytes(K(DebugAnnotation, "string_value"), r)])
    assert got.to_list() == [DebugAnnotation(string_value=s).SerializeToString()
                             for s in ("a", "", "xyz")]


def _packets(n: int, rng) -> list:
    """Packets of every field kind over ``n`` rows: varints of every size (negative ones:
    ten bytes), optional fields, strings (some empty), repeated fixed64, nested messages."""
    big = rng.integers(0, 2**63 - 1, n, dtype=np.int64) >> rng.integers(0, 63, n)
    sign = np.where(rng.random(n) < 0.1, -1, 1)
    present = rng.random(n) < 0.7
    words = [b"", b"a", b"kernel_name" * 3, bytes(range(200))]
    text = pw.Ragged.from_list([words[i] if present[k] else b""
                                for k, i in enumerate(rng.integers(0, 4, n))])
    counts = rng.integers(0, 3, n)
    ann = pw.Message(K(TrackEvent, "debug_annotations"), [
        pw.Const(K(DebugAnnotation, "name_iid") + pw.varint_bytes(300), present),
        pw.Bytes(K(DebugAnnotation, "string_value"), text, present)], present)
    te = pw.Message(K(TracePacket, "track_event"), [
        ann, pw.Varint(K(TrackEvent, "track_uuid"), big * sign),
        pw.RepeatedFixed64(K(TrackEvent, "flow_ids"), counts,
                           rng.integers(1, 2**63, int(counts.sum())).astype(np.uint64)),
        pw.Fixed64(K(TrackEvent, "callstack_weight"), rng.random(n) * 1e9, present)])
    return [pw.Message(K(Trace, "packet"), [pw.Varint(K(TracePacket, "timestamp"), big), te])]


def test_compiled_writes_give_the_bytes_of_the_numpy_passes(monkeypatch):
    rng = np.random.default_rng(11)
    fields = _packets(5000, rng)
    monkeypatch.setattr(pw, "JIT_MIN_ROWS", 1 << 62)
    numpy_way = pw.encode(5000, fields).data.tobytes()
    monkeypatch.setattr(pw, "JIT_MIN_ROWS", 0)
    compiled = pw.encode(5000, fields).data.tobytes()
    assert compiled == numpy_way
    assert Trace.FromString(compiled).SerializeToString() == compiled
