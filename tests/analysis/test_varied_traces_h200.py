"""torch.profiler traces recorded on the H200 with settings the other traces here do not use
(bench/whatif/results/h200-varied, bench/whatif/device_traces_varied.sh): torch's documented
schedule (``prof.step()`` each pass, files written by ``tensorboard_trace_handler``), memory
events (``profile_memory``), no Python stacks, torch.compile's CUDA graphs, a service whose
GPU work is launched from a thread pool."""
from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIED = ROOT / "bench" / "whatif" / "results" / "h200-varied"
SCHEDULED = VARIED / "vm_578.1796256627190531613.pt.trace.json.gz"
UNSCHEDULED = ROOT / "bench" / "whatif" / "results" / "h200-blind" / "kineto" / "vision.trace.json.gz"


def report(path: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(path), "--format",
                          "json", "--no-progress", *args], capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def sites(rep: dict) -> set[tuple[str, str]]:
    return {(f["rule_id"], f["site"]) for f in rep["findings"] if f.get("site_id") is not None}


def test_a_scheduled_trace_names_the_lines_inside_the_step():
    """Each ``ProfilerStep#N`` op is opened inside ``prof.step()`` and spans the whole step: the
    work in it must be laid to the frames that issued it. Second method: the same workload's
    trace recorded without a schedule names the same (rule, site) pairs."""
    scheduled, plain = report(SCHEDULED), report(UNSCHEDULED)
    got = sites(scheduled)
    assert got, scheduled["findings"]
    assert not [s for s in got if "harness.py" in s[1] and "serve" not in s[1]], got
    per_site = {s for s in got if s[0] != "compute.launch-bound-step"}   # (the step differs)
    assert per_site == {s for s in sites(plain) if s[0] != "compute.launch-bound-step"}
    assert ("transfers.pageable-memory", "vision.py:70 upload") in got


def raw_events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def test_without_stacks_a_scheduled_trace_has_its_profiler_steps():
    """No Python stacks, so no step function: the steps are the ProfilerStep#N ranges, as many
    as the raw JSON has on the CPU side, and the findings of the same workload traced without
    a schedule are all there (plus the launch-bound step, which needs steps)."""
    (path,) = (VARIED / "moe-schedule-nostack").glob("*.pt.trace.json.gz")
    ranges = [e for e in raw_events(path) if e.get("cat") == "user_annotation"
              and e.get("name", "").startswith("ProfilerStep#")]
    rep = report(path)
    steps = rep["phases"]["steps"]
    assert (steps["how"], steps["found"]) == ("profiler steps", len(ranges)) and len(ranges) == 4
    # a step runs to the next one's start, the last to its own end: lengths from the raw ranges
    ranges.sort(key=lambda e: e["ts"])
    lengths = [b["ts"] - a["ts"] for a, b in itertools.pairwise(ranges)] + [ranges[-1]["dur"]]
    assert steps["min_ns"] == pytest.approx(min(lengths) * 1000, abs=2)
    assert steps["max_ns"] == pytest.approx(max(lengths) * 1000, abs=2)
    plain = report(VARIED / "moe-nostack.trace.json.gz")
    assert plain["phases"]["steps"] is None

    def kinds(r: dict) -> set:
        return {(f["rule_id"], f["title"]) for f in r["findings"]}
    assert kinds(plain) <= kinds(rep)
    assert {k[0] for k in kinds(rep) - kinds(plain)} == {"compute.launch-bound-step"}


PER_FILE = ["churn-memory.trace.json.gz", "compiled.trace.json.gz", "moe-nostack.trace.json.gz",
            "pooled.trace.json.gz", SCHEDULED.name, *(f"{d.name}/{f.name}" for d in sorted(VARIED.iterdir()) if d.is_dir()
                              for f in sorted(d.glob("*.json.gz")))]


@pytest.mark.parametrize("name", PER_FILE)
def test_every_gpu_operation_and_call_counted(name):
    """Counts of the whole trace (``--window all``) against the raw JSON read here."""
    path = VARIED / name
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    cats = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    capture = report(path, "--window", "all")["capture"]
    assert capture["kernels"] == cats["kernel"]
    assert capture["copies"] == cats["gpu_memcpy"]
    assert capture["memsets"] == cats["gpu_memset"]
    assert capture["calls"] == cats["cuda_runtime"] + cats["cuda_driver"]


def test_a_compiled_model_is_the_calling_line_and_its_replays_are_steady_state():
    """torch.compile with CUDA graphs, traced with stacks: the graph replays and Triton
    launches run under Inductor frames named ``run`` (Kineto gives bare names) and under the
    compiled ``forward`` (Dynamo's frame, past Kineto's "nn.Module: MLP" frames): runtime, not
    compilation, and framework, not the user's line. The raw trace's calls of ``handle`` are
    the steps; nearly all of them are steady state."""
    path = VARIED / "compiled.trace.json.gz"
    handles = [e for e in raw_events(path) if e.get("cat") == "python_function"
               and e.get("name", "").endswith(": handle")]
    rep = report(path)
    steps = rep["phases"]["steps"]
    assert steps["found"] == len(handles) == 32
    assert steps["in_window"] >= len(handles) - 4
    assert {p["site"] for p in rep["paths_by_gpu_time"]} == {"compiled.py:37 handle"}
