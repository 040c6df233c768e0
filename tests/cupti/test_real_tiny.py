"""Real CUPTI records from the H200 (tests/cupti/device/tiny_workload.py, device call 1): CUDA
graph replays, two threads, copies, memset, syncs. tiny-h200.json holds what the workload knew
(its threads' native ids, graph size) and the record walk's check against CUPTI's own
cuptiActivityGetNextRecord, made there."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from zym.capture.cupti.decode import decode_spool, read_spool

DATA = Path(__file__).parent / "data"


def test_tiny_workload_records():
    facts = json.loads((DATA / "tiny-h200.json").read_text())
    assert facts["walk_buffers_mismatched"] == 0  # our walk == cuptiActivityGetNextRecord
    t = decode_spool(read_spool(DATA / "tiny-h200.spool"))
    assert t.stats["records"] == facts["records"] and t.stats["undecoded_bytes"] == 0
    # API records carry system tids: the ids threading.get_native_id() gave each thread
    assert sorted(t.api["tid"].unique().to_list()) == sorted([facts["main_tid"], facts["worker_tid"]])
    # each graph replay: one cudaGraphLaunch, its 20 kernels with its correlation id
    launches = t.api.filter(pl.col("name") == "cudaGraphLaunch")
    assert launches.height == facts["graph_replays"]
    g = t.gpu.filter(pl.col("graph_id").is_not_null())
    per_launch = g.group_by("correlation_id").len()
    assert sorted(per_launch["correlation_id"].to_list()) == sorted(launches["correlation_id"].to_list())
    assert per_launch["len"].to_list() == [facts["graph_kernels"]] * facts["graph_replays"]
    # every GPU op has its API record; kernel names are demangled
    assert t.gpu.join(t.api, on=["pid", "correlation_id"], how="anti").height == 0
    names = t.gpu.filter(pl.col("kind") == "kernel")["name"]
    assert not names.str.starts_with("_Z").any() and not names.str.starts_with("kernel@").any()
