"""Kineto import: stacks rebuilt from Python ids, op nesting and correlation, on built traces."""
from __future__ import annotations

import gzip
import json
import random

import polars as pl
import pytest
from kineto_builder import KinetoBuilder
from zym.capture.kineto import import_kineto, innermost_enclosing, load_kineto, nest_intervals
from zym.schemas import InputError, open_capture


def stacks_of_calls(tables) -> dict[str, list[str]]:
    """API name -> its stack as names, outermost first (one call per API in these tests)."""
    frames = dict(zip(tables["frame"]["frame_id"], tables["frame"]["name"]))
    parent = dict(zip(tables["stack"]["stack_id"], tables["stack"]["parent_id"]))
    frame_of = dict(zip(tables["stack"]["stack_id"], tables["stack"]["frame_id"]))
    out = {}
    for api, sid in zip(tables["call"]["name"], tables["call"]["stack_id"]):
        chain = []
        while sid is not None:
            chain.append(frames[frame_of[sid]])
            sid = parent[sid]
        out[api] = chain[::-1]
    return out


def decode_step(b: KinetoBuilder) -> None:
    with b.py("app.py(10): main"), b.py("app.py(20): step"):
        with (b.py("nn.Module: Linear_3"), b.py("<built-in function linear>"),
              b.op("aten::linear"),
              b.op("aten::addmm", dims=[[4], [4, 8], [8, 4]], types=["float", "float", "float"])):
            b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=7.0)
        with (b.py("<built-in method item of Tensor object at 0x7f00aa>"), b.op("aten::item"),
              b.op("aten::_local_scalar_dense")):
            b.launch("cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
                     gpu_cat="gpu_memcpy", gpu_args={"bytes": 4})
            b.launch("cudaStreamSynchronize", kernel=None, cpu_us=30.0)


def test_stacks_join_python_frames_ops_and_calls(tmp_path):
    b = KinetoBuilder()
    decode_step(b)
    tables, meta = load_kineto(b.write(tmp_path / "t.json"))
    stacks = stacks_of_calls(tables)
    assert stacks["cudaLaunchKernel"] == [
        "main", "step", "nn.Module: Linear", "<built-in function linear>", "aten::linear",
        "aten::addmm", "cudaLaunchKernel"]
    assert stacks["cudaStreamSynchronize"] == [
        "main", "step", "<built-in method item of Tensor object>", "aten::item",
        "aten::_local_scalar_dense", "cudaStreamSynchronize"]
    frames = tables["frame"].filter(pl.col("name") == "step").row(0, named=True)
    assert (frames["file"], frames["line"], frames["kind"]) == ("app.py", 20, "python")
    call = tables["call"].filter(pl.col("name") == "cudaLaunchKernel").row(0, named=True)
    assert call["kind"] == "launch" and json.loads(call["op_dtypes"]) == ["float"] * 3
    assert meta.gpus == [{"id": 0, "name": "Test GPU"}] and meta.driver_version == "13.0"


def _scheduled_steps(b: KinetoBuilder, steps: int = 3) -> None:
    """torch.profiler's schedule: ``prof.step()`` opens ``ProfilerStep#N`` inside its own
    frames and it runs until the next ``prof.step()``; the step's work is issued by later
    frames (serve -> handle), one part of it inside a ``record_function`` range."""
    step_op = None
    with b.py("app.py(1): <module>"), b.py("app.py(10): main"):
        for i in range(steps):
            with (b.py("torch/profiler/profiler.py(894): step"),
                  b.py("torch/autograd/profiler.py(854): __enter__"),
                  b.py("<built-in method _record_function_enter_new of PyCapsule object at "
                       "0x7f01>")):
                if step_op is not None:
                    b.close_op(step_op)
                step_op = b.open_op(f"ProfilerStep#{i}")
            with b.py("app.py(20): serve"), b.py("app.py(30): handle"):
                with (b.py("<built-in method to of Tensor object at 0x7f00aa>"),
                      b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_")):
                    b.launch("cudaMemcpyAsync", kernel="Memcpy HtoD (Pageable -> Device)",
                             gpu_cat="gpu_memcpy", gpu_args={"bytes": 64})
                with (b.py("torch/autograd/profiler.py(750): __enter__"),
                      b.py("<built-in method _record_function_enter_new of PyCapsule object "
                           "at 0x7f01>")):
                    region = b.open_op("model")
                with (b.py("app.py(40): forward"), b.py("<built-in function linear>"),
                      b.op("aten::linear"), b.op("aten::addmm")):
                    b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=7.0)
                with b.py("torch/autograd/profiler.py(760): __exit__"):
                    b.close_op(region)
        b.close_op(step_op)


