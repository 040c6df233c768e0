"""Captures without Python spans (eBPF): spans rebuilt from call stacks, and a valid trace."""
from __future__ import annotations

from collections import Counter

from zym.analysis.export.check import check_trace
from zym.analysis.export.perfetto import perfetto_bytes
from zym.analysis.export.source import load_export_source
from zym.rules.testing import CaptureBuilder

SERVE = [("python", "serve", "/srv/app.py", 10), ("python", "step", "/srv/app.py", 20)]


def _capture(tmp_path):
    b = CaptureBuilder()
    for i in range(3):
        for j in range(4):  # four launches from the same forward()
            b.kernel(SERVE + [("python", "forward", "/srv/model.py", 5),
                              ("torch_op", "aten::mm")], f"gemm_{j}", gpu_us=20)
        b.kernel(SERVE + [("python", "lonely", "/srv/model.py", 9)], "once", gpu_us=3)
        b.scalar_readback(SERVE)
        b.tick(50)
    return b.write(tmp_path / "ebpf.parquet")


def test_spans_rebuilt_from_consecutive_calls(tmp_path):
    src = load_export_source(_capture(tmp_path), with_findings=False)
    assert src.spans_reconstructed
    nodes = src.analysis.call_paths.nodes.select("stack_id", "name")
    names = Counter(src.spans.join(nodes, on="stack_id")["name"].to_list())
    assert names["serve"] == 1 and names["step"] == 1  # one run across every call
    assert names["forward"] == 3 and names["aten::mm"] == 3  # 4 calls a run, 3 runs
    assert "lonely" not in names  # a single call: on its callstack, not a span
    serve = src.spans.join(nodes, on="stack_id").filter(name="serve")
    calls = src.data.calls
    assert serve["ts_ns"][0] == calls["ts_ns"].min()
    assert serve["ts_ns"][0] + serve["dur_ns"][0] == (calls["ts_ns"] + calls["dur_ns"]).max()


def test_export_nests_rebuilt_spans_over_calls(tmp_path):
    src = load_export_source(_capture(tmp_path), with_findings=False)
    checked = check_trace(perfetto_bytes(src))
    thread = next(u for u, t in checked.tracks.items() if t["kind"] == "thread")
    slices = checked.slices[thread]
    by_name = {s.name: s for s in slices}
    assert by_name["serve (app.py:10)"].depth == 0
    launches = [s for s in slices if s.name == "cudaLaunchKernel"]
    assert len(launches) == 15 and {s.depth for s in launches} >= {2, 4}
    assert checked.flows == src.data.gpu.height
    lonely = [s for s in launches if s.callstack and "lonely (model.py:9)" in s.callstack]
    assert len(lonely) == 3 and all(s.callstack[-1] == "once" for s in lonely)


def test_sync_records_are_not_gpu_time(tmp_path):
    """CUPTI sync records time a host wait: on the sync track, but weightless everywhere."""
    import polars as pl
    from zym.analysis.export.counters import gpu_counters
    from zym.analysis.export.flamegraph import folded_stacks
    from zym.analysis.export.html_report import flame_tree
    from zym.schemas import write_capture
    from zym.schemas.meta import CaptureMeta

    b = CaptureBuilder()
    b.kernel(SERVE, "k", gpu_us=10)
    corr = b.call(SERVE, "cudaStreamSynchronize", "sync", 2.0)
    tables = b.tables()
    call = tables["call"].filter(pl.col("correlation_id") == corr)
    sync = tables["gpu"].with_columns(
        pl.lit("sync").alias("kind"), pl.lit("Stream Sync").alias("name"),
        pl.lit(corr, pl.Int64).alias("correlation_id"), call["ts_ns"].alias("ts_ns"),
        pl.lit(500_000, pl.Int64).alias("dur_ns"))
    tables["gpu"] = pl.concat([tables["gpu"], sync])
    src = load_export_source(write_capture(tmp_path / "s.parquet", tables,
                                           CaptureMeta(producer="test")), with_findings=False)
    kernel_ns = 10_000
    assert sum(int(x.rsplit(" ", 1)[1]) for x in folded_stacks(src.analysis).splitlines()) \
        == kernel_ns
    assert flame_tree(src)["v"] == kernel_ns
    checked = check_trace(perfetto_bytes(src))
    sync_track = next(u for u, t in checked.tracks.items() if t["name"] == "Stream 7 sync")
    assert [s.weight for s in checked.slices[sync_track]] == [0.0]
    busy = gpu_counters(src.data.gpu).filter(pl.col("counter") == "GPU busy")
    width = busy["ts_ns"][1] - busy["ts_ns"][0]
    assert abs(busy["value"].sum() * width / 100 - kernel_ns) < 1


