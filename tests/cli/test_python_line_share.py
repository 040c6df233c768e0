"""The header's "N% of GPU time has its Python line" counts GPU time whose call path reaches
a line of user code, not any call path: a trace recorded without Python stacks has paths of
torch operators and CUDA calls only, and says so."""
from __future__ import annotations

import json
import subprocess
import sys


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def trace(tmp_path, with_python: bool, devices: list[str] | None = None):
    events = [ev("cpu_op", "aten::mul", 100, 50, **{"External id": 1})]
    if with_python:
        events.append(ev("python_function", "serve.py(12): step", 90, 80,
                         **{"Python id": 1, "Python parent id": None}))
    for i in range(3):   # three launches under the op, each with its 10 us kernel
        events += [ev("cuda_runtime", "cudaLaunchKernel", 110 + 10 * i, 5,
                      correlation=10 + i, **{"External id": 1}),
                   ev("kernel", "mul_kernel", 200 + 20 * i, 10, pid=0, tid=7,
                      correlation=10 + i, device=0, stream=7, **{"External id": 1})]
    path = tmp_path / ("py.json" if with_python else "nopy.json")
    doc = {"traceEvents": events}
    if devices:
        doc["deviceProperties"] = [{"id": i, "name": n} for i, n in enumerate(devices)]
    path.write_text(json.dumps(doc))
    return path


def header(path) -> str:
    out = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(path),
                          "--no-progress"], capture_output=True, text=True, check=False,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return " ".join(out.stdout.split())   # the text wrapped at any width, as one line


def test_a_trace_without_python_stacks_says_it_has_no_python_line(tmp_path):
    text = header(trace(tmp_path, with_python=False))
    assert ("0.0% of GPU time has its Python line (100.0% has a call path of torch operators "
            "or CUDA calls)") in text, text


def test_gpu_work_without_device_names_is_not_called_no_gpu_side(tmp_path):
    text = header(trace(tmp_path, with_python=False))   # kernels, no deviceProperties
    assert "GPU names not recorded" in text and "no GPU side recorded" not in text, text


def test_a_trace_with_python_stacks_has_its_lines(tmp_path):
    text = header(trace(tmp_path, with_python=True))
    assert "100.0% of GPU time has its Python line Outside" in text, text


def test_identical_gpus_are_said_once_with_their_count(tmp_path):
    devices = ["NVIDIA A100-SXM4-80GB"] * 8 + ["NVIDIA H200"]
    text = header(trace(tmp_path, with_python=False, devices=devices))
    assert "8 × NVIDIA A100-SXM4-80GB, NVIDIA H200 ·" in text, text
