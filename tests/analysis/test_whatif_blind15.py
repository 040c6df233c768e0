"""The fifteenth blind round (bench/whatif/results/h100-blind15; on an H100): services written
by a helper that saw neither zym's rules nor its output (nerlink, transcribe), measured before
zym saw them; zym's findings on a torch.profiler trace and a zym capture of each baseline
against every variant's measured saving (docs/benchmarks.md, "Fifty-ninth round")."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare, steps_found, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND15 = ROOT / "bench" / "whatif" / "results" / "h100-blind15"
REQUESTS = {"nerlink": 4, "transcribe": 3}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind15-table", compare.compare(BLIND15, REQUESTS), BLIND15,
                     REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_a_step_is_a_request(source):
    """The steps zym finds are the requests each file recorded: one pass traced, the warm-up
    pass and one more captured (harness.py serve --passes 1). nerlink's handle starts with
    a call written over two lines (its arguments' uploads at 538 and 539, the forward at
    538): before statements were read from the lines' texts, its capture had 16 steps."""
    for w, n in REQUESTS.items():
        assert steps_found(BLIND15 / source / f"{w}.parquet") == (
            n if source == "kineto" else 2 * n), w
