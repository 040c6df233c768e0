"""Turn zym's exceptions into one line on stderr and exit code 2."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from zym.schemas.errors import Terminated, ZymError
from zym.schemas.text import printable

EXIT_BAD_INPUT = 2
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process it ended


def exit_code(e: ZymError | KeyboardInterrupt) -> int:
    """Say `e` on stderr in one line; the exit code for it. Any error once Ctrl-C came is
    the interrupt's (a library may turn the KeyboardInterrupt into an error of its own, which
    the reader then reports as an unusable input)."""
    from .entry import interrupted

    if isinstance(e, Terminated):
        print(f"zym: {e}", file=sys.stderr)
        return EXIT_TERMINATED
    if isinstance(e, ZymError) and not interrupted():  # names from files: escaped, one line
        print(f"zym: error: {printable(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("zym: interrupted", file=sys.stderr)
    return 130


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Run a command body; a ZymError becomes `zym: error: <message>` and exit code 2
    (typer imported only then: cli/fleet_fast.py runs without it)."""
    try:
        yield
    except (ZymError, KeyboardInterrupt) as e:
        import typer

        raise typer.Exit(exit_code(e)) from None
