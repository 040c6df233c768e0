"""The zym command: outputs, exit codes and one-line errors, as users see them."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from zym.cli.main import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_analyze_text_names_the_sites(sample_capture):
    result = run("analyze", str(sample_capture), "--top", "5", "--no-progress")
    assert result.exit_code == 0
    out = result.stdout
    assert "Top call paths by GPU time" in out and "CPU time blocked" in out
    assert "gpt_decode_server.py:40 FeedForward.forward" in out
    assert "gpt_decode_server.py:83 generate" in out
    # --top 5: at most 5 findings, kernels and paths per ranking
    assert len(re.findall(r"^ ?\d+\. (saves|no estimate)", out, re.MULTILINE)) <= 5
    for section in ("Top kernels by GPU time", "Top call paths by GPU time"):
        block = out.split(section, 1)[1].split("\n\n", 1)[0]
        assert 1 <= len(re.findall(r"^ +\d+  ", block, re.MULTILINE)) <= 5, section
    assert max(len(line) for line in out.splitlines()) <= 80  # piped: 80 columns


def test_analyze_json_top_limits_both_rankings(sample_capture):
    result = run("analyze", str(sample_capture), "--format", "json", "--top", "2")
    report = json.loads(result.stdout)
    assert len(report["paths_by_gpu_time"]) == 2 and len(report["paths_by_cpu_blocked"]) == 2
    full = json.loads(run("analyze", str(sample_capture), "--format", "json").stdout)
    assert len(full["paths_by_gpu_time"]) > 20


def test_import_then_refuses_to_overwrite(tmp_path, sample_trace):
    out = tmp_path / "t.parquet"
    first = run("import", str(sample_trace), "-o", str(out), "--no-progress")
    assert first.exit_code == 0 and out.exists() and "zym analyze" in first.stdout
    second = run("import", str(sample_trace), "-o", str(out))
    assert second.exit_code == 2 and "--force" in second.stderr
    assert run("import", str(sample_trace), "-o", str(out), "--force").exit_code == 0
    # Every writer creates a missing output folder (schemas.output), import included.
    nested = run("import", str(sample_trace), "-o", str(tmp_path / "no" / "t.parquet"))
    assert nested.exit_code == 0 and (tmp_path / "no" / "t.parquet").is_file()


def _bad_inputs(tmp_path, sample_trace, sample_capture) -> dict[str, bytes]:
    trace = sample_trace.read_bytes()
    text = gzip.decompress(trace)
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), other)
    v9 = tmp_path / "v9.parquet"
    t = pq.read_table(sample_capture)
    pq.write_table(t.replace_schema_metadata({"zym.schema_version": "9"}), v9)
    return {
        "empty": b"",
        # cut short before its first whole event (a cut later is read up to its last one:
        # tests/importer/test_cut_short.py)
        "cut before any event": gzip.compress(text[:text.index(b'"traceEvents"') + 40]),
        "not kineto": gzip.compress(json.dumps({"hello": "world"}).encode()),
        "not json": b"\x00\x01binary junk",
        "foreign parquet": other.read_bytes(),
        "other version": v9.read_bytes(),
        "truncated parquet": sample_capture.read_bytes()[:5000],
        "looping python ids": json.dumps({"traceEvents": [
            {"ph": "X", "cat": "python_function", "name": f"a.py({i}): f{i}", "pid": 1,
             "tid": 1, "ts": float(i), "dur": 10.0 - i,
             "args": {"Python id": i, "Python parent id": 3 - i}} for i in (1, 2)]}).encode(),
    }


@pytest.mark.parametrize("case", ["empty", "cut before any event", "not kineto", "not json",
                                  "foreign parquet", "other version", "truncated parquet",
                                  "looping python ids"])
def test_unusable_input_is_one_line_and_exit_2(tmp_path, sample_trace, sample_capture, case):
    path = tmp_path / "input.bin"
    path.write_bytes(_bad_inputs(tmp_path, sample_trace, sample_capture)[case])
    result = run("analyze", str(path))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zym: error: "), result.stderr
    assert "Traceback" not in result.output


def test_import_of_a_looping_trace_fails_cleanly(tmp_path, sample_trace, sample_capture):
    path, out = tmp_path / "loop.json", tmp_path / "loop.parquet"
    path.write_bytes(_bad_inputs(tmp_path, sample_trace, sample_capture)["looping python ids"])
    result = run("import", str(path), "-o", str(out), "--no-progress")
    assert result.exit_code == 2 and "Python parent ids form a loop" in result.stderr
    assert list(tmp_path.glob("loop.parquet*")) == []  # nothing half-written


def test_missing_file_is_exit_2(tmp_path):
    result = run("analyze", str(tmp_path / "nope.parquet"))
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_console_script_runs(sample_capture):
    proc = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(sample_capture),
                           "--format", "json", "--top", "1"], capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["capture"]["kernels"] == 8360


def _commands():
    import typer.main

    group = typer.main.get_command(app)
    return sorted(group.commands)


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_help_with_an_example(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout, f"zym {command} --help shows no example"


def test_capture_help_says_what_the_gpu_side_needs_and_what_runs_without_root():
    # Help is wrapped to the terminal; a line may end at a word's hyphen ("start-" / "up").
    help_text = re.sub(r"(?<=\w)-\n\s*", "-", run("capture", "--help").stdout)
    text = " ".join(help_text.replace("│", " ").split())
    for words in ("needs root", "the `-- COMMAND` form loads CUPTI at start-up",
                  "with --pid, the process must have been started by `zym run`",
                  "else only the CPU side is recorded",
                  "Without root, zym records the GPU side alone"):
        assert words in text, words


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and re.fullmatch(r"zym \S+ \(capture file schema v\d+\)\n",
                                                  result.stdout)


def test_export_format_comes_from_the_output_name(sample_capture, tmp_path):
    """-o x.folded writes folded stacks (not a Perfetto trace under that name); a --format
    that the name contradicts is refused and nothing is written."""
    folded = tmp_path / "x.folded"
    assert run("export", str(sample_capture), "-o", str(folded), "--no-progress").exit_code == 0
    first = folded.read_text().splitlines()[0]
    assert re.fullmatch(r"[^ ].* \d+", first)  # "frame;frame;... weight"
    spec = tmp_path / "x.speedscope.json"
    assert run("export", str(sample_capture), "-o", str(spec), "--no-progress").exit_code == 0
    assert json.loads(spec.read_text())["$schema"].startswith("https://www.speedscope.app")
    bad = tmp_path / "y.folded"
    result = run("export", str(sample_capture), "-o", str(bad), "-f", "perfetto")
    assert result.exit_code == 2 and "the name says folded" in result.stderr
    assert not bad.exists()


def test_diff_help_states_the_host_noise_default_the_analysis_uses():
    from zym.analysis.diff import HOST_FLOOR

    text = " ".join(run("diff", "--help").stdout.split())
    assert f"Default {100 * HOST_FLOOR:g}." in text


def test_commands_register_without_loading_the_analysis():
    """`zym --help` and every command's registration stay light: no polars, no analysis."""
    import subprocess
    import sys

    code = ("import sys, zym.cli.main; "
            "print(sorted(m for m in ('polars', 'zym.analysis', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_every_bundled_sample_analyzes_with_the_defaults():
    """The steady-state window with rules on, as users run it, on each bundled sample (the eBPF
    one has no GPU operations: its replay starts from no operations at all)."""
    from pathlib import Path

    samples = Path(__file__).parents[2] / "sample_traces"
    for name in ("gpt_decode_server.ebpf.parquet", "gpt_decode_server.parquet",
                 "gpt_decode_server.trace.json.gz"):
        res = run("analyze", str(samples / name), "--format", "json")
        assert res.exit_code == 0, (name, res.output[-500:])
        assert json.loads(res.output)["findings"], name


@pytest.mark.parametrize("name", ["gpt_decode_server.parquet", "gpt_decode_server.trace.json.gz"])
def test_what_if_of_one_finding_and_of_all_together(name):
    """Two what-ifs at once, one of them all the findings combined (graph fixes among them:
    their per-segment launch costs are concatenated, not compared)."""
    from pathlib import Path

    path = Path(__file__).parents[2] / "sample_traces" / name
    res = run("analyze", str(path), "--what-if", "1", "--what-if", "all", "--format", "json")
    assert res.exit_code == 0, res.output[-500:]
    doc = json.loads(res.output)
    saved = {w["spec"]: w["saving_ns"] for w in doc["what_if"]["specs"]}
    assert set(saved) == {"1", "all"} and saved["all"] >= saved["1"] > 0


@pytest.mark.parametrize("model", ["batch", "remove", "unblock", "pin", "async", "shorten-gaps"])
def test_what_if_of_a_fix_model_at_a_line(model):
    """``MODEL@FILE:LINE`` on the bundled capture's per-row ``.cpu()`` (line 96): each model
    replays the calls made there (this crashed with a polars error when the rules' call
    table stopped carrying ``stack_id`` unless asked for it)."""
    from pathlib import Path

    path = Path(__file__).parents[2] / "sample_traces" / "gpt_decode_server.parquet"
    spec = f"{model}@gpt_decode_server.py:96"
    res = run("analyze", str(path), "--what-if", spec, "--format", "json")
    assert res.exit_code == 0, res.output[-500:]
    (row,) = json.loads(res.output)["what_if"]["specs"]
    assert row["spec"] == spec and row["saving_ns"] > 0 and row["how"]
