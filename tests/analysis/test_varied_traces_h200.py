"""torch.profiler traces recorded on the H200 with settings the other traces here do not use
(bench/whatif/results/h200-varied, bench/whatif/device_traces_varied.sh): torch's documented
schedule (``prof.step()`` each pass, files written by ``tensorboard_trace_handler``), memory
events (``profile_memory``), no Python stacks, torch.compile's CUDA graphs."""
from __future__ import annotations

import gzip
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


@pytest.mark.parametrize("name", ["churn-memory", "compiled", "moe-nostack",
                                  "vm_578.1796256627190531613.pt"])
def test_every_gpu_operation_and_call_counted(name):
    """Counts of the whole trace (``--window all``) against the raw JSON read here."""
    path = VARIED / f"{name}.trace.json.gz" if not name.startswith("vm_") else SCHEDULED
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    cats = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    capture = report(path, "--window", "all")["capture"]
    assert capture["kernels"] == cats["kernel"]
    assert capture["copies"] == cats["gpu_memcpy"]
    assert capture["memsets"] == cats["gpu_memset"]
    assert capture["calls"] == cats["cuda_runtime"] + cats["cuda_driver"]
