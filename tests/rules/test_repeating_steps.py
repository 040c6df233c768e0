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
