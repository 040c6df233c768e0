"""The fourth blind round (bench/whatif/results/h100-blind4; on an H100: the device tool lent
one): services written by a helper that saw neither zym's rules nor its output (segserve,
gnnserve, ttsvoc), measured before zym saw them; zym's findings on a torch.profiler trace of
each baseline against every variant's measured saving (docs/benchmarks.md, "A fourth blind
round"). zym's step is the function it finds repeated: a request (segserve: 4 a pass,
gnnserve: 3), and ttsvoc's modules' ``forward`` (11 a request, 2 requests a pass)."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from whatif_compare import check_docs_table, compare

ROOT = Path(__file__).resolve().parents[2]
BLIND4 = ROOT / "bench" / "whatif" / "results" / "h100-blind4"
WORKLOADS = ROOT / "bench" / "whatif" / "workloads"
STEPS = {"segserve": 4, "gnnserve": 3, "ttsvoc": 22}   # zym's steps in one traced pass


@pytest.fixture(scope="module")
def rows():
    return compare.compare(BLIND4, STEPS)


def test_docs_table_is_what_the_traces_give_today(rows):
    check_docs_table("whatif-blind4-table", rows, BLIND4, STEPS)


def test_the_steps_are_what_the_sources_make():
    source = (WORKLOADS / "segserve.py").read_text()
    assert re.search(r"^BATCH, SIZE, REQUESTS = \d+, \d+, 4$", source, re.MULTILINE)
    source = (WORKLOADS / "gnnserve.py").read_text()
    assert re.search(r"REQUESTS = 512, 20, 70, 3$", source, re.MULTILINE)
    # ttsvoc: per request a text encoder, 8 speaker encoders (one a line), a decoder, a
    # vocoder: 11 outermost forward calls of its modules; 2 requests a pass
    source = (WORKLOADS / "ttsvoc.py").read_text()
    assert re.search(r"^BATCH, MIN_TOKENS, MAX_TOKENS, REQUESTS = 8, \d+, \d+, 2$", source, re.MULTILINE)
    assert STEPS["ttsvoc"] == 2 * (1 + 8 + 1 + 1)


def test_the_work_before_the_upload_and_after_the_last_copy_back_are_priced_apart():
    """segserve normalises its tiles with numpy before the upload and computes its statistics
    with numpy after its last copy back: two places a step's own CPU work went, each its own
    finding. The stretch from the step's last CUDA call to where handle returned is its own
    work (the function's span says where it returned), the longest of the step, named in
    class_stats; the other, ended by the upload, in normalise. Second method: the class_stats
    and normalise spans of the trace, read directly."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    path = BLIND4 / "kineto" / "segserve.parquet"
    found = evaluate(analyze(path))
    source = (WORKLOADS / "segserve.py").read_text().splitlines()
    at = {name: 1 + next(i for i, s in enumerate(source) if s.startswith(f"def {name}("))
          for name in ("class_stats", "normalise")}
    found = {f.evidence["where"]: f for f in found if f.rule_id == "utilization.cpu-bound-step"}
    assert set(found) == {f"segserve.py:{at[n]} {n}" for n in at}
    stats, norm = found[f"segserve.py:{at['class_stats']} class_stats"], \
        found[f"segserve.py:{at['normalise']} normalise"]
    assert stats.evidence["until"] is None   # (its function's return ended it, not a call)
    assert "until" not in stats.message
    assert norm.evidence["until"] == f"segserve.py:{source.index('    def preprocess(self, tiles: np.ndarray) -> torch.Tensor:') + 1} preprocess"
    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "name", "dur_ns"])
    frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name")
    stacks = raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id")
    spans = (raw.filter(pl.col("record") == "span").select("stack_id", "dur_ns")
             .join(stacks, on="stack_id").join(frames, on="frame_id"))
    for name, f in (("class_stats", stats), ("normalise", norm)):
        took = spans.filter(pl.col("name") == name)["dur_ns"]
        assert took.len() == STEPS["segserve"]   # one call a request in the traced pass
        assert f.evidence["count"] == STEPS["segserve"]
        assert f.evidence["work_per_step"] == pytest.approx(took.median(), rel=0.15)
    assert stats.saving_ns > norm.saving_ns > 0


def test_orders_hold_where_fixes_are_beyond_noise(rows):
    assert all(compare.order_agrees(rows).values())
