"""A saving model's ``only:`` (rules/savings.py): a ``where`` mapping on known columns, checked
when the pack loads. (The rules that use it: tests/rules/test_builtin_rules_unit.py.)"""
from __future__ import annotations

import pytest


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
