"""zym's predictions on the H200 validation captures (bench/whatif/results/h200), recomputed
and checked against what applying each fix measured there (docs/benchmarks.md, "What fixing
a finding saves")."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("whatif_compare",
                                               ROOT / "bench" / "whatif" / "compare.py")
compare = importlib.util.module_from_spec(_spec)
sys.modules["whatif_compare"] = compare  # dataclasses look their module up
_spec.loader.exec_module(compare)


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
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    table = doc.split("<!-- whatif-table -->\n", 1)[1].split("<!-- /whatif-table -->", 1)[0]
    assert table == compare.markdown(rows), (
        "docs/benchmarks.md is stale: python bench/whatif/compare.py --markdown")
