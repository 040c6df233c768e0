"""The convolution-layout rule on a GPU (bench/whatif/results/h100-layout; on an H100: the
device tool lent one): a bfloat16 CNN served in NCHW, zym's findings on a torch.profiler trace
of it, against what putting it in channels_last saved (docs/benchmarks.md, "Convolutions in
NCHW")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "bench" / "whatif" / "results" / "h100-layout"
WORKLOADS = ROOT / "bench" / "whatif" / "workloads"
REQUESTS = {"convlayout": 6}   # len(Service.requests)


@pytest.fixture(scope="module")
def rows():
    return compare.compare(LAYOUT, REQUESTS)


def test_docs_table_is_what_the_traces_give_today(rows):
    check_docs_table("whatif-layout-table", rows, LAYOUT, REQUESTS)


def test_channels_last_is_priced_within_30pct(rows):
    [r] = [r for r in rows if r.variant == "channels_last"]
    assert r.rule_id == "compute.conv-layout-conversions" and r.rank is not None
    assert not r.noise and r.agrees, r


def test_three_conversions_for_each_tensor_core_convolution():
    """cuDNN converts a 3x3 or strided convolution's input and weights to NHWC and its
    output back: three kernels for each of the model's convolutions but the stem's (3 input
    channels, not a tensor-core kernel), counted from the workload's source; none once the
    model is channels_last."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    source = (WORKLOADS / "convlayout.py").read_text()
    widths, blocks = re.search(r"^WIDTHS, BLOCKS, .*? = \(([\d, ]+)\), (\d+),", source,
                               re.MULTILINE).groups()
    stages = len(widths.split(","))
    convs = stages * int(blocks) * 2 + (stages - 1)  # two per block, one between stages
    analysis = analyze(LAYOUT / "kineto" / "convlayout.parquet")
    [f] = [f for f in evaluate(analysis) if f.rule_id == "compute.conv-layout-conversions"]
    steps = (analysis.steps_in_window()).count
    assert convs == 20 and f.evidence["count"] == 3 * convs * steps
    fixed = evaluate(analyze(LAYOUT / "kineto" / "convlayout-channels_last.parquet"))
    assert "compute.conv-layout-conversions" not in {f.rule_id for f in fixed}
