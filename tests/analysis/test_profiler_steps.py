"""Steps from torch.profiler's own ``ProfilerStep#N`` ranges (a trace recorded with a
``schedule``), where the call stacks name no step function."""
from __future__ import annotations

import pytest
from kineto_builder import KinetoBuilder
from zym.analysis.report import analyze


def scheduled(b: KinetoBuilder, steps: int, gap_us: float = 50.0) -> list[tuple[float, float]]:
    """``steps`` passes of prof.step() + work; returns each ProfilerStep's (start, end) in µs."""
    out, step = [], None
    with b.py("app.py(10): main"):
        for i in range(steps):
            with b.py("torch/profiler/profiler.py(894): step"):
                if step is not None:
                    b.close_op(step)
                    out.append((step["ts"], step["ts"] + step["dur"]))
                step = b.open_op(f"ProfilerStep#{i + 2}")
            with b.py("app.py(20): serve"):
                for _ in range(2):
                    with b.py("app.py(30): handle"), b.op("aten::mm"):
                        b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=5.0)
                    b.tick(gap_us)
        b.close_op(step)
        out.append((step["ts"], step["ts"] + step["dur"]))
    return out


def test_without_stacks_the_profiler_steps_are_the_steps(tmp_path):
    b = KinetoBuilder(with_stack=False)
    ranges = scheduled(b, 5)
    a = analyze(b.write(tmp_path / "t.json"), window="all")
    steps = a.phases.steps
    assert steps is not None and steps.source == "profiler steps"
    assert steps.function == "ProfilerStep#N"
    # a step runs from its start to the next one's; the last to its own end (the raw ranges)
    starts = [round(s * 1000) for s, _ in ranges]
    assert steps.start_ns.tolist() == starts
    assert steps.end_ns.tolist() == starts[1:] + [round(ranges[-1][1] * 1000)]


def test_a_step_function_is_still_preferred(tmp_path):
    b = KinetoBuilder()
    scheduled(b, 5)
    steps = analyze(b.write(tmp_path / "t.json"), window="all").phases.steps
    assert steps is not None and steps.source == "spans"
    assert steps.name == "handle" and steps.count == 10


@pytest.mark.parametrize("n", [1, 2])
def test_too_few_profiler_steps_are_no_steps(tmp_path, n):
    b = KinetoBuilder(with_stack=False)
    scheduled(b, n)
    assert analyze(b.write(tmp_path / "t.json"), window="all").phases.steps is None
