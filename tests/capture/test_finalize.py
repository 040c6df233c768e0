"""Raw records -> schema-v1 tables, on synthetic data: argument decoding, the stack trie,
missed and unsampled stacks, and reading raw streams cut short by a crash."""
from __future__ import annotations

import polars as pl
from zym.capture import events
from zym.capture.probes import PROBES
from zym.capture.sink import (
    MISSED_FRAME,
    RawWriter,
    build_tables,
    finalize,
    raw_polars_schema,
    read_raw,
)
from zym.schemas import CaptureMeta, open_capture

SLOT = {p.symbol: i for i, p in enumerate(PROBES)}


def raw_call(api, stack_hash, ts, size=0, stream=0, copy=0, dur=0, flags=0):
    return {"pid": 1, "tid": 7, "ts_ns": ts, "dur_ns": dur, "probe": SLOT[api],
            "size_arg": size, "stream": stream, "copy_arg": copy, "stack_hash": stack_hash,
            "flags": flags, "native_key": 0}


def frames(key, stack_hash, *names):
    """Frames of one stack, root first, each at line 10 * depth of f.py."""
    return [{"pid": 1, "hash": stack_hash, "stack_key": key, "depth": d, "kind": "python",
             "name": n, "file": "f.py", "line": 10 * (d + 1)} for d, n in enumerate(names)]


RAW_FRAMES = pl.DataFrame(frames(1, 0xAAA, "main", "step", "launch")
                          + frames(2, 0xBBB, "main", "step", "sync"),
                          schema=raw_polars_schema("frames"))
RAW_CALLS = pl.DataFrame([
    raw_call("cuLaunchKernel", 0xAAA, 100, stream=0x5),
    raw_call("cuLaunchKernel", 0xAAA, 200, stream=0x5),
    raw_call("cuMemsetD32Async", 0xAAA, 300, size=256, stream=0x5),
    raw_call("cuStreamSynchronize", 0xBBB, 400, stream=0x5, dur=5000),
    raw_call("cudaMemcpyAsync", 0, 500, size=64, copy=2, stream=0x7,    # no Python frames
             flags=events.F_NO_TSTATE),
    raw_call("cuMemcpyDtoHAsync_v2", 0xCCC, 600, size=8),   # its stack record was lost
    raw_call("cuLaunchKernel", 0, 700, flags=events.F_NOT_SAMPLED),
], schema=raw_polars_schema("calls"))


def paths(tables):
    """stack_id of each call -> [(kind, name, line)] innermost first."""
    nodes = {r["stack_id"]: r for r in
             tables["stack"].join(tables["frame"], on="frame_id").iter_rows(named=True)}
    out = []
    for sid in tables["call"]["stack_id"]:
        path, node = [], nodes.get(sid)
        while node is not None:
            path.append((node["kind"], node["name"], node["line"]))
            node = nodes.get(node["parent_id"])
        out.append(path)
    return out


def test_arguments_are_decoded_per_probe():
    calls = build_tables(RAW_CALLS, RAW_FRAMES)["call"]
    assert calls["name"].to_list() == ["cuLaunchKernel", "cuLaunchKernel", "cuMemsetD32Async",
                                       "cuStreamSynchronize", "cudaMemcpyAsync",
                                       "cuMemcpyDtoHAsync_v2", "cuLaunchKernel"]
    assert calls["kind"].to_list() == ["launch", "launch", "memset", "sync", "copy", "copy",
                                       "launch"]
    assert calls["size_bytes"].to_list() == [None, None, 1024, None, 64, 8, None]
    assert calls["copy_kind"].to_list() == [None, None, None, None, "DtoH", "DtoH", None]
    assert calls["stream_id"].to_list() == [5, 5, 5, 5, 7, 0, 0]     # 0: the default stream
    assert calls["dur_ns"].to_list() == [0, 0, 0, 5000, 0, 0, 0]


def test_stacks_form_a_trie_ending_in_the_api_frame():
    tables = build_tables(RAW_CALLS, RAW_FRAMES)
    p = paths(tables)
    assert p[0] == [("cuda_api", "cuLaunchKernel", None), ("python", "launch", 30),
                    ("python", "step", 20), ("python", "main", 10)]
    assert p[0] == p[1]
    assert tables["call"]["stack_id"][0] == tables["call"]["stack_id"][1]
    assert p[2][0] == ("cuda_api", "cuMemsetD32Async", None) and p[2][1:] == p[0][1:]
    assert p[3][1:] == [("python", "sync", 30), ("python", "step", 20), ("python", "main", 10)]
    assert p[4] == [("cuda_api", "cudaMemcpyAsync", None)]          # a thread without Python
    assert p[5] == [("cuda_api", "cuMemcpyDtoHAsync_v2", None), ("native", MISSED_FRAME, None)]
    assert p[6] == []                                                # not sampled: no stack
    stacks = tables["stack"]
    # shared prefixes are shared nodes: one root "main", one "step" under it
    assert stacks.filter(pl.col("depth") == 0).height == 3           # main, API-only, missed
    assert stacks["stack_id"].n_unique() == stacks.height
    child_depths = stacks.join(stacks.select("stack_id", pl.col("depth").alias("pd")),
                               left_on="parent_id", right_on="stack_id")
    assert (child_depths["depth"] == child_depths["pd"] + 1).all()


