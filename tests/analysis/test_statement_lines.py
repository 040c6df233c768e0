"""A statement written over several lines (analysis/statements.py ``statement_starts``): with eBPF
stacks a step function's call is told from the next where its executing line goes back to its
first CUDA line, and a call written over two lines runs its arguments' uploads at their own
lines, then its own launches at its first line (CPython reports a call at the line its
expression starts). The fifteenth blind round's nerlink::

    states, em = self.net(torch.from_numpy(ids).to(dev), torch.from_numpy(keep).to(dev),
                          torch.from_numpy(first).to(dev))

went 538, 538, 539, then back to 538 for the forward: each request was two steps."""
from __future__ import annotations

import pytest
from zym.analysis.statements import bracket_depth, statement_starts
from zym.rules.testing import CaptureBuilder

REQUESTS = 5
OPEN = "states, em = self.net(torch.from_numpy(ids).to(dev), torch.from_numpy(keep).to(dev),"
CLOSE = "torch.from_numpy(first).to(dev))"
SERVE = [("python", "main", "app.py", 1), ("python", "serve", "app.py", 10)]


def handle(line: int, text: str | None) -> list:
    return SERVE + [("python", "handle", "app.py", line, text)]


def service(texts: bool = True) -> CaptureBuilder:
    """REQUESTS calls of ``handle`` from one line of ``serve``: two uploads at its line 20 and
    one at 21 (one statement over both lines), the net's 6 launches at 20, then 3 launches at
    its line 23 and a value read back at 24. ``texts``: the capture holds the lines' texts."""
    b = CaptureBuilder()
    t20, t21 = (OPEN, CLOSE) if texts else (None, None)
    for _ in range(REQUESTS):
        for line, text in ((20, t20), (20, t20), (21, t21)):
            b.copy(handle(line, text), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
        for _ in range(6):
            b.kernel(handle(20, t20) + [("torch_op", "aten::linear")], "gemm", gpu_us=2)
        for _ in range(3):
            b.kernel(handle(23, "tags = decode(em)") + [("torch_op", "aten::max")], "max",
                     gpu_us=2)
        b.scalar_readback(handle(24, "n = int(tags.sum())"))
        b.tick(200)   # the serve loop's own work between two requests
    return b


def test_a_call_over_two_lines_does_not_start_a_new_step():
    steps = service().analysis(spans=False).steps_in_window()
    assert steps is not None and steps.count == REQUESTS


def test_without_the_texts_the_line_going_back_splits_as_before():
    """The capture's texts are what tells the statement: without them (a capture made before
    ``source`` was recorded) each request is two steps, as before."""
    steps = service(texts=False).analysis(spans=False).steps_in_window()
    assert steps is not None and steps.count == 2 * REQUESTS


@pytest.mark.parametrize("text, depth", [
    (OPEN, 1), (CLOSE, -1), ("x = f(a, b)", 0), ('x = f("(", y)  # )))', 0),
    ("s = '''(''' + g(", 1), ("d = {'a': [1,", 2), (None, None), ("x" * 200, None),
])
def test_bracket_depth(text, depth):
    assert bracket_depth(text) == depth


def test_statement_starts_by_function():
    """Lines 20 (open) and 21 (close) are one statement, 23 its own; a line that leaves
    brackets open joins the next line of its own function only, and only within 8 lines; a
    later line (the lines between unknown: no CUDA call there) joins it only where it closes
    brackets it did not open (72), not where it is whole (63: facegate's crops statement,
    closed at a line without CUDA calls, would otherwise swallow the loop after it)."""
    import numpy as np
    import polars as pl

    lines = np.array([20, 21, 23, 21, 40, 50, 60, 63, 64, 70, 72, -1])
    texts = pl.Series([OPEN, CLOSE, "y = 1", CLOSE, "z = g(", "w = 2)", "a = f(x", "b = g(x)",
                       "c = h(y)", "d = f(", "y.to(d))", None])
    group = np.array([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    assert statement_starts(lines, texts, group).tolist() == [
        20, 20, 23, 21, 40, 50, 60, 63, 64, 70, 70, -1]
