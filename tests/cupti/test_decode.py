"""Raw CUPTI buffers -> records -> capture frames, on synthetic records built with the dtypes."""
from __future__ import annotations

from pathlib import Path

import cupti_builder as b
import numpy as np
import polars as pl
import pytest
from zym.capture.cupti import agent
from zym.capture.cupti.decode import collapse_nested, decode_buffers, decode_spool, read_spool
from zym.capture.cupti.layouts import LAYOUTS

K = agent


def _mixed_buffer() -> bytes:
    return (b.api(1_000, 3_000, 55, 1, b.CBID["launch"]) + b.kernel(4_000, 9_000, 1, 0xAB00)
            + b.api(10_000, 12_000, 55, 2, b.CBID["copy"]) + b.memcpy(13_000, 14_000, 2, 4096)
            + b.api(14_500, 16_500, 55, 3, b.CBID["sync"]) + b.sync(15_000, 16_000, 3)
            + b.api(17_000, 18_000, 56, 4, b.CBID["memset"]) + b.memset(18_500, 19_000, 4, 1 << 20)
            + b.api(20_000, 21_000, 56, 5, b.CBID["cuLaunchKernelEx"], kind=K.KIND_DRIVER)
            + b.kernel(22_000, 30_000, 5, 0xCD00, graph_id=9))


def test_walk_finds_every_record_back_to_back():
    buf = _mixed_buffer()
    offsets, kinds, end = agent.record_offsets(buf, agent.RECORD_SIZES[13])
    assert end == len(buf)
    assert kinds == [5, 10, 5, 1, 5, 38, 5, 2, 4, 10]
    sizes = [agent.RECORD_SIZES[13][k] for k in kinds]
    assert offsets == list(np.cumsum([0] + sizes[:-1]))


def test_bulk_decode_fields_per_kind():
    recs, undecoded = decode_buffers([_mixed_buffer(), _mixed_buffer()], LAYOUTS[13])
    assert undecoded == 0
    assert len(recs[K.KIND_RUNTIME]) == 8 and len(recs[K.KIND_DRIVER]) == 2
    k = recs[K.KIND_CONCURRENT_KERNEL]
    assert k["correlation_id"].tolist() == [1, 5, 1, 5]
    assert k["name"].tolist() == [0xAB00, 0xCD00] * 2
    assert k["graph_id"].tolist() == [0, 9, 0, 9]
    m = recs[K.KIND_MEMCPY]
    assert m["bytes"].tolist() == [4096, 4096] and m["copy_kind"].tolist() == [2, 2]
    assert recs[K.KIND_SYNCHRONIZATION]["type"].tolist() == [3, 3]
    assert recs[K.KIND_MEMSET]["bytes"].tolist() == [1 << 20] * 2


def test_unknown_record_kind_stops_the_walk_and_is_counted():
    foreign = np.zeros(24, dtype=np.uint8)
    foreign[:4] = np.frombuffer(np.int32(99).tobytes(), np.uint8)
    buf = b.api(1, 2, 3, 4, 211) + foreign.tobytes() + b.api(5, 6, 7, 8, 211)
    recs, undecoded = decode_buffers([buf], LAYOUTS[13])
    assert len(recs[K.KIND_RUNTIME]) == 1
    assert undecoded == 24 + 40


@pytest.mark.parametrize("fmt", ["framed", "arrow"])
def test_spool_round_trip_to_capture_frames(tmp_path, fmt):
    calib = [[2_000, 1_000, 100], [10**9 + 2_000, 10**9 + 1_000, 100]]  # mono = cupti + 1000
    path = b.write_spool(tmp_path / f"cupti-100.{fmt}", [_mixed_buffer()], calib,
                         names={0xAB00: "gemm_kernel"}, fmt=fmt)
    spool = read_spool(path)
    assert spool.footer is not None and len(spool.activity) == 1
    t = decode_spool(spool)
    assert t.clock[100].offset_ns == 1_000
    api = t.api.sort("ts_ns")
    assert api["name"].to_list() == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize",
                                     "cudaMemsetAsync", "cuLaunchKernelEx"]
    assert api["kind"].to_list() == ["launch", "copy", "sync", "memset", "launch"]
    assert api["ts_ns"].to_list() == [2_000, 11_000, 15_500, 18_000, 21_000]
    assert api["tid"].to_list() == [55, 55, 55, 56, 56]
    gpu = t.gpu.sort("ts_ns")
    assert gpu["kind"].to_list() == ["kernel", "copy", "sync", "memset", "kernel"]
    assert gpu["name"].to_list() == ["gemm_kernel", "Memcpy DtoH (Device -> Pageable)",
                                     "Stream Sync", "Memset (Device)", f"kernel@{0xCD00}"]
    assert gpu["dur_ns"].to_list() == [5_000, 1_000, 1_000, 500, 8_000]
    assert gpu["graph_id"].to_list() == [None, None, None, None, 9]
    assert gpu["device_id"].to_list() == [0] * 5  # the sync's device comes from its context
    assert gpu["size_bytes"].to_list() == [None, 4096, None, 1 << 20, None]
    assert gpu["copy_kind"].to_list() == [None, "DtoH", None, None, None]