def test_finalize_writes_a_valid_capture(tmp_path):
    raw = write_raw(tmp_path / "raw")
    out = finalize(raw, tmp_path / "c.parquet", CaptureMeta(producer="zym capture"))
    cap = open_capture(tmp_path / "c.parquet")
    assert cap.load("call").height == 7 == out["call"].height
    assert cap.load("frame").height == out["frame"].height
    assert cap.meta.extra["missed_stacks"] == 1


def write_raw(raw, copies=1):
    """RAW_FRAMES and RAW_CALLS through the writer, calls as the kernel's struct bytes."""
    w = RawWriter(raw)
    for row in RAW_FRAMES.iter_rows(named=True):
        w.add("frames", **row)
    for _ in range(copies):
        for row in RAW_CALLS.iter_rows(named=True):
            w.add_call(bytes(events.Call(type=events.EV_CALL, **row)))
        w.flush()
    w.close()
    return raw


def test_a_stream_cut_mid_batch_keeps_the_complete_batches(tmp_path):
    raw = write_raw(tmp_path / "raw", copies=3)
    assert read_raw(raw, "calls").equals(pl.concat([RAW_CALLS] * 3))
    path = raw / "calls.arrow"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 200])     # a crash in the middle of the last batch
    assert read_raw(raw, "calls").height == 2 * RAW_CALLS.height


def _without_pyarrow(monkeypatch) -> None:
    """Imports of pyarrow fail from now until ``monkeypatch.undo()``: a host without it."""
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)


def test_json_lines_fallback_reads_back_the_same(tmp_path, monkeypatch):
    """A capture host without pyarrow writes JSON lines; finalizing reads them alike."""
    _without_pyarrow(monkeypatch)
    raw = write_raw(tmp_path / "raw")
    monkeypatch.undo()
    assert (raw / "calls.jsonl").exists() and not (raw / "calls.arrow").exists()
    assert read_raw(raw, "calls").equals(RAW_CALLS)


def test_a_raw_stream_of_another_format_is_a_one_line_error(tmp_path):
    """A raw directory written by another zym version (a column renamed) is refused clearly."""
    import pytest
    from pyarrow import ipc
    from zym.schemas.errors import InputError

    raw = write_raw(tmp_path / "raw")
    old = RAW_CALLS.rename({"stack_hash": "stack_key"}).to_arrow()
    with ipc.new_stream(raw / "calls.arrow", old.schema) as writer:
        writer.write_table(old)
    with pytest.raises(InputError, match="lacks stack_hash") as e:
        read_raw(raw, "calls")
    assert "\n" not in str(e.value)


STACK_COPY = bytes(range(256)) * 3     # the bytes of a native stack copy, every value


def write_natives(raw):
    """One native stack copy and one mapping, through the writer."""
    w = RawWriter(raw)
    w.add("natives", pid=1, key=0xFEED, ip=0x1000, sp=0x7000, bp=0, probe=0, stack=STACK_COPY)
    w.add("maps", pid=1, start=0x1000, end=0x2000, offset=0, path="/nonexistent/libx.so",
          size=None, mtime_ns=None)
    w.close()
    return raw


def test_stack_copies_survive_the_json_lines_fallback(tmp_path, monkeypatch):
    """Without pyarrow the copies are written as hex (JSON has no bytes) and read back as the
    same bytes, by the finalizer's reader and by the unwinder's."""
    from zym.capture.native import _raw_rows

    _without_pyarrow(monkeypatch)
    raw = write_natives(tmp_path / "raw")
    monkeypatch.undo()
    assert (raw / "natives.jsonl").exists()
    assert read_raw(raw, "natives")["stack"].to_list() == [STACK_COPY]
    assert [r["stack"] for r in _raw_rows(raw, "natives")] == [STACK_COPY]


def test_a_copy_whose_libraries_are_gone_is_cut_and_said(tmp_path):
    """Finalized where the mapped library does not exist: no frame is guessed; the path gets
    the cut frame with its reason, and the metadata names the library."""
    from zym.capture.native import CUT_FRAME, unwind_raw
    from zym.schemas.meta import CaptureMeta

    raw = write_natives(tmp_path / "raw")
    meta = CaptureMeta(producer="zym capture", clock_domain="CLOCK_MONOTONIC")
    summary = unwind_raw(raw, meta)
    assert summary.paths == 1 and summary.to_python == 0
    assert "/nonexistent/libx.so" in meta.extra["native"]["unreadable_libraries"]
    names = read_raw(raw, "native_frames")["name"].to_list()
    assert names[0] == f"{CUT_FRAME} (unreadable library)"
    assert unwind_raw(raw, meta) is None       # once: the unwound paths are kept


def test_a_raw_capture_from_before_native_frames_finalizes(tmp_path):
    """A calls stream written before native_key existed reads with it null."""
    from pyarrow import ipc
    from zym.capture.finalize_raw import read_raw_checked
    from zym.capture.rawcheck import ChecksummedFile

    raw = write_raw(tmp_path / "raw")
    old = RAW_CALLS.drop("native_key").to_arrow()
    sink = ChecksummedFile(raw / "calls.arrow")
    writer = ipc.new_stream(sink, old.schema)
    writer.write_table(old)
    writer.close()
    sink.checkpoint()
    sink.close()
    calls, lost = read_raw_checked(raw, "calls")
    assert lost == 0 and calls.height == RAW_CALLS.height
    assert calls["native_key"].null_count() == calls.height
    assert calls.drop("native_key").equals(RAW_CALLS.drop("native_key"))