def test_ids_beyond_int32_still_export(tmp_path):
    """Perfetto's pid/tid and track ranks are int32; eBPF thread ids and CUDA stream handles
    can be larger. They are folded into range, and the names keep the real ids."""
    import polars as pl
    from zym.schemas import write_capture
    from zym.schemas.meta import CaptureMeta

    b = CaptureBuilder(pid=7, tid=(1 << 40) + 5)
    b.kernel(SERVE, "k", gpu_us=10)
    b.kernel(SERVE, "k", gpu_us=10)
    tables = b.tables()
    tables["gpu"] = tables["gpu"].with_columns(pl.lit(1 << 45, pl.Int64).alias("stream_id"))
    path = write_capture(tmp_path / "big.parquet", tables, CaptureMeta(producer="test"))
    checked = check_trace(perfetto_bytes(load_export_source(path, with_findings=False)))
    names = {t["name"] for t in checked.tracks.values()}
    assert f"thread {(1 << 40) + 5}" in names and f"Stream {1 << 45}" in names


def test_a_frame_and_its_callee_over_the_same_calls_nest_caller_first(tmp_path):
    """A frame and its callee that span the same calls are the same interval: the caller is
    the outer slice, in every run (their order once depended on how rows were grouped)."""
    b = CaptureBuilder()
    for i in range(40):
        for _ in range(3):
            b.kernel(SERVE + [("python", f"forward_{i}", "/srv/model.py", 5),
                              ("torch_op", "aten::mm")], "gemm", gpu_us=20)
        b.tick(50)
    path = b.write(tmp_path / "same.parquet")
    for _ in range(3):
        checked = check_trace(perfetto_bytes(load_export_source(path, with_findings=False)))
        thread = next(u for u, t in checked.tracks.items() if t["kind"] == "thread")
        depth = {}
        for s in checked.slices[thread]:
            depth.setdefault(s.name.split(" (")[0], set()).add(s.depth)
        assert depth["serve"] == {0} and depth["step"] == {1}
        assert all(depth[f"forward_{i}"] == {2} for i in range(40))
        assert depth["aten::mm"] == {3}


def _reference_spans(calls, parent, api, min_calls):
    """The rebuilt spans by their definition, one call at a time: per thread, in time order,
    each unbroken run of calls whose stacks pass through the same (non-API) node."""
    def path(sid):
        nodes = []
        while sid is not None:
            nodes.append(sid)
            sid = parent.get(sid)
        return [n if n not in api else None for n in reversed(nodes)]
    out, open_runs = [], {}
    rows = sorted((r for r in calls if r["stack_id"] is not None),
                  key=lambda r: (r["pid"], r["tid"], r["ts_ns"]))
    previous = None
    for r in rows + [None]:
        same = (r is not None and previous is not None
                and (r["pid"], r["tid"]) == (previous["pid"], previous["tid"]))
        nodes = path(r["stack_id"]) if r is not None and r["stack_id"] in parent else []
        for depth in list(open_runs):
            run = open_runs[depth]
            if same and depth < len(nodes) and nodes[depth] == run["node"]:
                run["calls"] += 1
                run["end"] = max(run["end"], r["ts_ns"] + r["dur_ns"])
                continue
            if run["calls"] >= min_calls:
                out.append((run["pid"], run["tid"], run["ts"], run["end"] - run["ts"],
                            run["node"]))
            del open_runs[depth]
        for depth, node in enumerate(nodes):
            if node is not None and depth not in open_runs:
                open_runs[depth] = {"node": node, "pid": r["pid"], "tid": r["tid"],
                                    "ts": r["ts_ns"], "end": r["ts_ns"] + r["dur_ns"],
                                    "calls": 1}
        previous = r
    return sorted(out)


