"""The Perfetto export of the sample, read back with the perfetto package's generated classes.

``check_trace`` (zym.analysis.export.check) already enforces, on every packet: interned ids
defined before use, tracks described before use, balanced begin/end per track, flows with both
ends. These tests compare what the trace shows with the capture it came from.
"""
from __future__ import annotations

import copy
from collections import Counter

import polars as pl
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
from zym.analysis.export.check import TraceCheckError, check_trace
from zym.analysis.export.perfetto import export_perfetto, perfetto_bytes


def _tracks(checked, kind: str) -> dict[int, list[str]]:
    return {u: checked.path(u) for u in checked.slices if kind in checked.path(u)[-1]}


def test_every_gpu_operation_once_on_its_stream_track(checked, export_source):
    gpu = export_source.data.gpu
    seen = Counter()
    for uuid, path in _tracks(checked, "Stream").items():
        device = int(path[-2].split()[1])
        stream = int(path[-1].split()[1])
        for s in checked.slices[uuid]:
            seen[(device, stream, s.ts_ns, s.dur_ns, s.name)] += 1
    want = Counter(gpu.select("device_id", "stream_id", "ts_ns", "dur_ns", "name").iter_rows())
    assert seen == want
    assert sum(want.values()) == gpu.height == 9444


def test_kernel_arguments(checked):
    kernels = [s for u in _tracks(checked, "Stream") for s in checked.slices[u]
               if s.category == "kernel"]
    assert len(kernels) == 8360
    assert all(set(k.args["grid"]) == {"x", "y", "z"} and "correlation" in k.args
               for k in kernels if "grid" in k.args)
    copies = [s for u in _tracks(checked, "Stream") for s in checked.slices[u]
              if s.category == "gpu_memcpy"]
    assert copies and all(c.args["direction"] in ("HtoD", "DtoH", "DtoD") and c.args["bytes"] > 0
                          for c in copies)


def test_cpu_slices_keep_their_times_and_nest(checked, export_source):
    threads = {u: p for u, p in checked.tracks.items() if p["kind"] == "thread"}
    slices = [s for u in threads for s in checked.slices.get(u, [])]
    calls = export_source.data.calls
    api = Counter((s.ts_ns, s.dur_ns, s.name) for s in slices if s.category == "cuda_api")
    assert api == Counter(calls.select("ts_ns", "dur_ns", "name").iter_rows())
    others = [s for s in slices if s.category != "cuda_api"]
    assert len(others) == export_source.spans.height
    assert max(s.depth for s in slices) > 10  # Python -> torch -> CUDA, nested


def test_flows_join_each_call_to_its_gpu_work(checked, export_source):
    gpu, calls = export_source.data.gpu, export_source.data.calls
    linked = gpu.join(calls.select("pid", "correlation_id").unique(), on=["pid", "correlation_id"])
    assert checked.flows == linked.height > 9000


def test_callstacks_weighted_by_gpu_time(checked, export_source):
    gpu_total = int(export_source.data.gpu["dur_ns"].sum())
    streams = _tracks(checked, "Stream")
    gpu_slices = [s for u in streams for s in checked.slices[u]]
    assert all(s.callstack and s.callstack[-1] == s.name for s in gpu_slices)
    assert sum(s.weight for s in gpu_slices) == gpu_total
    launches = [s for u, sl in checked.slices.items() if u not in streams for s in sl
                if s.weight is not None]
    attributed = int(export_source.analysis.to_dict()["gpu"]["attributed_ns"])
    assert sum(s.weight for s in launches) == attributed
    hot = max(launches, key=lambda s: s.weight)
    assert any("gpt_decode_server.py" in f for f in hot.callstack)


def test_every_finding_occurrence_on_the_findings_track(checked, export_source):
    assert export_source.findings, "the rules find problems in the sample"
    instants = [s for u, p in checked.tracks.items() if p["name"] == "zym findings"
                for s in checked.slices.get(u, [])]
    want = Counter()
    for f in export_source.findings:
        for ts in f["occurrences"]["ts_ns"].to_list():
            want[(f["rule_id"], ts, f["site"])] += 1
    got = Counter((s.args["rule"], s.ts_ns, s.args["site"]) for s in instants)
    assert got == want
    assert all(s.args["severity"] in ("info", "warning", "error") and s.args["message"]
               for s in instants)


def test_counters_busy_percent_and_copy_bandwidth(checked, export_source):
    names = {checked.tracks[u]["name"]: v for u, v in checked.counters.items()}
    busy = [v for _, v in names["GPU busy"]]
    assert all(0 <= v <= 100.0001 for v in busy)
    util = export_source.analysis.utilization["devices"][0]["busy_pct"]
    assert abs(sum(busy[:-1]) / (len(busy) - 1) - util) < 2
    assert max(v for _, v in names["copy bandwidth"]) > 0


def test_bytes_are_what_the_generated_classes_write(sample_pftrace):
    data = sample_pftrace.read_bytes()
    assert Trace.FromString(data).SerializeToString() == data


