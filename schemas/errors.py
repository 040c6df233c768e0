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
