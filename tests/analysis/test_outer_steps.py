"""Which function is the step where a trace holds two requests (analysis/phases.py
find_steps): ``handle`` called twice, each call running a model (``forward``) five times. The
step is ``handle`` where the forwards take less than half of its time (the requests' own pre-
and post-processing: the sixth blind round's CT service, whose forward per window hid the
request's host work, which the window then left out), and ``forward`` where the requests are
little else (a decoding loop), as before."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kineto_builder import KinetoBuilder


def _trace(tmp_path: Path, host_us: float, upload: bool) -> tuple[Path, float]:
    """Two requests of ``host_us`` of host work before and after five forwards of ~100 µs
    (``upload``: and a copy to the GPU of their input, a CUDA call outside the forwards);
    returns the trace and the forwards' share of the requests' time, from the clock."""
    b = KinetoBuilder()
    forward_us = request_us = 0.0
    with b.py("app.py(1): <module>"):
        for _ in range(2):
            t0 = b.now
            with b.py("app.py(20): handle"):
                b.tick(host_us)
                if upload:
                    with b.op("aten::copy_"):
                        b.launch("cudaMemcpyAsync", kernel="Memcpy HtoD", gpu_cat="gpu_memcpy")
                for _ in range(5):
                    f0 = b.now
                    with b.py("app.py(10): forward"):
                        for _ in range(4):
                            with b.op("aten::mm"):
                                b.launch(gpu_us=20.0, cpu_us=20.0)
                    forward_us += b.now - f0
                b.tick(host_us)
            request_us += b.now - t0
            b.tick(50.0)
    return b.write(tmp_path / f"t{host_us:g}{upload}.json"), forward_us / request_us


@pytest.mark.parametrize("upload", [False, True])
@pytest.mark.parametrize("host_us, step, count", [
    (2_000.0, "app.py handle", 2),   # the forwards ~11% of a request: the request is the step
    (10.0, "app.py forward", 10),    # ~96%: the requests are their forwards' loop
])
def test_the_step_of_a_two_request_trace(tmp_path, host_us, step, count, upload):
    from zym.analysis import analyze
    from zym.analysis.phases import MIN_INNER_SHARE

    path, share = _trace(tmp_path, host_us, upload)
    assert (share < MIN_INNER_SHARE) == (step == "app.py handle"), share
    steps = analyze(path).steps_in_window()
    assert (steps.function, steps.count) == (step, count)
