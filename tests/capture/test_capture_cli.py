"""`zym capture` as users call it, without needing eBPF: --print-bpf, failures with exit
code 2, and the CLI not importing BCC."""
from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from zym.cli.main import app

runner = CliRunner()


def test_print_bpf_shows_the_program_with_its_flags():
    result = runner.invoke(app, ["capture", "--print-bpf", "--sample", "4"])
    assert result.exit_code == 0
    out = result.stdout
    assert "#define ZYM_SAMPLE 4" in out and "#define ZYM_NPROBES 33" in out
    assert "int zym_walk(struct pt_regs *ctx)" in out
    wide = runner.invoke(app, ["capture", "--print-bpf", "--runtime-api"]).stdout
    assert "#define ZYM_NPROBES 48" in wide


def test_not_root_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    result = runner.invoke(app, ["capture", "--pid", "1"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("zym: error: zym capture needs root (eBPF uprobes): "
                                     "run it with sudo")


def test_needs_a_target():
    result = runner.invoke(app, ["capture", "-o", "x.parquet"])
    assert result.exit_code == 2
    assert "give either --pid PID or a command after --" in result.stderr


def test_importing_the_cli_does_not_import_bcc():
    code = "import sys, zym.cli.main; print('bcc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
