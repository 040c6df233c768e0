"""The one exception hierarchy of zym. The CLI maps these to a one-line message and exit code 2."""
from __future__ import annotations


class ZymError(Exception):
    """Base of every error zym raises on purpose. The message is one line and names the next step."""


class InputError(ZymError):
    """An input file is unusable: missing, empty, truncated, corrupt or of a foreign format."""


class SchemaError(InputError):
    """A capture file of another schema or version, or with missing or mistyped columns."""


class CaptureError(ZymError):
    """Capture could not start or run (permissions, missing kernel support, target problems)."""


class OutputError(ZymError):
    """An output cannot be written: the folder is missing, read-only or full, the name is not
    usable, the target is not a regular file, or another zym is writing the same file."""


class Terminated(ZymError):
    """zym was asked to stop (SIGTERM) while running; what it was writing has been removed."""


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (at most 200 characters), or its type's name: what a
    one-line error quotes of a library's (often multi-line) exception."""
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
