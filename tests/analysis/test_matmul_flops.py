"""with_flops: FLOPs, intensity and 8-alignment from recorded input shapes, worked out once per
distinct (shapes, dtypes) pair. Checked against hand-derived values and against the per-row
definition (every row decoded on its own, as before the grouping)."""
from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from zym.analysis.matmul import _flops_of, with_flops


def test_hand_derived_values():
    frame = pl.DataFrame({
        "op_shapes": ["[[8,16],[16,32]]", "[[32],[8,16],[16,32],[],[]]", "[[4,8,16],[4,16,32]]",
                      "[[7,16],[16,32]]", None],
        "op_dtypes": ['["c10::Half","c10::Half"]', '["float","float","float","Scalar","Scalar"]',
                      '["c10::BFloat16","c10::BFloat16"]', '["double","double"]', '["float"]'],
    })
    out = with_flops(frame)
    assert out["flops"].to_list() == [2 * 8 * 16 * 32, 2 * 8 * 16 * 32, 4 * 2 * 8 * 16 * 32,
                                      2 * 7 * 16 * 32, None]
    mem = [(8 * 16 + 16 * 32 + 8 * 32) * 2, (8 * 16 + 16 * 32 + 8 * 32) * 4,
           4 * (8 * 16 + 16 * 32 + 8 * 32) * 2, (7 * 16 + 16 * 32 + 7 * 32) * 8]
    flops = out["flops"].to_list()
    assert out["intensity"].to_list()[:4] == pytest.approx([f / m for f, m in zip(flops, mem)])
    assert out["intensity"][4] is None
    assert out["dims_aligned8"].to_list() == [True, True, True, False, None]
    assert out["dtype"].to_list() == ["c10::Half", "float", "c10::BFloat16", "double", "float"]
    assert out.columns == ["op_shapes", "op_dtypes", "dtype", "flops", "dims_aligned8",
                           "intensity"]


def _pool(rng: random.Random) -> list[tuple[str | None, str | None]]:
    dtypes = ['["c10::Half","c10::Half","c10::Half"]', '["float","float"]', '["int"]', None]
    pool = []
    for _ in range(40):
        m, k, n, b = (rng.choice([1, 3, 8, 64, 100, 4096]) for _ in range(4))
        shapes = rng.choice([f"[[{m},{k}],[{k},{n}]]", f"[[{n}],[{m},{k}],[{k},{n}],[],[]]",
                             f"[[{b},{m},{k}],[{b},{k},{n}]]", "[[5]]", "[]", None])
        pool.append((shapes, rng.choice(dtypes)))
    return pool


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grouped_equals_each_row_decoded(seed):
    """Second method: the same columns, row for row and in order, as decoding every row."""
    rng = random.Random(seed)
    rows = [rng.choice(_pool(rng)) for _ in range(5000)]
    frame = pl.DataFrame({"call_idx": list(range(len(rows))),
                          "op_shapes": [r[0] for r in rows], "op_dtypes": [r[1] for r in rows]},
                         schema={"call_idx": pl.Int64, "op_shapes": pl.String,
                                 "op_dtypes": pl.String})
    assert_frame_equal(with_flops(frame), _flops_of(frame))


def test_one_unparsable_shape_leaves_every_flop_unknown():
    frame = pl.DataFrame({"op_shapes": ["[[8,16],[16,32]]", "not json"],
                          "op_dtypes": ['["float"]', '["float"]']})
    out = with_flops(frame)
    assert out["flops"].to_list() == [None, None]
    assert "dtype" not in out.columns
    with pytest.raises(pl.exceptions.PolarsError):
        _flops_of(frame)


def test_empty_and_an_existing_dtype_column():
    empty = pl.DataFrame({"op_shapes": [], "op_dtypes": []},
                         schema={"op_shapes": pl.String, "op_dtypes": pl.String})
    assert with_flops(empty).columns == ["op_shapes", "op_dtypes", "flops", "dims_aligned8",
                                         "intensity"]
    frame = pl.DataFrame({"dtype": ["x"], "op_shapes": ["[[8,8],[8,8]]"],
                          "op_dtypes": ['["float"]']})
    assert_frame_equal(with_flops(frame), _flops_of(frame))