@pytest.mark.parametrize("with_stack", [True, False])
def test_work_inside_a_profiler_step_has_the_frames_that_issued_it(tmp_path, with_stack):
    """``ProfilerStep#N`` and ``record_function`` ranges span Python code: the ops inside them
    are issued by the frames that run inside, not by ``prof.step()``'s frames. Without Python
    stacks the ranges are all there is, and stay the ops' parents."""
    b = KinetoBuilder(with_stack=with_stack)
    _scheduled_steps(b)
    tables, _ = load_kineto(b.write(tmp_path / "t.json"))
    launches = tables["call"].filter(pl.col("name") == "cudaLaunchKernel")
    # one path for the three steps' launches; without stacks each is under its ProfilerStep#N
    assert launches.height == 3 and launches["stack_id"].n_unique() == (1 if with_stack else 3)
    stacks = stacks_of_calls(tables)
    if with_stack:
        assert stacks["cudaMemcpyAsync"] == [
            "<module>", "main", "serve", "handle", "<built-in method to of Tensor object>",
            "aten::to", "aten::_to_copy", "aten::copy_", "cudaMemcpyAsync"]
        assert stacks["cudaLaunchKernel"] == [
            "<module>", "main", "serve", "handle", "forward", "<built-in function linear>",
            "aten::linear", "aten::addmm", "cudaLaunchKernel"]
    else:  # (the first step's copy; each step's is under its own ProfilerStep#N op)
        assert stacks["cudaMemcpyAsync"][1:] == ["aten::to", "aten::_to_copy", "aten::copy_",
                                                 "cudaMemcpyAsync"]
        assert stacks["cudaMemcpyAsync"][0].startswith("ProfilerStep#")
        assert stacks["cudaLaunchKernel"][1:] == ["model", "aten::linear", "aten::addmm",
                                                  "cudaLaunchKernel"]


def test_profiler_steps_on_one_thread_of_several(tmp_path):
    """The scheduled steps on a second thread while another thread runs plain steps at the same
    times: each thread's Python frames are searched on their own (the per-thread path)."""
    a, b = KinetoBuilder(tid=100), KinetoBuilder(tid=200)
    b._next_py, b._next_ext, b._next_corr = 10_000, 10_000, 10_000
    for _ in range(3):
        decode_step(a)
    _scheduled_steps(b)
    a.events += b.events
    tables, _ = load_kineto(a.write(tmp_path / "t.json"))
    by_thread = {}
    for tid in (100, 200):
        mine = {"call": tables["call"].filter(pl.col("tid") == tid)}
        by_thread[tid] = stacks_of_calls(tables | mine)
    assert by_thread[200]["cudaLaunchKernel"] == [
        "<module>", "main", "serve", "handle", "forward", "<built-in function linear>",
        "aten::linear", "aten::addmm", "cudaLaunchKernel"]
    assert by_thread[100]["cudaLaunchKernel"] == [
        "main", "step", "nn.Module: Linear", "<built-in function linear>", "aten::linear",
        "aten::addmm", "cudaLaunchKernel"]


