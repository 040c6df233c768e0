"""A rule message's ``:float`` figures as people read them: three significant digits below
1,000, a whole number with separators from there on (a launch-bound step "launched 3.94e+03
kernels per step" before)."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize(("value", "shown"), [
    (836.0, "836"), (12.345, "12.3"), (0.5, "0.5"), (999.4, "999"), (1000.0, "1,000"),
    (3936.2, "3,936"), (1234567.8, "1,234,568"), (-2500.0, "-2,500"),
    (float("inf"), "inf"), (float("nan"), "nan")])
def test_float_figures(value, shown):
    from zym.rules.compile import fmt

    assert fmt(value, "float") == shown
