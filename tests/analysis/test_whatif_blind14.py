"""The fourteenth blind round (bench/whatif/results/h100-blind14; on an H100): services written
by a helper that saw neither zym's rules nor its output (clipaction, skufcast), measured before
zym saw them; zym's findings on a torch.profiler trace and a zym capture of each baseline
against every variant's measured saving (docs/benchmarks.md, "Fifty-ninth round"). A request
is zym's step (6 a pass each)."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare, steps_found, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND14 = ROOT / "bench" / "whatif" / "results" / "h100-blind14"
REQUESTS = {"clipaction": 6, "skufcast": 6}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind14-table", compare.compare(BLIND14, REQUESTS), BLIND14,
                     REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_a_step_is_a_request(source):
    """The per-step figures are per request: the steps zym finds (the warm-up's among them,
    in a capture) are the requests each file recorded: one pass traced (torch.profiler's
    schedule), the warm-up pass and one more captured (harness.py serve --passes 1)."""
    for w, n in REQUESTS.items():
        assert steps_found(BLIND14 / source / f"{w}.parquet") == (
            n if source == "kineto" else 2 * n), w
