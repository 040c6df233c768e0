"""A saving model's ``only:`` (rules/savings.py): a ``where`` mapping on known columns, checked
when the pack loads, and edits only the events it matches. (The rules that use it:
tests/rules/test_builtin_rules_unit.py.)"""
from __future__ import annotations

import pytest

BODY = """pack: mine
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


def test_a_saving_model_s_only_must_be_a_where_on_known_columns(tmp_path):
    from zym.rules.model import RuleError, load_pack

    pack = tmp_path / "mine.yaml"
    for only, words in (("{nope: 1}", "unknown column 'nope'"), ("[]", "saving.only")):
        pack.write_text(BODY.replace("ONLY", only))
        with pytest.raises(RuleError) as e:
            load_pack(pack)
        assert words in str(e.value), str(e.value)
    pack.write_text(BODY.replace("ONLY", "{op_class: softmax}"))
    assert load_pack(pack).rules[0].saving["only"] == {"op_class": "softmax"}


def test_only_may_name_a_site_column(tmp_path):
    """``only: {torch_op: ...}`` (a column of the call's site, read through its stack): the
    fix edits the softmaxes alone; every step GPU-bound before and after (per attention: 180
    us of GPU, 12 us of launches), so it saves their GPU time."""
    from zym.rules.engine import evaluate_rules
    from zym.rules.model import load_pack
    from zym.rules.testing import CaptureBuilder

    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
    softmax = "void at::native::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16>"
    frames = [("python", "main", "app.py", 1), ("python", "attend", "model.py", 30)]
    b = CaptureBuilder()
    for _ in range(6):
        with b.enclosing(frames[:1]):
            for _ in range(4):
                b.kernel(frames + [("torch_op", "aten::bmm")], gemm, gpu_us=100, cpu_us=5)
                b.kernel(frames + [("torch_op", "aten::_softmax")], softmax, gpu_us=80,
                         cpu_us=5)
    pack = tmp_path / "mine.yaml"
    pack.write_text(BODY.replace("    where: {kind: kernel}\n",
                                 "    where: {kind: kernel}\n    group_by: [user_function]\n")
                    .replace("ONLY", '{torch_op: "aten::_softmax"}'))
    [f] = evaluate_rules(b.analysis(), load_pack(pack).rules)
    assert f.evidence["count"] == 48  # the finding holds every kernel of the function
    assert f.saving_ns == pytest.approx(24 * 80_000, rel=0.05)
    assert "these 24 calls" in f.saving_how
