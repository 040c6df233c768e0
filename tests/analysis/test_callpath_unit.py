"""Call paths on built traces: unknown stacks, multi-process correlation, busy time."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from kineto_builder import KinetoBuilder
from zym.analysis import analyze
from zym.analysis.callpath import UNKNOWN_STACK
from zym.analysis.timeline import busy_intervals


def test_gpu_work_without_a_call_is_kept_as_unknown(tmp_path):
    b = KinetoBuilder()
    with b.py("app.py(3): run"), b.op("aten::mm"):
        b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=4.0)
    b.events.append({"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7,
                     "ts": b.gpu_now + 1, "dur": 6.0, "args": {"correlation": 999, "stream": 7,
                                                                "device": 0}})
    result = analyze(b.write(tmp_path / "t.json"))
    paths = result.call_paths.paths
    unknown = paths.filter(pl.col("path_id") == UNKNOWN_STACK).row(0, named=True)
    assert unknown["gpu_ns"] == 6000
    report = result.to_dict()
    assert report["gpu"]["activity_ns"] == 10_000 and report["gpu"]["attributed_ns"] == 4000
    assert any(p["site"] == "(unknown stack)" for p in report["paths_by_gpu_time"])


def test_same_kernel_from_two_sites_is_two_paths(tmp_path):
    b = KinetoBuilder()
    for site in ("app.py(10): attention", "app.py(20): mlp"):
        with b.py(site), b.op("aten::mm"):
            b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=3.0)
    paths = analyze(b.write(tmp_path / "t.json")).call_paths.paths
    assert sorted(paths["user_function"].to_list()) == ["attention", "mlp"]
    assert paths["gpu_ns"].to_list() == [3000, 3000]


def test_busy_time_counts_overlapping_streams_once():
    gpu = pl.DataFrame({"device_id": [0, 0, 0, 1], "ts_ns": [0, 5, 20, 0],
                        "dur_ns": [10, 10, 5, 3]})
    iv = busy_intervals(gpu)
    assert iv.rows() == [(0, 0, 15, 0), (0, 20, 25, 2), (1, 0, 3, 3)]  # + the opening row


def _busy_by_sweep(rows: list[tuple]) -> list[tuple]:
    """Busy periods by a plain sweep (the definition, one interval at a time)."""
    out = []
    for dev in sorted({d for d, *_ in rows}):
        mine = sorted((ts, i, ts + dur) for d, ts, dur, kind, i in rows
                      if d == dev and kind != "sync" and ts is not None and dur is not None)
        for ts, i, end in mine:
            if out and out[-1][0] == dev and ts <= out[-1][2]:
                out[-1] = (dev, out[-1][1], max(out[-1][2], end), out[-1][3])
            else:
                out.append((dev, ts, end, i))
    return out


@pytest.mark.parametrize("in_order", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_busy_periods_match_a_sweep(seed, in_order):
    """Random intervals on several devices (ties, touching ends, nested work, sync records,
    a row with no time, a null device, no work at all; seeds 6-7: times over most of the
    int64 range, as a capture with damaged clocks has): the periods a plain sweep finds.
    ``in_order``: the rows in time order (one device on even seeds, and with no sync record
    or row without time on seeds 0 and 4: nothing filtered, nothing sorted)."""
    rng = random.Random(seed)
    n = rng.randint(0, 400)
    scale = 1 << 51 if seed >= 6 else 1
    kinds = ["kernel", "copy"] if in_order and seed % 4 == 0 else ["kernel", "copy", "sync"]
    rows = [(rng.choice([0, 1, 3, None]) if seed % 2 else 0,
             rng.randint(0, 2000) // 5 * 5 * scale, scale * rng.choice([0, 5, 10, 40, 300]),
             rng.choice(kinds), i)
            for i in range(n)]
    if n and not (in_order and seed % 4 == 0):
        rows[0] = (rows[0][0], None, 5, "kernel", 0)
    if in_order:
        rows = [(d, ts, dur, k, i) for i, (d, ts, dur, k, _) in enumerate(
            sorted(rows, key=lambda r: -1 if r[1] is None else r[1]))]
    gpu = pl.DataFrame({"device_id": [r[0] for r in rows], "ts_ns": [r[1] for r in rows],
                        "dur_ns": [r[2] for r in rows], "kind": [r[3] for r in rows]},
                       schema={"device_id": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64,
                               "kind": pl.String})
    expected = _busy_by_sweep([(-1 if d is None else d, ts, dur, k, i)
                               for d, ts, dur, k, i in rows])
    iv = busy_intervals(gpu)
    assert iv.rows() == expected
    assert busy_intervals(gpu.filter(pl.col("kind") == "sync")).height == 0  # no work at all
    assert iv.schema == {"device_id": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
                         "first_row": pl.Int64}


def test_sync_records_are_not_gpu_time():
    """CUPTI SYNCHRONIZATION records time a host wait: never GPU busy time or path GPU time."""
    from zym.analysis import analyze_data
    from zym.analysis.load import CaptureData
    from zym.schemas import CaptureMeta, conform

    frames = pl.DataFrame({"frame_id": [0, 1], "kind": ["python", "cuda_api"],
                           "name": ["step", "cuStreamSynchronize"], "file": ["a.py", None],
                           "line": [3, None]}, schema_overrides={"line": pl.Int32})
    stacks = pl.DataFrame({"stack_id": [0, 1], "parent_id": [None, 0], "frame_id": [0, 1],
                           "depth": [0, 1]}, schema_overrides={"depth": pl.Int32})
    calls = pl.DataFrame({"pid": [1, 1], "tid": [1, 1], "ts_ns": [0, 100], "dur_ns": [10, 500],
                          "name": ["cuLaunchKernel", "cuStreamSynchronize"],
                          "kind": ["launch", "sync"], "correlation_id": [1, 2], "stack_id": [1, 1]})
    gpu = pl.DataFrame({"pid": [1, 1], "device_id": [0, 0], "ts_ns": [20, 100],
                        "dur_ns": [50, 500], "name": ["k", "Stream Sync"], "kind": ["kernel", "sync"],
                        "correlation_id": [1, 2]})
    frames, stacks, calls, gpu = (conform(t, df).drop("record") for t, df in (
        ("frame", frames), ("stack", stacks), ("call", calls), ("gpu", gpu)))
    data = CaptureData(Path("x"), CaptureMeta(producer="t"), frames, stacks, calls, gpu)
    analysis = analyze_data(data, "all")
    paths = analysis.call_paths.paths
    assert paths["gpu_ns"].sum() == 50
    util = analysis.utilization
    assert util["activity_ns"] == 50 and util["devices"][0]["busy_ns"] == 50


def test_compiled_code_is_framework_and_the_calling_line_is_the_site():
    """torch.compile: kernels launched from Inductor's generated wrapper (under its
    torchinductor_<user> cache folder) through Triton's launcher, and graph replays through
    cudagraph_trees, are the user's line that called the compiled module; compiler calls (the
    first step's autotuning) make that step warm-up and are reported as compilation."""
    from zym.rules.testing import CaptureBuilder

    user = [("python", "serve", "/srv/app/serve.py", 10), ("python", "handle", "/srv/app/serve.py", 42)]
    dynamo = ("python", "_fn", "/usr/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py", 655)
    wrapper = ("python", "call", "/tmp/torchinductor_root/ab/cabcd1234.py", 200)
    launcher = ("python", "launch", "/usr/lib/python3.12/site-packages/triton/backends/nvidia/driver.py", 40)
    trees = ("python", "run", "/usr/lib/python3.12/site-packages/torch/_inductor/cudagraph_trees.py", 1800)
    tune = ("python", "benchmark_all_configs",
            "/usr/lib/python3.12/site-packages/torch/_inductor/runtime/triton_heuristics.py", 900)
    b = CaptureBuilder()
    for step in range(5):
        with b.enclosing(user):
            if step == 0:  # first call: Inductor autotunes (launches candidate kernels)
                for _ in range(30):
                    b.kernel(user + [dynamo, tune, launcher], "triton_poi_fused_0", gpu_us=5)
            for _ in range(4):
                b.kernel(user + [dynamo, wrapper, launcher], "triton_poi_fused_add_0", gpu_us=5)
            b.kernel(user + [dynamo, trees], "graph", api="cuGraphLaunch", gpu_us=20)
            b.scalar_readback(user[:1] + [("python", "handle", "/srv/app/serve.py", 43)])
    a = b.analysis(spans=False, window="steady")
    paths = a.call_paths.paths.filter(pl.col("kernels") > 0)
    assert set(paths["site"]) == {"serve.py:42 handle"}
    assert a.phases.compile_calls == 30 and a.phases.warmup_steps == 1
    assert a.steps_in_window().count == 4