def test_an_op_keeps_what_it_issues_before_python_runs_inside_it(tmp_path):
    """An op that calls back into Python (a compiled region): a call it makes before any
    Python frame starts inside it stays its child; an op issued from a frame inside it has
    that frame as its parent, and the op is not on that path."""
    b = KinetoBuilder()
    with b.py("app.py(1): <module>"), b.py("app.py(30): handle"), b.op("CompiledFunction"):
        b.launch("cudaGraphLaunch", kernel="graph_kernel")
        with b.py("torch/_inductor/output_code.py(584): __call__"), b.op("aten::mm"):
            b.launch("cudaLaunchKernel", kernel="gemm")
    tables, _ = load_kineto(b.write(tmp_path / "t.json"))
    stacks = stacks_of_calls(tables)
    assert stacks["cudaGraphLaunch"] == ["<module>", "handle", "CompiledFunction",
                                         "cudaGraphLaunch"]
    assert stacks["cudaLaunchKernel"] == ["<module>", "handle", "__call__", "aten::mm",
                                          "cudaLaunchKernel"]


def test_identical_paths_share_one_stack(tmp_path):
    b = KinetoBuilder()
    for _ in range(3):
        decode_step(b)
    tables, _ = load_kineto(b.write(tmp_path / "t.json.gz"))
    launches = tables["call"].filter(pl.col("name") == "cudaLaunchKernel")
    assert launches.height == 3 and launches["stack_id"].n_unique() == 1
    assert tables["stack"]["stack_id"].n_unique() == tables["stack"].height


def test_trace_without_stacks_starts_at_the_torch_op(tmp_path):
    b = KinetoBuilder(with_stack=False)
    decode_step(b)
    tables, _ = load_kineto(b.write(tmp_path / "t.json"))
    assert stacks_of_calls(tables)["cudaLaunchKernel"] == ["aten::linear", "aten::addmm",
                                                           "cudaLaunchKernel"]


def test_gpu_activity_kinds_and_copy_memory(tmp_path):
    b = KinetoBuilder()
    decode_step(b)
    gpu = load_kineto(b.write(tmp_path / "t.json"))[0]["gpu"].sort("ts_ns")
    assert gpu["kind"].to_list() == ["kernel", "copy"]
    copy = gpu.row(1, named=True)
    assert (copy["copy_kind"], copy["src_mem"], copy["dst_mem"], copy["size_bytes"]) == (
        "DtoH", "device", "pageable", 4)
    assert gpu["pid"].to_list() == [100, 100]
    assert gpu.row(0, named=True)["block_x"] == 128


def test_driver_call_inside_runtime_call_is_one_call(tmp_path):
    b = KinetoBuilder()
    with b.py("app.py(1): f"), b.op("aten::mm"):
        corr = b.launch("cudaLaunchKernel", kernel="gemm", cpu_us=10.0)
        b.now -= 8.0  # the driver call the runtime made, inside its span
        b.events.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 100,
                         "tid": 100, "ts": b.now, "dur": 2.0, "args": {"correlation": corr + 100}})
        b.now += 8.0
    calls = load_kineto(b.write(tmp_path / "t.json"))[0]["call"]
    assert calls["name"].to_list() == ["cudaLaunchKernel"]


def test_import_writes_a_capture_the_reader_accepts(tmp_path):
    b = KinetoBuilder()
    decode_step(b)
    out = import_kineto(b.write(tmp_path / "t.json"), tmp_path / "t.parquet")
    cap = open_capture(out)
    assert cap.load("call").height == 3 and cap.load("gpu").height == 2
    assert cap.load("span").height == 9  # 4 + 1 python frames (x2 branches shared) and 5 ops
    assert cap.meta.producer.startswith("zym import")


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"{\"traceEvents\": [", "cut short before its first whole event"),
    (b"{\"traceEvents\": [{\"ph\": \"X\"", "cut short before its first whole event"),
    (b"{\"traceEvents\": [{\"ph\": \"X\"}] garbage", "not valid JSON"),
    (b"[1, 2, 3]", "not a torch.profiler"),
    (b"{\"foo\": 1}", "not a torch.profiler"),
    (b"{\"traceEvents\": [{\"ph\": \"M\", \"name\": \"x\"}]}", "no torch.profiler events"),
    (b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": \"soon\"}]}", "malformed|not a torch"),
])
def test_bad_json_inputs_are_one_line_input_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message) as e:
        load_kineto(path)
    assert "\n" not in str(e.value)