def test_rebuilt_spans_match_their_definition_on_random_stacks():
    """Random stack tries (small ids read through a table, and ids too large for one), calls
    interleaved on threads, API frames, stacks the trie lacks and calls without a stack."""
    import numpy as np
    import polars as pl
    from zym.analysis.callpath import stack_nodes
    from zym.analysis.export.source import MIN_RUN_CALLS, spans_from_call_stacks

    rng = np.random.default_rng(3)
    for base in (0, 1 << 40):
        parent, depth, kind = {}, {}, {}
        for sid in range(60):
            up = int(rng.integers(0, sid)) if sid and rng.random() < 0.85 else None
            parent[base + sid] = base + up if up is not None else None
            depth[base + sid] = depth[base + up] + 1 if up is not None else 0
            kind[base + sid] = "cuda_api" if rng.random() < 0.15 else "python"
        stacks = pl.DataFrame({"stack_id": list(parent), "frame_id": list(range(60)),
                               "depth": [depth[s] for s in parent],
                               "parent_id": [parent[s] for s in parent]},
                              schema={"stack_id": pl.Int64, "frame_id": pl.Int64,
                                      "depth": pl.Int32, "parent_id": pl.Int64})
        frames = pl.DataFrame({"frame_id": list(range(60)), "kind": [kind[s] for s in parent],
                               "name": [f"f{i}" for i in range(60)],
                               "file": [f"/srv/m{i}.py" for i in range(60)],
                               "line": list(range(60))})
        n = 3000
        choice = rng.integers(0, 12, n)  # few distinct stacks: runs repeat
        sids = [None if c == 11 else base + 10_000 if c == 10 else base + int(c) * 5 + 3
                for c in choice]
        calls = [{"pid": int(rng.integers(1, 3)), "tid": int(rng.integers(1, 4)),
                  "ts_ns": i * 10 + int(rng.integers(0, 3)), "dur_ns": int(rng.integers(1, 30)),
                  "stack_id": sid} for i, sid in enumerate(sids)]
        df = pl.DataFrame(calls, schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                                         "dur_ns": pl.Int64, "stack_id": pl.Int64})
        got = spans_from_call_stacks(df, stack_nodes(frames, stacks))
        api = {s for s in parent if kind[s] == "cuda_api"}
        want = _reference_spans(calls, parent, api, MIN_RUN_CALLS)
        assert len(want) > 50
        assert sorted(got.select("pid", "tid", "ts_ns", "dur_ns", "stack_id").iter_rows()) == want


def test_rebuilt_spans_of_the_bundled_ebpf_capture_match_their_definition():
    """The same on real data: the bundled eBPF capture (recorded on the H200, no spans)."""
    from pathlib import Path

    import polars as pl
    from zym.analysis.callpath import stack_nodes
    from zym.analysis.export.source import MIN_RUN_CALLS, _conformed, spans_from_call_stacks
    from zym.analysis.load import load_capture

    data = load_capture(Path(__file__).parents[2] / "sample_traces"
                        / "gpt_decode_server.ebpf.parquet")
    calls = _conformed("call", data.calls)
    got = spans_from_call_stacks(calls, stack_nodes(data.frames, data.stacks))
    kinds = dict(data.frames.select("frame_id", "kind").iter_rows())
    parent = {sid: up for sid, up in data.stacks.select("stack_id", "parent_id").iter_rows()}
    api = {sid for sid, fid in data.stacks.select("stack_id", "frame_id").iter_rows()
           if kinds.get(fid) == "cuda_api"}
    rows = calls.select("pid", "tid", "ts_ns", "dur_ns", "stack_id").to_dicts()
    want = _reference_spans(rows, parent, api, MIN_RUN_CALLS)
    assert len(want) > 1000
    assert sorted(got.select("pid", "tid", "ts_ns", "dur_ns", "stack_id").iter_rows()) == want
    assert got.schema["stack_id"] == pl.Int64
