"""The eBPF <-> CUPTI join on synthetic edge cases, checked against the known truth."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from cupti_world import attributed, drop_rows, make_world
from zym.analysis.join import join_calls, stack_coverage
from zym.capture.cupti.clock import fit_clock

MIX = ["launch", "launch", "copy", "sync", "memset", "launch", "graph", "launch", "nogpu"] * 6


def _check_exact(world, calls) -> None:
    """Every GPU op carries exactly the stack of the call that caused it."""
    got = attributed(calls, world.gpu).join(world.truth.rename({"stack_id": "truth"}),
                                            on=["pid", "correlation_id"])
    wrong = got.filter(pl.col("stack_id").ne_missing(pl.col("truth")))
    assert wrong.height == 0, wrong.head()
    assert got.height == world.gpu.height


def test_single_thread_all_kinds_exact():
    w = make_world({7: MIX})
    calls, stats = join_calls(w.calls, w.api)
    _check_exact(w, calls)
    assert stats["matched_by_time"] == w.calls.height
    assert stats["cupti_unclaimed"] == 0 and stats["ebpf_unmatched"] == 0
    # calls keep their eBPF names and stacks, and take CUPTI's duration (entry-only probes)
    assert calls["name"].to_list() == w.calls.sort("ts_ns")["name"].to_list()
    assert calls.filter(pl.col("kind") == "sync")["dur_ns"].min() == 60_000


def test_interleaved_threads():
    # four threads whose calls alternate in time: a join ignoring tids would cross them
    w = make_world({7: MIX, 8: MIX[::-1], 9: ["launch"] * 40, 10: ["copy", "sync"] * 20},
                   gap_ns=6_000, stagger_ns=1_500)
    calls, stats = join_calls(w.calls, w.api)
    _check_exact(w, calls)
    assert stats["ebpf_matched_pct"] == 100.0


def test_direct_driver_calls_fire_before_the_record():
    w = make_world({7: MIX}, direct=set(range(0, len(MIX), 2)))
    calls, stats = join_calls(w.calls, w.api)
    _check_exact(w, calls)
    assert stats["matched_by_time"] == w.calls.height


def test_graph_launch_many_kernels_one_stack():
    w = make_world({7: ["launch", "graph", "launch"]}, graph_kernels=200)
    calls, _ = join_calls(w.calls, w.api)
    g = attributed(calls, w.gpu).filter(pl.col("graph_id") == 5)
    assert g.height == 200
    assert g["stack_id"].unique().to_list() == [7_001]


def test_api_records_without_gpu_work_and_gpu_work_without_call():
    w = make_world({7: MIX})
    orphan = pl.DataFrame({"pid": [100], "ts_ns": [5], "dur_ns": [1_000_000], "name": ["mystery"],
                           "kind": ["kernel"], "correlation_id": [999_999], "graph_id": [None],
                           "device_id": [0], "stream_id": [7]})
    gpu = pl.concat([w.gpu, orphan], how="diagonal_relaxed")
    calls, _ = join_calls(w.calls, w.api)
    g = attributed(calls, gpu)
    assert g.height == gpu.height  # nothing dropped
    assert g.filter(pl.col("correlation_id") == 999_999)["stack_id"].to_list() == [None]
    nogpu = w.api.filter(pl.col("name") == "cudaStreamSynchronize").height
    assert calls.filter(pl.col("kind") == "sync")["correlation_id"].null_count() == 0
    assert nogpu > 0
    cov = stack_coverage(calls, gpu)
    total = int(gpu.filter(pl.col("kind") != "sync")["dur_ns"].sum())
    assert cov["gpu_ns"] == total
    assert cov["gpu_ns_with_stack"] == total - 1_000_000
    assert cov["gpu_time_with_stack_pct"] < 100


def test_dropped_ebpf_events():
    w = make_world({7: MIX})
    lost = [3, 4, 20, 21, 22]
    ebpf = drop_rows(w.calls, lost)
    calls, stats = join_calls(ebpf, w.api)
    lost_corr = [i + 1 for i in lost]  # correlation ids count from 1 in call order
    g = attributed(calls, w.gpu).join(w.truth.rename({"stack_id": "truth"}),
                                      on=["pid", "correlation_id"])
    unknown = g.filter(pl.col("stack_id").is_null())
    assert sorted(unknown["correlation_id"].unique().to_list()) == sorted(
        c for c in lost_corr if c in w.gpu["correlation_id"].to_list())
    assert g.filter(pl.col("stack_id").is_not_null() & (pl.col("stack_id") != pl.col("truth"))).height == 0
    assert stats["cupti_unclaimed"] == len(lost)
    # the calls eBPF missed are still there, without a stack
    assert calls.filter(pl.col("stack_id").is_null()).height == len(lost)


def test_dropped_cupti_records():
    w = make_world({7: MIX})
    lost = [0, 9, 10, 30]
    api = drop_rows(w.api, lost)
    calls, stats = join_calls(w.calls, api)
    assert stats["ebpf_unmatched"] == len(lost)
    assert calls["correlation_id"].null_count() == len(lost)
    got = calls.filter(pl.col("correlation_id").is_not_null()).join(
        w.truth.rename({"stack_id": "truth"}), on=["pid", "correlation_id"])
    assert (got["stack_id"] == got["truth"]).all()


@pytest.mark.parametrize("shift_ns", [30_000, -45_000])
def test_clock_residual_resynchronized_by_sequence(shift_ns):
    # the clock fit is off by more than a call's duration: no call falls in its record;
    # the rank-paired median finds the shift, and drops on both sides are survived
    w = make_world({7: MIX, 8: ["launch"] * 30}, gap_ns=100_000)
    ebpf = drop_rows(w.calls.with_columns(pl.col("ts_ns") + shift_ns), [40])
    api = drop_rows(w.api, [50])
    calls, stats = join_calls(ebpf, api)
    assert abs(stats["clock_residual_shift_ns"] - shift_ns) < 5_000
    got = calls.filter(pl.col("correlation_id").is_not_null()).join(
        w.truth.rename({"stack_id": "truth"}), on=["pid", "correlation_id"])
    assert got.filter(pl.col("stack_id").is_not_null())["stack_id"].equals(
        got.filter(pl.col("stack_id").is_not_null())["truth"])
    assert stats["ebpf_unmatched"] == 1 and stats["cupti_unclaimed"] == 1


def test_sequence_fills_calls_the_clock_missed():
    # a few calls whose timestamps are garbled (e.g. clock step): sequence order places them
    w = make_world({7: MIX}, gap_ns=100_000)
    garbled = [5, 6, 7]
    ebpf = w.calls.with_row_index("_i").with_columns(
        pl.when(pl.col("_i").is_in(garbled)).then(pl.col("ts_ns") + 40_000)
        .otherwise(pl.col("ts_ns")).alias("ts_ns")).drop("_i")
    calls, stats = join_calls(ebpf, w.api)
    _check_exact(w, calls)
    assert stats["matched_by_sequence"] == len(garbled)


def test_clock_offset_and_drift_end_to_end():
    # CUPTI's clock runs 80 ppm fast on an epoch base; calibration points carry read noise
    w = make_world({7: MIX, 8: MIX}, gap_ns=15_000)
    offset, drift = 1_795_941_770_251_820_603, 80e-6
    t0 = int(w.api["ts_ns"].min())

    def to_cupti(mono):
        mono = np.asarray(mono, dtype=np.int64)
        return mono + offset + np.rint((mono - t0) * drift).astype(np.int64)

    rng = np.random.default_rng(1)
    mono_pts = t0 + np.linspace(-10**10, 10**10, 40).astype(np.int64)  # calibrations over 20 s
    pts = [[int(m + rng.integers(-150, 150)), int(c), 500] for m, c in zip(mono_pts, to_cupti(mono_pts))]
    pts = [[10**9, 123, 400]] + pts  # taken before CUPTI's clock settled: rejected
    fit = fit_clock(pts)
    assert fit.used == 40
    assert abs(fit.drift_ppm + 80) < 1  # mono runs slower than CUPTI
    start_c = to_cupti(w.api["ts_ns"].to_numpy())
    end_c = to_cupti((w.api["ts_ns"] + w.api["dur_ns"]).to_numpy())
    start_m = fit.to_mono(start_c)
    api = w.api.with_columns(pl.Series("ts_ns", start_m),
                             pl.Series("dur_ns", fit.to_mono(end_c) - start_m))
    err = np.abs(start_m - w.api["ts_ns"].to_numpy())
    assert err.max() < 300
    calls, stats = join_calls(w.calls, api)
    _check_exact(w, calls)
    assert stats["matched_by_time"] == w.calls.height


def test_cupti_only_calls_without_stacks():
    w = make_world({7: MIX})
    calls, stats = join_calls(None, w.api)
    assert calls.height == w.api.height
    assert calls["stack_id"].null_count() == calls.height
    assert stats["cupti_unclaimed"] == w.api.height
    assert stack_coverage(calls, w.gpu)["gpu_time_with_stack_pct"] == 0.0


def test_non_joinable_ebpf_calls_pass_through():
    w = make_world({7: ["launch", "launch"]})
    other = pl.DataFrame({"pid": [100], "tid": [7], "ts_ns": [w.calls["ts_ns"][0] + 10],
                          "dur_ns": [0], "name": ["cuStreamWaitEvent"], "kind": ["other"],
                          "stack_id": [5]})
    calls, _ = join_calls(pl.concat([w.calls, other]), w.api)
    assert calls.height == 3
    row = calls.filter(pl.col("kind") == "other")
    assert row["correlation_id"].to_list() == [None] and row["stack_id"].to_list() == [5]


def test_direct_call_right_after_a_runtime_call_takes_its_own_record():
    # a direct driver launch whose uprobe fires 500 ns after the previous runtime record ended
    # (inside the clock slack) and 8 us before its own record starts
    api = pl.DataFrame({"pid": [1, 1], "tid": [5, 5], "ts_ns": [10_000, 18_500],
                        "dur_ns": [5_000, 4_000], "name": ["cudaLaunchKernel", "cuLaunchKernelEx"],
                        "kind": ["launch", "launch"], "correlation_id": [1, 2], "cbid": [211, 442],
                        "domain": ["runtime", "driver"]})
    calls = pl.DataFrame({"pid": [1, 1], "tid": [5, 5], "ts_ns": [11_000, 15_500], "dur_ns": [0, 0],
                          "name": ["cuLaunchKernel", "cuLaunchKernelEx"], "kind": ["launch"] * 2,
                          "stack_id": [10, 20]})
    joined, stats = join_calls(calls, api)
    assert joined.select("stack_id", "correlation_id").rows() == [(10, 1), (20, 2)]
    assert stats["matched_by_time"] == 2


def test_runtime_probes_match_their_runtime_records():
    # with --runtime-api the eBPF call is the runtime entry: its uprobe fires 1.2-20 us before
    # CUPTI's start of the same runtime call (as for direct driver calls)
    w = make_world({7: MIX, 8: ["launch", "sync"] * 10}, gap_ns=30_000)
    lead = pl.Series(np.random.default_rng(3).integers(1_200, 20_000, w.api.height))
    calls = w.calls.sort("pid", "tid", "ts_ns").with_columns(
        w.api.sort("pid", "tid", "ts_ns")["ts_ns"].alias("ts_ns") - lead,
        w.api.sort("pid", "tid", "ts_ns")["name"].alias("name"))
    joined, stats = join_calls(calls, w.api)
    _check_exact(w, joined)
    assert stats["matched_by_time"] == w.calls.height and stats["kind_mismatch"] == 0


def test_a_record_after_calls_claims_the_nearest_one_only():
    """Without runtime records (an attach), launches made through cudart sit right before a
    direct driver call's record: only that call takes it; the others stay free for the order
    join."""
    calls = pl.DataFrame({"pid": [1] * 3, "tid": [7] * 3, "ts_ns": [1_000, 5_000, 9_000],
                          "dur_ns": [0] * 3, "name": ["cuLaunchKernel"] * 3,
                          "kind": ["launch"] * 3, "stack_id": [1, 2, 3]})
    api = pl.DataFrame({"pid": [1], "tid": [7], "ts_ns": [10_000], "dur_ns": [500],
                        "name": ["cuLaunchKernel"], "kind": ["launch"], "correlation_id": [42],
                        "cbid": [307], "domain": ["driver"]})
    joined, stats = join_calls(calls, api)
    got = joined.filter(pl.col("stack_id").is_not_null()).sort("ts_ns")["correlation_id"]
    assert got.to_list() == [None, None, 42]
    assert stats["matched_by_time"] == 1


def test_order_join_edges_calls_before_cupti_started_and_records_cut_at_its_end():
    """An attach: the first launch was made before CUPTI recorded (no record), the last one's
    kernel was still running when CUPTI stopped (no record). The segments at the edges are
    counted from their anchor (the sync), the middle ones where both sides hold as many."""
    from zym.analysis.join import join_by_order

    kinds = ["launch", "launch", "sync", "launch", "launch", "launch"]
    calls = pl.DataFrame({"pid": [1] * 6, "tid": [7] * 6,
                          "ts_ns": [100, 200, 300, 400, 500, 600], "dur_ns": [0] * 6,
                          "name": ["cuLaunchKernel", "cuLaunchKernel", "cuStreamSynchronize",
                                   "cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel"],
                          "kind": kinds, "correlation_id": [None] * 6,
                          "stack_id": [1, 2, 3, 4, 5, 6]}).with_columns(
        pl.col("correlation_id").cast(pl.Int64))
    gpu = pl.DataFrame({"pid": [1] * 4, "kind": ["kernel", "sync", "kernel", "kernel"],
                        "correlation_id": [11, 12, 13, 14], "ts_ns": [250, 305, 450, 560],
                        "dur_ns": [40, 20, 30, 30]})
    out, stats = join_by_order(calls, gpu)
    assert out.sort("ts_ns")["correlation_id"].to_list() == [None, 11, 12, 13, 14, None]
    assert stats["matched_by_order"] == 4 and stats["gpu_records_unclaimed"] == 0
