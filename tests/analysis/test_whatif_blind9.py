"""The ninth blind round (bench/whatif/results/h100-blind9; on an H100): services written by a
helper that saw neither zym's rules nor its output (nowcast, protvar, changedet), measured
before zym saw them; zym's findings on a torch.profiler trace and a zym capture of each
baseline against every variant's measured saving (docs/benchmarks.md, "A ninth blind
round"). A request is zym's step (3, 4 and 4 a pass)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from whatif_compare import check_docs_table, compare, raw_spans, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND9 = ROOT / "bench" / "whatif" / "results" / "h100-blind9"
REQUESTS = {"nowcast": 3, "protvar": 4, "changedet": 4}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind9-table", compare.compare(BLIND9, REQUESTS), BLIND9, REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


def _per_request(path: Path, name: str, line: int | None = None) -> list[int]:
    """Per span of ``handle`` (a request), the spans of a function ``name`` (at its def
    ``line``) inside it, from the raw rows."""
    raw = pl.read_parquet(path, columns=["record", "frame_id", "line"])
    lines = dict(raw.filter(pl.col("record") == "frame").select("frame_id", "line").rows())
    spans = raw_spans(path).with_columns(
        pl.col("frame_id").replace_strict(lines, default=None).alias("line"))
    handle = spans.filter(pl.col("name") == "handle").sort("ts_ns")
    fn = spans.filter((pl.col("name") == name)
                      & ((pl.col("line") == line) if line is not None else pl.lit(True)))
    ts = fn["ts_ns"].to_numpy()
    return [int(((ts >= t) & (ts < t + d)).sum()) for t, d in handle.select("ts_ns", "dur_ns").rows()]


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_the_per_item_calls_are_the_workloads_items(source):
    """protvar scores the wild type and each of its N_VARIANTS mutants with one forward each;
    changedet decodes each of its (SCENE / TILE)^2 tiles with one call, and encodes each tile
    of both scenes (the reference's and the new one's) with one call: zym's per-item findings
    count them, from the spans (torch.profiler) and from the stacks' runs split where the line
    goes back (zym capture, eBPF), or, for the encoder's calls there (a list comprehension's
    inside Service.encode, back to back, every CUDA call from one line of SiamDiff.encode),
    where a run repeats one sequence of stacks (before, not found on the capture)."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    tiles = (workload_constant("changedet", "SCENE") // workload_constant("changedet", "TILE")) ** 2
    sequences = workload_constant("protvar", "N_VARIANTS") + 1
    want = {"protvar": {"forward": sequences}, "changedet": {"decode": tiles, "encode": 2 * tiles}}
    for w, n in want.items():
        found = {f.evidence["item_function"].split(" ")[-1].split(".")[-1]:
                 f.evidence["calls_per_step"]
                 for f in evaluate(analyze(BLIND9 / source / f"{w}.parquet"))
                 if f.rule_id == "compute.per-item-calls"}
        assert found == n, w
    if source == "kineto":   # the raw spans say the same
        assert set(_per_request(BLIND9 / "kineto" / "protvar.parquet", "forward", 137)) == {
            sequences}
        assert set(_per_request(BLIND9 / "kineto" / "changedet.parquet", "encode", 161)) == {
            2 * tiles}


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_nowcast_s_recurrent_loops_are_not_items(source):
    """nowcast runs its recurrent model once per observed frame after the first, then once per
    forecast lead, each call on the last one's states (OBSERVED - 1 + LEAD calls a request,
    from the raw spans), and reads each forecast step's rain rates back: no per-item finding."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    calls = workload_constant("nowcast", "OBSERVED") - 1 + workload_constant("nowcast", "LEAD")
    if source == "kineto":
        assert set(_per_request(BLIND9 / "kineto" / "nowcast.parquet", "forward", 178)) == {
            calls}
    found = evaluate(analyze(BLIND9 / source / "nowcast.parquet"))
    assert not [f for f in found if f.rule_id == "compute.per-item-calls"]
