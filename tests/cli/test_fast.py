"""`zym analyze` and `zym diff` through the console script without typer (cli/fast.py): every
command line it takes gets the parameters click gets from the typer app, every line click
refuses goes to typer, and the two paths print the same and exit alike."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from enum import Enum

import pytest
import typer
import typer.main
from console import console as run_console
from console import imported, script, stderr_without_report, typer_app
from zym.cli import fast
from zym.cli.main import app

COMMANDS = typer.main.get_command(app).commands
RENAMED = {"format": "fmt"}  # the typer parameter -> the body's
# click's own, or the copy typer 0.29 vendors
CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def click_params(command: str, args: list[str]) -> dict | None:
    """The parameters click (with typer's conversions) gives ``args``, in the body's names and
    types; None where click refuses the line or answers it itself (--help)."""
    try:
        ctx = COMMANDS[command].make_context(command, list(args))
    except (CLICK_ERROR, typer.Exit):
        return None
    out = {}
    for name, value in ctx.params.items():
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, list) or (value is None and name in ("what_if", "rules",
                                                                    "disable")):
            value = tuple(value or ())
        out[RENAMED.get(name, name)] = value
    return out


def test_the_tables_declare_the_typer_commands_options():
    """Every option name of the typer command is in cli/fast.py's table, for the same
    parameter, and nothing else is."""
    for command, table in fast.OPTIONS.items():
        names = {}
        for p in COMMANDS[command].params:
            for n in [*p.opts, *p.secondary_opts]:
                if n.startswith("-") and n != "--help":
                    names[n] = RENAMED.get(p.name, p.name)
        assert {n: o.param for n, o in table.items()} == names, command
        positional = [p.name for p in COMMANDS[command].params if p.param_type_name == "argument"]
        assert list(fast.POSITIONAL[command]) == positional


LINES = [
    ("analyze", ["t.parquet"]),
    ("analyze", ["t.parquet", "--format", "json", "--top", "3"]),
    ("analyze", ["-f", "markdown", "t.json.gz", "-n", "1", "-w", "all"]),
    ("analyze", ["t.parquet", "--format=json", "--window=steps:2:5", "--no-progress"]),
    ("analyze", ["t.parquet", "--what-if", "1", "--what-if", "batch@a.py:3", "-r", "p.yaml",
                 "--rules", "d", "--disable", "syncs", "--fail-on", "warning"]),
    ("analyze", ["t.parquet", "--no-rules", "--progress", "--no-progress", "--top", "2",
                 "--top", "7"]),
    ("analyze", ["-"]),
    ("diff", ["a.parquet", "b.json.gz"]),
    ("diff", ["a", "b", "-f", "json", "--fail-on-regression", "5", "--host-noise", "12.5",
              "-j", "1", "--repeat", "c.parquet", "--no-rules", "-n", "4"]),
    ("diff", ["--jobs=2", "a", "--window", "1.5s:3s", "b", "--disable", "x", "-r", "y.yaml"]),
]
REFUSED = [  # lines click refuses or answers itself: typer must see them
    ("analyze", []), ("analyze", ["a", "b"]), ("analyze", ["t", "--help"]),
    ("analyze", ["t", "--format", "xml"]), ("analyze", ["t", "--top", "0"]),
    ("analyze", ["t", "--top"]), ("analyze", ["t", "--bogus"]), ("analyze", ["t", "-x"]),
    ("analyze", ["t", "--no-rules=1"]), ("analyze", ["t", "--fail-on", "WARNING"]),
    ("diff", ["a"]), ("diff", ["a", "b", "-j", "3"]), ("diff", ["a", "b", "--host-noise", "101"]),
    ("diff", ["a", "b", "--what-if", "1"]), ("diff", ["a", "b", "c"]),
]
TAKEN_ELSEWHERE = [  # lines click takes that this parser leaves to it (the same outcome there)
    ("analyze", ["t", "-fjson"]), ("analyze", ["--", "t"]), ("analyze", ["t", "--top", "+3"]),
    ("diff", ["a", "b", "--host-noise", "1e1"]), ("analyze", ["t", "-w", "-1s:"]),
]


@pytest.mark.parametrize(("command", "args"), LINES)
def test_lines_taken_get_clicks_parameters(command, args):
    expected = click_params(command, args)
    assert expected is not None, "click takes this line"
    assert fast.parse(command, args) == expected


@pytest.mark.parametrize(("command", "args"), REFUSED + TAKEN_ELSEWHERE)
def test_lines_not_taken_go_to_typer(command, args):
    assert fast.parse(command, args) is None


TOKENS = {
    "analyze": ["t.parquet", "u.json", "-", "--format", "-f", "json", "text", "markdown", "xml",
                "--top", "-n", "0", "1", "12", "-3", "2.5", "--window", "-w", "all", "steady",
                "--what-if", "3", "--rules", "-r", "p.yaml", "--disable", "syncs", "--no-rules",
                "--fail-on", "error", "never", "info", "--progress", "--no-progress",
                "--format=json", "--top=4", "-n=4", "--no-rules=", "--help", "--", "-fjson", ""],
    "diff": ["a.parquet", "b.parquet", "-", "--format", "-f", "json", "markdown", "--top",
             "-n", "0", "5", "--window", "-w", "all", "--fail-on-regression", "5", "0.5", "1e2",
             "--repeat", "r.parquet", "--host-noise", "100", "100.5", "60", "--rules", "-r",
             "--disable", "x", "--no-rules", "--jobs", "-j", "1", "2", "3", "--progress",
             "--no-progress", "--jobs=1", "--host-noise=7.5", "--help", "--", ""],
}


@pytest.mark.parametrize("command", sorted(TOKENS))
def test_random_lines_agree_with_click(command):
    """Random command lines from each command's option names and values (valid and not):
    where this parser takes a line, click gives the same parameters; where click refuses a
    line, this parser does not take it."""
    rng = random.Random(13)
    taken = 0
    for _ in range(3000):
        args = [rng.choice(TOKENS[command]) for _ in range(rng.randint(1, 8))]
        mine, theirs = fast.parse(command, args), click_params(command, args)
        if mine is not None:
            taken += 1
            assert mine == theirs, args
    assert taken >= 150  # the sample reaches the lines this parser takes, not only refusals


HEAVY = ("typer", "click", "pydantic", "typer._click")


def console(*args: str) -> subprocess.CompletedProcess:
    return run_console(HEAVY, *args)


def _stderr(r: subprocess.CompletedProcess) -> tuple[str, set[str]]:
    return stderr_without_report(r), imported(r)


RUNS = [
    ("analyze", "{capture}", "--format", "json", "--no-progress"),
    ("analyze", "{capture}", "-n", "2"),
    ("analyze", "{capture}", "-f", "markdown", "--fail-on", "info", "--window", "all"),
    ("analyze", "{capture}", "--no-rules", "--fail-on", "warning"),
    ("analyze", "{missing}"),
    ("diff", "{capture}", "{capture}", "--format", "json"),
    ("diff", "{capture}", "{capture}", "-j", "1", "--fail-on-regression", "0", "-n", "3"),
]


@pytest.mark.parametrize("args", RUNS, ids=[" ".join(r) for r in RUNS])
def test_console_prints_what_the_typer_command_prints(args, sample_capture, tmp_path):
    args = [a.format(capture=sample_capture, missing=tmp_path / "nope.parquet") for a in args]
    fast_run, slow = console(*args), typer_app(*args)
    fast_err, imported = _stderr(fast_run)
    assert (fast_run.returncode, fast_run.stdout, fast_err) == (
        slow.returncode, slow.stdout, slow.stderr)
    assert fast_run.stdout or fast_run.returncode == 2
    assert imported == set(), f"the console script imported {imported}"


def test_a_line_it_does_not_take_still_goes_to_typer(sample_capture):
    r = console("analyze", str(sample_capture), "--top", "0")
    err, imported = _stderr(r)
    assert r.returncode == 2 and "--top" in err and "typer" in imported
    help_run = console("diff", "--help")
    assert help_run.returncode == 0 and "Usage: zym diff" in help_run.stdout


def test_a_closed_pipe_is_exit_1_without_a_traceback(sample_capture):
    """`zym analyze ... | head -1`: the reader leaves; as click does, exit 1 and say nothing."""
    code = script(HEAVY)
    proc = subprocess.Popen([sys.executable, "-c", code, "analyze", str(sample_capture), "-f",
                             "json", "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1
    assert "Traceback" not in err and "Error" not in err, err


def test_bodies_and_fast_import_no_typer():
    code = "import sys, zym.cli.fast, zym.cli.bodies; print([m for m in %r if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code % (HEAVY,)], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"




def test_numpy_loads_with_one_blas_thread_and_the_limit_is_not_inherited():  # and gc is back on
    """OpenBLAS starts a thread per core as numpy loads; the console script's analyze/diff
    limit it to one (zym runs no BLAS routine), and leave no limit for what they start."""
    count = ("import gc, os, sys; from zym.cli.fast import _import_libraries as f; "
             "f() if sys.argv[1] == 'fast' else (__import__('numpy'), __import__('polars')); "
             "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in os.environ, "
             "gc.isenabled())")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def threads(how: str) -> tuple[int, str, str]:
        out = subprocess.run([sys.executable, "-c", count, how], capture_output=True, text=True,
                             check=True, env=env).stdout.split()
        return int(out[0]), out[1], out[2]

    (fast_threads, left, gc_on), (plain_threads, _, _) = threads("fast"), threads("plain")
    assert (left, gc_on) == ("False", "True")
    if (os.cpu_count() or 1) > 1:  # OpenBLAS's threads beyond the first: what the limit avoids
        assert fast_threads < plain_threads


@pytest.mark.parametrize(("env", "terminal", "imported"), [
    ({}, False, False), ({"FORCE_COLOR": "1"}, True, True), ({"TTY_COMPATIBLE": "1"}, True, True),
    ({"TTY_COMPATIBLE": "0"}, False, True)])
def test_progress_imports_rich_only_where_stderr_may_be_a_terminal(env, terminal, imported):
    """stderr a pipe: rich's Console says it is no terminal, so the spinner is off and rich
    is not imported; where the environment tells rich otherwise, rich decides as before."""
    code = ("import sys; from zym.cli.progress import stage_progress\n"
            "with stage_progress(True) as say: say('x')\n"
            "from rich.console import Console\n"
            "print(Console(stderr=True).is_terminal)")
    probe = ("import sys; from zym.cli.progress import stage_progress\n"
             "with stage_progress(True) as say: say('x')\n"
             "print('rich' in sys.modules)")
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    run = [subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, check=True,
                          env=clean | env).stdout.split()[-1] for c in (code, probe)]
    assert run == [str(terminal), str(imported)]