def test_torn_spool_keeps_completed_chunks(tmp_path):
    path = b.write_spool(tmp_path / "cupti-100.spool", [_mixed_buffer(), _mixed_buffer()],
                         [[2_000, 1_000, 100]], footer=False)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-3])  # cut inside the trailing names chunk: a crash mid-write
    spool = read_spool(path)
    assert len(spool.activity) == 2 and spool.footer is None
    t = decode_spool(spool)
    assert t.stats["clean_stop"] is False and t.gpu.height == 10


def test_nested_runtime_and_driver_records_are_one_call():
    api = pl.DataFrame({"pid": [1, 1, 1], "tid": [5, 5, 5], "ts_ns": [100, 150, 400],
                        "dur_ns": [200, 50, 10], "name": ["cudaLaunchKernel", "cuLaunchKernel", "x"],
                        "kind": ["launch", "launch", "other"], "correlation_id": [7, 7, 8],
                        "cbid": [211, 307, 1], "domain": ["runtime", "driver", "runtime"]})
    out = collapse_nested(api)
    assert out.select("name", "ts_ns", "dur_ns").rows() == [("cudaLaunchKernel", 100, 200),
                                                           ("x", 400, 10)]


def test_api_names_lose_version_suffixes():
    assert agent.api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert agent.api_name("__cudaLaunchKernel_v13000") == "cudaLaunchKernel"
    assert agent.api_name("cuMemcpyDtoHAsync_v2") == "cuMemcpyDtoHAsync_v2"
    assert agent.API_PATTERN.match("cudaStreamSynchronize")
    assert not agent.API_PATTERN.match("cudaGetDevice")


def test_layouts_match_cupti_python():
    cupti = pytest.importorskip("cupti.cupti", reason="cupti-python not installed")
    from zym.capture.cupti import layouts

    for ours, theirs in layouts.CUPTI_PYTHON_NAMES.items():
        mine, ref = getattr(layouts, ours), getattr(cupti, theirs)
        assert mine.itemsize == ref.itemsize, ours
        for name, (dt, off) in ((n, mine.fields[n][:2]) for n in mine.names):
            assert name in ref.fields, (ours, name)
            assert ref.fields[name][1] == off and ref.fields[name][0].itemsize == dt.itemsize, (ours, name)


def test_cupti_12_records_decode_with_their_layout(tmp_path):
    import json

    dt12 = LAYOUTS[12]

    def rec(kind, **fields):
        a = np.zeros(1, dtype=dt12[kind])
        a["kind"] = kind
        for k, v in fields.items():
            a[k] = v
        return a.tobytes()

    buf = (rec(K.KIND_RUNTIME, start=1_000, end=3_000, thread_id=5, process_id=100,
               correlation_id=1, cbid=211)
           + rec(K.KIND_CONCURRENT_KERNEL, start=4_000, end=9_000, correlation_id=1, name=0x20)
           + rec(K.KIND_RUNTIME, start=10_000, end=11_000, thread_id=5, process_id=100,
                 correlation_id=2, cbid=211)
           + rec(K.KIND_CONCURRENT_KERNEL, start=12_000, end=13_000, correlation_id=2, name=0x20))
    w = agent.SpoolWriter(str(tmp_path / "cupti-100.spool"), "framed")
    w.write("header", json.dumps({"pid": 100, "cupti_api_version": 26,
                                  "api_names": b.API_NAMES}).encode())
    w.write("activity", buf)
    w.write("names", json.dumps({str(0x20): "gemm"}).encode())
    w.close()
    t = decode_spool(read_spool(tmp_path / "cupti-100.spool"))
    assert t.stats["cupti_major"] == 12 and t.stats["undecoded_bytes"] == 0
    assert t.gpu["correlation_id"].to_list() == [1, 2] and t.gpu["name"].to_list() == ["gemm"] * 2
    # read with CUPTI 13's layout, the same bytes cannot walk to the end: detected, not misread
    _, undecoded = decode_buffers([buf], LAYOUTS[13])
    assert undecoded > 0


def test_records_cupti_could_not_time_are_left_out_and_counted(tmp_path):
    """A kernel still running when the target stopped comes back with start = end = 0
    (CUPTI_TIMESTAMP_UNKNOWN): on an H200 capture five such records became GPU ops at
    -1.8e18 ns and the capture failed validation."""
    calib = [[2_000, 1_000, 100], [10**9 + 2_000, 10**9 + 1_000, 100]]
    buf = (b.kernel(1_000, 6_000, corr=1) + b.kernel(0, 0, corr=2) + b.kernel(7_000, 6_000, corr=3)
           + b.api(500, 900, 55, 1, 211))
    path = b.write_spool(tmp_path / "cupti-100.spool", [buf], calib, names={0x1000: "k"})
    t = decode_spool(read_spool(path))
    assert t.gpu["correlation_id"].to_list() == [1]
    assert t.gpu["ts_ns"].to_list() == [2_000]
    assert t.stats["incomplete"] == 2
    assert t.api.height == 1
