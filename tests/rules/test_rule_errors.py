"""Malformed rule packs: each refused with one message naming the file, the rule and the field."""
from __future__ import annotations

import json
import textwrap

import pytest
from zym.rules import RuleError, builtin_pack_paths, load_pack, parse_pack
from zym.rules.model import schema, validate
from zym.schemas.errors import InputError

GOOD = """\
pack: mine
version: 1
rules:
  - id: mine.slow
    title: Slow kernels
    severity: warning
    doc: Kernels over 1 ms.
    relation: gpu
    where:
      kind: kernel
      dur_ns: {gt: 1000000}
    measures:
      share: {div: [gpu_ns, total_gpu_ns]}
    having:
      count: {ge: 1}
    cost: gpu_ns
    message: "{count} slow kernels at {site} ({share:pct})"
    fix: Make them faster.
"""


def bad(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def error_of(text: str) -> str:
    with pytest.raises(RuleError) as e:
        parse_pack(text, "mine.yaml")
    assert isinstance(e.value, InputError)  # the CLI maps it to exit code 2
    return str(e.value)


def test_the_good_pack_loads():
    pack = parse_pack(GOOD, "mine.yaml")
    assert [r.id for r in pack.rules] == ["mine.slow"] and pack.rules[0].group_by == ("code_site",)


@pytest.mark.parametrize("text, field, words", [
    (bad("    fix: Make them faster.\n", ""), "field fix", "missing (required field)"),
    (bad("severity: warning", "severity: fatal"), "field severity", "not one of info, warning"),
    (bad("relation: gpu", "relation: kernels"), "field relation", "not one of calls, gpu"),
    (bad("dur_ns: {gt: 1000000}", "dur_ns: {gt: fast}"), "field where.dur_ns", "expected number"),
    (bad("dur_ns: {gt: 1000000}", "dur_ns: {around: 5}"), "field where.dur_ns",
     "unknown field 'around'"),
    (bad("dur_ns: {gt", "duration: {gt"), "field where.duration", "unknown column 'duration'"),
    (bad("count: {ge: 1}", "slowness: {ge: 1}"), "field having.slowness", "unknown measure"),
    (bad("{share:pct}", "{share.__class__}"), "field message", "not a {placeholder}"),
    (bad("{share:pct}", "{shares}"), "field message", "unknown placeholder {shares}"),
    (bad("{share:pct}", "{count|shares:pct}"), "field message", "unknown placeholder {shares}"),
    (bad("({share:pct})", "{?({share:pct}{? {count}?})?}"), "field message",
     "unclosed or nested"),
    (bad("({share:pct})", "{?({share:pct})"), "field message", "unclosed or nested"),
    (bad("kind: kernel", "name: {regex: '(unclosed'}"), "field where.name.regex",
     "invalid regular expression"),
    (bad("cost: gpu_ns", "cost: money"), "field cost", "unknown measure 'money'"),
    (bad("cost: gpu_ns", "cost: gpu_ns\n    saving: {model: speedup, to: tf32, alone: unblock}"),
     "field saving.alone", "applies to model batch only"),
    (bad("id: mine.slow", "id: other.slow"), "field id", "must start with the pack name"),
    (bad("id: mine.slow", "id: Slow"), "field id", "does not match"),
    (bad("share: {div: [gpu_ns, total_gpu_ns]}", "share: {div: [gpu_ns, nothing]}"),
     "field measures.share", "unknown measure 'nothing'"),
    (bad("share: {div: [gpu_ns, total_gpu_ns]}", "share: {agg: sum}"),
     "field measures.share", "needs 'of: COLUMN'"),
    (bad("share: {div: [gpu_ns, total_gpu_ns]}", "share: {agg: sum, of: nope}"),
     "field measures.share.of", "unknown column 'nope'"),
    (bad("share: {div: [gpu_ns, total_gpu_ns]}", "share: {agg: top, of: name}"),
     "field measures.share", "agg top needs 'by: COLUMN'"),
    (bad("share: {div: [gpu_ns, total_gpu_ns]}", "share: {agg: max, of: dur_ns, by: dur_ns}"),
     "field measures.share", "only top takes 'by'"),
    (bad("share: {div: [gpu_ns, total_gpu_ns]}", "share: {agg: top, of: name, by: nope}"),
     "field measures.share.by", "unknown column 'nope'"),
])
def test_malformed_rule_names_file_rule_and_field(text, field, words):
    message = error_of(text)
    assert message.startswith("mine.yaml: rule ")
    assert ("rule mine.slow" in message or "rule #1" in message
            or "rule other.slow" in message or "rule Slow" in message), message
    assert field in message and words in message, message
    assert "\n" not in message


@pytest.mark.parametrize("text", [
    bad("kind: kernel", "kind: !!python/object/apply:os.system ['echo hacked']"),
    bad("    where:\n", "    where: !!python/name:os.system\n    x:\n"),
])
def test_python_tags_are_refused_not_run(text, capfd):
    message = error_of(text)
    assert "cannot run code" in message and "mine.yaml" in message
    assert "hacked" not in capfd.readouterr().out


@pytest.mark.parametrize("key", ["eval", "python", "lambda", "code"])
def test_code_keys_are_refused_with_a_pointer(key):
    message = error_of(bad("dur_ns: {gt: 1000000}", f"dur_ns: {{{key}: 'x > 5'}}"))
    assert "rule mine.slow" in message and f"field where.dur_ns.{key}" in message
    assert "cannot run code" in message


def test_pack_level_fields_name_the_field():
    message = error_of(bad("version: 1", "version: 2"))
    assert message == "mine.yaml: field version: must be 1, got 2"
    assert "field rules" in error_of(bad("rules:", "rulez:"))


def test_not_yaml_and_not_a_mapping():
    assert "not valid YAML" in error_of("pack: [unclosed")
    assert "a rule pack is a mapping" in error_of("- just\n- a list\n")


def test_duplicate_ids_are_refused():
    twice = GOOD + textwrap.indent(GOOD.split("rules:\n", 1)[1], "")
    assert "duplicate rule id" in error_of(twice)


def test_missing_file(tmp_path):
    with pytest.raises(RuleError, match="cannot read rule pack"):
        load_pack(tmp_path / "nope.yaml")


def test_builtin_packs_validate_against_the_json_schema():
    """The full jsonschema validator agrees with zym's subset validator on the shipped packs."""
    import yaml

    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema())
    for path in builtin_pack_paths():
        doc = yaml.safe_load(path.read_text())
        jsonschema.validate(doc, schema())
        assert validate(doc, schema()) is None


