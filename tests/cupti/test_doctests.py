"""The examples in the GPU-side modules' docstrings run."""
from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["zym.capture.cupti", "zym.capture.cupti.clock",
                                    "zym.capture.cupti.decode", "zym.analysis.join"])
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0