def test_truncated_and_corrupt_gzip(tmp_path, sample_trace):
    data = sample_trace.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])  # read up to its last whole event, and said
    assert load_kineto(cut)[1].extra["cut_short"]["gzip_cut"]  # (test_cut_short.py)
    early = tmp_path / "early.json.gz"
    early.write_bytes(data[:200])
    with pytest.raises(InputError, match="truncated gzip|cut short before its first"):
        load_kineto(early)
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(data[:100] + bytes(200) + data[300:])
    with pytest.raises(InputError, match="corrupt gzip|truncated gzip|not valid JSON"):
        load_kineto(corrupt)


def _reference_parents(iv: list[tuple[int, int, int]]) -> dict[int, int | None]:
    """Parent by a plain stack walk over (node, start, end), sorted start asc, end desc."""
    out, stack = {}, []
    for node, start, end in sorted(iv, key=lambda r: (r[1], -r[2], r[0])):
        while stack and stack[-1][2] <= start and not (stack[-1][1] == stack[-1][2] == start):
            stack.pop()
        while stack and stack[-1][2] < end:
            stack.pop()
        out[node] = stack[-1][0] if stack else None
        stack.append((node, start, end))
    return out


def _random_nested(rng: random.Random, n: int) -> list[tuple[int, int, int]]:
    out, node = [], 0

    def fill(start: int, end: int, depth: int) -> None:
        nonlocal node
        t = start
        while t < end and node < n and depth < 8:
            length = rng.randint(0, max(0, min(end - t, 50)))
            out.append((node, t, t + length))
            node += 1
            if length:
                fill(t, t + length, depth + 1)
            t += length + rng.randint(0, 3)

    fill(0, 10_000, 0)
    return out


@pytest.fixture(params=["compiled", "numpy"])
def nesting(request, monkeypatch):
    """nest_intervals and innermost_enclosing by their compiled half (capture/_nesting.c),
    and by numpy alone."""
    from zym.capture import kineto

    if request.param == "compiled":
        if kineto._nesting is None:
            pytest.skip("native nesting not built (pip install -e . needs gcc and the Python "
                        "headers)")
    else:
        monkeypatch.setattr(kineto, "_nesting", None)
    return request.param


@pytest.mark.parametrize("seed", range(5))
def test_nest_intervals_matches_a_stack_walk(seed, nesting):
    """Two threads over the same time range, rows shuffled: each nests on its own."""
    rng = random.Random(seed)
    threads = {7: _random_nested(rng, 400), 3: _random_nested(rng, 300)}
    rows, want = [], {}
    for tid, iv in threads.items():
        offset = 10_000 * (tid == 3)  # distinct node keys per thread
        rows += [(node + offset, tid, start, end - start) for node, start, end in iv]
        want |= {node + offset: None if parent is None else parent + offset
                 for node, parent in _reference_parents(iv).items()}
    rng.shuffle(rows)
    df = pl.DataFrame(rows, schema=["node", "tid", "ts_ns", "dur_ns"], orient="row")
    assert dict(zip(df["node"], nest_intervals(df))) == want


