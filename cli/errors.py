"""Turn zym's exceptions into one line on stderr and exit code 2."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import typer
from zym.schemas.errors import ZymError

EXIT_BAD_INPUT = 2


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Run a command body; a ZymError becomes `zym: error: <message>` and exit code 2."""
    try:
        yield
    except ZymError as e:
        print(f"zym: error: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except KeyboardInterrupt:
        print("zym: interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
