"""A torch.profiler trace with no CUDA call and no GPU work (a CPU-only profile) is analyzed
and says so, rather than reading as an empty capture."""
from __future__ import annotations

import json

from zym.analysis import analyze


def test_a_cpu_only_trace_says_nothing_was_recorded_to_rank(tmp_path):
    def ev(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": dur,
                "args": args}

    events = [ev("user_annotation", "ProfilerStep#1", 0, 100, **{"External id": 1}),
              ev("cpu_op", "aten::add", 10, 5, **{"External id": 2}),
              ev("cpu_op", "aten::mul", 20, 5, **{"External id": 3}),
              ev("python_function", "app.py(3): main", 1, 90, **{"Python id": 1}),
              {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
               "tid": "PyTorch Profiler", "ts": 0, "dur": 100, "args": {}}]
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps({"traceEvents": events}))
    notes = analyze(path).phase_facts()["notes"]
    spans = 4  # the annotation, the two ops and the Python frame (not the profiler's own span)
    assert any(n.startswith(f"no CUDA call and no GPU work recorded ({spans} CPU spans)")
               for n in notes), notes
    assert not any("no repeated step" in n for n in notes)
