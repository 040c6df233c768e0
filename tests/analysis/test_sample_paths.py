"""Call-path attribution on the real H200 trace, checked against the raw JSON itself."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import polars as pl
import pytest
from zym.analysis import analyze
from zym.analysis.callpath import UNKNOWN_STACK

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@pytest.fixture(scope="module")
def raw_events(sample_trace) -> list[dict]:
    return json.loads(gzip.decompress(sample_trace.read_bytes()))["traceEvents"]


@pytest.fixture(scope="module")
def report(sample_analysis) -> dict:
    return sample_analysis.to_dict()


def test_required_user_sites_are_found(report):
    sites = {(p["user_frame"]["function"], p["user_frame"]["line"], p["user_frame"]["module"])
             for p in report["paths_by_gpu_time"] + report["paths_by_cpu_blocked"]
             if p["user_frame"] and p["user_frame"]["file"] == "gpt_decode_server.py"}
    for expected in [("generate", 83, None), ("strip_padding", 94, None),
                     ("forward", 24, "Attention"), ("forward", 40, "FeedForward"),
                     ("lm_head", 68, "TinyGPT")]:
        assert expected in sites


def test_gpu_time_of_all_paths_is_the_traces_gpu_activity(report, raw_events):
    raw_total_ns = sum(round(e["dur"] * 1000) for e in raw_events
                       if e.get("ph") == "X" and e.get("cat") in GPU_CATS)
    paths_total = sum(p["gpu_ns"] for p in report["paths_by_gpu_time"])
    assert abs(paths_total - raw_total_ns) <= 0.01 * raw_total_ns
    assert report["gpu"]["activity_ns"] == pytest.approx(raw_total_ns, rel=1e-6)
    assert report["gpu"]["attributed_ns"] == report["gpu"]["activity_ns"]  # every op has a call


def test_three_matmul_paths_stay_separate(sample_analysis):
    paths = sample_analysis.call_paths.paths
    matmuls = paths.filter(pl.col("torch_op").is_in(["aten::addmm", "aten::mm"]))
    by_site = set(matmuls["site"])
    assert {"gpt_decode_server.py:24 Attention.forward", "gpt_decode_server.py:40 FeedForward.forward",
            "gpt_decode_server.py:68 lm_head"} <= by_site
    # the float32 feed-forward matmuls dominate: the same kernels family does not merge them
    ff = matmuls.filter(pl.col("user_module") == "FeedForward")["gpu_ns"].sum()
    attn = matmuls.filter(pl.col("user_module") == "Attention")["gpu_ns"].sum()
    assert ff > 10 * attn


def test_kernel_counts_and_copy_bytes_match_raw_json(sample_analysis, raw_events):
    paths = sample_analysis.call_paths.paths
    kernels = sum(1 for e in raw_events if e.get("cat") == "kernel" and e.get("ph") == "X")
    dtoh = sum(e["args"]["bytes"] for e in raw_events
               if e.get("cat") == "gpu_memcpy" and " DtoH " in f" {e['name']} ")
    assert paths["kernels"].sum() == kernels
    assert paths["bytes_dtoh"].sum() == dtoh


def test_cpu_blocked_time_of_item_sync_matches_raw_json(report, raw_events):
    """The .item() in generate blocks in cudaStreamSynchronize under _local_scalar_dense."""
    ops = [e for e in raw_events if e.get("cat") == "cpu_op"
           and e["name"] == "aten::_local_scalar_dense"]
    syncs = [e for e in raw_events if e.get("cat") == "cuda_runtime"
             and e["name"] == "cudaStreamSynchronize"]
    inside = [s for s in syncs if any(o["ts"] <= s["ts"] <= o["ts"] + o["dur"] for o in ops)]
    expected = sum(round(s["dur"] * 1000) for s in inside)
    path = next(p for p in report["paths_by_cpu_blocked"]
                if p["torch_op"] == "aten::_local_scalar_dense" and p["api"] == "cudaStreamSynchronize")
    assert path["site"] == "gpt_decode_server.py:83 generate"
    assert path["cpu_blocked_ns"] == pytest.approx(expected, abs=len(inside))
    assert path["calls"] == len(inside) == 80


def test_graph_totals_equal_path_sums(sample_analysis):
    cp = sample_analysis.call_paths
    assert cp.graph.total_gpu_ns() == cp.paths["gpu_ns"].sum()
    g = cp.graph.graph
    for node in g.nodes:
        children = sum(g.nodes[c]["total_gpu_ns"] for c in g.successors(node))
        assert g.nodes[node]["total_gpu_ns"] == g.nodes[node]["self_gpu_ns"] + children
    assert UNKNOWN_STACK not in cp.paths["path_id"].to_list()


def test_parquet_capture_analyzes_like_the_json(sample_capture, sample_analysis):
    from_parquet = analyze(sample_capture).to_dict()
    from_json = sample_analysis.to_dict()
    assert from_parquet["paths_by_gpu_time"] == from_json["paths_by_gpu_time"]
    assert from_parquet["gpu"] == from_json["gpu"]


def test_paths_per_user_site_sum_by_thread_order(sample_analysis):
    """Every call of the trace lands on exactly one path."""
    assert sample_analysis.call_paths.paths["calls"].sum() == sample_analysis.data.calls.height
    seen = defaultdict(int)
    for row in sample_analysis.call_paths.paths.iter_rows(named=True):
        seen[row["path_id"]] += 1
    assert max(seen.values()) == 1