@pytest.mark.parametrize("text", [bad("severity: warning", "severity: fatal"),
                                  bad("dur_ns: {gt: 1000000}", "dur_ns: {gt: fast}"),
                                  bad("    fix: Make them faster.\n", "")])
def test_subset_validator_agrees_with_jsonschema_on_bad_packs(text):
    import yaml

    jsonschema = pytest.importorskip("jsonschema")
    doc = yaml.safe_load(text)
    assert validate(doc, schema()) is not None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema())
    json.dumps(schema())


def test_rule_code_has_no_row_wise_python():
    """rules/ stays columnar: no map_elements, apply, iterrows or eval (STYLE: Habits 3)."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[2] / "rules"
    for path in root.glob("*.py"):
        text = path.read_text()
        code = re.sub(r'"""[\s\S]*?"""', "", text)
        for word in (".map_elements(", ".apply(", "iterrows", "itertuples"):
            assert word not in code, f"{path.name} uses {word}"
        assert not re.search(r"(?<![.\w])(eval|exec)\(", code), f"{path.name} evaluates code"


@pytest.mark.parametrize("template, values, want", [
    ("launched {a|b}", {"a": None, "b": "cuLaunchKernel"}, "launched cuLaunchKernel"),
    ("launched {a|b}", {"a": "aten::mm", "b": "cuLaunchKernel"}, "launched aten::mm"),
    ("x{?, {share:pct} in {a}?}.", {"a": None, "share": 0.5}, "x."),
    ("x{?, {share:pct} in {a}?}.", {"a": "mm", "share": 0.5}, "x, 50.0% in mm."),
    ("{a} and {b}", {"a": "{b}", "b": None}, "{b} and ?"),  # values are never rescanned
])
def test_templates_fall_back_and_leave_out_parts(template, values, want):
    from zym.rules.compile import render

    assert render(template, values) == want