def test_nest_intervals_with_times_too_far_apart_for_keys(nesting):
    """A bogus timestamp (0, among epoch-ns ones) stretches the time span so far that a
    thread's int64 keys would wrap in the middle of its intervals: nesting still follows the
    time order."""
    iv = _random_nested(random.Random(7), 300)
    span = max(end for _, _, end in iv)
    # Thread 1's keys are 3 * (base + span + 1) + 3 * (base + t) + 1: 2**63 is mid-range.
    base = (2**63 - 9 * span // 2 - 4) // 6
    rows = [(node, 1, base + start, end - start) for node, start, end in iv]
    rows.append((10_000, 2, 0, 5))  # the bogus event, on another thread
    df = pl.DataFrame(rows, schema=["node", "tid", "ts_ns", "dur_ns"], orient="row")
    got = dict(zip(df["node"], nest_intervals(df)))
    assert got == _reference_parents(iv) | {10_000: None}


def test_nest_intervals_ties(nesting):
    """At one instant: an interval that ends does not contain one that starts; identical
    intervals nest in node order; zero-length ones at the same instant nest in node order."""
    df = pl.DataFrame({"node": [1, 2, 3, 4, 5, 6], "tid": [1] * 6,
                       "ts_ns": [0, 10, 10, 20, 20, 20], "dur_ns": [10, 5, 5, 0, 0, 3]})
    got = dict(zip(df["node"], nest_intervals(df)))
    assert got == {1: None, 2: None, 3: 2, 4: 6, 5: 4, 6: None}
    assert got == _reference_parents([(r[0], r[2], r[2] + r[3]) for r in df.iter_rows()])


def _counted_parents(df: pl.DataFrame) -> dict:
    """nest_intervals' definition, one interval at a time (O(n^2)), for any intervals, nested
    or not: in preorder (thread, start, longest first, node), an interval's depth is the
    number of earlier ones of its thread still open when it opens (one that ends at that
    instant is not, unless it has no length: its close comes after the instant's opens), and
    its parent is the latest earlier one a level up."""
    rows = sorted(df.iter_rows(), key=lambda r: ((r[1] is not None, r[1]), r[2], -r[3], r[0]))

    def still_open(j: tuple, i: tuple) -> bool:
        end = j[2] + j[3]
        return end > i[2] or (end == i[2] and j[3] == 0)

    depth, parents = [], {}
    for k, i in enumerate(rows):
        depth.append(sum(rows[j][1] == i[1] and still_open(rows[j], i) for j in range(k)))
        up = [j for j in range(k) if depth[j] == depth[k] - 1]
        parents[i[0]] = rows[up[-1]][0] if depth[k] > 0 else None
    return parents


@pytest.mark.parametrize("seed", range(40))
def test_nest_intervals_of_any_intervals_follow_its_definition(seed, nesting):
    """Overlapping (not nested), zero-length, identical and tied intervals, threads unknown
    (null tid) or several, rows in any order."""
    rng = random.Random(seed)
    m = rng.randint(1, 40)
    df = pl.DataFrame({"node": rng.sample(range(1000), m),
                       "tid": [rng.choice([1, 2, 7, None]) for _ in range(m)],
                       "ts_ns": [rng.randint(0, 15) for _ in range(m)],
                       "dur_ns": [rng.choice([0, 0, 1, 2, 5, 10]) for _ in range(m)]},
                      schema={"node": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                              "dur_ns": pl.Int64})
    assert dict(zip(df["node"], nest_intervals(df))) == _counted_parents(df)


@pytest.mark.parametrize("seed", range(6))
def test_nest_intervals_compiled_and_numpy_agree_on_many_intervals(seed, monkeypatch):
    """Thousands of intervals, nested and overlapping, on several threads, with long runs of
    one start (hundreds of intervals at an instant: the compiled half orders such a run
    itself): the same Series either way."""
    from zym.capture import kineto

    compiled = kineto._nesting
    if compiled is None:
        pytest.skip("native nesting not built (pip install -e . needs gcc and the Python "
                    "headers)")
    rng = random.Random(seed)
    m = rng.randint(2000, 6000)
    starts = [rng.choice([0, 500, 500, rng.randint(0, 2000)]) for _ in range(m)]
    df = pl.DataFrame({"node": rng.sample(range(10 * m), m),
                       "tid": [rng.choice([1, 2, 3, None]) for _ in range(m)],
                       "ts_ns": starts,
                       "dur_ns": [rng.choice([0, 1, 3, 50, 400, rng.randint(0, 3000)])
                                  for _ in range(m)]},
                      schema={"node": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                              "dur_ns": pl.Int64})
    got = nest_intervals(df)
    monkeypatch.setattr(kineto, "_nesting", None)
    want = nest_intervals(df)
    assert got.null_count() < m and got.equals(want)


def test_the_compiled_nesting_refuses_arrays_that_do_not_match():
    import numpy as np
    from zym.capture import kineto

    if kineto._nesting is None:
        pytest.skip("native nesting not built (pip install -e . needs gcc and the Python "
                    "headers)")
    a = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="one entry per interval"):
        kineto._nesting.preorder(a, a, np.zeros(2, np.int64), a.copy())
    flags = np.zeros(3, np.uint8)
    with pytest.raises(ValueError, match="one entry per interval"):
        kineto._nesting.nest(a, a, a, a, a, np.zeros(3, np.int64), np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match="one entry per interval"):
        kineto._nesting.nest(a, a, a, a, flags, np.zeros(3, np.int64), flags.copy())
    with pytest.raises(ValueError, match="out of range"):
        kineto._nesting.nest(a, a, np.array([0, 5, 1]), a, a, np.zeros(3, np.int64),
                             flags.copy())


