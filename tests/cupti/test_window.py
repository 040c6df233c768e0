"""An attach's CUPTI window (``zym capture --pid`` switching the agent on, then off): which calls
and GPU records a file keeps at its edges (capture/cupti/finalize.py ``merge_cupti``). The
expected rows come from the synthetic world's truth (which call made which record), not from
the code under test."""
from __future__ import annotations

import polars as pl
from cupti_world import make_world
from zym.capture.cupti.decode import CuptiTables
from zym.capture.cupti.finalize import OFF_EDGE_NS, merge_cupti
from zym.schemas.meta import CaptureMeta

MS = 1_000_000


def _merge(world, calls: pl.DataFrame, api: pl.DataFrame, gpu: pl.DataFrame,
           window: tuple[int, int]) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    meta = CaptureMeta(producer="test")
    cupti = CuptiTables(api=api, gpu=gpu, stats={"spools": []})
    out = merge_cupti({"call": calls}, cupti, [{"cupti_api_version": 130001}], meta, window)
    return out["call"], out["gpu"], meta.extra["gpu_window"]


def _world():
    """Two threads; row i of ``calls`` made correlation id ``truth[i]`` (make_world's order)."""
    world = make_world({11: ["launch", "copy", "launch", "memset", "sync"] * 8,
                        12: ["launch", "copy"] * 20}, seed=5)
    calls = world.calls.with_row_index("row")
    owner = world.truth.with_row_index("row").select("row", "correlation_id")
    return world, calls.join(owner, on="row").rename({"correlation_id": "corr"})


def test_a_call_entered_just_after_the_switch_on_keeps_its_gpu_work():
    """CUPTI on between a runtime call's start (its API record's) and the driver call eBPF sees
    inside it: the call is in the window, so are its records."""
    world, calls = _world()
    api = world.api.join(calls.select(pl.col("corr").alias("correlation_id"),
                                      pl.col("ts_ns").alias("entry")), on="correlation_id")
    # the sixth launch of thread 11 whose runtime record starts before its driver call
    edge = (api.filter((pl.col("tid") == 11) & (pl.col("kind") == "launch")
                       & (pl.col("ts_ns") < pl.col("entry")))
            .sort("entry").row(5, named=True))
    start = (edge["ts_ns"] + edge["entry"]) // 2
    end = int(world.calls["ts_ns"].max()) + 10 * MS
    kept_calls, gpu, stats = _merge(world, world.calls, world.api, world.gpu, (start, end))
    # expected: every call entered from `start` on, each with its GPU records (from the truth)
    later = calls.filter(pl.col("ts_ns") >= start)
    assert later.filter(pl.col("corr") == edge["correlation_id"]).height == 1
    want = world.gpu.join(later.select(pl.col("corr").alias("correlation_id")),
                          on="correlation_id", how="semi")
    probed = kept_calls.filter(pl.col("stack_id").is_not_null())   # not CUPTI's own calls
    assert probed.height == later.height
    assert sorted(gpu["correlation_id"].to_list()) == sorted(want["correlation_id"].to_list())
    assert edge["correlation_id"] in gpu["correlation_id"].to_list()
    assert stats["calls_left_out"] == world.calls.height - later.height
    assert stats["gpu_ops_left_out"] == world.gpu.height - want.height


def test_a_call_held_up_past_the_switch_off_is_cut_not_kept_without_its_gpu_work():
    """Thread 12's last call (a copy) entered 50 ms before the switch-off and was held up
    (descheduled) until after it: an API record, no GPU record. It counts as cut by the
    switch-off; a launch without a GPU record in the middle of thread 11 (not at its end)
    stays, a call that made none."""
    world, calls = _world()
    t12 = calls.filter(pl.col("tid") == 12).sort("ts_ns")
    stalled = t12.row(-1, named=True)
    assert stalled["kind"] == "copy"
    end = stalled["ts_ns"] + 50 * MS
    assert end - stalled["ts_ns"] > OFF_EDGE_NS
    middle = (calls.filter((pl.col("tid") == 11) & (pl.col("kind") == "launch"))
              .sort("ts_ns").row(3, named=True))
    gpu = world.gpu.filter(~pl.col("correlation_id").is_in([stalled["corr"], middle["corr"]]))
    start = int(world.api["ts_ns"].min()) - MS
    kept_calls, kept_gpu, stats = _merge(world, world.calls, world.api, gpu, (start, end))
    kept = set(kept_calls["correlation_id"].to_list())
    assert stalled["corr"] not in kept and middle["corr"] in kept
    assert stats["calls_left_out"] == 1
    assert kept_calls.filter(pl.col("stack_id").is_not_null()).height == world.calls.height - 1
    # every kept launch/copy/memset but the middle one has its GPU record
    made = kept_calls.filter(pl.col("kind").is_in(["launch", "copy", "memset"]))
    lone = made.join(kept_gpu, on=["pid", "correlation_id"], how="anti")
    assert lone["correlation_id"].to_list() == [middle["corr"]]
    assert kept_gpu.height == gpu.height


def test_calls_that_ended_after_the_switch_off_are_cut_with_their_gpu_work():
    """A call that ends after the window may have lost records: left out, its GPU work too,
    even when it has some (the 20 ms edge and the thread's tail do not keep it)."""
    world, calls = _world()
    t11 = calls.filter(pl.col("tid") == 11).sort("ts_ns")
    last = t11.row(-2, named=True)   # thread 11's penultimate call (a memset)
    assert last["kind"] == "memset"
    late = world.calls.with_columns(
        pl.when(pl.col("ts_ns") == last["ts_ns"]).then(pl.lit(10 * MS))
        .otherwise(pl.col("dur_ns")).alias("dur_ns"))
    end = last["ts_ns"] + 5 * MS
    start = int(world.api["ts_ns"].min()) - MS
    kept_calls, gpu, stats = _merge(world, late, world.api, world.gpu, (start, end))
    assert last["corr"] not in kept_calls["correlation_id"].to_list()
    assert last["corr"] not in gpu["correlation_id"].to_list()
    assert stats["calls_left_out"] == 1


def test_launches_without_api_records_are_judged_by_the_edge_alone():
    """An attach records no runtime API records (CUPTI started inside the process): launches
    have GPU records but no correlation until the join by order, after the window. Those more
    than 20 ms before the switch-off are all kept (none looks like a thread held up)."""
    world = make_world({11: ["launch", "copy", "launch", "sync"] * 5, 13: ["launch"] * 12},
                       seed=9)   # thread 13's calls are all launches, none with an API record
    runtime = world.api.filter(pl.col("kind") == "launch")["correlation_id"]
    api = world.api.filter(~pl.col("correlation_id").is_in(runtime.implode()))
    end = int(world.calls["ts_ns"].max()) + 50 * MS
    start = int(world.api["ts_ns"].min()) - MS
    kept_calls, gpu, stats = _merge(world, world.calls, api, world.gpu, (start, end))
    assert stats["calls_left_out"] == 0
    assert kept_calls.filter(pl.col("stack_id").is_not_null()).height == world.calls.height
    assert gpu.height == world.gpu.height
