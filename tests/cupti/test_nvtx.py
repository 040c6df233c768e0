"""NVTX ranges: recorded by the agent through NVTX's injection path (a stand-in libcupti plays
CUPTI and the injection library, nvtx_target.py an NVTX client), paired, stored in the range
table, layered into call stacks and shown on a Perfetto track.

Expected values come from what nvtx_target.py does (its docstring), or are written by hand for
the synthetic marker records below; none is read back from zym's output."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_capture_e2e import libs  # noqa: F401 - the stand-in libraries fixture (eBPF)
from zym.capture.cupti import agent, target_env
from zym.capture.cupti.decode import decode_spool, read_spool
from zym.capture.cupti.finalize import finalize_capture
from zym.capture.cupti.layouts import LAYOUTS, MARKER_2, MARKER_2_CUPTI_PYTHON
from zym.capture.cupti.nvtx import UNNAMED, add_range_layer, pair_ranges
from zym.schemas import open_capture, write_capture
from zym.schemas.meta import CaptureMeta

HERE = Path(__file__).parent
TARGET = HERE / "nvtx_target.py"
# nvtx_target.py: launches inside each range (innermost), on which thread
INSIDE = {"step": 3, "aten::addmm, seq = 1, op_id = 2": 2, "io": 1, "left open": 5, "load": 4}
OUTSIDE = 6
LAUNCHES = sum(INSIDE.values()) + OUTSIDE


def _run(tmp_path: Path, lib: Path, **extra: str) -> tuple[dict, Path]:
    spool = tmp_path / "spool"
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(lib), "ZYM_CUPTI_FLUSH_MS": "200",
                               "ZYM_CUPTI_EAGER": "1", "ZYM_NVTX": "1"}
    env.pop("NVTX_INJECTION64_PATH", None)
    env |= extra
    proc = subprocess.run([sys.executable, str(TARGET)], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[0]), spool


@pytest.fixture(scope="module")
def recorded(fake_lib, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvtx")
    facts, spool_dir = _run(tmp, fake_lib)
    out, meta = finalize_capture(spool_dir, tmp / "nvtx.parquet")
    return facts, spool_dir, out, meta


def test_agent_names_its_libcupti_for_nvtx_and_records_ranges(recorded, fake_lib):
    facts, spool_dir, _, _ = recorded
    assert facts["env"] == str(fake_lib) and facts["injected"]   # seen by C getenv
    (path,) = spool_dir.glob("cupti-*.spool")
    spool = read_spool(path)
    assert spool.header["nvtx"] == "on" and spool.footer["errors"] == []
    t = decode_spool(spool)
    r = t.ranges
    main, worker = facts["main_tid"], facts["worker_tid"]
    got = {(n, tid, k, d, c) for n, tid, k, d, c in
           r.select("name", "tid", "kind", "domain", "clipped").iter_rows()}
    # names survived the stand-in wiping them after each buffer's completion callback
    assert got == {("step", main, "nvtx", None, None),
                   ("aten::addmm, seq = 1, op_id = 2", main, "nvtx", None, None),
                   ("io", main, "nvtx", None, None), ("left open", main, "nvtx", None, "end"),
                   ("here", main, "nvtx_mark", None, None),
                   ("load", worker, "nvtx", "mydomain", None)}
    # each range holds exactly the launches made inside it (both clocks: the fit's)
    api = t.api
    for name, n in INSIDE.items():
        row = r.filter(pl.col("name") == name).row(0, named=True)
        inside = api.filter((pl.col("tid") == row["tid"]) & pl.col("ts_ns").is_between(
            row["ts_ns"], row["ts_ns"] + row["dur_ns"]))
        nested = 2 if name == "step" else 0   # step also holds aten::addmm's launches
        assert inside.height == n + nested, name
    assert r.filter(pl.col("kind") == "nvtx_mark")["dur_ns"].to_list() == [0]


def _chains(cap, with_kind: bool = False) -> Counter:
    """Counter of each call's stack as frame names (or (kind, name)) root first (None: no
    stack)."""
    frames = cap.load("frame").select("frame_id", "name", "kind", "file")
    stacks = cap.load("stack")
    parent = dict(zip(stacks["stack_id"], stacks["parent_id"]))
    frame = dict(zip(stacks["stack_id"], stacks["frame_id"]))
    name = dict(zip(frames["frame_id"], frames["name"]))
    if with_kind:
        name = {f: (k, n) for f, k, n in frames.select("frame_id", "kind", "name").iter_rows()}
    out = Counter()
    for sid in cap.load("call")["stack_id"]:
        chain = []
        while sid is not None:
            chain.append(name[frame[sid]])
            sid = parent[sid]
        out[tuple(reversed(chain)) or None] += 1
    return out


def test_cupti_only_capture_keeps_ranges_and_invents_no_stacks(recorded):
    _, _, out, meta = recorded
    cap = open_capture(out)
    # no eBPF, no stacks: a stack of ranges alone would pass for a known call path
    assert _chains(cap) == Counter({None: LAUNCHES})
    frames = cap.load("frame").filter(pl.col("kind") == "nvtx")
    assert dict(zip(frames["name"], frames["file"]))["load"] == "mydomain"
    ranges = cap.load("range")
    assert ranges.filter(pl.col("name").str.starts_with("aten::addmm"))["depth"].to_list() == [1]
    assert meta.extra["nvtx"]["calls_in_ranges"] == LAUNCHES - OUTSIDE
    assert meta.extra["nvtx"]["clipped_end"] == 1 and meta.extra["nvtx"]["marks"] == 1


@pytest.mark.ebpf
def test_zym_capture_puts_ranges_between_python_and_the_cuda_call(libs, tmp_path):  # noqa: F811
    out = tmp_path / "nvtx.parquet"
    iters = 10
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"), "ITERS": str(iters),
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "INIT_SLEEP": "0.5"}
    env.pop("NVTX_INJECTION64_PATH", None)
    proc = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "-o", str(out),
                           "--nvtx", "--", sys.executable, str(HERE / "nvtx_e2e_workload.py")],
                          capture_output=True, text=True, check=False, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    cap = open_capture(out)
    below = Counter()   # the innermost Python frame, the ranges and the API frame below it
    for chain, n in _chains(cap, with_kind=True).items():
        last_py = max(i for i, (k, _) in enumerate(chain) if k == "python")
        rest = chain[last_py + 1:]
        # native frames (when the capture unwinds them) come after the ranges, never before
        kinds = [k for k, _ in rest]
        assert kinds == sorted(kinds, key=lambda k: {"nvtx": 0, "cuda_api": 2}.get(k, 1)), rest
        below[(chain[last_py][1], *(name for k, name in rest if k in ("nvtx", "cuda_api")))] += n
    assert below == Counter({("launch", "step", "layer", "cuLaunchKernel"): 2 * iters,
                             ("launch", "step", "cuLaunchKernel"): iters,
                             ("launch", "cuLaunchKernel"): 3})
    folded = tmp_path / "nvtx.folded"
    subprocess.run([sys.executable, "-m", "zym.cli.main", "export", str(out), "--format",
                    "folded", "-o", str(folded)], check=True, capture_output=True, timeout=120)
    layered = [line for line in folded.read_text().splitlines()
               if re.search(r"launch \(nvtx_e2e_workload\.py:\d+\);\[nvtx\] step;\[nvtx\] layer;", line)]
    assert layered and all(";cuLaunchKernel;" in line for line in layered)


def test_perfetto_shows_an_nvtx_track_per_thread(recorded):
    from zym.analysis.export.check import check_trace
    from zym.analysis.export.perfetto import perfetto_bytes
    from zym.analysis.export.source import load_export_source

    facts, _, out, _ = recorded
    checked = check_trace(perfetto_bytes(load_export_source(out, with_findings=False)))
    nvtx = {u: checked.path(u) for u in checked.slices if checked.path(u)[-1] == "NVTX"}
    by_thread = {}
    for uuid, path in nvtx.items():
        thread = path[-2]
        by_thread[thread] = {(s.name, s.depth, s.args.get("domain"), s.args.get("clipped"))
                             for s in checked.slices[uuid]}
    assert by_thread == {
        "main thread": {("step", 0, None, None), ("aten::addmm, seq = 1, op_id = 2", 1, None, None),
                        ("io", 0, None, None), ("here", 0, None, None),
                        ("left open", 0, None, "end")},
        f"thread {facts['worker_tid']}": {("load", 0, "mydomain", None)}}


def test_zym_nvtx_0_leaves_nvtx_alone(fake_lib, tmp_path):
    facts, spool_dir = _run(tmp_path, fake_lib, ZYM_NVTX="0")
    assert facts["env"] is None and not facts["injected"]
    (path,) = spool_dir.glob("cupti-*.spool")
    spool = read_spool(path)
    assert spool.header["nvtx"].startswith("off: not asked") and not spool.marker_names
    assert decode_spool(spool).ranges.height == 0
    _, meta = finalize_capture(spool_dir, tmp_path / "t.parquet")
    assert meta.extra["nvtx"]["recording"] == {str(spool.header["pid"]): spool.header["nvtx"]}


def test_another_tools_injection_library_is_kept(fake_lib, tmp_path):
    other = tmp_path / "libother.so"
    facts, spool_dir = _run(tmp_path, fake_lib, NVTX_INJECTION64_PATH=str(other))
    assert facts["env"] == str(other)
    (path,) = spool_dir.glob("cupti-*.spool")
    assert read_spool(path).header["nvtx"].startswith("off: NVTX_INJECTION64_PATH already names")


@pytest.mark.parametrize("opt_in", [True, False])
def test_dormant_agent_readies_nvtx_only_when_asked(fake_lib, tmp_path, opt_in):
    from zym.capture.cupti import agent_env

    env = agent_env(agent_dir=str(tmp_path / "agents"), nvtx=opt_in) | {
        "ZYM_CUPTI_LIB": str(fake_lib), "ZYM_CUPTI_EAGER": "1"}
    env.pop("NVTX_INJECTION64_PATH", None)
    code = ("import os, sys, json; a = sys.modules['_zym_cupti_agent']; "
            "print(json.dumps([os.environ.get('NVTX_INJECTION64_PATH'), a._dormant.nvtx]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=False, timeout=60)
    path, state = json.loads(out.stdout)
    if opt_in:
        assert (path, state) == (str(fake_lib), "on")
    else:
        assert path is None and state.startswith("off: the dormant agent was started without")


# --- pairing, on marker records written by hand ------------------------------------------------

def _markers(rows: list[tuple]) -> pl.DataFrame:
    """rows: (tid, ts, flags, id, name, domain); pid 1."""
    return pl.DataFrame([(1, *r) for r in rows], orient="row",
                        schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                                "flags": pl.Int64, "id": pl.Int64, "name": pl.String,
                                "domain": pl.String})


S, E, M = 2, 4, 1


def test_pairing_by_id_whatever_the_record_order():
    rows = [(7, 100, S, 1, "a", None), (7, 150, S, 2, "b", "d"), (7, 300, E, 2, None, None),
            (7, 900, E, 1, None, None), (8, 120, S, 3, "c", None), (8, 120, E, 3, None, None),
            (7, 400, M, 4, "m", None)]
    shuffled = [rows[i] for i in (5, 2, 6, 0, 3, 1, 4)]
    r = pair_ranges(_markers(shuffled), 0, 10_000)
    got = set(r.select("tid", "ts_ns", "dur_ns", "name", "kind", "domain", "clipped").iter_rows())
    assert got == {(7, 100, 800, "a", "nvtx", None, None), (7, 150, 150, "b", "nvtx", "d", None),
                   (8, 120, 0, "c", "nvtx", None, None),      # start and end at one instant
                   (7, 400, 0, "m", "nvtx_mark", None, None)}


def test_an_id_used_twice_pairs_in_time_order():
    rows = [(7, 10, S, 5, "x", None), (7, 20, E, 5, None, None),
            (7, 30, S, 5, "y", None), (7, 45, E, 5, None, None)]
    r = pair_ranges(_markers(rows), 0, 100)
    assert sorted(r.select("name", "ts_ns", "dur_ns").iter_rows()) == [("x", 10, 10), ("y", 30, 15)]


def test_ends_without_their_starts_id_pair_as_pops_do():
    # should a pop's record not carry its push's id (here 0), ends pair with the latest open
    # start of their thread; an end with nothing open is a range begun before recording
    rows = [(7, 50, E, 0, None, None), (7, 100, S, 1, "a", None), (7, 150, S, 2, "b", None),
            (7, 300, E, 0, None, None), (7, 900, E, 0, None, None), (7, 950, S, 3, "c", None),
            (8, 120, S, 4, "x", None), (8, 130, E, 0, None, None)]
    r = pair_ranges(_markers(rows), 10, 1_000)
    assert sorted(r.select("tid", "name", "ts_ns", "dur_ns", "clipped").iter_rows()) == [
        (7, UNNAMED, 10, 40, "start"), (7, "a", 100, 800, None), (7, "b", 150, 150, None),
        (7, "c", 950, 50, "end"), (8, "x", 120, 10, None)]
    assert r["by_order"].sum() == 3


def test_unclosed_and_unopened_ranges_are_clipped_to_the_recording():
    rows = [(7, 50, E, 1, None, None),      # opened before recording began
            (7, 200, S, 2, "open", None)]   # still open when it ended
    r = pair_ranges(_markers(rows), 10, 1_000)
    assert sorted(r.select("name", "ts_ns", "dur_ns", "clipped").iter_rows()) == [
        (UNNAMED, 10, 40, "start"), ("open", 200, 800, "end")]


# --- the stack layer, on a hand-made eBPF-like capture -----------------------------------------

def test_ranges_sit_below_the_innermost_python_frame():
    frames = pl.DataFrame({"frame_id": [0, 1, 2, 3], "kind": ["python", "python", "native",
                                                           "cuda_api"],
                           "name": ["main", "forward", "at::addmm", "cuLaunchKernel"],
                           "file": ["m.py", "m.py", "libtorch.so", None], "line": [1, 2, None, None],
                           "source": [None] * 4}, schema_overrides={"line": pl.Int32})
    # 0 main > 1 forward > 2 at::addmm > 3 cuLaunchKernel; 4: cuLaunchKernel alone (no Python)
    stacks = pl.DataFrame({"stack_id": [0, 1, 2, 3, 4], "parent_id": [None, 0, 1, 2, None],
                           "frame_id": [0, 1, 2, 3, 3], "depth": [0, 1, 2, 3, 0]},
                          schema_overrides={"depth": pl.Int32})
    calls = pl.DataFrame({"pid": [1] * 4, "tid": [7, 7, 7, 9], "ts_ns": [150, 250, 2_000, 150],
                          "dur_ns": [5] * 4, "name": ["cuLaunchKernel"] * 4,
                          "stack_id": [3, 3, 3, 4]})
    ranges = pair_ranges(_markers([(7, 100, S, 1, "layer", None), (7, 200, S, 2,
                                   "aten::addmm, seq = 9", None), (7, 300, E, 2, None, None),
                                   (7, 400, E, 1, None, None), (9, 100, S, 3, "w", None),
                                   (9, 200, E, 3, None, None)]), 0, 5_000)
    tables, stats = add_range_layer({"frame": frames, "stack": stacks, "call": calls}, ranges)
    name = dict(zip(tables["frame"]["frame_id"], tables["frame"]["name"]))
    st = tables["stack"]
    parent, frame = dict(zip(st["stack_id"], st["parent_id"])), dict(zip(st["stack_id"], st["frame_id"]))

    def chain(sid):
        out = []
        while sid is not None:
            out.append(name[frame[sid]])
            sid = parent[sid]
        return out[::-1]

    assert [chain(s) for s in tables["call"]["stack_id"]] == [
        ["main", "forward", "layer", "at::addmm", "cuLaunchKernel"],
        ["main", "forward", "layer", "aten::addmm", "at::addmm", "cuLaunchKernel"],
        ["main", "forward", "at::addmm", "cuLaunchKernel"],          # after the ranges
        ["w", "cuLaunchKernel"]]                                      # no Python: at the root
    assert [chain(s) for s in tables["range"]["stack_id"]] == [["layer"],
                                                               ["layer", "aten::addmm"], ["w"]]
    assert stats["calls_in_ranges"] == 3 and stats["max_depth"] == 1


# --- file, layout, agent helpers ---------------------------------------------------------------

def test_range_table_round_trips_and_older_files_read_without_ranges(tmp_path):
    ranges = pl.DataFrame({"pid": [1], "tid": [2], "ts_ns": [10], "dur_ns": [5], "name": ["r"],
                           "kind": ["nvtx"], "domain": ["d"], "clipped": ["end"]})
    path = write_capture(tmp_path / "c.parquet", {"range": ranges}, CaptureMeta(producer="test"))
    back = open_capture(path).load("range")
    assert back.select(ranges.columns).to_dicts() == ranges.to_dicts()
    bad = ranges.with_columns(pl.lit("ring").alias("kind"))
    write_capture(tmp_path / "bad.parquet", {"range": bad}, CaptureMeta(producer="test"))
    from zym.schemas.validate import InvalidCaptureError

    with pytest.raises(InvalidCaptureError, match="range table"):
        open_capture(tmp_path / "bad.parquet").load("range")


def test_marker_layout_is_the_same_in_cupti_12_and_13():
    assert LAYOUTS[12][agent.KIND_MARKER] == LAYOUTS[13][agent.KIND_MARKER] == MARKER_2
    assert MARKER_2.itemsize == agent.RECORD_SIZES[13][agent.KIND_MARKER] == 56
    assert (MARKER_2.fields["name"][1], MARKER_2.fields["domain"][1]) == (
        agent.MARKER_NAME_OFFSET, agent.MARKER_DOMAIN_OFFSET)


def test_marker_layout_matches_cupti_python():
    cupti = pytest.importorskip("cupti.cupti", reason="cupti-python not installed")
    attr, renamed = MARKER_2_CUPTI_PYTHON
    ref = getattr(cupti, attr)
    assert ref.itemsize == MARKER_2.itemsize
    obj = ref.fields["object_id"][1]
    for name in MARKER_2.names:
        off = MARKER_2.fields[name][1]
        theirs = renamed.get(name, name)
        if theirs == "object_id":   # the union's pt member: process id, then thread id
            assert off == obj + (4 if name == "thread_id" else 0)
        else:
            assert ref.fields[theirs][1] == off, name


def _marker_bytes(name_ptr: int, domain_ptr: int = 0, flags: int = 2) -> bytes:
    a = np.zeros(1, MARKER_2)
    a["kind"], a["flags"], a["id"], a["object_kind"] = agent.KIND_MARKER, flags, 3, 2
    a["name"], a["domain"] = name_ptr, domain_ptr
    return a.tobytes()


def test_marker_pointers_found_without_walking_the_buffer():
    import sys as _sys

    sys_path = _sys.path[:]
    try:
        _sys.path.insert(0, str(HERE))
        from cupti_builder import api, kernel
    finally:
        _sys.path[:] = sys_path
    # another record's fields look like a marker head at offset 4 (12, then 2): a false,
    # unaligned match overlapping nothing real; then a real marker, then one more record
    decoy = np.int32(12).tobytes() + np.int32(2).tobytes()
    buf = (api(1, 2, 5, 12, 211)[:36] + decoy[:4] + _marker_bytes(0x1000, 0x2000)
           + kernel(3, 4, 1) + _marker_bytes(0x3000, 0, flags=4 | 8))
    plain = api(1, 2, 5, 12, 211) + kernel(3, 4, 12)
    for find in (lambda b: agent._pointers_numpy(np, b) - {0}, lambda b: agent._pointers_scan(b) - {0}):
        assert find(buf) == {0x1000, 0x2000, 0x3000}
        assert find(plain) == set()
        assert find(buf[:-8]) == {0x1000, 0x2000}   # a record cut short is not read
    assert agent.marker_name_pointers(buf + _marker_bytes(0)) == {0x1000, 0x2000, 0x3000}


def test_marker_names_are_read_only_inside_readable_memory():
    import ctypes

    text = ctypes.create_string_buffer(b"forward\0tail")
    good = ctypes.addressof(text)
    got = agent.read_strings({good, 8, good + 8}, 64)   # 8: never mapped
    assert got == {str(good): "forward", str(good + 8): "tail"}


def test_nvtx_env_is_left_as_is_when_disabled(monkeypatch):
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setenv("ZYM_NVTX", "0")
    assert agent.ready_nvtx("/x/libcupti.so.13").startswith("off: not asked")
    monkeypatch.delenv("ZYM_NVTX")     # opt-in: unset is off too
    assert agent.ready_nvtx("/x/libcupti.so.13").startswith("off: not asked")
    assert "NVTX_INJECTION64_PATH" not in os.environ


def test_pushes_without_pops_stay_within_the_files_bounds():
    # a loop that pushes "step" and never pops: 3,000 ranges, each inside the one before
    from zym.capture.cupti.nvtx import MAX_DEPTH, MAX_LAYER
    from zym.schemas.validate import check_tables

    n = 3_000
    markers = _markers([(7, 100 + 10 * i, S, i + 1, "step", None) for i in range(n)])
    ranges = pair_ranges(markers, 0, 10 * n + 1_000)
    frames = pl.DataFrame({"frame_id": [0, 1], "kind": ["python", "cuda_api"],
                           "name": ["loop", "cuLaunchKernel"], "file": ["l.py", None],
                           "line": [3, None], "source": [None, None]},
                          schema_overrides={"line": pl.Int32})
    stacks = pl.DataFrame({"stack_id": [0, 1], "parent_id": [None, 0], "frame_id": [0, 1],
                           "depth": [0, 1]}, schema_overrides={"depth": pl.Int32})
    calls = pl.DataFrame({"pid": [1], "tid": [7], "ts_ns": [10 * n + 500], "dur_ns": [5],
                          "name": ["cuLaunchKernel"], "stack_id": [1]})
    tables, stats = add_range_layer({"frame": frames, "stack": stacks, "call": calls}, ranges)
    assert stats["dropped_too_deep"] == n - (MAX_DEPTH + 1)
    assert tables["range"].height == MAX_DEPTH + 1
    st = tables["stack"]
    leaf = tables["call"]["stack_id"][0]
    assert st.filter(pl.col("stack_id") == leaf)["depth"][0] == 1 + MAX_LAYER   # loop, 64 x step, call
    check_tables(tables)   # depths and stacks within the file's bounds
