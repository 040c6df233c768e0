"""A saving model's ``instead:`` (rules/findings.py, ``Finding.saving_instead``): a second fix
the finding's text offers, checked when the pack loads, estimated the same way from the same
events, and shown beside the first in every report. (The built-in rule that uses it:
compute.fp32-matmul-no-tf32, the matmuls in bfloat16 beside TF32.)"""
from __future__ import annotations

from pathlib import Path

import pytest
from attention_capture import PACK

ROOT = Path(__file__).resolve().parents[2]

FIRST = "{model: remove, work: keep, only: {op_class: softmax}"


@pytest.mark.parametrize("instead, words", [
    ("{model: remove, work: keep}", "label"),                      # (the schema)
    ("{label: all, model: speedup, to: bf16, keep: first}", "saving.instead.keep"),
    ("{label: all, model: remove, only: {nope: 1}}", "saving.instead.only"),
    ("{label: all, model: speedup}", "saving.instead"),            # neither to nor factor
])
def test_a_second_fix_is_a_labelled_saving_model_checked_as_the_first(tmp_path, instead, words):
    from zym.rules.model import RuleError, load_pack

    pack = tmp_path / "mine.yaml"
    pack.write_text(PACK.replace("SAVING", FIRST + f", instead: {instead}}}"))
    with pytest.raises(RuleError) as e:
        load_pack(pack)
    assert words in str(e.value), str(e.value)


def test_no_second_fix_without_a_first(tmp_path):
    from zym.rules.model import RuleError, load_pack

    pack = tmp_path / "mine.yaml"
    pack.write_text(PACK.replace("SAVING", "{model: none, instead: {label: x, model: remove}}"))
    with pytest.raises(RuleError, match="model none"):
        load_pack(pack)


def _attention(tmp_path, saving: str):
    """A rule over every kernel of hand-written attention (``attention_capture``)."""
    from attention_capture import attention_analysis
    from zym.rules.engine import evaluate_rules
    from zym.rules.model import load_pack

    pack = tmp_path / "mine.yaml"
    pack.write_text(PACK.replace("SAVING", saving))
    return evaluate_rules(attention_analysis(), load_pack(pack).rules)


def test_the_second_fix_is_replayed_from_the_same_events(tmp_path):
    """The first fix takes the softmaxes away (24 x 80 us), the second every kernel of the
    finding (24 x 180 us): GPU-bound before and after, each saves the GPU time it removes."""
    [f] = _attention(tmp_path, FIRST + ", instead: {label: every kernel gone, model: remove, "
                                       "work: keep}}")
    assert f.saving_ns == pytest.approx(24 * 80_000, rel=0.05)
    inst = f.saving_instead
    assert inst["label"] == "every kernel gone"
    assert inst["saving_ns"] == pytest.approx(48 * 90_000, rel=0.05)
    assert "these 48 calls" in inst["saving_how"]
    d = f.to_dict(examples=0, window_ns=10 * inst["saving_ns"], steps=6)["saving_instead"]
    assert (d["saving_pct_of_window"], d["saving_per_step_ns"]) == (10.0,
                                                                     inst["saving_ns"] // 6)


def test_a_rule_without_a_second_fix_reports_none(tmp_path):
    [f] = _attention(tmp_path, FIRST + "}")
    assert f.saving_instead is None
    assert f.to_dict(examples=0)["saving_instead"] is None


@pytest.fixture(scope="module")
def embedsvc():
    """A float32 encoder without autocast (the third blind round, on an H100): its GEMMs on
    CUDA cores, the finding's first fix TF32, its second the matmuls in bfloat16."""
    from zym.analysis import analyze
    from zym.analysis.export.summary import build_report
    from zym.rules import evaluate

    a = analyze(ROOT / "bench" / "whatif" / "results" / "h100-blind3" / "kineto" / "embedsvc.parquet")
    found = evaluate(a)
    [f] = [f for f in found if f.rule_id == "compute.fp32-matmul-no-tf32"]
    return a, f, build_report(a, found, None)


def test_bfloat16_is_priced_beside_tf32_within_what_its_gemms_can_give(embedsvc):
    """Second method for the bound: the GEMMs' own time at bfloat16's rates (the throughput
    table, kernel by kernel) is the most the replay can take away; TF32 saves less."""
    import numpy as np
    import polars as pl
    from zym.analysis.relations import Relations
    from zym.analysis.throughput import speedup_durations

    a, f, _ = embedsvc
    inst = f.saving_instead
    assert inst["label"] == "the matmuls in bfloat16 (autocast)"
    g = (Relations(a).get("gpu").filter((pl.col("op_class") == "gemm")
                                        & (pl.col("precision") == "fp32")
                                        & ~pl.col("tensor_core").fill_null(False)))
    d = g["dur_ns"].to_numpy()
    new, _ = speedup_durations(d, "fp32", "bf16", a.data.meta.gpus[0]["name"],
                               g["flops"].cast(pl.Float64).to_numpy())
    removed = int(np.sum(d - new))
    assert f.saving_ns < inst["saving_ns"] <= removed
    assert "bf16 GEMMs run" in inst["saving_how"]


def test_every_report_shows_the_second_fix(embedsvc):
    from rich.console import Console
    from zym.analysis.export.html_report import _findings_html
    from zym.cli.render import render_findings, render_markdown

    _, _, report = embedsvc
    [d] = [d for d in report["findings"] if d["rule_id"] == "compute.fp32-matmul-no-tf32"]
    said = "or the matmuls in bfloat16 (autocast): saves ~"
    assert d["saving_instead"]["saving_ns"] > d["saving_ns"]
    console = Console(record=True, width=200)
    render_findings(report, console)
    assert said in console.export_text()
    assert any(line.startswith("*Or the matmuls in bfloat16") and "saves \\~" in line
               for line in render_markdown(report).splitlines())
    assert said in _findings_html(report["findings"])   # (zym report's HTML)


def test_a_second_fix_may_edit_only_events_of_a_site_column(tmp_path):
    """The second fix's ``only`` names a site column the rule reads nowhere else
    (``torch_op``): its events keep what it needs (their stacks), and it takes the softmaxes
    away (24 x 80 us) where the first fix takes every kernel (24 x 180 us)."""
    [f] = _attention(tmp_path, '{model: remove, work: keep, instead: {label: the softmaxes, '
                               'model: remove, work: keep, only: {torch_op: "aten::_softmax"}}}')
    assert f.saving_ns == pytest.approx(48 * 90_000, rel=0.05)
    assert f.saving_instead["saving_ns"] == pytest.approx(24 * 80_000, rel=0.05)
