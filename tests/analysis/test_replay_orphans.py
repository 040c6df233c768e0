"""GPU work no call claims (its launch unrecorded or unjoined) must not pin the replay: on the
kept H200 gpt_decode capture, forgetting the correlation of ten launches late in the window
leaves the tf32 fix's saving where it was (held at their recorded times, those kernels cut
it from 87 to 40 ms)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from zym.analysis import analyze
from zym.rules import evaluate
from zym.schemas import open_capture, write_capture

CAPTURE = (Path(__file__).resolve().parents[2] / "bench" / "whatif" / "results" / "h200"
           / "captures" / "gpt_decode.parquet")


def _tf32_saving(path) -> int:
    a = analyze(path)
    found = [f for f in evaluate(a) if f.rule_id == "compute.fp32-matmul-no-tf32"]
    return found[0].saving_ns


def test_an_unclaimed_kernel_mid_window_does_not_hide_the_saving(tmp_path):
    cap = open_capture(CAPTURE)
    tables = {t: cap.load(t) for t in ("frame", "stack", "span", "call", "gpu")}
    calls = tables["call"]
    launches = calls.filter((pl.col("kind") == "launch") & pl.col("correlation_id").is_not_null())
    at = int(launches.height * 0.8)
    victims = launches["correlation_id"][at:at + 10].to_list()
    tables["call"] = calls.with_columns(
        pl.when(pl.col("correlation_id").is_in(victims)).then(None)
        .otherwise(pl.col("correlation_id")).alias("correlation_id"))
    out = write_capture(tmp_path / "orphan.parquet", tables, cap.meta)
    before, after = _tf32_saving(CAPTURE), _tf32_saving(out)
    assert before > 0
    assert abs(after - before) <= 0.05 * before, (before, after)
