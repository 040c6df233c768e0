"""`zym rules ...` and the rule options of `zym analyze`, as users run them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner
from zym.cli.main import app
from zym.rules.testing import CaptureBuilder

runner = CliRunner()
STEP = [("python", "main", "app.py", 1), ("python", "step", "app.py", 20)]


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def readback_capture(tmp_path_factory):
    """A small capture with one warning-level problem: a .item() sync per step."""
    b = CaptureBuilder()
    for _ in range(3):
        with b.enclosing(STEP):
            for _ in range(4):
                b.kernel(STEP + [("torch_op", "aten::add")], "add", gpu_us=20)
                b.scalar_readback(STEP)
    return b.write(tmp_path_factory.mktemp("cap") / "readback.parquet")


@pytest.fixture(scope="module")
def clean_capture(tmp_path_factory):
    b = CaptureBuilder()
    for _ in range(20):
        b.kernel(STEP + [("torch_op", "aten::mm")], "gemm", gpu_us=1000)
    return b.write(tmp_path_factory.mktemp("cap") / "clean.parquet")


def test_list_shows_every_builtin_rule():
    result = run("rules", "list")
    assert result.exit_code == 0
    for rid in ("syncs.scalar-readback", "transfers.repeated-small-dtoh",
                "compute.slow-matmul-path", "utilization.idle-before-launch"):
        assert rid in result.stdout
    rows = json.loads(run("rules", "list", "--json").stdout)
    assert len(rows) == len({r["id"] for r in rows}) >= 14


def test_show_a_rule_and_a_relation():
    result = run("rules", "show", "syncs.scalar-readback")
    assert result.exit_code == 0 and "_local_scalar_dense" in result.stdout
    assert "fix:" in result.stdout and "relation: calls" in result.stdout
    cols = run("rules", "show", "calls")
    assert "follows_dtoh" in cols.stdout and "call_instance" in cols.stdout
    missing = run("rules", "show", "syncs.nope")
    assert missing.exit_code == 2 and "no rule 'syncs.nope'" in missing.stderr


def test_new_writes_a_template_that_lints_and_loads(tmp_path):
    out = tmp_path / "team.yaml"
    assert run("rules", "new", "team", "-o", str(out)).exit_code == 0
    lint = run("rules", "lint", str(out))
    assert lint.exit_code == 0 and "ok" in lint.stdout and "1 rule(s)" in lint.stdout
    assert run("rules", "new", "team", "-o", str(out)).exit_code == 2  # exists
    assert "team.many-small-launches" in run("rules", "list", "--rules", str(out)).stdout
    assert run("rules", "new", "Bad Name", "-o", str(tmp_path / "x.yaml")).exit_code == 2


def test_lint_rejects_a_bad_pack_with_file_rule_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(run("rules", "new", "bad", "-o", "-").stdout.replace("dur_ns: {lt",
                                                                         "duration: {lt"))
    result = run("rules", "lint", str(bad))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"zym: error: {bad}: rule bad.many-small-launches: "
                                    "field where.duration: unknown column 'duration'")


def test_lint_accepts_the_builtin_packs():
    from zym.rules import builtin_pack_paths

    paths = builtin_pack_paths()
    result = run("rules", "lint", *map(str, paths))
    assert result.exit_code == 0 and result.stdout.count("ok ") == len(paths) >= 5


def _pack_with_fixtures(tmp_path, capture, expect: str):
    pack = tmp_path / "mine.yaml"
    pack.write_text(run("rules", "new", "mine", "-o", "-").stdout
                    .replace("relation: gpu", "relation: calls")
                    .replace("kind: kernel", "kind: sync")
                    .replace("dur_ns: {lt: 5000}", "op_chain: {regex: _local_scalar_dense}")
                    .replace("count: {ge: 1000}", "count: {ge: 1}")
                    .replace("share: {div: [gpu_ns, total_gpu_ns]}",
                             "share: {div: [stall_ns, window_ns]}")
                    .replace("cost: gpu_ns", "cost: stall_ns"))
    cases = tmp_path / "mine.tests"
    cases.mkdir()
    (cases / "readback.expect.yaml").write_text(f"capture: {capture}\n{expect}")
    return pack


def test_test_passes_and_fails_on_expectations(tmp_path, readback_capture):
    good = _pack_with_fixtures(tmp_path, readback_capture, textwrap_expect(
        "mine.many-small-launches", "app.py:20 step", 12))
    result = run("rules", "test", str(good))
    assert result.exit_code == 0, result.stdout
    assert "PASS  readback" in result.stdout and "1 passed, 0 failed" in result.stdout
    (tmp_path / "mine.tests" / "readback.expect.yaml").write_text(
        f"capture: {readback_capture}\n" + textwrap_expect("mine.many-small-launches",
                                                            "app.py:20 step", 13))
    failed = run("rules", "test", str(good))
    assert failed.exit_code == 1 and "FAIL  readback" in failed.stdout
    assert "evidence {'count': 12} != expected {'count': 13}" in failed.stdout


def textwrap_expect(rule: str, site: str, count: int) -> str:
    return (f"expect:\n  - rule: {rule}\n    site: \"{site}\"\n    evidence: {{count: {count}}}\n"
            "exclusive: true\n")


def test_test_without_fixtures_is_a_clear_error(tmp_path):
    pack = tmp_path / "lonely.yaml"
    pack.write_text(run("rules", "new", "lonely", "-o", "-").stdout)
    result = run("rules", "test", str(pack))
    assert result.exit_code == 2 and "no fixture cases" in result.stderr


def test_analyze_fail_on_exit_codes(readback_capture, clean_capture):
    assert run("analyze", str(readback_capture), "--no-progress").exit_code == 0
    failing = run("analyze", str(readback_capture), "--fail-on", "warning", "--no-progress")
    assert failing.exit_code == 1 and "--fail-on warning" in failing.stderr
    assert "syncs.scalar-readback" in failing.stdout  # the report still prints
    assert run("analyze", str(readback_capture), "--fail-on", "error").exit_code == 0
    assert run("analyze", str(readback_capture), "--fail-on", "warning",
               "--disable", "syncs.scalar-readback", "--disable", "utilization").exit_code == 0
    assert run("analyze", str(clean_capture), "--fail-on", "info").exit_code == 0
    assert run("analyze", str(readback_capture), "--fail-on", "fatal").exit_code == 2


def test_analyze_json_keeps_its_keys_and_adds_findings(readback_capture):
    report = json.loads(run("analyze", str(readback_capture), "--format", "json").stdout)
    assert {"capture", "gpu", "paths_by_gpu_time", "paths_by_cpu_blocked", "findings"} <= set(report)
    f = next(f for f in report["findings"] if f["rule_id"] == "syncs.scalar-readback")
    assert f["site"] == "app.py:20 step" and f["evidence"]["syncs"] == 12
    assert f["examples"] and {"pid", "tid", "ts_ns", "dur_ns", "correlation_id"} == set(
        f["examples"][0])
    none = json.loads(run("analyze", str(readback_capture), "--format", "json",
                          "--no-rules").stdout)
    assert none["findings"] == []


def test_analyze_markdown(readback_capture):
    out = run("analyze", str(readback_capture), "--format", "markdown").stdout
    assert out.startswith("## zym: ") and "### What to fix first" in out
    assert "`syncs.scalar-readback`" in out and "*Fix:*" in out
    assert re.search(r"^\| 1 \| (saves \\?~|no estimate)[^|]*\| warning \|", out, re.MULTILINE)


def test_analyze_extra_rules_and_bad_disable(tmp_path, readback_capture):
    pack = _pack_with_fixtures(tmp_path, readback_capture, "")
    report = json.loads(run("analyze", str(readback_capture), "--format", "json", "--rules",
                            str(pack)).stdout)
    assert "mine.many-small-launches" in {f["rule_id"] for f in report["findings"]}
    bad = run("analyze", str(readback_capture), "--disable", "syncs.typo")
    assert bad.exit_code == 2 and "no such rule or pack" in bad.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("pack: broken\nversion: 1\nrules: []\n")
    result = run("analyze", str(readback_capture), "--rules", str(broken))
    assert result.exit_code == 2 and "broken.yaml: field rules" in result.stderr


def test_analyze_text_lists_findings_first(readback_capture):
    out = run("analyze", str(readback_capture), "--no-progress").stdout
    assert out.index("What to fix first") < out.index("Top call paths")
    assert "app.py:20 step" in out


def test_entry_point_packs_are_loaded(monkeypatch, tmp_path):
    import importlib.metadata as md

    from zym import rules

    pack = tmp_path / "plug.yaml"
    pack.write_text(run("rules", "new", "plug", "-o", "-").stdout)

    class EP:
        name, value = "plug", "plug_pkg:PACKS"

        def load(self):
            return str(pack)

    real = md.entry_points
    monkeypatch.setattr(md, "entry_points", lambda group=None, **kw: [EP()]
                        if group == rules.ENTRY_POINT_GROUP else real(group=group, **kw))
    assert "plug.many-small-launches" in {r.id for p in rules.load_packs() for r in p.rules}


@pytest.mark.parametrize("pack", ["syncs", "transfers", "compute", "utilization", "memory"])
def test_builtin_packs_pass_their_own_fixtures(pack):
    """`zym rules test` on each shipped pack, against the Kineto and eBPF samples kept in
    rules/packs/PACK.tests/."""
    # The fixtures live beside the packs in the repository (they point at sample_traces/),
    # not in an installed wheel: test the repository's copy of the pack.
    path = Path(__file__).resolve().parents[2] / "rules" / "packs" / f"{pack}.yaml"
    result = run("rules", "test", str(path))
    assert result.exit_code == 0, result.stdout
    cases = len(list(path.with_suffix(".tests").glob("*.expect.yaml")))
    assert cases >= 2 and f"{cases} passed, 0 failed" in result.stdout
