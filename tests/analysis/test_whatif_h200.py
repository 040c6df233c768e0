"""zym's predictions on the H200 validation captures (bench/whatif/results/h200), recomputed
and checked against what applying each fix measured there (docs/benchmarks.md, "What fixing
a finding saves")."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rows():
    return compare.compare()


def test_every_workload_and_input_is_compared(rows):
    assert {(r.workload, r.source) for r in rows} == {
        (w, s) for w in compare.REQUESTS for s in ("zym capture", "torch.profiler")}
    assert all(r.rank is not None for r in rows), [r for r in rows if r.rank is None]


def test_the_fix_that_saved_most_on_the_h200_is_the_first_finding(rows):
    for key in {(r.workload, r.source) for r in rows}:
        mine = [r for r in rows if (r.workload, r.source) == key]
        best = max(mine, key=lambda r: r.measured_ms)
        assert best.rank == 1, (key, best)


def test_fixes_beyond_noise_rank_in_their_measured_order(rows):
    assert all(compare.order_agrees(rows).values()), compare.order_agrees(rows)


def test_fixes_that_saved_nothing_measurable_are_predicted_inside_the_noise(rows):
    noise = [r for r in rows if r.noise]
    assert noise and all(r.agrees for r in noise), [r for r in noise if not r.agrees]


def test_docs_table_is_what_the_captures_give_today(rows):
    check_docs_table("whatif-table", rows)


def test_compiled_kernels_and_graph_replays_are_sited_at_the_calling_line():
    """torch.compile (mode="reduce-overhead") on the H200: every GPU op launched through
    Inductor's generated code or a CUDA-graph tree is charged to the user's line that called
    the compiled module, read here from the raw stacks: the last frame of the workload's own
    file before torch's frames begin."""
    import polars as pl
    from zym.analysis import analyze
    from zym.schemas import open_capture

    path = compare.RESULTS / "captures" / "compiled.parquet"
    cap = open_capture(path)
    calls, gpu = cap.load("call"), cap.load("gpu")
    stacks = {r["stack_id"]: r for r in cap.load("stack").to_dicts()}
    frames = {r["frame_id"]: r for r in cap.load("frame").to_dicts()}
    source = "bench/whatif/workloads/compiled.py"
    expected = {}
    for sid in calls["stack_id"].drop_nulls().unique().to_list():
        chain, s = [], sid  # innermost first
        while s is not None:
            chain.append(frames.get(stacks[s]["frame_id"]) or {})
            s = stacks[s]["parent_id"]
        files = [f.get("file") or "" for f in chain]
        if not any("torchinductor" in f or "cudagraph_trees" in f for f in files):
            continue
        outer = max(i for i, f in enumerate(files) if f.endswith(source))
        assert "torch/" in files[outer - 1]  # the compiled module is called from here
        expected[sid] = f"compiled.py:{chain[outer]['line']}"
    assert expected and set(expected.values()) == {"compiled.py:44"}

    result = analyze(path, window="all")
    compiled_gpu = (gpu.join(calls.select("correlation_id", "stack_id"), on="correlation_id")
                    .filter(pl.col("stack_id").is_in(list(expected))))
    assert compiled_gpu.height > 1000
    sites = result.call_paths.paths.filter(pl.col("path_id").is_in(list(expected)))
    assert sites.height == len(expected)
    assert {f"{Path(f).name}:{line}" for f, line in sites.select("user_file", "user_line").rows()
            } == {"compiled.py:44"}


def test_compiled_capture_steady_state_is_the_timed_passes():
    """bench/whatif/device_captures.sh ran the compiled workload as one warm-up pass and 3
    timed passes of 16 requests: compilation and autotuning are in the first pass, and
    CUDA-graph replays (torch/_inductor/compile_fx.py's cudagraphify run) are steady-state
    work, not compilation."""
    from zym.analysis import analyze

    result = analyze(compare.RESULTS / "captures" / "compiled.parquet")
    ph = result.phases
    assert ph.steps.count == 16 * 4
    assert ph.warmup_steps == 16 and ph.steady_steps() == 48
    assert ph.compile_calls > 0
