"""What a waiting call waited for, read from its return (``zym.analysis.waits``): against a
walk over every operation, and in the replay of a pipelined decode loop."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from event_loops import event_pipeline
from zym.analysis.waits import RETURN_SLACK_NS, event_awaited, left_work_running, sync_rows
from zym.rules.testing import CaptureBuilder


def _random_window(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Calls in time order (of two processes, of one with an even ``seed``), and operations
    each launched by one of them on one of two streams (some by none; some not work), each
    stream running its work in launch order; operations in order of their start."""
    rng = np.random.default_rng(seed)
    n, m = 300, 400
    ts = np.sort(rng.integers(0, 20_000_000, n))  # streams often idle: work launched after a
    # long call can end before it returns
    calls = pl.DataFrame({"pid": rng.choice([7, 9] if seed % 2 else [7], n), "ts_ns": ts,
                          "end_ns": ts + rng.integers(0, 60_000, n),
                          "api": pl.Series(rng.choice(["cudaEventSynchronize", "cudaLaunchKernel",
                                                       "cudaStreamSynchronize"], n).tolist())
                          .cast(pl.Categorical)})
    launcher = np.sort(rng.integers(0, n, m))
    stream = rng.choice([3, 5], m)
    pid = calls["pid"].to_numpy()
    start, free = np.zeros(m, np.int64), {}
    dur = rng.integers(1_000, 30_000, m)
    for i in range(m):  # each stream in launch order
        key = (pid[launcher[i]], stream[i])
        start[i] = max(free.get(key, 0), ts[launcher[i]] + 1_000)
        free[key] = start[i] + dur[i]
    none = rng.random(m) < 0.1
    order = np.argsort(start, kind="stable")
    gpu = pl.DataFrame({"call_idx": pl.Series([None if x else int(k) for x, k in
                                               zip(none[order], launcher[order])], dtype=pl.Int32),
                        "end_ns": (start + dur)[order], "work": (rng.random(m) < 0.9),
                        "stream_id": stream[order], "device_id": np.zeros(m, np.int32)})
    return calls, gpu


def _launched(calls: pl.DataFrame, gpu: pl.DataFrame, c: int) -> list[tuple[int, int, int]]:
    """(row, launching call, end) of the work operations launched by a call of ``c``'s
    process."""
    pid = calls["pid"].to_list()
    rows = gpu.select("call_idx", "end_ns", "work").iter_rows()
    return [(r, k, e) for r, (k, e, w) in enumerate(rows)
            if w and k is not None and pid[k] == pid[c]]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_left_work_running_is_a_walk_over_every_operation(seed):
    """Whether some work of the call's process, launched by an earlier call, ended past its
    return (plus the slack)."""
    calls, gpu = _random_window(seed)
    at = np.arange(0, calls.height, 3)
    got = left_work_running(calls, gpu, at)
    end = calls["end_ns"].to_list()
    want = [any(k < c and e > end[c] + RETURN_SLACK_NS
                for _, k, e in _launched(calls, gpu, c)) for c in at.tolist()]
    assert got.tolist() == want and 0 < sum(want) < len(want)


@pytest.mark.parametrize("few", [16, 0])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_an_event_sync_awaits_the_last_work_ended_by_its_return(seed, few, monkeypatch):
    """Among its process's work launched by earlier calls and ended by its return (plus the
    slack), the one ending last (the later row where two end together); none where none
    ended by then. Streams told apart by a mask each, and (``few`` 0) by one sort."""
    from zym.analysis import waits

    monkeypatch.setattr(waits, "FEW_STREAMS", few)
    calls, gpu = _random_window(seed)
    at, streams = sync_rows(calls)
    assert calls["api"].cast(str).gather(at).unique().to_list() == ["cudaEventSynchronize"]
    assert calls["api"].cast(str).gather(streams).unique().to_list() == ["cudaStreamSynchronize"]
    got = event_awaited(calls, gpu, at)
    end = calls["end_ns"].to_list()
    want = []
    for c in at.tolist():
        done = [(e, r) for r, k, e in _launched(calls, gpu, c)
                if k < c and e <= end[c] + RETURN_SLACK_NS]
        want.append(max(done)[1] if done else -1)
    assert got.tolist() == want
    assert sum(w >= 0 for w in want) > len(want) // 2


@pytest.mark.parametrize("late", [True, False])
def test_the_replay_of_event_waits_is_the_recording(late):
    """An event sync waits for the work before its event, not for every operation before
    it: the unfixed replay of a loop that waits for the previous step's event (the GPU never
    idles) ends when the recording does, within 0.5%, as does the loop that waits for this
    step's event at once (each wait then waits for everything before it)."""
    b = CaptureBuilder()
    event_pipeline(b, requests=6, steps=8, late=late)
    a = b.analysis()
    error = a.timeline.fidelity["error_pct"]
    assert abs(error) < 0.5, error
    waits = a.relations.materialize("calls", {"api", "left_work_running"}).filter(
        pl.col("api").cast(str) == "cudaEventSynchronize")
    assert waits["left_work_running"].all() == late and waits["left_work_running"].any() == late


def test_a_stream_sync_beside_another_stream_s_work_waits_for_its_own_stream():
    """A side stream runs a 1 ms kernel each step, launched first; the main stream a 200 µs
    GEMM, then ``cudaStreamSynchronize`` returns when the GEMM is done, the side kernel still
    running: the sync left work running, and the replay has it wait for the GEMM, not for
    the side kernel: within 0.5% of the recording (read as a device sync's wait, for every
    operation before it, the replay ran ~5% long)."""
    b = CaptureBuilder()
    step = [("python", "serve", "app.py", 10), ("python", "step", "app.py", 20)]
    for _ in range(12):
        with b.enclosing(step):
            b.call(step, "cudaLaunchKernel", "launch", 5.0,
                   {"kind": "kernel", "name": "side", "dur_us": 1000, "stream": 9})
            b.kernel(step + [("torch_op", "aten::mm")], "gemm", gpu_us=200)
            b.call(step, "cudaStreamSynchronize", "sync", 2.0)
            b.tick(50)
    a = b.analysis()
    syncs = a.relations.materialize("calls", {"api", "left_work_running"}).filter(
        pl.col("api").cast(str) == "cudaStreamSynchronize")
    assert syncs.height == 12 and syncs["left_work_running"].all()
    error = a.timeline.fidelity["error_pct"]
    assert abs(error) < 0.5, error


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_latest_end_before_is_a_walk_over_every_operation(seed):
    """``latest_end_before``: for each query, the greatest end among operations launched
    strictly before it (``NO_END`` where none), against a walk over all of them."""
    from zym.analysis.waits import NO_END, latest_end_before

    rng = np.random.default_rng(seed)
    launched = np.sort(rng.integers(0, 1_000, 200))
    end = launched + rng.integers(0, 5_000, 200)
    at = rng.integers(-10, 1_100, 300)
    got = latest_end_before(launched, end, at)
    want = [max((e for t, e in zip(launched, end, strict=True) if t < q), default=NO_END)
            for q in at]
    assert got.tolist() == want
    assert latest_end_before(launched[:0], end[:0], at).tolist() == [NO_END] * len(at)
