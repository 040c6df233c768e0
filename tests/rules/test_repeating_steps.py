"""Which steps a CUDA graph could replay (``rules.savings.repeating_steps``): those whose
launches repeat another step's kernels and grids in order, whatever stacks the profiler gave
them."""
from __future__ import annotations

import polars as pl
from zym.rules.savings import repeating_steps


def steps_of(launches: dict[int, list[tuple[int, str, int]]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Calls and GPU operations: per step, its launches as (stack_id, kernel, grid_x)."""
    calls, gpu = [], []
    for step, ls in launches.items():
        for stack, name, grid in ls:
            i = len(calls)
            calls.append({"call_idx": i, "step": step, "stack_id": stack, "kind": "launch"})
            gpu.append({"work": True, "call_idx": i, "name": name, "grid_x": grid, "grid_y": 1,
                        "grid_z": 1})
    return pl.DataFrame(calls), pl.DataFrame(gpu)


def test_steps_repeat_by_kernels_and_grids_not_by_stacks():
    same = [("gemv", 128), ("gelu", 4), ("gemv", 128), ("argmax", 1)]
    calls, gpu = steps_of({
        0: [(10 + k, n, g) for k, (n, g) in enumerate(same)],
        1: [(10 + k, n, g) for k, (n, g) in enumerate(same)],
        # a frame the profiler dropped: other stack ids, the same launches
        2: [(20 + k, n, g) for k, (n, g) in enumerate(same)],
        # another shape: another grid for the second gemv
        3: [(10 + k, n, 256 if k == 2 else g) for k, (n, g) in enumerate(same)],
        # the same kernels in another order
        4: [(10 + k, n, g) for k, (n, g) in enumerate(same[::-1])],
    })
    assert repeating_steps(calls, gpu, {0, 1, 2, 3, 4}) == {0, 1, 2}
    assert repeating_steps(calls, gpu, {3, 4}) == set()


def test_a_launch_is_its_first_gpu_work_in_the_calls_order():
    """Each launch is read as its first GPU operation that is work (in the GPU table's order,
    whatever order the table lists the calls in); a step is its launches in call order."""
    same = [("gemv", 128), ("gelu", 4), ("argmax", 1)]
    calls, gpu = steps_of({s: [(10 + k, n, g) for k, (n, g) in enumerate(same)]
                           for s in range(4)})
    gpu = gpu.reverse()  # the GPU table lists the later calls first
    row = {"work": True, "grid_y": 1, "grid_z": 1}
    # step 1's second launch ran a second kernel after its first: still step 0's launches
    after = pl.DataFrame([{**row, "call_idx": 4, "name": "other", "grid_x": 9}])
    # step 2's first launch: a record that is not work, then its work, another kernel
    before = pl.DataFrame([{**row, "work": False, "call_idx": 6, "name": "gemv", "grid_x": 128}])
    gpu = pl.concat([before, gpu.with_columns(
        pl.when(pl.col("call_idx") == 6).then(pl.lit("gemm")).otherwise("name").alias("name")),
        after], how="diagonal_relaxed").select(gpu.columns)
    # step 3's calls listed last to first: call_idx still orders its launches
    calls = pl.concat([calls.filter(pl.col("step") != 3), calls.filter(pl.col("step") == 3)
                       .reverse()])
    assert repeating_steps(calls, gpu, {0, 1, 2, 3}) == {0, 1, 3}


def test_graph_launch_cost_is_the_captures_own_graph_launches():
    """The H200 `compiled` workload (torch.compile's CUDA graphs) records its graph launches:
    the fix's launch cost is their median duration, found by their API names (each distinct
    name tested once) as by every call's name read as text."""
    from pathlib import Path

    from zym.analysis import analyze
    from zym.rules.savings import _graph_launch_cost

    trace = (Path(__file__).resolve().parents[2]
             / "bench/whatif/results/h200-varied/compiled.trace.json.gz")
    analysis = analyze(trace)
    calls = analysis.facts.calls
    launches = calls.filter(pl.col("api").cast(pl.String).str.contains("GraphLaunch"))
    assert launches.height >= 3
    base, per_node, where = _graph_launch_cost(analysis)
    assert base == int(launches["dur_ns"].median()) and per_node == 0
    assert where.startswith(f"this capture's {launches.height:,} graph launches")


def capture_counts(launches: dict[tuple[str, int], int]) -> pl.DataFrame:
    """A whole capture's launches per kernel and grid (as ``Analysis.capture_launches``)."""
    return pl.DataFrame([{"name": n, "grid_x": g, "grid_y": 1, "grid_z": 1, "launches": k}
                         for (n, g), k in launches.items()])


def test_a_step_a_sample_holds_once_repeats_where_the_capture_has_room_for_another():
    """In a sample, a step whose launches the sample holds once counts as repeating where the
    whole capture ran each of its kernels with its grid at least twice as often as the step
    does; the capture is asked for only where some step is held once."""
    a = [("gemv", 128), ("gelu", 4), ("gemv", 128)]  # held twice: repeats in the sample
    b = [("gemv", 256), ("gelu", 8), ("gemv", 256)]  # held once; the capture: 4 gemv-256
    c = [("gemv", 512), ("gelu", 16), ("gemv", 512)]  # held once; the capture: 3 gemv-512
    d = [("gemv", 128), ("topk", 7)]  # held once; its topk-7 runs once in the capture
    calls, gpu = steps_of({0: [(1, n, g) for n, g in a], 1: [(1, n, g) for n, g in a],
                           2: [(1, n, g) for n, g in b], 3: [(1, n, g) for n, g in c],
                           4: [(1, n, g) for n, g in d]})
    whole = capture_counts({("gemv", 128): 40, ("gelu", 4): 20, ("gemv", 256): 4,
                            ("gelu", 8): 2, ("gemv", 512): 3, ("gelu", 16): 9, ("topk", 7): 1})
    asked = []

    def capture():
        asked.append(1)
        return whole

    # b: 4 >= 2x2 and 2 >= 2x1; c: 3 < 2x2 gemv-512; d: 1 < 2x1 topk-7
    assert repeating_steps(calls, gpu, {0, 1, 2, 3, 4}, capture) == {0, 1, 2}
    assert repeating_steps(calls, gpu, {0, 1, 2, 3, 4}) == {0, 1}
    assert len(asked) == 1
    assert repeating_steps(calls, gpu, {0, 1}, capture) == {0, 1} and len(asked) == 1
    # a whole capture (no sample): nothing to ask
    assert repeating_steps(calls, gpu, {2}, lambda: None) == set()
    # a kernel the capture never ran with that grid: no room
    assert repeating_steps(calls, gpu, {2}, lambda: whole.filter(
        pl.col("grid_x") != 8)) == set()
