"""The what-if replay on small timelines whose outcome is worked out by hand below.

CaptureBuilder times (rules/testing.py): a call lasts its ``cpu_us``, and the next call starts
1 us after it ends; a launched GPU operation starts 1 us after its call starts, or when the
stream is free; a sync returns 1 us after the GPU is done. Times below are in us from the
first call.
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from zym.analysis import replay
from zym.analysis.replay import Fix
from zym.rules.testing import CaptureBuilder


@pytest.fixture(autouse=True, params=["interpreted", "compiled"])
def engine(request, monkeypatch):
    """Every expectation below holds for the epoch loop interpreted and compiled (numba)."""
    if request.param == "compiled" and replay._compiled_epochs() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", 0 if request.param == "compiled" else 1 << 62)

STEP = [("python", "main", "app.py", 1), ("python", "step", "app.py", 20)]
US = 1_000


def two_kernels_with_syncs(gpu_us: float = 1000):
    """K1 (call 0-5, GPU 1-1001), S1 (6-1002: waits), 500 us of CPU work, K2 (1503-1508,
    GPU 1504-2504), S2 (1509-2505): the window ends at 2505."""
    b = CaptureBuilder()
    b.kernel(STEP, "k1", gpu_us=gpu_us)
    b.call(STEP, "cudaStreamSynchronize", "sync", 2.0)
    b.tick(500)
    b.kernel(STEP, "k2", gpu_us=gpu_us)
    b.call(STEP, "cudaStreamSynchronize", "sync", 2.0)
    return b.analysis()


def call_idx(analysis, api: str) -> np.ndarray:
    c = analysis.facts.calls
    return c.filter(pl.col("api").cast(pl.String) == api)["call_idx"].to_numpy()


def test_the_unfixed_replay_is_the_recorded_timeline():
    a = two_kernels_with_syncs()
    fid = a.timeline.fidelity
    assert fid["recorded_ns"] == 2505 * US and fid["replayed_ns"] == 2505 * US
    assert fid["error_pct"] == 0.0 and a.timeline.baseline.end_ns - a.facts.window[0] == 2505 * US


def test_removing_a_sync_lets_the_cpu_work_overlap_the_gpu():
    """Without S1 the 500 us of CPU work runs while K1 computes: K2 is launched at 507, queues
    behind K1 (ends 1001) and runs until 2001; S2 returns 1 us after: the window ends at 2002,
    503 us sooner."""
    a = two_kernels_with_syncs()
    s1 = call_idx(a, "cudaStreamSynchronize")[:1]
    assert a.timeline.saving(Fix(remove_calls=s1)) == 503 * US


def test_a_faster_kernel_shortens_the_waits_for_it():
    """Kernels twice as fast (500 us): S1 returns at 502, K2 is called at 1003 and runs
    1004-1504, S2 returns at 1505: 1000 us sooner."""
    a = two_kernels_with_syncs()
    gpu = a.facts.gpu
    fix = Fix(gpu_ops=gpu["gpu_idx"].to_numpy(), gpu_dur_ns=(gpu["dur_ns"] // 2).to_numpy())
    assert a.timeline.saving(fix) == 1000 * US


def test_a_faster_kernel_saves_nothing_when_the_cpu_is_the_bottleneck():
    """Kernels of 10 us, each followed by 50 us of CPU work before its sync: the GPU is done
    long before the CPU waits, so halving the kernels moves no CPU time and the CPU ends the
    window as before."""
    b = CaptureBuilder()
    for _ in range(2):
        b.kernel(STEP, "k", gpu_us=10)
        b.tick(50)
        b.call(STEP, "cudaStreamSynchronize", "sync", 2.0)
    a = b.analysis()
    gpu = a.facts.gpu
    fix = Fix(gpu_ops=gpu["gpu_idx"].to_numpy(), gpu_dur_ns=(gpu["dur_ns"] // 2).to_numpy())
    assert a.timeline.saving(fix) == 0


def test_less_cpu_work_before_a_launch_moves_everything_after_it():
    """The 501 us between S1's return (1002) and K2 cut to 100 us: K2 is called at 1102, runs
    1103-2103, S2 returns at 2104: 401 us sooner."""
    a = two_kernels_with_syncs()
    k2 = call_idx(a, "cudaLaunchKernel")[1:]
    assert a.timeline.saving(Fix(gap_calls=k2, gap_ns=np.array([100 * US]))) == 401 * US


def test_fixes_together_never_count_a_nanosecond_twice():
    """Removing S1 and halving the kernels, alone and together: together saves less than the
    sum (both shorten the same wait), and exactly what one replay of both says."""
    a = two_kernels_with_syncs()
    tl = a.timeline
    s1 = Fix(remove_calls=call_idx(a, "cudaStreamSynchronize")[:1])
    gpu = a.facts.gpu
    fast = Fix(gpu_ops=gpu["gpu_idx"].to_numpy(), gpu_dur_ns=(gpu["dur_ns"] // 2).to_numpy())
    both = tl.saving(Fix.combine([s1, fast]))
    # By hand: K1 500 us (1-501), K2 called at 507, runs 508-1008, S2 returns at 1009.
    assert both == (2505 - 1009) * US
    assert both < tl.saving(s1) + tl.saving(fast)


def test_the_recording_cost_is_taken_out_of_the_gaps():
    """A profiler that added 200 us before K2 (one event in that gap): the run without it
    ends 200 us sooner, and fixes are measured against that run."""
    from zym.analysis.replay import Timeline

    a = two_kernels_with_syncs()
    calls = a.facts.calls
    overhead = np.where(calls["api"].cast(pl.String) == "cudaLaunchKernel",
                        np.array([0, 200 * US])[np.cumsum(
                            calls["api"].cast(pl.String) == "cudaLaunchKernel") - 1], 0)
    tl = Timeline(a.facts, overhead)
    assert tl.fidelity["uninstrumented_ns"] == (2505 - 200) * US
    assert tl.fidelity["replayed_ns"] == 2505 * US


def test_a_graph_replays_a_run_of_launches_with_one_launch():
    """40 launches of 8 us (+1 us apart) with 2 us kernels: 359 us of CPU for 80 us of GPU.
    As one graph launch (13 us of CPU: 5 us + 200 ns x 40) the kernels are queued at once and
    run back to back from the launch's latency (1 us): the window ends when the last kernel
    does, at 1 + 80 = 81 us, instead of 359 us."""
    b = CaptureBuilder()
    for _ in range(40):
        b.kernel(STEP, "tiny", gpu_us=2, cpu_us=8)
    a = b.analysis()
    calls = a.facts.calls["call_idx"].to_numpy()
    fix = Fix(graph_first=calls[:1], graph_last=calls[-1:], graph_launch_ns=np.array([13 * US]))
    before = a.timeline.baseline.end_ns - a.facts.window[0]
    assert before == 40 * 9 * US - US  # the last call ends at 359 us, its kernel at 358
    assert a.timeline.saving(fix) == before - 81 * US


def test_in_sorted_is_membership_in_a_sorted_array():
    """``replay.in_sorted`` (the chained replay's waits taken away before) against numpy's
    ``isin``: empty arrays, values below, between, equal to and past every one."""
    rng = np.random.default_rng(3)
    for n, m in ((0, 5), (5, 0), (1, 4), (40, 100), (1000, 300)):
        values = np.unique(rng.integers(-50, 2000, n))
        x = rng.integers(-100, 2100, m)
        assert np.array_equal(replay.in_sorted(values, x), np.isin(x, values)), (n, m)
