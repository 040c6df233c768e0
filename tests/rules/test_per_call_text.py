"""A finding says "N per call of F" only where F is a user function: at a site with no user
frame (a trace without Python stacks) there is no enclosing function whose calls to count."""
from __future__ import annotations

import json
import subprocess
import sys


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def trace(tmp_path, with_python: bool):
    """Three calls of step(), each reading one GPU scalar (.item(): a 4-byte DtoH copy and a
    stream sync inside aten::_local_scalar_dense), then launching one kernel."""
    events = []
    for i in range(3):
        t = 1000 * i
        if with_python:
            events.append(ev("python_function", "serve.py(12): step", t + 90, 300,
                             **{"Python id": i + 1, "Python parent id": None}))
        events += [
            ev("cpu_op", "aten::item", t + 100, 60, **{"External id": 10 * i + 1}),
            ev("cpu_op", "aten::_local_scalar_dense", t + 105, 50, **{"External id": 10 * i + 2}),
            ev("cuda_runtime", "cudaMemcpyAsync", t + 110, 10, correlation=100 + 2 * i,
               **{"External id": 10 * i + 2}),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t + 125, 2, pid=0, tid=7,
               correlation=100 + 2 * i, device=0, stream=7, bytes=4),
            ev("cuda_runtime", "cudaStreamSynchronize", t + 122, 30, correlation=101 + 2 * i,
               **{"External id": 10 * i + 2}),
            ev("cuda_runtime", "cudaLaunchKernel", t + 290, 5, correlation=500 + i),
            ev("kernel", "k", t + 300, 100, pid=0, tid=7, correlation=500 + i, device=0,
               stream=7)]
    path = tmp_path / ("py.json" if with_python else "nopy.json")
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def readback(path) -> str:
    out = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(path),
                          "--format", "json", "--no-progress"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    (f,) = [f for f in json.loads(out.stdout)["findings"]
            if f["rule_id"] == "syncs.scalar-readback"]
    return f["message"]


def test_no_user_frame_no_count_per_call(tmp_path):
    message = readback(trace(tmp_path, with_python=False))
    assert message.startswith("3 host syncs reading a GPU scalar through .item()")
    assert "per call" not in message and "enclosing function" not in message, message


def test_a_user_function_gets_its_count_per_call(tmp_path):
    message = readback(trace(tmp_path, with_python=True))
    assert "(1 per call of step)" in message, message   # 3 syncs in 3 calls of step