def test_size_under_a_quarter_of_the_kineto_json(sample_pftrace, sample_trace):
    import gzip

    json_size = len(gzip.decompress(sample_trace.read_bytes()))
    assert sample_pftrace.stat().st_size < json_size / 4


def test_chunked_writing_gives_the_same_trace(export_source, sample_pftrace, tmp_path):
    out = tmp_path / "chunked.pftrace"
    export_perfetto(export_source, out, chunk_events=10_000)
    assert out.read_bytes() == sample_pftrace.read_bytes()


def test_a_timeline_only_source_lets_the_derived_tables_go_and_writes_the_same_trace(
        sample_capture, sample_pftrace, tmp_path):
    """`zym export` and `zym view` load with ``timeline_only``: the rules' state and the
    analysis's derived tables are let go before the timeline is built, and the trace is the
    one the full source writes."""
    from zym.analysis.export.source import load_export_source

    src = load_export_source(sample_capture, timeline_only=True)
    assert src.found is None and src.findings
    for facts in (src.analysis.facts, src.analysis.whole):
        assert set(facts.__dict__) <= {"data", "nodes", "window"}
    assert not {"relations", "timeline", "_timeline"} & set(src.analysis.__dict__)
    out = tmp_path / "timeline_only.pftrace"
    export_perfetto(src, out)
    assert out.read_bytes() == sample_pftrace.read_bytes()
    assert src.analysis.facts.gpu_ns > 0  # (a dropped fact is built again where asked for)


def _shifted(src, **changes):
    src = copy.copy(src)
    src.analysis = copy.copy(src.analysis)
    src.analysis.whole = copy.copy(src.analysis.whole)
    src.analysis.whole.data = copy.copy(src.data)
    for k, v in changes.items():
        if k == "spans":
            src.spans = v
        else:
            setattr(src.analysis.whole.data, k, v)
    return src


def test_overlapping_kernels_and_spans_go_to_overlap_tracks(export_source):
    gpu = export_source.data.gpu.sort("ts_ns")
    # Every 10th GPU op starts before the previous one ends (a programmatic dependent launch).
    moved = gpu.with_row_index("i").with_columns(
        pl.when(pl.col("i") % 10 == 5)
        .then(pl.col("ts_ns").shift(1) + pl.col("dur_ns").shift(1) // 2)
        .otherwise("ts_ns").alias("ts_ns")).drop("i")
    spans = export_source.spans.with_row_index("i").with_columns(
        pl.when(pl.col("i") % 50 == 7).then(pl.col("dur_ns") * 3).otherwise("dur_ns")
        .alias("dur_ns")).drop("i")
    src = _shifted(export_source, gpu=moved, spans=spans)
    checked = check_trace(perfetto_bytes(src))
    overlap = [u for u, p in checked.tracks.items() if "overlap" in p["name"]]
    assert any("Stream" in checked.tracks[u]["name"] for u in overlap)
    assert any("Thread" in checked.tracks[u]["name"] for u in overlap)
    stream_slices = Counter((s.ts_ns, s.dur_ns, s.name) for u, p in checked.tracks.items()
                            if "Stream" in p["name"] for s in checked.slices.get(u, []))
    assert stream_slices == Counter(moved.select("ts_ns", "dur_ns", "name").iter_rows())


def test_check_trace_catches_broken_traces(sample_pftrace):
    data = sample_pftrace.read_bytes()
    trace = Trace.FromString(data)
    for i, p in enumerate(trace.packet):
        if p.HasField("track_event") and p.track_event.flow_ids:
            del p.track_event.flow_ids[:]
            break
    with pytest.raises(TraceCheckError, match="flow"):
        check_trace(trace.SerializeToString())
    with pytest.raises(TraceCheckError, match="not a Perfetto"):
        check_trace(b"\xff" * 100)
    trace = Trace.FromString(data)
    first_event = next(i for i, p in enumerate(trace.packet) if p.HasField("track_event"))
    trace.packet[first_event].ClearField("sequence_flags")
    del trace.packet[0]  # drop the interned data
    with pytest.raises(TraceCheckError, match="before"):
        check_trace(trace.SerializeToString())


def test_writes_only_its_output_and_leaves_the_rest_to_the_atomic_write(export_source,
                                                                        sample_pftrace,
                                                                        tmp_path, monkeypatch):
    """No second temporary file beside ``out`` while it writes (one was once left behind by
    an interrupted `zym export`, where no later write removed it): only ``out``, the atomic
    write's temporary file in `zym export`."""
    from zym.analysis.export import perfetto

    seen = []
    real = perfetto.encode_events

    def watched(*a, **kw):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        return real(*a, **kw)

    monkeypatch.setattr(perfetto, "encode_events", watched)
    out = tmp_path / "o.pftrace"
    export_perfetto(export_source, out, chunk_events=10_000)
    assert seen and all(names == ["o.pftrace"] for names in seen)
    assert out.read_bytes() == sample_pftrace.read_bytes()
