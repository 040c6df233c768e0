"""Real Kineto variants the import accepts: numbers written as strings (decimal or hex, as
ROCm's Kineto writes ``stream`` and ``size``), grid/block as text (Inductor's
``"grid(100,)"``), older Kineto's capitalised categories with ``external id``, HIP API names;
and what stays refused. Each trace is written here; expected values come from its events."""
from __future__ import annotations

import json

import polars as pl
import pytest
from zym.capture import kineto_json
from zym.capture.kineto import load_kineto
from zym.schemas import InputError
from zym.schemas.apis import api_copy_kind, api_kind, is_blocking_api


@pytest.fixture(params=["compiled", "msgspec"])
def decoder(request, monkeypatch):
    """Each test with the compiled decoder (when built), and with msgspec alone."""
    if request.param == "compiled":
        if kineto_json._kineto_scan is None:
            pytest.skip("native JSON decoder not built")
    else:
        monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    return request.param


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


META = {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "python"}}


def write(tmp_path, events, name="t.json", **top) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def by_ts(table: pl.DataFrame) -> pl.DataFrame:
    return table.sort("ts_ns")


def test_numbers_as_strings_hex_and_inductor_grids(tmp_path, decoder):
    events = [
        META,
        # torch.compile: the Triton launcher's op carries its grid as text, and a stream.
        ev("cpu_op", "triton_poi_fused_add_0", 10, 20, **{"External id": 5},
           grid="grid(100,)", stream=0, kernel_backend="triton"),
        # ROCm: the runtime call's stream and size as strings (not read by zym).
        ev("cuda_runtime", "hipLaunchKernel", 12, 3, **{"External id": 5}, correlation=77,
           stream="0x0", size="2560"),
        ev("kernel", "triton_poi_fused_add_0", 40, 2, **{"External id": "5"},
           correlation="77", device="0", stream="0x1f", grid="grid(100,)",
           block="[128, 1, 1]"),
        ev("cuda_runtime", "hipMemcpyWithStream", 45, 10, correlation=78, stream="0x0"),
        ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 50, 4, correlation=78, device=0,
           stream=" 7 ", bytes="2560"),
        ev("kernel", "k2", 60, 1, correlation=79, device=1, stream="-0x2", grid=["3", 2],
           block=[32, "null", 1], bytes="1e3"),
        ev("cuda_runtime", "hipLaunchKernel", 58, 1, correlation=79),
    ]
    tables, _ = load_kineto(write(tmp_path, events))
    gpu = by_ts(tables["gpu"])
    assert gpu["name"].to_list() == ["triton_poi_fused_add_0", "Memcpy DtoH (Device -> Pageable)",
                                     "k2"]
    assert gpu["correlation_id"].to_list() == [77, 78, 79]
    assert gpu["device_id"].to_list() == [0, 0, 1]
    assert gpu["stream_id"].to_list() == [0x1F, 7, -2]
    assert gpu["size_bytes"].to_list() == [None, 2560, 1000]
    assert gpu["grid_x"].to_list() == [100, None, 3]
    assert gpu["grid_y"].to_list() == [None, None, 2]
    assert gpu["grid_z"].to_list() == [None, None, None]
    assert gpu["block_x"].to_list() == [128, None, 32]
    assert gpu["block_y"].to_list() == [1, None, None]
    assert gpu["block_z"].to_list() == [1, None, 1]
    assert gpu["kind"].to_list() == ["kernel", "copy", "kernel"]
    calls = by_ts(tables["call"])
    assert calls["name"].to_list() == ["hipLaunchKernel", "hipMemcpyWithStream", "hipLaunchKernel"]
    assert calls["kind"].to_list() == ["launch", "copy", "launch"]
    assert calls["op_id"].to_list() == [5, None, None]
    assert calls["correlation_id"].to_list() == [77, 78, 79]


