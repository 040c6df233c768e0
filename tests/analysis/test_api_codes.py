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
