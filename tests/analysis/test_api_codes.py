"""`analyze` holds its calls' API names once, as categorical codes (``load.api_codes``): the
capture's text column is not kept beside ``Facts.calls``' codes."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_series_equal
from zym.analysis import analyze, load_capture

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [REPO / "sample_traces" / "gpt_decode_server.parquet",
           REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_api_names_held_as_codes(path):
    a = analyze(path, lambda _stage: None)
    whole = a.whole  # the whole capture's facts (a.data: the steady window's rows)
    assert whole.data.calls.schema["name"] == pl.Categorical
    assert whole.calls.schema["api"] == pl.Categorical
    # the same names, in the same rows, as the capture's text
    text = load_capture(path).calls["name"].cast(pl.String)
    assert_series_equal(whole.data.calls["name"].cast(pl.String), text)
    assert_series_equal(whole.calls["api"].cast(pl.String), text.gather(whole.calls["_orig"]),
                        check_names=False)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_gpu_names_held_as_codes_classified_as_their_text(path):
    """The GPU operations' names as codes too: the same names in the same rows, and the same
    kernel classes as the text classifies to."""
    from zym.analysis.kernels import classify_kernels

    a = analyze(path, lambda _stage: None)
    whole = a.whole
    assert whole.data.gpu.schema["name"] == pl.Categorical
    text = load_capture(path).gpu["name"].cast(pl.String)
    assert_series_equal(whole.gpu["name"].cast(pl.String), text)
    by_text = classify_kernels(text, whole.gpu["kind"])
    by_code = classify_kernels(whole.gpu["name"], whole.gpu["kind"], whole.kernel_table)
    assert by_text[0].drop_nulls().n_unique() > 1  # several classes: something to compare
    for a_col, b_col in zip(by_text, by_code, strict=True):
        assert_series_equal(a_col.cast(pl.String) if a_col.dtype == pl.Categorical else a_col,
                            b_col.cast(pl.String) if b_col.dtype == pl.Categorical else b_col)
