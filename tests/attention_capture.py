"""A capture of hand-written attention, and a one-rule pack, for the saving-model tests
(``only:``, ``instead:``):
six steps, GPU-bound throughout, each with four batched matmuls (100 us of GPU) and four
softmaxes (80 us), every kernel launched in 5 us of CPU from ``model.py:30 attend``."""
from __future__ import annotations

# A pack of one rule over every kernel, grouped by the user function; SAVING: its saving.
PACK = """pack: mine
version: 1
doc: d
rules:
  - id: mine.slow
    title: t
    severity: warning
    doc: d
    relation: gpu
    where: {kind: kernel}
    group_by: [user_function]
    cost: gpu_ns
    saving: SAVING
    message: m
    fix: f
"""
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
SOFTMAX = "void at::native::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16>"


def attention_analysis():
    from zym.rules.testing import CaptureBuilder

    frames = [("python", "main", "app.py", 1), ("python", "attend", "model.py", 30)]
    b = CaptureBuilder()
    for _ in range(6):
        with b.enclosing(frames[:1]):
            for _ in range(4):
                b.kernel(frames + [("torch_op", "aten::bmm")], GEMM, gpu_us=100, cpu_us=5)
                b.kernel(frames + [("torch_op", "aten::_softmax")], SOFTMAX, gpu_us=80,
                         cpu_us=5)
    return b.analysis()
