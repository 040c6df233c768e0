"""Rules that name GPUs (`gpus: {has, lacks}`): TF32 advice only where the GPU has TF32; on a
Volta/Turing GPU the float32-matmul finding says float16 instead. Which maths a GPU has comes
from its datasheet row (analysis/gpus.yaml), else the trace's compute capability."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from zym.analysis.throughput import gpu_maths


def test_maths_from_the_datasheet_row_then_the_compute_capability():
    assert "tf32" not in gpu_maths({"name": "Tesla V100-SXM2-32GB"})
    assert {"fp16", "fp32"} <= gpu_maths({"name": "Tesla V100-SXM2-32GB"})
    assert {"tf32", "bf16", "fp8"} <= gpu_maths({"name": "NVIDIA H200"})
    assert "tf32" not in gpu_maths({"name": "Tesla T4"})
    # not in gpus.yaml: the trace's compute capability decides
    assert "tf32" not in gpu_maths({"name": "Quadro RTX 8000", "computeMajor": 7,
                                    "computeMinor": 5})
    assert {"tf32", "bf16"} <= gpu_maths({"name": "RTX A6000", "computeMajor": 8,
                                          "computeMinor": 6})
    assert "fp8" in gpu_maths({"name": "RTX 4090", "computeMajor": 8, "computeMinor": 9})
    assert gpu_maths({"name": "Mystery GPU"}) is None


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def fired(tmp_path, device: dict | None) -> set[str]:
    """Rules fired on a trace whose GPU time is float32 SGEMMs on CUDA cores."""
    events = []
    for i in range(20):
        t = 1000 * i
        events += [ev("cpu_op", "aten::mm", t + 100, 50, **{"External id": i + 1}),
                   ev("cuda_runtime", "cudaLaunchKernel", t + 110, 5, correlation=100 + i,
                      **{"External id": i + 1}),
                   ev("kernel", "volta_sgemm_128x64_nn", t + 200, 700, pid=0, tid=7,
                      correlation=100 + i, device=0, stream=7, **{"External id": i + 1})]
    doc = {"traceEvents": events}
    if device is not None:
        doc["deviceProperties"] = [{"id": 0, **device}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(path),
                          "--format", "json", "--no-progress"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    return {f["rule_id"] for f in json.loads(out.stdout)["findings"]}


TF32, FP16 = "compute.fp32-matmul-no-tf32", "compute.fp32-matmul-no-tensor-cores"


@pytest.mark.parametrize("device, expected", [
    ({"name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0}, FP16),
    ({"name": "Tesla T4"}, FP16),
    ({"name": "Quadro RTX 8000", "computeMajor": 7, "computeMinor": 5}, FP16),
    ({"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}, TF32),
    ({"name": "Mystery GPU"}, TF32),      # not known: today's GPUs have TF32
    (None, TF32),                         # no GPU named at all
])
def test_tf32_advice_only_where_the_gpu_has_tf32(tmp_path, device, expected):
    got = fired(tmp_path, device) & {TF32, FP16}
    assert got == {expected}, (device, got)