def test_older_kineto_category_names_and_external_id(tmp_path, decoder):
    """torch <= 1.12: Operator, Runtime, Kernel, Memcpy, Memset, and "external id"."""
    dims = [[2, 3], [3, 4]]
    events = [
        META,
        ev("Operator", "aten::mm", 100, 50, tid="123", **{"Input Dims": dims, "External id": 3}),
        ev("Runtime", "cudaLaunchKernel", 110, 5, tid="123", cbid=211, correlation=9,
           **{"external id": 3, "external ts": 100}),
        ev("Kernel", "gemm", 120, 8, pid=0, tid="stream 7", device=0, stream=7, correlation=9,
           grid=[4, 1, 1], block=[64, 1, 1], **{"external id": 3}),
        ev("Runtime", "cudaMemcpyAsync", 130, 4, tid="123", correlation=10,
           **{"external id": 3}),
        ev("Runtime", "cudaMemsetAsync", 136, 1, tid="123", correlation=11,
           **{"external id": 3}),
        ev("Memcpy", "Memcpy DtoH (Device -> Pageable)", 140, 2, pid=0, tid="stream 7",
           device=0, stream=7, correlation=10, bytes=16, **{"external id": 3}),
        ev("Memset", "Memset (Device)", 150, 1, pid=0, tid="stream 7", device=0, stream=7,
           correlation=11, bytes=64, **{"external id": 3}),
        {"ph": "X", "cat": "Trace", "ts": 90, "dur": 100, "pid": "Traces", "tid": "PyTorch",
         "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
    ]
    tables, _ = load_kineto(write(tmp_path, events))
    calls = by_ts(tables["call"])
    assert calls["name"].to_list() == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"]
    assert calls["kind"].to_list() == ["launch", "copy", "memset"]
    assert calls["op_id"].to_list() == [3, 3, 3]
    assert calls["tid"].to_list() == [123, 123, 123]
    assert [json.loads(s) for s in calls["op_shapes"]] == [dims] * 3
    frames = dict(zip(tables["frame"]["frame_id"], tables["frame"]["name"]))
    stack = tables["stack"]
    parent = dict(zip(stack["stack_id"], stack["parent_id"]))
    frame_of = dict(zip(stack["stack_id"], stack["frame_id"]))
    sid, chain = calls["stack_id"][0], []
    while sid is not None:
        chain.append(frames[frame_of[sid]])
        sid = parent[sid]
    assert chain[::-1] == ["aten::mm", "cudaLaunchKernel"]
    gpu = by_ts(tables["gpu"])
    assert gpu["kind"].to_list() == ["kernel", "copy", "memset"]
    assert gpu["correlation_id"].to_list() == [9, 10, 11]
    assert gpu["size_bytes"].to_list() == [None, 16, 64]
    assert gpu["copy_kind"].to_list() == [None, "DtoH", None]
    assert gpu["grid_x"].to_list() == [4, None, None]
    assert gpu["dur_ns"].to_list() == [8000, 2000, 1000]
    assert gpu["pid"].to_list() == [1, 1, 1]  # the issuing process, not Kineto's device pid


def test_a_variant_batch_among_plain_ones_keeps_order_and_values(tmp_path, monkeypatch,
                                                                 decoder):
    """Small batches (read a kB at a time): most decode on the fast path, the few with
    strings or old names by the fallbacks; the rows come out in file order with the values
    written. Counted (checked: read in one piece, the file was one batch, the general
    decoder's)."""
    import msgspec

    monkeypatch.setattr(kineto_json, "_DECODE_BATCH", 2048)
    monkeypatch.setattr(kineto_json, "_THREAD_BATCH", 2048)
    monkeypatch.setattr(kineto_json, "_READ_CHUNK", 1000)
    real_scan, real_fast, paths = kineto_json._scan_frames, kineto_json._FAST_DECODER, []

    def scanning(*a):  # the compiled decoder's fast path
        frames = real_scan(*a)
        if frames is not None:
            paths.append("fast")
        return frames

    class Fast:  # msgspec's: refused, the batch goes to the general decoder
        def decode(self, text):
            try:
                events = real_fast.decode(text)
            except msgspec.ValidationError:
                paths.append("fallback")
                raise
            paths.append("fast")
            return events

    monkeypatch.setattr(kineto_json, "_scan_frames", scanning)
    monkeypatch.setattr(kineto_json, "_FAST_DECODER", Fast())
    events, streams = [], []
    for i in range(400):
        stream = i % 5
        odd = i in (57, 58, 233)
        events.append(ev("Runtime" if i == 233 else "cuda_runtime", "cudaLaunchKernel",
                         10 * i, 2, correlation=i))
        events.append(ev("Kernel" if i == 233 else "kernel", f"k{i}", 10 * i + 3, 4,
                         correlation=str(i) if odd else i, device=0,
                         stream=hex(stream) if odd else stream))
        streams.append(stream)
    tables, _ = load_kineto(write(tmp_path, events))
    gpu = by_ts(tables["gpu"])
    assert gpu["name"].to_list() == [f"k{i}" for i in range(400)]
    assert gpu["stream_id"].to_list() == streams
    assert gpu["correlation_id"].to_list() == list(range(400))
    assert tables["call"].height == 400
    assert paths.count("fast") > 20 and 1 <= paths.count("fallback") <= 3, paths


@pytest.mark.parametrize("args, where", [
    ({"stream": "banana"}, "args.stream"),
    ({"correlation": {"id": 1}}, "args.correlation"),
    ({"grid": "abc"}, "args.grid"),
    ({"block": [1, "x"]}, "args.block"),
    ({"device": "0x"}, "args.device"),
    ({"bytes": "1.5"}, "args.bytes"),
])
def test_values_that_are_no_numbers_stay_refused(tmp_path, decoder, args, where):
    events = [META, ev("cuda_runtime", "cudaLaunchKernel", 1, 1, correlation=1),
              ev("kernel", "k", 3, 1, **({"correlation": 1, "device": 0} | args))]
    with pytest.raises(InputError, match="malformed trace event") as e:
        load_kineto(write(tmp_path, events))
    assert "\n" not in str(e.value) and where in str(e.value)


def test_times_as_numeric_strings_and_garbage_times(tmp_path, decoder):
    events = [META, ev("cuda_runtime", "cudaLaunchKernel", "1.5", "2", correlation=1),
              ev("kernel", "k", 3, 1, correlation="0x1", device=0, stream=7)]
    tables, _ = load_kineto(write(tmp_path, events))
    assert tables["call"]["ts_ns"].to_list() == [1500]
    assert tables["call"]["dur_ns"].to_list() == [2000]
    events[1]["ts"] = "soon"
    with pytest.raises(InputError, match="malformed trace event"):
        load_kineto(write(tmp_path, events))


def test_a_field_zym_does_not_read_is_not_judged(tmp_path, decoder):
    """A cpu_op's grid or stream (Inductor writes both) is not read: any type passes."""
    events = [META, ev("cpu_op", "op", 1, 9, **{"External id": 1}, grid="grid(x)",
                       stream="main", block={"a": 1}),
              ev("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=1, stream="nope"),
              ev("kernel", "k", 3, 1, correlation=1, device=0, stream=7)]
    tables, _ = load_kineto(write(tmp_path, events))
    assert tables["gpu"]["stream_id"].to_list() == [7]
    assert tables["call"]["op_id"].to_list() == [None]  # the call carries no External id


def test_an_execution_trace_is_named(tmp_path):
    path = tmp_path / "et.json"
    path.write_text(json.dumps({"schema": "1.0.1", "pid": 1, "time": "2023-07-14",
                                "nodes": [{"name": "[pytorch|profiler|execution_trace|thread]",
                                           "id": 2}]}))
    with pytest.raises(InputError, match="execution trace") as e:
        load_kineto(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name, kind, blocking, direction", [
    ("hipLaunchKernel", "launch", False, None),
    ("hipExtModuleLaunchKernel", "launch", False, None),
    ("hipModuleLaunchKernel", "launch", False, None),
    ("hipGraphLaunch", "launch", False, None),
    ("hipMemcpyWithStream", "copy", True, None),
    ("hipMemcpyAsync", "copy", False, None),
    ("hipMemcpyDtoH", "copy", True, "DtoH"),
    ("hipMemsetAsync", "memset", False, None),
    ("hipDeviceSynchronize", "sync", True, None),
    ("hipStreamSynchronize", "sync", True, None),
    ("hipEventSynchronize", "sync", True, None),
    ("hipEventRecord", "other", False, None),
    ("cudaLaunchKernel", "launch", False, None),
])
def test_hip_api_names_are_classified_like_cuda_ones(name, kind, blocking, direction):
    got = pl.select(api_kind(pl.lit(name)).alias("k"), is_blocking_api(pl.lit(name)).alias("b"),
                    api_copy_kind(pl.lit(name)).alias("d")).row(0)
    assert got == (kind, blocking, direction)


def test_epoch_microsecond_times_are_exact_and_keep_nesting(tmp_path, decoder):
    """Older Kineto writes epoch µs (1.7e15): times 1000 that passes 2^53, where a float64 is
    256 ns coarse. Here the call ends exactly when its op does; rounded through a float, its
    end lands 72 ns past the op's and the call loses its op."""
    op_ts, call_ts = 1712867402348289, 1712867402348292
    events = [META,
              ev("cpu_op", "aten::copy_", op_ts, 10, **{"External id": 4}),
              ev("cuda_runtime", "cudaMemcpyAsync", call_ts, 7, correlation=1,
                 **{"External id": 4}),
              ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", call_ts + 1, 2,
                 correlation=1, device=0, stream=7, bytes=64)]
    tables, _ = load_kineto(write(tmp_path, events))
    call = tables["call"]
    assert call["ts_ns"].to_list() == [call_ts * 1000]
    assert tables["gpu"]["ts_ns"].to_list() == [(call_ts + 1) * 1000]
    assert tables["span"]["ts_ns"].to_list() == [op_ts * 1000]
    frames = dict(zip(tables["frame"]["frame_id"], tables["frame"]["name"]))
    stack = tables["stack"]
    parent = dict(zip(stack["stack_id"], stack["parent_id"]))
    frame_of = dict(zip(stack["stack_id"], stack["frame_id"]))
    sid, chain = call["stack_id"][0], []
    while sid is not None:
        chain.append(frames[frame_of[sid]])
        sid = parent[sid]
    assert chain[::-1] == ["aten::copy_", "cudaMemcpyAsync"]


