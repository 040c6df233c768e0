"""The twelfth blind round (bench/whatif/results/h100-blind12; on an H100): services written
by a helper that saw neither zym's rules nor its output (ecgtriage, facegate), measured before
zym saw them; zym's findings on a torch.profiler trace and a zym capture of each baseline
against every variant's measured saving (docs/benchmarks.md, "Fifty-sixth round"). A request
is zym's step (4 a pass each)."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND12 = ROOT / "bench" / "whatif" / "results" / "h100-blind12"
REQUESTS = {"ecgtriage": 4, "facegate": 4}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind12-table", compare.compare(BLIND12, REQUESTS), BLIND12,
                     REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


def _raw_frames(path: Path):
    import polars as pl

    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "name", "ts_ns",
                                         "dur_ns"])
    frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name")
    stacks = raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id")
    spans = (raw.filter(pl.col("record") == "span").select("stack_id", "ts_ns", "dur_ns")
             .join(stacks, on="stack_id").join(frames, on="frame_id"))
    return spans


def test_the_host_filter_is_found_as_a_cpu_phase_of_each_request():
    """ecgtriage band-passes its recordings in numpy before the upload: ~24 ms of the 334 ms
    torch.profiler step (7%), whose beat loop the profiler slowed most. The finding places it
    in ``bandpass`` and prices each step's filter: the spans of ``bandpass`` summed from the
    raw rows, within the CPU work before the upload that ends each stretch."""
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    path = BLIND12 / "kineto" / "ecgtriage.parquet"
    [f] = [f for f in evaluate(analyze(path)) if f.rule_id == "utilization.cpu-bound-step"]
    assert f.site.startswith("ecgtriage.py:256 bandpass")
    spans = _raw_frames(path)
    filt = spans.filter(pl.col("name") == "bandpass")["dur_ns"]
    steps = spans.filter(pl.col("name") == "handle")
    assert f.evidence["steps"] == steps.height == filt.len() == 4
    assert f.evidence["work_share"] < 0.1 <= f.evidence["bare_share"]
    # the stretch holds the filter and the rest of ``filtered`` up to its upload: at least
    # the filter's spans, at most ``filtered``'s (which end after the upload)
    within = spans.filter(pl.col("name") == "filtered")["dur_ns"].sum()
    assert filt.sum() <= f.evidence["work_ns"] <= within
    assert 0.95 * filt.sum() <= f.saving_ns <= f.evidence["work_ns"]


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_the_rhythm_nets_blocks_are_no_items(source):
    """The rhythm net's four residual blocks, one after the other inside its forward, are a
    model's layers, not items: no per-item finding names ResBlock.forward."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    findings = evaluate(analyze(BLIND12 / source / "ecgtriage.parquet"))
    assert not [f for f in findings if f.rule_id == "compute.per-item-calls"
                and "ResBlock" in f.message]


def test_the_per_face_crops_are_one_loop_of_the_library_calls_on_the_trace():
    """facegate aligns each face by ``F.affine_grid`` and ``F.grid_sample`` called from
    ``embed``: on torch.profiler's trace no user function is called per face, so the library
    function is the item function, named with its caller, and ``grid_sample`` after each call
    is part of its item. From the raw rows: the calls a step are ``affine_grid``'s spans over
    ``handle``'s, and the launches a call those inside either function's spans over them."""
    import numpy as np
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    path = BLIND12 / "kineto" / "facegate.parquet"
    [f] = [f for f in evaluate(analyze(path)) if f.rule_id == "compute.per-item-calls"]
    assert "torch/nn/functional.py:5245 affine_grid (from facegate.py:334 embed)" in f.message
    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "name", "file",
                                         "ts_ns", "dur_ns"])
    spans = _raw_frames(path)
    steps = spans.filter(pl.col("name") == "handle").height
    lib = spans.filter(pl.col("name").is_in(["affine_grid", "grid_sample"]))
    calls = lib.filter(pl.col("name") == "affine_grid").height
    assert f.evidence["calls_per_step"] == pytest.approx(calls / steps)
    launches = raw.filter((pl.col("record") == "call")
                          & pl.col("name").str.starts_with("cudaLaunchKernel"))["ts_ns"]
    start, end = lib["ts_ns"].to_numpy(), (lib["ts_ns"] + lib["dur_ns"]).to_numpy()
    t = np.sort(launches.to_numpy())
    inside = int((np.searchsorted(t, end) - np.searchsorted(t, start)).sum())
    assert f.evidence["launches_per_call"] == pytest.approx(inside / calls)


def test_facegates_face_loop_is_named_as_the_loop_with_one_iteration_per_upload():
    """facegate's ``embed`` is called once a request and loops over its faces (an upload of
    the face's parameters at line 354, ``F.affine_grid`` at 355, ``F.grid_sample`` at 356),
    then concatenates the crops and runs the embedder (357, 358). On its zym capture the
    per-item finding names the loop by its lines, not calls of ``embed``, and counts one
    iteration per face: the HtoD copies made under ``Service.embed`` at line 354 in the
    analyzed window, counted from the raw stack records."""
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    path = ROOT / "bench" / "whatif" / "results" / "h100-blind12" / "captures" / "facegate.parquet"
    analysis = analyze(path)
    [f] = [f for f in evaluate(analysis) if f.rule_id == "compute.per-item-calls"]
    assert f.evidence["item_function"] == \
        "the loop at workloads/facegate.py:354-356 in Service.embed"
    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "parent_id", "name",
                                         "line", "kind", "copy_kind", "ts_ns"])
    frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name", "line")
    stacks = raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id", "parent_id")
    # the stack nodes at or under Service.embed's line 354
    marked = set(stacks.join(frames, on="frame_id")
                 .filter((pl.col("name") == "Service.embed") & (pl.col("line") == 354))
                 ["stack_id"].to_list())
    while True:
        more = set(stacks.filter(pl.col("parent_id").is_in(list(marked)))["stack_id"].to_list())
        if more <= marked:
            break
        marked |= more
    t0, t1 = analysis.facts.window
    uploads = raw.filter((pl.col("record") == "call") & (pl.col("kind") == "copy")
                         & (pl.col("copy_kind") == "HtoD") & pl.col("stack_id").is_in(list(marked))
                         & (pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1)).height
    items = analysis.relations.item_calls().table
    assert uploads > 100 and int(items["item_calls"].sum()) == uploads, uploads
