"""docs/rules.md stays true: every rule and column is documented, and its worked example runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from zym import rules
from zym.analysis.relations import COLUMNS

DOC = Path(__file__).parents[2] / "docs" / "rules.md"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_builtin_rule_and_column_is_documented(doc):
    for pack in rules.load_packs(plugins=False):
        for rule in pack.rules:
            assert f"`{rule.id}`" in doc, rule.id
            assert len(rule.doc) > 40, f"{rule.id}: doc too short"
    for relation, columns in COLUMNS.items():
        for column in columns:
            assert f"`{column}`" in doc, f"{relation}.{column}"


def test_the_worked_example_runs_as_documented(doc, sample_analysis):
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL)
    text = next(b for b in blocks if "pack: myteam" in b and "memory-bound" in b)
    pack = rules.parse_pack(text, "docs/rules.md")
    [finding] = rules.evaluate(sample_analysis, [pack])
    assert finding.site == "gpt_decode_server.py:68 lm_head" and finding.evidence["count"] == 80
    assert finding.message in " ".join(doc.split()) or finding.message.split(":")[0] in doc