def test_a_byte_order_mark_is_ignored(tmp_path):
    """A UTF-8 byte order mark before the JSON (RFC 8259 lets a reader ignore it; a tool on
    Windows that saved the trace may write one): the same tables, plain or gzip, read by the
    forked decoder or by this process."""
    import gzip
    from pathlib import Path

    from zym.capture import kineto_prefetch
    from zym.capture.kineto_text import BOM, without_bom

    text = gzip.decompress((Path(__file__).resolve().parents[2] / "sample_traces"
                            / "gpt_decode_server.trace.json.gz").read_bytes())
    whole, _ = load_kineto(_write(tmp_path / "t.json", text))
    for name, data in (("bom.json", BOM + text), ("bom.json.gz", gzip.compress(BOM + text))):
        path = _write(tmp_path / name, data)
        for ahead in (False, True):
            if ahead:
                kineto_prefetch.start(path)
            tables, _ = load_kineto(path)
            assert {t: tables[t].height for t in tables} == {t: whole[t].height for t in whole}
            assert tables["gpu"].equals(whole["gpu"]) and tables["call"].equals(whole["call"])
    # the mark split across pieces, or the whole text shorter than it
    pieces = [BOM[:1], BOM[1:2], BOM[2:] + b"{", b"}"]
    assert b"".join(without_bom(iter(pieces))) == b"{}"
    assert list(without_bom(iter([b"{"]))) == [b"{"]
    assert b"".join(p for p in without_bom(iter([BOM[:2], None])) if p) == BOM[:2]


def _write(path, data: bytes):
    path.write_bytes(data)
    return path
