"""The seventh blind round (bench/whatif/results/h100-blind7; on an H100: the device tool lent
one): services written by a helper that saw neither zym's rules nor its output (lidardet,
posekpt, fraudscore), measured before zym saw them; zym's findings on a torch.profiler trace of
each baseline against every variant's measured saving (docs/benchmarks.md, "A seventh blind
round"). zym's step is a request (4 a traced pass each)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from whatif_compare import (
    check_docs_table,
    check_steps_are_requests,
    compare,
    raw_spans,
)

ROOT = Path(__file__).resolve().parents[2]
BLIND7 = ROOT / "bench" / "whatif" / "results" / "h100-blind7"
STEPS = {"lidardet": 4, "posekpt": 4, "fraudscore": 4}   # zym's steps in one traced pass


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind7-table", compare.compare(BLIND7, STEPS), BLIND7, STEPS)


def test_the_steps_are_the_requests_of_a_pass():
    check_steps_are_requests(BLIND7, STEPS)


def test_posekpt_s_decoding_is_a_tenth_of_its_requests_and_found():
    """posekpt decodes the heatmaps joint by joint in numpy after the copy back
    (decode_host): from the raw spans, between a tenth and a fifth of each request's time, the
    share the CPU-bound rule asked for before the fifty-second round (a fifth) and now (a
    tenth); the finding names it and prices it within ±30% of what decoding on the GPU
    saved."""
    spans = raw_spans(BLIND7 / "kineto" / "posekpt.parquet")
    handle = spans.filter(pl.col("name") == "handle")["dur_ns"].sum()
    decode = spans.filter(pl.col("name") == "decode_host")["dur_ns"].sum()
    assert 0.1 <= decode / handle < 0.2
    [r] = [r for r in compare.compare(BLIND7, {"posekpt": 4}) if r.variant == "gpu_decode"]
    assert r.rule_id == "utilization.cpu-bound-step" and r.rank is not None and r.agrees, r
