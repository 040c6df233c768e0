"""Which leading steps are warm-up (analysis/phases.py warmup_steps), on step lengths alone."""
from __future__ import annotations

import numpy as np
import pytest
from zym.analysis.phases import Steps, warmup_steps


def steps_of(ms: list[float]) -> Steps:
    ends = np.cumsum(np.array(ms) * 1e6).astype(np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    return Steps("app.py handle", "app.py", "handle", starts, ends, "lines", 0)


@pytest.mark.parametrize("ms,warm", [
    # the H200 churn capture: a first request 50x slower (cuDNN planning), one later step
    # 1.29x the pace: the count rule alone (1 slow step in each half) saw no warm-up
    ([170.9, 3.5, 3.2, 3.2, 3.1, 3.3, 3.5, 3.1, 3.3, 4.1, 3.3, 3.2, 3.2, 3.2, 3.2, 3.2, 3.3,
      3.1], 1),
    ([9.0, 8.0, 6.0, 3.0, 3.1, 3.0, 3.2, 3.0, 3.1, 3.0], 3),        # slow steps gathered first
    ([3.0, 9.0, 3.1, 3.0, 9.2, 3.0, 3.1, 9.1, 3.0, 3.1, 9.0, 3.0], 0),   # a slow step all along
    ([3.0, 3.1, 3.0, 3.2, 3.0, 3.1, 3.0, 3.0], 0),                   # no slow step
    ([50.0, 3.0, 3.1, 3.0, 3.1, 40.0, 3.0, 3.1, 3.0, 3.0, 3.1, 3.0, 3.0, 3.1], 6),  # a new shape
    ([9.0, 3.0, 8.0, 3.1, 3.0, 3.1, 3.0, 3.2, 3.0, 3.1, 3.0, 3.0], 3),   # slow steps still most
    ([3.0, 3.1, 3.0, 3.1, 3.0, 3.0, 90.0, 3.1], 0),                  # one late outlier (GC)
    # the sixth blind round's cliptag, traced after a warm-up pass: a second request 1.29x the
    # pace after a first at it is not warm-up (it took half the trace out of the window)
    ([223.8, 323.4, 248.0, 255.1], 0),
    ([3.0, 9.0, 8.0, 3.0, 3.1, 3.0, 3.0, 3.1], 0),   # slow steps gathered, the first at the pace
])
def test_warmup_steps(ms, warm):
    assert warmup_steps(steps_of(ms)) == warm
