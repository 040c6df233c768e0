"""utilization.cpu-bound-step counts a step's own CPU work, not the time between steps: the
bundled trace repeated 3 times (bench/replicate_trace.py) has `main` as its step, one per
copy, and after each copy's last CUDA call ~325 ms without one before the next copy (its
start-up). That time is no step's work: the rule stays silent (it claimed
~650 ms there when it counted the time after a step's last call)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "gpt_decode_server.trace.json.gz"


def test_the_time_between_copies_is_no_steps_cpu_work(tmp_path):
    from zym.analysis import analyze
    from zym.rules import evaluate

    x3 = tmp_path / "x3.trace.json.gz"
    subprocess.run([sys.executable, str(ROOT / "bench" / "replicate_trace.py"), str(SAMPLE), "3",
                    "-o", str(x3)], check=True, capture_output=True)
    result = analyze(x3)
    steps = result.relations.materialize("steps", {"quiet_ns", "quiet_py_ns", "dur_ns"})
    assert result.steps_in_window().function == "gpt_decode_server.py main"
    # the longest CUDA-less time of each step (the gap to the next copy, after its last call)
    # is far longer than the longest stretch before or between its calls
    assert (steps["quiet_ns"] > 5 * steps["quiet_py_ns"]).sum() >= 2
    assert [f for f in evaluate(result) if f.rule_id == "utilization.cpu-bound-step"] == []