def test_innermost_enclosing_walks_up_ended_candidates(nesting):
    # a [0,100] contains b [10,20] and c [30,40]; a point at 25 falls in a, after b ended.
    iv = pl.DataFrame({"node": [1, 2, 3], "tid": [1, 1, 1], "ts_ns": [0, 10, 30],
                       "dur_ns": [100, 10, 10]})
    tree = pl.DataFrame({"node": [1, 2, 3], "parent": [None, 1, 1]})
    points = pl.DataFrame({"node": [10, 11, 12, 13], "tid": [1, 1, 1, 2],
                           "ts_ns": [25, 15, 200, 15]})
    got = dict(innermost_enclosing(points, iv, tree).iter_rows())
    assert got == {10: 1, 11: 2, 12: None, 13: None}


@pytest.mark.parametrize("seed", range(4))
def test_innermost_enclosing_matches_a_scan_of_every_interval(seed, nesting):
    """Random nested intervals on two threads (zero lengths, shared starts), random points,
    some far off in time (the keys then rank the times): each point's parent is, of its
    thread's intervals running at its time, the latest started (then the shortest), found by
    looking at every one of them."""
    rng = random.Random(seed)
    rows, tree = [], []
    for tid, offset in ((5, 0), (9, 100_000)):
        iv = _random_nested(rng, 300)
        parents = _reference_parents(iv)
        rows += [(node + offset, tid, start, end - start) for node, start, end in iv]
        tree += [(node + offset, None if p is None else p + offset) for node, p in parents.items()]
    if seed % 2:  # a bogus time stretches the span past what int64 keys can hold
        rows.append((999_999, 9, 2**62, 1))
        tree.append((999_999, None))
    iv = pl.DataFrame(rows, schema=["node", "tid", "ts_ns", "dur_ns"], orient="row")
    tree_df = pl.DataFrame(tree, schema={"node": pl.Int64, "parent": pl.Int64}, orient="row")
    points = pl.DataFrame([(10**7 + i, rng.choice([5, 9, 11]), rng.randint(-5, 10_010))
                           for i in range(400)], schema=["node", "tid", "ts_ns"], orient="row")
    got = dict(innermost_enclosing(points, iv, tree_df).iter_rows())
    for node, tid, t in points.iter_rows():
        running = [(s, -d, n) for n, th, s, d in rows if th == tid and s <= t <= s + d]
        assert got[node] == (max(running)[2] if running else None), (node, tid, t)


