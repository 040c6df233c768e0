"""The console script's own top-level help (cli/entry.py) against the typer app's."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer
from zym.cli.entry import root_help
from zym.cli.main import app

ENTRY = "import sys; sys.argv[0] = 'zym'; from zym.cli.entry import main; main()"


def _typer_help() -> str:
    command = typer.main.get_command(app)
    return command.get_help(command.context_class(command, info_name="zym"))


@pytest.mark.parametrize("columns", range(20, 131))
def test_root_help_is_the_typer_apps_at_every_width(columns, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))  # the width click reads from the terminal
    assert root_help("zym", columns) == _typer_help()


def _run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "COLUMNS": "80", **(env or {})})


def test_help_and_no_arguments_answer_as_the_app_does_without_typer():
    app_code = "import sys; sys.argv[0] = 'zym'; from zym.cli.main import app; app()"
    for args in (["--help"], []):
        fast = _run(ENTRY + "; ", *args)
        slow = _run(app_code, *args)
        assert (fast.returncode, fast.stdout, fast.stderr) == (
            slow.returncode, slow.stdout, slow.stderr), args
    assert _run(ENTRY, "--help").returncode == 0 and _run(ENTRY).returncode == 2
    probe = ("import sys, atexit; atexit.register(lambda: print(sorted(m for m in ('typer', "
             "'click', 'zym.cli.main') if m in sys.modules), file=sys.stderr)); " + ENTRY)
    assert _run(probe, "--help").stderr.strip() == "[]"


def test_other_arguments_and_completion_go_to_the_app():
    assert _run(ENTRY, "--version").stdout.startswith("zym ")
    assert "Usage: zym analyze" in _run(ENTRY, "analyze", "--help").stdout
    # typer's shell completion answers through the app even for a bare `zym`.
    done = _run(ENTRY, env={"_ZYM_COMPLETE": "source_bash"})
    assert "_zym_completion()" in done.stdout and done.returncode == 0


def test_version_answers_as_the_app_does_without_typer():
    from importlib.metadata import version

    from zym.schemas.version import SCHEMA_VERSION

    app_code = "import sys; sys.argv[0] = 'zym'; from zym.cli.main import app; app()"
    fast, slow = _run(ENTRY, "--version"), _run(app_code, "--version")
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout,
                                                           slow.stderr)
    assert fast.stdout == f"zym {version('zym')} (capture file schema v{SCHEMA_VERSION})\n"
    probe = ("import sys, atexit; atexit.register(lambda: print(sorted(m for m in ('typer', "
             "'click', 'polars', 'zym.cli.main') if m in sys.modules), file=sys.stderr)); "
             + ENTRY)
    assert _run(probe, "--version").stderr.strip() == "[]"
    # anything more goes to the app, which answers as before
    both = [_run(code, "--version", "--help") for code in (ENTRY, app_code)]
    assert both[0].stdout == both[1].stdout == fast.stdout


def test_leave_flushes_runs_exit_handlers_and_keeps_the_code():
    code = ("import atexit, sys; atexit.register(lambda: print('handler ran')); "
            "from zym.cli.entry import leave; sys.stdout.write('x' * 100_000); "
            "sys.stderr.write('said'); leave(3)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 3
    assert done.stdout == "x" * 100_000 + "handler ran\n"
    assert done.stderr == "said"


def test_leave_waits_for_a_running_thread_as_a_normal_exit_does():
    code = ("import threading, time; from zym.cli.entry import leave; "
            "t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))); "
            "t.start(); leave(0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert (done.returncode, done.stdout) == (0, "thread done\n")
