"""``--window`` parsed against a capture's phases (``zym.analysis.phases.parse_window``)."""
from __future__ import annotations

import pytest
from zym.analysis.phases import Phases, parse_window
from zym.schemas.errors import InputError

S = 1_000_000_000
WHOLE = Phases(window=(7 * S, 17 * S))  # a capture of 10 s, starting at 7 s on its clock


@pytest.mark.parametrize(("spec", "want"), [
    ("all", (7 * S, 17 * S)), ("steady", (7 * S, 17 * S)), ("2s:3s", (9 * S, 10 * S)),
    ("500ms:", (7 * S + S // 2, 17 * S)), (":1.5s", (7 * S, 8 * S + S // 2)),
    ("5s:20s", (12 * S, 17 * S)),  # past the end: to the end
])
def test_times_are_from_the_capture_start_and_end_at_its_end(spec, want):
    assert parse_window(spec, WHOLE) == want


@pytest.mark.parametrize("spec", ["3s:2s", "2s:2s", "12s:20s", "10s:"])
def test_an_empty_window_is_one_line_that_says_how_long_the_capture_is(spec):
    """A window that ends before it starts, or starts past the capture's end (it read as a
    negative window, "-455 s", and an empty report)."""
    with pytest.raises(InputError) as got:
        parse_window(spec, WHOLE)
    assert "the window is empty (the capture lasts 10.000 s)" in str(got.value)
    assert "\n" not in str(got.value)