def test_sample_header_metadata(sample_trace):
    raw = json.loads(gzip.decompress(sample_trace.read_bytes()))
    _, meta = load_kineto(sample_trace)
    assert meta.gpus[0]["name"] == raw["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert meta.extra["with_stack"] is True


def test_streamed_and_whole_decoding_agree(tmp_path, monkeypatch):
    """Every layout is decoded piece by piece (Kineto's own and a compact re-export): the
    same tables as decoding the text whole."""
    from zym.capture import kineto_json

    b = KinetoBuilder()
    for _ in range(50):
        decode_step(b)
    pretty = b.write(tmp_path / "pretty.json.gz", kineto_layout=True)
    compact = b.write(tmp_path / "compact.json")
    for path in (pretty, compact):
        with open(path, "rb") as f:
            assert kineto_json._decode_streaming(kineto_json._pieces(f, path), path) is not None
    streamed = [load_kineto(p)[0] for p in (pretty, compact)]
    monkeypatch.setattr(kineto_json, "_decode_streaming", lambda *a: None)
    whole = [load_kineto(p)[0] for p in (pretty, compact)]
    for got in (*streamed, whole[1]):
        for table in whole[0]:
            assert got[table].equals(whole[0][table]), table


def test_sample_streams_and_matches_whole_decoding(sample_trace, monkeypatch):
    from zym.capture import kineto_json

    streamed, _ = load_kineto(sample_trace)
    monkeypatch.setattr(kineto_json, "_decode_streaming", lambda *a: None)
    whole, _ = load_kineto(sample_trace)
    for table in streamed:
        assert streamed[table].equals(whole[table]), table


def test_fast_and_general_decoders_give_the_same_tables(sample_trace, monkeypatch):
    """The per-category decoder (tagged union on "cat") and the general one it falls back to
    read the same columns: force the fallback for every batch and compare (both without the
    compiled decoder, which would decode every batch first)."""
    import msgspec
    from zym.capture import kineto_json

    monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    fast, _ = load_kineto(sample_trace)
    calls = []

    class Refuses:
        def decode(self, text):
            calls.append(1)
            raise msgspec.ValidationError("forced fallback")

    monkeypatch.setattr(kineto_json, "_FAST_DECODER", Refuses())
    general, _ = load_kineto(sample_trace)
    assert len(calls) > 10  # every batch went through the general decoder
    for table in fast:
        assert fast[table].equals(general[table]), table


def test_an_event_of_another_phase_or_category_falls_back_and_is_kept_out(tmp_path):
    """A complete-event category with another phase (an instant "i") or an unknown category
    sends its batch to the general decoder, which keeps only complete events."""
    b = KinetoBuilder()
    for _ in range(5):
        decode_step(b)
    expected = load_kineto(b.write(tmp_path / "plain.json", kineto_layout=True))[0]
    b.events += [
        {"ph": "i", "cat": "cpu_op", "name": "aten::instant", "pid": 1, "tid": 1, "ts": 1.0,
         "s": "t"},
        {"ph": "X", "cat": "some_new_category", "name": "x", "pid": 1, "tid": 1, "ts": 1.0,
         "dur": 1.0},
    ]
    odd = b.write(tmp_path / "odd.json", kineto_layout=True)
    got = load_kineto(odd)[0]
    for table in expected:
        assert got[table].equals(expected[table]), table


def test_small_pieces_cut_events_anywhere(tmp_path, monkeypatch):
    """Pieces of 97 bytes, and batches of ~1 kB: each batch is cut where a piece ended, mid-
    event or mid-string, and the rest carried to the next (counted: with the default batch
    the pieces were joined again and the file decoded as one batch)."""
    from zym.capture import kineto_json

    b = KinetoBuilder()
    for _ in range(20):
        decode_step(b)
    path = b.write(tmp_path / "t.json", kineto_layout=True)
    expected = load_kineto(path)[0]
    monkeypatch.setattr(kineto_json, "_READ_CHUNK", 97)  # pieces end mid-event, mid-string
    for name in ("_DECODE_BATCH", "_THREAD_BATCH"):
        monkeypatch.setattr(kineto_json, name, 1024)
    real, batches = kineto_json._scan_frames, []

    def counting(*a):
        batches.append(1)
        return real(*a)

    monkeypatch.setattr(kineto_json, "_scan_frames", counting)
    got = load_kineto(path)[0]
    assert len(batches) > 10
    for table in expected:
        assert got[table].equals(expected[table]), table


def test_a_trace_with_gpu_activity_only_imports(tmp_path):
    """No CPU events at all (a GPU-only export): empty stack tables, the GPU work kept."""
    path = tmp_path / "gpu_only.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"correlation": 5, "device": 0, "stream": 7}}]}))
    tables, _ = load_kineto(path)
    assert tables["gpu"].height == 1 and tables["gpu"]["dur_ns"].to_list() == [2000]
    assert tables["stack"].height == tables["call"].height == tables["span"].height == 0


@pytest.mark.parametrize("bad", [
    [(-5.0, 1.0)],  # negative
    [(1e300, 1.0), (3.0, 1e300)],  # past 2^61 ns
    [(None, 1.0), (4.0, -1.0), (5.0, 2.0 ** 62 / 1000)],  # missing, negative, past
])
def test_times_out_of_range_are_one_line_input_errors(tmp_path, bad):
    """Every Python event with a bad time is counted, and the first one named."""
    good = [(10.0 + i, 1.0) for i in range(5)]
    times = good[:2] + bad + good[2:]
    events = [{"ph": "X", "cat": "python_function", "name": f"app.py({i}): f", "pid": 1,
               "tid": 1, "ts": ts, "dur": dur, "args": {"Python id": i,
                                                         "Python parent id": None}}
              for i, (ts, dur) in enumerate(times)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(InputError) as e:
        load_kineto(path)
    ts, dur = bad[0]
    assert (f"{len(bad)} event(s) with a timestamp or duration that is missing, negative, "
            f"not finite or past 2^61 ns (first: ts {ts}, dur {dur} µs)") in str(e.value)
    assert "\n" not in str(e.value)


def test_shapes_past_the_limits_are_dropped_in_spans_and_calls(tmp_path):
    """Op spans hold their shapes as categorical codes in memory: the checks that drop
    shapes nested too deep still apply to them, and the capture file holds text."""
    from zym.schemas.validate import MAX_SHAPES_NESTING

    deep: list = [4]
    for _ in range(MAX_SHAPES_NESTING + 2):
        deep = [deep]
    b = KinetoBuilder()
    with b.py("app.py(1): main"):
        with b.op("aten::addmm", dims=[[4], [4, 8]], types=["float", "float"]):
            b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=2.0)
        with b.op("aten::weird", dims=deep, types=["float"]):
            b.launch("cudaLaunchKernel", kernel="odd", gpu_us=1.0)
    tables, _ = load_kineto(b.write(tmp_path / "t.json"))
    spans = tables["span"].filter(pl.col("op_id").is_not_null()).sort("ts_ns")
    assert spans["op_shapes"].cast(pl.String).to_list() == ["[[4], [4, 8]]", None]
    assert spans["op_dtypes"].cast(pl.String).to_list() == ['["float", "float"]', '["float"]']
    assert tables["call"].sort("ts_ns")["op_shapes"].to_list() == ["[[4], [4, 8]]", None]
    out = import_kineto(tmp_path / "t.json", tmp_path / "t.parquet")
    stored = open_capture(out).load("span")
    assert stored.schema["op_shapes"] == pl.String
    assert sorted(stored["op_shapes"].drop_nulls().to_list()) == ["[[4], [4, 8]]"]


def test_autograd_sequence_numbers_reach_the_op_spans(tmp_path):
    """Kineto's ``Sequence number`` (an op autograd recorded) is the op span's ``op_seq``;
    Python spans and ops without one have none."""
    b = KinetoBuilder()
    with b.py("app.py(1): main"):
        with b.op("aten::linear", seq=41), b.op("aten::addmm", seq=42):
            b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=2.0)
        with b.op("aten::empty"):
            b.launch("cudaMemsetAsync", kernel=None)
    tables, _ = load_kineto(b.write(tmp_path / "t.json"))
    spans = tables["span"].sort("ts_ns")
    assert spans["op_seq"].to_list() == [None, 41, 42, None]
    stored = open_capture(import_kineto(tmp_path / "t.json", tmp_path / "t.parquet")).load("span")
    assert stored.sort("ts_ns")["op_seq"].to_list() == [None, 41, 42, None]


@pytest.mark.parametrize(("name", "host"), [
    ("gpu-node-17_41234.1701234567890.pt.trace.json.gz", "gpu-node-17"),  # ms since the epoch
    ("node1.cluster.local_7.1701234567890123456.pt.trace.json", "node1.cluster.local"),  # ns
    ("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", ""),  # a worker name, not HOST_PID.TIME
    ("gpt_decode_server.trace.json.gz", ""),
])
def test_the_host_is_the_recording_machine_or_unknown(tmp_path, name, host):
    """An imported trace's host comes from torch.profiler's default file name where it has
    one, never from the machine that imports it."""
    b = KinetoBuilder()
    decode_step(b)
    _, meta = load_kineto(b.write(tmp_path / name))
    assert meta.host == host

