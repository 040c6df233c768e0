"""Attention written out by hand, found in launch order (zym.analysis.attention): which
kernels are one attention's, on kernel sequences written out here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from zym.analysis.attention import ROLES, find_attention

# (op_class, torch op, function, line, in aten::matmul) per kernel
Kernel = tuple[str, str, int, int, bool]


def find(kernels: list[Kernel], thread: list[int] | None = None, chain: bool = True):
    cls, op, fn, line, mm = (np.asarray(x) for x in zip(*kernels))
    at, role, owner = find_attention(
        np.asarray(thread or [0] * len(kernels)), cls, np.isin(op, ("aten::bmm", "aten::baddbmm")),
        np.isin(op, ("aten::mul", "aten::div")), np.full(len(kernels), chain), mm.astype(bool),
        fn.astype(np.int64), line.astype(np.int64))
    return {int(a): (ROLES[r], int(o)) for a, r, o in zip(at, role, owner)}


BMM = ("gemm", "aten::bmm", 1, 1, True)
SOFTMAX = ("softmax", "aten::_softmax", 1, 1, False)
DIV = ("elementwise", "aten::div", 1, 1, False)
IN_COPY = ("copy", "aten::copy_", 1, 1, True)
OUT_COPY = ("copy", "aten::copy_", 1, 1, False)
ADDMM = ("gemm", "aten::addmm", 1, 1, False)
GELU = ("elementwise", "aten::gelu", 1, 1, False)


def test_a_block_s_attention_and_nothing_after_it():
    kernels = [ADDMM, IN_COPY, IN_COPY, BMM, DIV, SOFTMAX, IN_COPY, BMM, OUT_COPY, ADDMM, GELU]
    got = find(kernels)
    assert got == {1: ("input_copy", 5), 2: ("input_copy", 5), 3: ("scores", 5),
                   4: ("between", 5), 5: ("softmax", 5), 6: ("between", 5), 7: ("output", 5)}


def test_scale_before_the_scores_only_from_the_same_line():
    mul = ("elementwise", "aten::mul", 1, 1, False)
    assert find([mul, BMM, SOFTMAX, BMM])[0] == ("scale", 2)
    other_line = ("elementwise", "aten::mul", 1, 2, False)   # a rotary embedding's, say
    assert 0 not in find([other_line, BMM, SOFTMAX, BMM])
    add = ("elementwise", "aten::add", 1, 1, False)          # not a scaling
    assert 0 not in find([add, BMM, SOFTMAX, BMM])


def test_copies_before_the_scores_without_op_chains_by_the_matmul_s_line():
    copy_here, copy_there = ("copy", "", 1, 1, False), ("copy", "", 1, 2, False)
    assert find([copy_there, copy_here, BMM, SOFTMAX, BMM], chain=False) == {
        1: ("input_copy", 3), 2: ("scores", 3), 3: ("softmax", 3), 4: ("output", 3)}


def test_no_attention_without_a_matmul_on_each_side_in_the_same_function():
    assert find([SOFTMAX, BMM]) == {}                          # a sampler's softmax
    assert find([BMM, SOFTMAX]) == {}
    elsewhere = ("gemm", "aten::bmm", 2, 9, False)
    assert find([BMM, SOFTMAX, elsewhere]) == {}
    assert find([BMM, SOFTMAX, SOFTMAX, BMM]) == {}            # two softmaxes: not one
    far = [BMM, SOFTMAX] + [DIV] * 12 + [BMM]                  # too far apart
    assert find(far) == {}


def test_each_thread_in_its_own_order():
    # two threads' kernels interleaved in the input is not what the caller gives: each
    # thread's run is its own, and a matmul of one thread is never another's
    kernels = [BMM, SOFTMAX, BMM, SOFTMAX, BMM]
    assert find(kernels, thread=[0, 0, 1, 1, 1]) == {
        2: ("scores", 3), 3: ("softmax", 3), 4: ("output", 3)}


def test_consecutive_attentions_share_no_kernel():
    got = find([BMM, SOFTMAX, BMM, BMM, DIV, SOFTMAX, BMM])
    assert [got[i][1] for i in range(7)] == [1, 1, 1, 5, 5, 5, 5]
    assert got[3] == ("scores", 5) and got[4] == ("between", 5)


def test_the_fused_kernel_s_curve_reads_between_points_in_log_time():
    from zym.analysis import attention

    # the second point's ratio is noise: each is the median of it and its neighbours
    x, y = attention.curve([[100, 1.0], [10, 2.0], [1000, 1.5], [400, 9.0]])
    assert np.exp(x).round().tolist() == [10, 100, 400, 1000]
    assert y.tolist() == [1.5, 2.0, 1.5, 5.25]


def test_the_fused_kernel_s_ratio_by_math_and_time(monkeypatch):
    from zym.analysis import attention

    curves = {"fp32": attention.curve([[10, 1.0], [100, 1.0], [1000, 2.0], [10000, 2.0]])}
    monkeypatch.setattr(attention, "_curves", lambda: curves)
    # 316 us: halfway between 100 and 1,000 in log time; past the ends, the ends' values;
    # another math or none: the matmuls' own time
    got = attention.fused_ratio(np.array(["fp32", "fp32", "fp32", "bf16", None], object),
                                np.array([10 ** 2.5 * 1e3, 1e3, 1e9, 100e3, 100e3]))
    assert np.round(got, 9).tolist() == [1.5, 1.0, 2.0, 1.0, 1.0]


def test_below_the_shortest_measured_matmuls_the_ratio_goes_to_one():
    from zym.analysis import attention

    x, y = attention.curve([[100, 1.6], [1000, 1.6]])
    assert np.exp(x).round().tolist() == [attention.UNMEASURED_US, 100, 1000]
    assert y.tolist() == [1.0, 1.6, 1.6]


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "whatif" / "results"


def _roles(path: Path):
    from zym.analysis import analyze

    rel = analyze(path).relations
    table = rel.materialize("attention", {"role", "attention"})
    per = table.group_by("attention", "role").len().pivot("role", index="attention",
                                                            values="len").fill_null(0)
    ops = rel.site_of(rel.gpu_table()["stack_id"].gather(table["gpu_idx"]), ("torch_op",))[0]
    lines = set(rel.site_of(table["stack_id"], ("user_line",))[0].to_list())
    return lines, per.drop("attention").unique(), set(ops.drop_nulls().to_list())


def test_a_torch_profiler_trace_s_transformer_block_gives_its_attention_alone():
    """tsanomaly's Block.forward (bench/whatif/workloads/tsanomaly.py): q and k, permuted
    views, are copied for the first matmul, the scores divided by sqrt(d), softmaxed, v copied
    for the second matmul; the output's reshape, the residual adds, the norms and the MLP's
    GELU after it in the same function are not the attention's."""
    _, per, ops = _roles(RESULTS / "h100-blind5" / "kineto" / "tsanomaly.parquet")
    assert per.select(sorted(per.columns)).to_dicts() == [
        {"between": 2, "input_copy": 2, "output": 1, "scores": 1, "softmax": 1}]
    assert not ops & {"aten::gelu", "aten::add", "aten::native_layer_norm", "aten::addmm"}


def test_a_capture_s_attention_on_two_lines_is_one_at_the_softmax_s_line():
    """protvar's Block.attend (bench/whatif/workloads/protvar.py): line 115 scales q and
    takes the scores, line 116 the softmax and the second matmul, line 117 the output's
    reshape (not the attention's)."""
    lines, per, ops = _roles(RESULTS / "h100-blind9" / "captures" / "protvar.parquet")
    assert per.select(sorted(per.columns)).to_dicts() == [
        {"output": 1, "scale": 1, "scores": 1, "softmax": 1}]
    assert lines == {116}
    assert "aten::copy_" not in ops