def test_the_header_counts_processes_and_threads():
    """Two worker processes of one thread each: 2 processes, 2 threads (not '2 thread(s)')."""
    from zym.rules.testing import CaptureBuilder

    b = CaptureBuilder()
    for pid in (100, 200):
        b.pid = b.tid = pid
        b.kernel([("python", "work", "w.py", 3)], "k", gpu_us=5)
    facts = b.analysis().to_dict()["capture"]
    assert (facts["processes"], facts["threads"]) == (2, 2)


@pytest.mark.parametrize("file, name, runtime", [
    ("/usr/lib/python3.12/site-packages/torch/_inductor/compile_fx.py",
     "cudagraphify.<locals>.run", True),                        # zym capture: qualified name
    ("torch/_inductor/compile_fx.py", "run", True),               # Kineto: the bare name
    ("torch/_inductor/runtime/triton_heuristics.py", "CachingAutotuner.run", True),
    ("torch/_inductor/runtime/triton_heuristics.py", "run", True),
    ("torch/_inductor/triton_heuristics.py", "run", True),        # older torch's place
    ("/x/triton/backends/nvidia/driver.py", "launcher", True),
    ("torch/_dynamo/symbolic_convert.py", "InstructionTranslatorBase.run", False),  # tracing
    ("torch/_dynamo/symbolic_convert.py", "run", False),
    ("torch/_inductor/runtime/triton_heuristics.py", "benchmark_all_configs", False),
    ("torch/_inductor/compile_fx.py", "rerun", False),
])
def test_compiled_code_running_is_not_compilation(file, name, runtime):
    from zym.analysis.phases import RUNTIME_FUNCTIONS

    assert bool(RUNTIME_FUNCTIONS.search(f"{file}:{name}")) is runtime


