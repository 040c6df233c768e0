"""A saving model's ``only:`` (rules/savings.py): a ``where`` mapping on known columns, checked
when the pack loads, and edits only the events it matches. (The rules that use it:
tests/rules/test_builtin_rules_unit.py.)"""
from __future__ import annotations

import pytest
from attention_capture import PACK

BODY = PACK.replace("SAVING", "{model: remove, work: keep, only: ONLY}")


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
    from attention_capture import attention_analysis
    from zym.rules.engine import evaluate_rules
    from zym.rules.model import load_pack

    pack = tmp_path / "mine.yaml"
    pack.write_text(BODY.replace("ONLY", '{torch_op: "aten::_softmax"}'))
    [f] = evaluate_rules(attention_analysis(), load_pack(pack).rules)
    assert f.evidence["count"] == 48  # the finding holds every kernel of the function
    assert f.saving_ns == pytest.approx(24 * 80_000, rel=0.05)
    assert "these 24 calls" in f.saving_how
