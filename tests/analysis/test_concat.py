"""with_append_factor: how much of a torch.cat's output is what it appended, from the recorded
input shapes (Kineto's ``Input Dims`` of ``aten::cat``: the tensor list, then the dimension),
checked against values worked out by hand, and the relation column it feeds."""
from __future__ import annotations

import polars as pl
import pytest
from zym.analysis.concat import with_append_factor


def test_hand_derived_values():
    shapes = [
        "[[[16, 16, 1024, 64], [16, 16, 1, 64]], []]",   # a key/value cache gains a position
        "[[[4,256,32,32],[4,256,32,32]], []]",           # a U-Net skip connection: alike
        "[[[10,3],[10,1],[10,1]], []]",                  # three inputs: 10*5 / (10*2)
        "[[[3,4]], []]",                                 # one input: nothing appended
        "[[[2,3],[2,3,4]], []]",                         # ranks differ: not a concatenation
        "[[[2,0],[2,3]], []]",                           # an empty input
        "[[3,4],[3,4]]",                                 # not a tensor list (an add's inputs)
        "not json",
        None,
    ]
    out = with_append_factor(pl.DataFrame({"op_shapes": shapes}))
    want = [16 * 16 * 1025 * 64 / (16 * 16 * 1 * 64), 2.0, 50 / 20] + [None] * 6
    got = out["append_factor"].to_list()
    assert got[:3] == pytest.approx(want[:3]) and got[3:] == want[3:]
    assert out.columns == ["op_shapes", "append_factor"]


def test_repeated_shapes_get_their_group_s_value_in_row_order():
    shapes = ["[[[8,100],[8,1]], []]", None, "[[[8,5],[8,5]], []]"] * 1000
    got = with_append_factor(pl.DataFrame({"op_shapes": shapes}))["append_factor"].to_list()
    assert got == [101.0, None, 2.0] * 1000


def test_no_calls():
    out = with_append_factor(pl.DataFrame({"op_shapes": []}, schema={"op_shapes": pl.String}))
    assert out.height == 0 and out.schema["append_factor"] == pl.Float64