@pytest.mark.parametrize("seed", range(5))
def test_the_interval_of_each_time_matches_a_scan(seed):
    """``interval_of`` (a step's calls, a sample's runs) against a scan of every interval:
    times before, between, inside, at the start (in) and at the end (out) of intervals,
    touching and empty intervals, no intervals at all."""
    from zym.analysis.timeline import interval_of

    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(1_000, 2 * rng.integers(0, 12), replace=False))
    starts, ends = cuts[0::2], cuts[1::2]
    if len(starts) > 2:  # one touching its neighbour, one empty
        ends[0] = starts[1]
        ends[-1] = starts[-1]
    ts = np.concatenate([rng.integers(-5, 1_005, 300), starts, ends])
    want = [next((k for k, (a, b) in enumerate(zip(starts, ends, strict=True)) if a <= t < b),
                 -1) for t in ts.tolist()]
    assert interval_of(ts, starts, ends).tolist() == want


def test_the_graph_against_the_capture_tables_walked_in_python(tmp_path):
    """Each path's frames, user frames, self and subtree GPU time, the roots and the unknown
    stack's work, from the capture's stack and frame tables and its paths, walked in Python."""
    b = KinetoBuilder()
    with b.py("app.py(1): main"):
        for site, op in (("app.py(10): attention", "aten::mm"), ("app.py(20): mlp", "aten::add"),
                         ("app.py(10): attention", "aten::add")):
            with b.py(site), b.op(op):
                b.launch("cudaLaunchKernel", kernel=op.split("::")[1], gpu_us=3.0)
    b.events.append({"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7,
                     "ts": b.gpu_now + 1, "dur": 6.0, "args": {"correlation": 999, "stream": 7,
                                                                "device": 0}})
    a = analyze(b.write(tmp_path / "t.json"))
    graph, data = a.call_paths.graph, a.data
    parent = dict(data.stacks.select("stack_id", "parent_id").iter_rows())
    frame_of = dict(data.stacks.select("stack_id", "frame_id").iter_rows())
    frames = {f: (k, n) for f, k, n in data.frames.select("frame_id", "kind", "name").iter_rows()}
    own = dict(a.call_paths.paths.select("path_id", "gpu_ns").iter_rows())

    def chain(sid):
        out = []
        while sid is not None:
            out.append(sid)
            sid = parent[sid]
        return out[::-1]

    for sid in parent:
        path = graph.path(sid)
        assert [f["stack_id"] for f in path] == chain(sid)
        assert [(f["kind"], f["name"]) for f in path] == [frames[frame_of[s]] for s in chain(sid)]
        assert [f["name"] for f in graph.user_frames(sid)] == [
            f["name"] for f in path if f["is_user"]]
        below = [s for s in parent if sid in chain(s)]
        node = graph.node(sid)
        assert node["self_gpu_ns"] == own.get(sid, 0)
        assert node["total_gpu_ns"] == sum(own.get(s, 0) for s in below)
    roots = sorted(s for s, p in parent.items() if p is None)
    assert sorted(graph.roots()) == sorted([*roots, UNKNOWN_STACK])
    assert graph.node(UNKNOWN_STACK)["total_gpu_ns"] == 6000 and graph.path(UNKNOWN_STACK)[0][
        "name"] == "(unknown stack)"
    assert graph.total_gpu_ns() == a.call_paths.paths["gpu_ns"].sum() == 15_000
    assert graph.node(10 ** 9) is None and graph.path(10 ** 9) == []
