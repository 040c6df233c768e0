"""GPU work -> launching call: the array lookup agrees with a join, dense or sparse ids."""
from __future__ import annotations

import polars as pl
import pytest
from zym.analysis.correlate import launch_stack_ids, match_rows


def _frames(corr_step: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    calls = pl.DataFrame({
        "pid": [1, 1, 1, 2, 2, 1, 1], "tid": [1] * 7, "name": ["cuLaunchKernel"] * 7,
        "correlation_id": [c * corr_step for c in (1, 2, 3, 1, 2)] + [None, 3 * corr_step],
        "stack_id": [10, 11, 12, 20, 21, 13, 99],  # the last reuses id 3: the first one wins
    })
    gpu = pl.DataFrame({
        "pid": [2, 1, 1, 1, 2, 1, 3],
        "correlation_id": [c * corr_step for c in (2, 3, 1, 1)] + [None, 99 * corr_step, 5],
        "dur_ns": [1, 2, 3, 4, 5, 6, 7],
    })
    return calls, gpu


@pytest.mark.parametrize("corr_step", [1, 1_000_000])  # dense ids: array; sparse: join
def test_lookup_matches_a_join(corr_step):
    calls, gpu = _frames(corr_step)
    got = launch_stack_ids(calls, gpu).to_list()
    assert got == [21, 12, 10, 10, -1, -1, -1]
    first = calls.with_row_index("row").unique(["pid", "correlation_id"], keep="first")
    joined = gpu.join(first.drop_nulls("correlation_id"), on=["pid", "correlation_id"],
                      how="left", maintain_order="left")["stack_id"].fill_null(-1).to_list()
    assert got == joined


def test_one_process_dense_ids_take_the_array_path():
    src = pl.Series([5, 6, 7])
    rows = match_rows(pl.Series([1, 1, 1]), src, pl.Series([1, 1]), pl.Series([7, 5]))
    assert rows.to_list() == [2, 0]
