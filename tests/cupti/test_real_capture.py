"""The join on real data: CUPTI spool + uprobe calls recorded together on the H200
(sample_traces/gpt_decode_server.cupti/README.md)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import REPO
from pyarrow import ipc
from zym.analysis.join import join_calls, stack_coverage
from zym.capture.cupti.finalize import collect_spools, finalize_capture
from zym.schemas import open_capture

SAMPLE = REPO / "sample_traces" / "gpt_decode_server.cupti"


@pytest.fixture(scope="module")
def real():
    calls = pl.from_arrow(ipc.open_file(SAMPLE / "ebpf_calls.arrow").read_all())
    # an opaque stack per call: the join must carry each call's own stack to its GPU work
    calls = calls.sort("ts_ns").with_row_index("stack_id").with_columns(pl.col("stack_id").cast(pl.Int64))
    cupti, _ = collect_spools(SAMPLE)
    return calls, cupti


def _truth(calls: pl.DataFrame, api: pl.DataFrame) -> pl.DataFrame:
    """Per-thread call order pairs each uprobe call with its record (no drops in this capture;
    cudaDeviceSynchronize fires no probed libcuda symbol)."""
    e = calls.sort("ts_ns").with_row_index("k")
    r = api.filter(pl.col("name") != "cudaDeviceSynchronize").sort("ts_ns").with_row_index("k")
    assert e.height == r.height
    return e.join(r.select("k", pl.col("correlation_id").alias("truth"), pl.col("kind").alias("rk")),
                  on="k")


def test_decoded_counts_and_clock(real):
    calls, cupti = real
    assert cupti.stats["spools"][0]["undecoded_bytes"] == 0
    counts = dict(cupti.gpu.group_by("kind").len().iter_rows())
    assert counts == {"kernel": 5983, "copy": 281, "memset": 538, "sync": 285}
    fit = next(iter(cupti.clock.values()))
    assert fit.used == fit.points and fit.max_residual_ns < 1_000
    # every GPU op has its API record in CUPTI
    assert cupti.gpu.join(cupti.api, on=["pid", "correlation_id"], how="anti").height == 0
    # uprobes saw as many launches as CUPTI saw kernels
    assert calls.filter(pl.col("kind") == "launch").height == counts["kernel"]


def test_every_call_joins_its_own_record(real):
    calls, cupti = real
    joined, stats = join_calls(calls, cupti.api)
    assert stats["matched_by_time"] == calls.height and stats["kind_mismatch"] == 0
    assert stats["cupti_unclaimed"] == 4  # the cudaDeviceSynchronize calls
    t = _truth(calls, cupti.api)
    got = joined.filter(pl.col("stack_id").is_not_null()).join(t.select("stack_id", "truth"),
                                                              on="stack_id")
    assert got.height == calls.height
    assert (got["correlation_id"] == got["truth"]).all()
    assert stack_coverage(joined, cupti.gpu)["gpu_time_with_stack_pct"] == 100.0


@pytest.mark.parametrize("error_ns", [-30_000, 5_000, 200_000])
def test_clock_error_is_found_and_removed(real, error_ns):
    calls, cupti = real
    joined, stats = join_calls(calls.with_columns(pl.col("ts_ns") + error_ns), cupti.api)
    assert abs(stats["clock_residual_shift_ns"] - error_ns) < 2_000
    assert stats["kind_mismatch"] == 0
    assert stack_coverage(joined, cupti.gpu)["gpu_time_with_stack_pct"] == 100.0


def test_dropped_uprobe_events_lose_only_their_own_work(real):
    calls, cupti = real
    lost = np.random.default_rng(0).choice(calls.height, 70, replace=False)
    kept = calls.filter(~pl.col("stack_id").is_in(lost))
    joined, stats = join_calls(kept, cupti.api)
    assert stats["ebpf_unmatched"] == 0 and stats["cupti_unclaimed"] == 74
    t = _truth(calls, cupti.api)
    got = joined.filter(pl.col("stack_id").is_not_null()).join(t.select("stack_id", "truth"), on="stack_id")
    assert (got["correlation_id"] == got["truth"]).all()
    cov = stack_coverage(joined, cupti.gpu)
    assert 98.0 < cov["gpu_time_with_stack_pct"] < 100.0


def test_finalized_capture_is_valid(tmp_path, real):
    calls, _ = real
    out, meta = finalize_capture(SAMPLE, tmp_path / "real.parquet",
                                 tables={"call": calls.with_columns(pl.lit(None, pl.Int64).alias("stack_id"))})
    cap = open_capture(out)
    assert cap.load("gpu").height == 7087
    assert meta.gpus[0]["name"] == "NVIDIA H200"
    assert meta.extra["cupti"]["join"]["matched_by_time"] == 7083
    assert cap.meta.clock_domain == "CLOCK_MONOTONIC"
