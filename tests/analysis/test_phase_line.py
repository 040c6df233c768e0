"""The header says when the analyzed steps were not alike (their slowest 1.5x their fastest)."""
from zym.analysis.export.summary import phase_line


def _phases(lo_ms: float, hi_ms: float) -> dict:
    return {"capture_ns": 10**9, "window": "steady", "window_ns": 900 * 10**6,
            "startup": None, "warmup": None,
            "steps": {"in_window": 4, "function": "serve.py handle", "mean_ns": 225 * 10**6,
                      "min_ns": int(lo_ms * 1e6), "max_ns": int(hi_ms * 1e6)}}


def test_uneven_steps_are_named_with_their_range():
    line = phase_line(_phases(157.7, 393.6))
    assert "uneven: 157.7 ms to 393.6 ms" in line


def test_even_steps_say_nothing_more():
    line = phase_line(_phases(200.0, 250.0))
    assert "uneven" not in line and line.endswith("a step on average)")
