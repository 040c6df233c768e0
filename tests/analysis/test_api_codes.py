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
    assert a.data.calls.schema["name"] == pl.Categorical
    assert a.facts.calls.schema["api"] == pl.Categorical
    # the same names, in the same rows, as the capture's text
    text = load_capture(path).calls["name"]
    assert_series_equal(a.data.calls["name"].cast(pl.String), text.cast(pl.String))
    assert_series_equal(a.facts.calls["api"].cast(pl.String),
                        text.cast(pl.String).gather(a.facts.calls["_orig"]), check_names=False)
