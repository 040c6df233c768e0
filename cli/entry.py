"""The `zym` console script. `zym` and `zym --help` are answered from cli/commands.py's table
with the standard library alone: typer and click cost ~0.08-0.12 s of imports, more than the
whole answer. `zym fleet top|findings|sql` are answered by cli/fleet_fast.py, and the common command lines of
`zym analyze` and `zym diff` by cli/fast.py, also without typer (typer, click and the pydantic
that typer 0.29 converts parameters with cost ~0.25-0.3 s there). Everything else goes to the
typer app (cli/main.py).

The text is laid out as click lays out a group's help (usage, description, options, commands;
width from the terminal, 50-78 columns); tests/cli/test_entry.py checks it against the typer
app's own help at every width.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .commands import COMMANDS, DESCRIPTION

# The root options as typer declares them: --version (cli/main.py) and typer's own.
_OPTIONS = (
    ("--version", "Print zym's version and exit."),
    ("--install-completion", "Install completion for the current shell."),
    ("--show-completion", ("Show completion for the current shell, to copy it or customize "
                           "the installation.")),
    ("--help", "Show this message and exit."),
)
_COMPLETE_VAR = "_ZYM_COMPLETE"  # typer's shell-completion request: the app must answer it


def _definitions(rows: list[tuple[str, str]], width: int) -> list[str]:
    """click's definition list, indented 2: the first column as wide as its longest entry (at
    most 30) plus 2, the second wrapped to what is left."""
    import textwrap

    first = min(max(len(name) for name, _ in rows), 30) + 2
    wrap = textwrap.TextWrapper(max(width - first - 2, 10), replace_whitespace=False)
    lines = []
    for name, text in rows:
        wrapped = wrap.wrap(text)
        if len(name) <= first - 2:
            lines.append(f"  {name}{' ' * (first - len(name))}{wrapped[0]}")
        else:
            lines += [f"  {name}", f"{' ' * (first + 2)}{wrapped[0]}"]
        lines += [f"{' ' * (first + 2)}{line}" for line in wrapped[1:]]
    return lines


def root_help(prog: str, columns: int) -> str:
    """The top-level help as click prints it for a terminal `columns` wide (no trailing
    newline)."""
    import textwrap

    width = max(min(columns, 80) - 2, 50)
    usage = textwrap.fill("[OPTIONS] COMMAND [ARGS]...", width, replace_whitespace=False,
                          initial_indent=f"Usage: {prog} ",
                          subsequent_indent=" " * len(f"Usage: {prog} "))
    description = textwrap.fill(DESCRIPTION, width, initial_indent="  ", subsequent_indent="  ",
                                replace_whitespace=False)
    commands = ([(c.name, c.summary) for c in COMMANDS if not c.group]
                + [(c.name, c.summary) for c in COMMANDS if c.group])
    return "\n".join([usage, "", description, "", "Options:",
                      *_definitions(list(_OPTIONS), width), "", "Commands:",
                      *_definitions(commands, width)])


def version_line() -> str:
    """What `zym --version` prints: the installed version and the capture schema's."""
    from importlib.metadata import PackageNotFoundError, version

    from zym.schemas.version import SCHEMA_VERSION

    try:
        v = version("zym")
    except PackageNotFoundError:  # run from a source tree without an install
        v = "unknown (not installed)"
    return f"zym {v} (capture file schema v{SCHEMA_VERSION})"


def leave(code: int) -> None:
    """``sys.exit(code)`` without the interpreter's teardown, where nothing is left running:
    freeing an analysis's objects one by one at exit takes ~0.04-0.06 s here. The output is
    flushed and the atexit handlers run first, as at a normal exit; with another Python
    thread or a child process still alive, or output that cannot be flushed, the normal exit.
    """
    import threading

    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    mp = sys.modules.get("multiprocessing")
    if others or (mp is not None and mp.active_children()):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass  # what an exit handler wrote may be lost, as at a normal exit
    os._exit(code)


def _deliver_again(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook``: a Ctrl-C that lands in code Python cannot raise from (a weakref
    callback, such as importlib's module locks use while the command imports; a ``__del__``)
    is neither printed as "Exception ignored ... Traceback" nor lost: it is delivered to the
    main thread again, so the command stops with its one line and exit code 130 as on any
    other Ctrl-C. Delivered from a thread of its own: delivered from here, it would be raised
    in this hook, and be lost again. Everything else goes to Python's own hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import _thread

        try:  # SIGINT ignored or left to the system: interrupt_main does nothing
            _thread.start_new_thread(_thread.interrupt_main, ())
        except RuntimeError:  # no new thread (the interpreter is finishing): as Python does
            sys.__unraisablehook__(unraisable)
        return
    sys.__unraisablehook__(unraisable)


_interrupted = False  # a SIGINT reached this process


def interrupted() -> bool:
    """Whether a SIGINT (Ctrl-C) reached this process (where `interruptible` set the
    handler)."""
    return _interrupted


def _on_interrupt(signum: int, frame: object) -> None:
    """SIGINT: Python's own KeyboardInterrupt, remembered, so that where a library turns it
    into an error of its own (numpy, interrupted while it imports its C parts, raises an
    ImportError that blames the install), the command still ends as interrupted."""
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def interruptible(answer: Callable[[], None]) -> None:
    """Run ``answer`` (a command line's whole answer) so that Ctrl-C ends it with one line and
    exit code 130, wherever the interrupt lands (see `_deliver_again`, `_on_interrupt`)."""
    import signal

    sys.unraisablehook = _deliver_again
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)
    try:
        answer()
    except (KeyboardInterrupt, Exception) as e:
        # a KeyboardInterrupt no command body caught (typer building the command: its type
        # hints, click's parameters), or any error once an interrupt came
        if not (isinstance(e, KeyboardInterrupt) or _interrupted):
            raise
        print("zym: interrupted", file=sys.stderr)
        sys.exit(130)


def main() -> None:
    interruptible(lambda: _answer(sys.argv[1:]))


def _answer(args: list[str]) -> None:
    """Answer ``zym ARGS``: the root help and version, `zym fleet`'s and the common `zym
    analyze` and `zym diff` lines without typer, the rest by the typer app."""
    if args == ["--version"] and _COMPLETE_VAR not in os.environ:  # without typer (~0.1 s)
        try:
            print(version_line())
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    if args in ([], ["--help"]) and _COMPLETE_VAR not in os.environ:
        import shutil

        text = root_help(os.path.basename(sys.argv[0]), shutil.get_terminal_size().columns)
        # As click does: asked for, the help goes to stdout; with no arguments, to stderr
        # as a usage error (exit 2).
        stream = sys.stdout if args else sys.stderr
        try:
            print(text, file=stream)
            stream.flush()
        except BrokenPipeError:     # `zym --help | head`: the reader left; nothing to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        sys.exit(0 if args else 2)
    if args[:1] == ["fleet"] and len(args) > 1 and _COMPLETE_VAR not in os.environ:
        from .fleet_fast import run

        code = run(args[1], args[2:])  # None: a line for the typer app
        if code is not None:
            sys.stdout.flush()
            sys.exit(code)
    from zym.analysis.compiled import skip_blas_check

    skip_blas_check()  # (numba is zym's alone in this process)
    if args[:1] in (["analyze"], ["diff"]):
        from .fast import run as run_fast

        code = run_fast(args[0], args[1:])  # None: a line for the typer app
        if code is not None:
            leave(code)
    from .main import app

    app()
