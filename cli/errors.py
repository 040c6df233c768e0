"""Turn zym's exceptions into one line on stderr and exit code 2."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import typer
from zym.schemas.errors import ZymError
from zym.schemas.text import printable

EXIT_BAD_INPUT = 2
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process it ended


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Run a command body; a ZymError becomes `zym: error: <message>` and exit code 2."""
    from zym.schemas.errors import Terminated

    try:
        yield
    except Terminated as e:
        print(f"zym: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_TERMINATED) from None
    except ZymError as e:  # messages quote names from files: shown escaped, on one line
        print(f"zym: error: {printable(e)}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except KeyboardInterrupt:
        print("zym: interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
