"""A report as JSON text, laid out as ``json.dumps(value, indent=1)`` lays it out, in pieces.

msgspec encodes and indents (~0.3 s for a 120 MB report, against ~4 s for ``json.dumps`` and
~12 s for ``json.dump`` into a stream, chunk by chunk). The text goes out in pieces, so that it
is never whole in memory (a 192 MB report whole, then indented: two copies beside the
report): the first ``DEPTH`` levels of dicts and short lists a value at a time, long lists
``BATCH`` items at a time, what lies deeper or inside a batch encoded at once.

The values are those the json module writes, and the text is ASCII as the json module's is:
every character past ``~`` is a ``\\u`` escape (msgspec writes UTF-8, which would put a name's
bidirectional overrides and the like on the terminal as they are). The text differs in two
ways: floats are in their shortest form (``1e-05`` is ``0.00001``); NaN and infinities are
null (strict JSON, which ``jq`` and browsers read).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

BATCH = 512  # list items encoded at once
DEPTH = 3  # levels of containers written a value at a time
_NOT_ASCII = re.compile(rb"[\x7f-\xff]+")  # DEL and UTF-8's bytes: only inside strings


def _escape(run: re.Match) -> bytes:
    """A run of characters past ``~`` as the json module escapes them (its C encoder: no
    quote or backslash is in the run, so its text between the quotes is the escapes)."""
    return json.dumps(run.group().decode())[1:-1].encode()


def _ascii(text: bytes) -> bytes:
    return _NOT_ASCII.sub(_escape, text) if not text.isascii() or b"\x7f" in text else text


def json_chunks(value: object) -> Iterator[bytes]:
    """``value`` as indented JSON text (no trailing newline), in pieces."""
    import msgspec

    encoder = msgspec.json.Encoder()

    def whole(v: object, level: int) -> bytes:
        text = _ascii(msgspec.json.format(encoder.encode(v), indent=1))
        return text.replace(b"\n", b"\n" + b" " * level) if level else text

    yield from _pieces(value, 0, whole, lambda key: _ascii(encoder.encode(key)))


def _pieces(v: object, level: int, whole: Callable[[object, int], bytes],
            encode: Callable[[object], bytes]) -> Iterator[bytes]:
    """``v`` at ``level`` (its closing bracket indented by ``level`` spaces)."""
    inner = b"\n" + b" " * (level + 1)
    if isinstance(v, dict) and v and level < DEPTH and all(isinstance(k, str) for k in v):
        sep = b"{" + inner
        for key, item in v.items():
            yield sep + encode(key) + b": "
            sep = b"," + inner
            yield from _pieces(item, level + 1, whole, encode)
        yield b"\n" + b" " * level + b"}"
    elif isinstance(v, list) and len(v) > BATCH:
        for i in range(0, len(v), BATCH):  # each batch "[\n  a,\n  b\n ]" without brackets
            yield (b"[" if i == 0 else b",") + whole(v[i:i + BATCH], level)[1:-(level + 2)]
        yield b"\n" + b" " * level + b"]"
    elif isinstance(v, list) and v and level < DEPTH:
        sep = b"[" + inner
        for item in v:
            yield sep
            sep = b"," + inner
            yield from _pieces(item, level + 1, whole, encode)
        yield b"\n" + b" " * level + b"]"
    else:
        yield whole(v, level)
