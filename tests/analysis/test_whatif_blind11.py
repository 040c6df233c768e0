"""The eleventh blind round (bench/whatif/results/h100-blind11; on an H100): services written
by a helper that saw neither zym's rules nor its output (motionfc, vocalsep), measured before
zym saw them; zym's findings on a torch.profiler trace and a zym capture of each baseline
against every variant's measured saving (docs/benchmarks.md, "An eleventh blind round"). A
request is zym's step (40 and 20 a pass)."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND11 = ROOT / "bench" / "whatif" / "results" / "h100-blind11"
REQUESTS = {"motionfc": 40, "vocalsep": 20}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind11-table", compare.compare(BLIND11, REQUESTS), BLIND11,
                     REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_the_agents_upload_loop_is_found_at_its_lines(source):
    """motionfc uploads each agent's four fields one copy at a time in ``tracks``: a
    torch.profiler trace names the function (one finding), a zym capture each line (four)."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    findings = evaluate(analyze(BLIND11 / source / "motionfc.parquet"))
    sites = [f.site for f in findings if f.rule_id == "transfers.htod-in-loop"
             and "tracks" in f.site]
    assert len(sites) == (1 if source == "kineto" else 4), sites
