"""A rule grouped by a site column labels each group with the site id of its first event (in
the relation's row order), every run alike: the site strings are joined onto the events in
their order. Before, the join's row order varied, and so did the site id of the H200 rerank
capture's fp32-matmul finding (70 or 71, about one run in six)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from zym.analysis import analyze
from zym.rules import load_packs
from zym.rules.engine import run_rule

CAPTURE = (Path(__file__).resolve().parents[2] / "bench" / "diff" / "results" / "h200"
           / "rerank-tolist.parquet")
RULE = "compute.fp32-matmul-no-tf32"  # relation gpu, grouped by user file, line, function


@pytest.fixture(scope="module")
def analysis():
    if not CAPTURE.exists():
        pytest.skip("H200 rerank capture not in this checkout")
    return analyze(CAPTURE)


def _first_site_ids(analysis) -> dict[tuple, int]:
    """Per (user_file, user_line, user_function): the site id of the first GPU operation (in
    GPU-table order) the rule's conditions keep, read row by row."""
    facts = analysis.facts
    gpu = facts.gpu
    file, line, fn, site = facts.site_of(gpu["stack_id"], ("user_file", "user_line",
                                                           "user_function", "site_id"))
    first: dict[tuple, int] = {}
    for row, (call, work, op, prec, tc) in enumerate(gpu.select(
            "call_idx", "work", "op_class", "precision", "tensor_core").iter_rows()):
        if call is None or not work or (op, prec, tc) != ("gemm", "fp32", False):
            continue
        key = (file[row], line[row], fn[row])
        if key not in first and site[row] is not None:
            first[key] = site[row]
    return first


def test_each_group_is_labelled_by_its_first_events_site(analysis):
    rule = next(r for p in load_packs() for r in p.rules if r.id == RULE)
    want = _first_site_ids(analysis)
    assert want, "the capture has fp32 GEMMs"
    for _ in range(8):  # the old join reordered rows now and then: ask several times
        found = run_rule(rule, analysis.relations)
        assert found
        for f in found:
            key = tuple(v for _, v in f.group_key)
            assert f.site_id == want[key], (key, f.site_id, want[key])


def test_the_join_keeps_the_events_order():
    from zym.rules.engine import _plan

    class Rel:  # what _plan reads of the relations
        sites = pl.DataFrame({"stack_id": [1, 2, 3], "user_file": ["a.py", "a.py", "b.py"],
                              "site_id": [10, 20, 30]})
        total_gpu_ns, window_ns = 1, 1

    rule = next(r for p in load_packs() for r in p.rules if r.id == RULE)
    frame = pl.DataFrame({"stack_id": [2, 1, 3, 1] * 50, "gpu_idx": range(200),
                          "site_id": [20, 10, 30, 10] * 50, "dur_ns": [1] * 200,
                          "op_class": ["gemm"] * 200, "precision": ["fp32"] * 200,
                          "tensor_core": [False] * 200})
    import dataclasses

    plain = dataclasses.replace(rule, group_by=("user_file",), having={}, measures={})
    rows = _plan(plain, Rel(), frame)["rows"].collect()
    assert rows["gpu_idx"].to_list() == list(range(200))
