"""compute.unfused-attention and compute.growing-concat on synthetic captures worked out by
hand (CaptureBuilder times: rules/testing.py; every step here is GPU-bound, so what a fix
saves is the GPU time it takes away), and the ``only:`` option of a saving model."""
from __future__ import annotations

import pytest
from zym import rules
from zym.rules.testing import CaptureBuilder

US = 1_000
HANDLE = [("python", "main", "app.py", 1), ("python", "handle", "app.py", 20)]
ATTEND = HANDLE + [("python", "attend", "model.py", 30)]
SAMPLE = HANDLE + [("python", "sample", "model.py", 60)]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
SOFTMAX = "void at::native::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16>"
SCALE = "void at::native::vectorized_elementwise_kernel<8, at::native::MulFunctor<float>>"
STEPS, PER_STEP = 6, 4


def op(frames, name):
    return list(frames) + [("torch_op", name)]


def attention(b: CaptureBuilder, softmax_us: float = 80, scale_us: float = 50,
              bmm: str = "aten::bmm") -> None:
    """softmax(q @ k^T * scale) @ v as four kernels."""
    b.kernel(op(ATTEND, bmm), GEMM, gpu_us=100, cpu_us=5)
    b.kernel(op(ATTEND, "aten::mul"), SCALE, gpu_us=scale_us, cpu_us=5)
    b.kernel(op(ATTEND, "aten::_softmax"), SOFTMAX, gpu_us=softmax_us, cpu_us=5)
    b.kernel(op(ATTEND, bmm), GEMM, gpu_us=100, cpu_us=5)


def _found(b: CaptureBuilder, rule_id: str):
    return [f for f in rules.evaluate(b.analysis()) if f.rule_id == rule_id]


def test_hand_written_attention_is_priced_at_its_softmax_and_scaling_not_its_matmuls():
    b = CaptureBuilder()
    for _ in range(STEPS):
        with b.enclosing(HANDLE):
            for _ in range(PER_STEP):
                attention(b)
            b.kernel(op(SAMPLE, "aten::_softmax"), SOFTMAX, gpu_us=10, cpu_us=5)  # no matmul
    [f] = _found(b, "compute.unfused-attention")
    n = STEPS * PER_STEP
    assert (f.evidence["softmaxes"], f.evidence["bmms"]) == (n, 2 * n)  # not the sampler's
    assert f.evidence["user_function"] == "attend"
    # GPU-bound before and after (per attention: 330 us of GPU, 24 us of launches; after:
    # 200 us), so the saving is the softmax's and the scaling's GPU time; the matmuls stay
    removed = n * (80 + 50) * US
    assert f.saving_ns == pytest.approx(removed, rel=0.05)
    assert "these 48 calls" in f.saving_how  # the softmaxes and scalings, not the 96 bmms


def test_a_softmax_without_batched_matmuls_is_not_attention():
    b = CaptureBuilder()
    for _ in range(STEPS):
        with b.enclosing(HANDLE):
            for _ in range(PER_STEP):
                attention(b, bmm="aten::mm")  # 2-D products: a projection, then a softmax
    assert not _found(b, "compute.unfused-attention")


def test_a_cache_grown_by_cat_is_priced_as_writing_only_the_new_part():
    b = CaptureBuilder()
    length = 100
    for _ in range(STEPS):
        with b.enclosing(HANDLE):
            for _ in range(PER_STEP):
                b.kernel(op(ATTEND, "aten::mm"), GEMM, gpu_us=50, cpu_us=5)
                b.kernel(op(ATTEND, "aten::cat"), "CatArrayBatchedCopy", gpu_us=100, cpu_us=5,
                         shapes=[[[8, length, 64], [8, 1, 64]], []])
                length += 1
    [f] = _found(b, "compute.growing-concat")
    assert f.evidence["count"] == STEPS * PER_STEP
    median_length = 100 + (STEPS * PER_STEP - 1) / 2
    assert f.evidence["append_factor"] == pytest.approx(median_length + 1)
    # each concatenation's 100 us become 100 / (its median factor) us: GPU-bound throughout
    assert f.saving_ns == pytest.approx(
        STEPS * PER_STEP * (100 - 100 / (median_length + 1)) * US, rel=0.05)


def test_concatenating_alike_tensors_is_not_growing():
    b = CaptureBuilder()
    for _ in range(STEPS):
        with b.enclosing(HANDLE):
            for _ in range(PER_STEP):
                b.kernel(op(ATTEND, "aten::cat"), "CatArrayBatchedCopy", gpu_us=100, cpu_us=5,
                         shapes=[[[4, 256, 32, 32], [4, 256, 32, 32]], []])
    assert not _found(b, "compute.growing-concat")


def test_a_saving_model_s_only_must_be_a_where_on_known_columns(tmp_path):
    from zym.rules.model import RuleError, load_pack

    pack = tmp_path / "mine.yaml"
    body = """pack: mine
version: 1
doc: d
rules:
  - id: mine.slow
    title: t
    severity: warning
    doc: d
    relation: gpu
    where: {kind: kernel}
    cost: gpu_ns
    saving: {model: remove, work: keep, only: ONLY}
    message: m
    fix: f
"""
    for only, words in (("{nope: 1}", "unknown column 'nope'"), ("[]", "saving.only")):
        pack.write_text(body.replace("ONLY", only))
        with pytest.raises(RuleError) as e:
            load_pack(pack)
        assert words in str(e.value), str(e.value)
    pack.write_text(body.replace("ONLY", "{op_class: softmax}"))
    assert load_pack(pack).rules[0].saving["only"] == {"op_class": "softmax"}
