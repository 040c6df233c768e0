"""The analysis's data files read through libyaml (analysis/bundled.py) are the documents
``yaml.safe_load`` (pure Python) makes of them."""
from __future__ import annotations

from importlib import resources

import pytest
import yaml
from zym.analysis.bundled import bundled_yaml

NAMES = sorted(p.name for p in resources.files("zym.analysis").iterdir()
               if p.name.endswith(".yaml"))


def test_every_data_file_is_listed():
    assert {"kernel_classes.yaml", "gpus.yaml", "gemm_rates.yaml",
            "capture_costs.yaml"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_same_document_as_safe_load(name):
    text = resources.files("zym.analysis").joinpath(name).read_text("utf-8")
    assert bundled_yaml(name) == yaml.safe_load(text)

