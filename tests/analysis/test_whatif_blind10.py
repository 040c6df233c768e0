"""The tenth blind round (bench/whatif/results/h100-blind10; on an H100): services written by a
helper that saw neither zym's rules nor its output (spkdiar, docparse), measured before zym saw
them; zym's findings on a torch.profiler trace of each baseline against every variant's
measured saving (docs/benchmarks.md, "A tenth blind round"). A request is zym's step (32 and
24 a pass)."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND10 = ROOT / "bench" / "whatif" / "results" / "h100-blind10"
REQUESTS = {"spkdiar": 32, "docparse": 24}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind10-table", compare.compare(BLIND10, REQUESTS), BLIND10,
                     REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


@pytest.mark.parametrize("workload,model,helper,items", [
    ("spkdiar", "XVector.forward", "confidence", "SEGMENTS"),
    ("docparse", "Recogniser.forward", "read_line", None),
])
def test_both_loops_over_items_are_found(workload, model, helper, items):
    """Each service calls its model once per item in the handler and a helper once per item
    from a list comprehension, and runs a sequential loop (spkdiar's online clustering,
    docparse's reading-order decode) that is no loop of items: per request, the model's and
    the helper's calls are the items (spkdiar's segments a request, a constant; docparse's
    lines vary by page, the same count for both)."""
    from zym.analysis import analyze

    table = analyze(BLIND10 / "kineto" / f"{workload}.parquet").relations.item_calls().table
    name = table["item_function"].str.split(" ").list.get(-1)
    assert set(name) == {model, helper}
    per = {n: table.filter(name == n).sort("step")["item_calls"].to_list() for n in (model, helper)}
    assert per[model] == per[helper] and min(per[model]) >= 4
    if items:
        assert set(per[model]) == {workload_constant(workload, items)}
