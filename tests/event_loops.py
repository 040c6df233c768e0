"""A decode loop that reads each step's tokens through a CUDA event, for the tests of what a
sync waited for (``zym.analysis.waits``) and of the sync rules."""
from __future__ import annotations

from collections.abc import Sequence

from zym.rules.testing import CaptureBuilder, Frame

STEP = [("python", "serve", "app.py", 10), ("python", "step", "app.py", 20)]


def event_pipeline(b: CaptureBuilder, requests: int = 4, steps: int = 5, *, late: bool = True,
                   step: Sequence[Frame] = STEP, copy_line: Sequence[Frame] | None = None
                   ) -> None:
    """``requests`` calls of ``step`` (its innermost frame), each ``steps`` steps of: a 200
    µs GEMM, its tokens copied into pinned memory without waiting (at ``copy_line``, else
    the step's line), an event recorded, ``event.synchronize()`` on the previous step's
    event once this step's work is queued (``late``, the sync rules' advice) or on this
    step's at once, then 100 µs of host work; 50 µs between requests."""
    copy_line = list(copy_line or step)
    event_sync = list(step) + [("python", "synchronize", "torch/cuda/streams.py", 1)]
    for _ in range(requests):
        with b.enclosing(step):
            previous = None
            for _ in range(steps):
                b.kernel(list(step) + [("torch_op", "aten::mm")], "gemm", gpu_us=200)
                b.copy(copy_line, "DtoH", host_mem="pinned", sync=False)
                copied = b.gpu_free  # the copy's end: the event's
                b.call(copy_line, "cudaEventRecord", "other", 1.0)
                waited = previous if late else copied
                if waited is not None:
                    b.call(event_sync, "cudaEventSynchronize", "sync", 2.0, until_ns=waited)
                previous = copied
                b.tick(100)
        b.tick(50)
