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


# A Ctrl-C that lands in a weakref callback (as one may while importlib's module locks are
# dropped: CI saw "Exception ignored in: <function _get_module_lock.<locals>.cb>"), planted
# where `zym analyze` imports its libraries; `lost` puts Python's own hook back first.
_INTERRUPTED_IN_CALLBACK = """
import sys, time, weakref
sys.argv[0] = 'zym'
from zym.cli import entry, fast
if {lost}:
    entry._deliver_again = sys.__unraisablehook__
real = fast._import_libraries
def importing():
    class Lock: pass
    def callback(_):
        raise KeyboardInterrupt
    lock = Lock()
    ref = weakref.ref(lock, callback)
    del lock  # the callback runs here; its KeyboardInterrupt cannot be raised from it
    for _ in range(20):
        time.sleep(0.001)  # where a delivered interrupt is raised
    real()
fast._import_libraries = importing
entry.main()
"""


def test_an_interrupt_in_a_callback_stops_the_command_with_its_one_line():
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "sample_traces")
    trace = next(os.path.join(sample, f) for f in sorted(os.listdir(sample))
                 if f.endswith(".json.gz"))
    args = ("analyze", trace, "--format", "json", "--no-progress")
    env = {"ZYM_DECODE_AHEAD": "0"}
    done = _run(_INTERRUPTED_IN_CALLBACK.format(lost=False), *args, env=env)
    assert (done.returncode, done.stderr, done.stdout) == (130, "zym: interrupted\n", "")
    # Python's own hook: printed with a traceback, and the interrupt lost (the command runs on)
    lost = _run(_INTERRUPTED_IN_CALLBACK.format(lost=True), *args, env=env)
    assert "Exception ignored" in lost.stderr and "Traceback" in lost.stderr
    assert lost.returncode == 0 and lost.stdout.startswith("{")


# Ctrl-C while a library imports its C parts, which reports the interrupted import as an
# error of its own (numpy: "PyCapsule_Import could not import module ..."), planted where
# `zym analyze` imports its libraries; `plain` puts Python's own SIGINT handler back.
_INTERRUPTED_INTO_AN_ERROR = """
import os, signal, sys, time
sys.argv[0] = 'zym'
from zym.cli import entry, fast
if {plain}:
    entry._on_interrupt = signal.default_int_handler
def importing():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    except KeyboardInterrupt:
        raise ImportError('could not import module "datetime"') from None
fast._import_libraries = importing
entry.main()
"""


def test_an_interrupt_a_library_turns_into_an_error_still_ends_as_interrupted():
    trace = os.path.join(os.path.dirname(__file__), "..", "..", "sample_traces",
                         "gpt_decode_server.trace.json.gz")
    args = ("analyze", trace, "--format", "json", "--no-progress")
    env = {"ZYM_DECODE_AHEAD": "0"}
    done = _run(_INTERRUPTED_INTO_AN_ERROR.format(plain=False), *args, env=env)
    assert (done.returncode, done.stderr, done.stdout) == (130, "zym: interrupted\n", "")
    plain = _run(_INTERRUPTED_INTO_AN_ERROR.format(plain=True), *args, env=env)
    assert plain.returncode == 1 and "Traceback" in plain.stderr
    assert plain.stderr.rstrip().endswith('ImportError: could not import module "datetime"')


def test_an_interrupt_before_a_typer_command_runs_ends_with_its_one_line():
    """Ctrl-C while typer builds a command (its type hints; bench/interrupts.py found it in
    `zym import`, `export` and `report`): one line and 130, not a traceback."""
    code = ("import sys; sys.argv[0] = 'zym'\n"
            "import zym.cli.main as m\n"
            "def building():\n"
            "    raise KeyboardInterrupt\n"
            "m.app = building\n"
            "from zym.cli.entry import main; main()\n")
    done = _run(code, "import", "x.json", "-o", "y.parquet")
    assert (done.returncode, done.stderr) == (130, "zym: interrupted\n")


def test_an_interrupt_a_reader_reports_as_bad_input_ends_as_interrupted():
    """Ctrl-C while the trace is read, turned by polars into an error of its own that the
    reader reports as an unusable trace (bench/interrupts.py saw `zym: error: ... unusable
    torch.profiler trace`, exit 2): the command ends as interrupted."""
    code = ("import os, signal, sys, time; sys.argv[0] = 'zym'\n"
            "import zym.analysis\n"
            "from zym.schemas.errors import InputError\n"
            "def reading(*a, **k):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGINT); time.sleep(1)\n"
            "    except KeyboardInterrupt:\n"
            "        raise InputError('t.json.gz: unusable torch.profiler trace') from None\n"
            "zym.analysis.analyze = reading\n"
            "from zym.cli.entry import main; main()\n")
    trace = os.path.join(os.path.dirname(__file__), "..", "..", "sample_traces",
                         "gpt_decode_server.trace.json.gz")
    done = _run(code, "analyze", trace, "--no-progress", env={"ZYM_DECODE_AHEAD": "0"})
    assert (done.returncode, done.stderr) == (130, "zym: interrupted\n")
