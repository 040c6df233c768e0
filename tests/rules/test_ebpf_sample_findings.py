"""The built-in packs on the real eBPF capture of the same workload (sample_traces/...ebpf.parquet).

eBPF captures carry the executing line (87: the .item(), 95: the .tolist(), 96: the per-row
.cpu()), driver API names and no torch ops or GPU activity: the rules must find the same
problems by mechanism (a scalar-sized copy and its sync; copies per call). Costs are checked
against sums computed here from the file's own rows.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from zym import rules

EBPF = Path(__file__).parents[2] / "sample_traces" / "gpt_decode_server.ebpf.parquet"
pytestmark = pytest.mark.skipif(not EBPF.exists(), reason="no eBPF sample capture")


@pytest.fixture(scope="module")
def findings():
    from zym.analysis import analyze

    return rules.evaluate(analyze(EBPF, window="all"))  # the whole file, as the sums below


@pytest.fixture(scope="module")
def by_line() -> pl.DataFrame:
    """Copies and syncs per (function, line) of the innermost Python frame, from raw rows."""
    d = pl.read_parquet(EBPF)
    frames = d.filter(pl.col("record") == "frame").select("frame_id", "name", "line")
    stacks = d.filter(pl.col("record") == "stack").select("stack_id", "parent_id", "frame_id")
    calls = d.filter(pl.col("record") == "call").select("name", "kind", "dur_ns", "stack_id",
                                                        "size_bytes")
    parent = stacks.select(pl.col("stack_id").alias("parent_id"), pl.col("frame_id").alias("pf"))
    return (calls.join(stacks, on="stack_id").join(parent, on="parent_id")
            .join(frames.select(pl.col("frame_id").alias("pf"), pl.col("name").alias("fn"),
                                "line"), on="pf")
            .filter(pl.col("kind").is_in(["copy", "sync"])))


def sums(by_line: pl.DataFrame, line: int) -> dict:
    rows = by_line.filter(pl.col("line") == line)
    return {"stall_ns": int(rows["dur_ns"].sum()), "count": rows.height,
            "copies": int((rows["kind"] == "copy").sum())}


def test_exactly_the_three_problems_at_their_exact_lines(findings):
    got = sorted((f.rule_id, f.site.rsplit("/", 1)[-1]) for f in findings)
    assert got == [("syncs.dtoh-copy-sync", "gpt_decode_server.py:95 strip_padding"),
                   ("syncs.scalar-readback", "gpt_decode_server.py:87 generate"),
                   ("transfers.repeated-small-dtoh", "gpt_decode_server.py:96 strip_padding")]


def test_costs_match_the_capture(findings, by_line):
    f = {x.rule_id: x for x in findings}
    item, tolist, rows = (f["syncs.scalar-readback"], f["syncs.dtoh-copy-sync"],
                          f["transfers.repeated-small-dtoh"])
    for finding, line in ((item, 87), (tolist, 95), (rows, 96)):
        expected = sums(by_line, line)
        assert finding.evidence["stall_ns"] == expected["stall_ns"]
        assert finding.evidence["count"] == expected["count"]
    assert item.evidence["syncs"] == 56 and item.evidence["bytes"] == 56  # 1-byte bools
    assert rows.evidence["per_call"] == 16.0 and rows.evidence["copies"] == 112
    assert tolist.evidence["per_call"] == 1.0


def test_no_finding_on_model_upload_or_copy_syncs(findings):
    """build_model's parameter uploads and the syncs of .cpu() copies are not 'explicit syncs
    in a hot loop' nor 'host-to-device copies in a loop'."""
    assert not [x for x in findings if x.rule_id in ("syncs.explicit-sync-in-loop",
                                                     "transfers.htod-in-loop")]
