"""A content hash sealed into every capture file, checked before any of it is read.

Parquet has page checksums (zym writes them, for readers that check them), but polars does
not verify them, and a flipped bit in a footer statistic or an uncompressed page reads as a
plausible, wrong number. So the writer seals the whole file: the key ``zym.content_hash`` in
the footer holds ``sha256:<hex>`` of every byte of the file, with the 64 hex digits themselves
read as ``0``. The writer first writes 64 zeros there, hashes the finished file and patches
the digits in place (same length, so nothing moves); a reader hashes the file the same way.
Any changed byte (data pages, statistics, schema, metadata) makes open_capture fail with
``CorruptCaptureError`` instead of giving a wrong answer. Hashing reads the file once, at
about 1 GB/s.

>>> seal("trace.parquet")                        # doctest: +SKIP
>>> verify("trace.parquet", kv["zym.content_hash"])  # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .errors import InputError

HASH_KEY = "zym.content_hash"
_ALGO = "sha256:"
_DIGITS = 64
HASH_PLACEHOLDER = _ALGO + "0" * _DIGITS
_CHUNK = 1 << 20
_FOOTER_MAX = 64 << 20  # a footer larger than this is not one zym wrote


class CorruptCaptureError(InputError):
    """A capture whose bytes do not match its content hash (or that has none)."""


def _footer(f, size: int) -> tuple[int, bytes]:
    """(offset, bytes) of the Parquet footer (file metadata) of an open file."""
    if size < 12:
        raise CorruptCaptureError("too short for a Parquet file")
    f.seek(size - 8)
    tail = f.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or not 0 < length <= min(size - 12, _FOOTER_MAX):
        raise CorruptCaptureError("no valid Parquet footer")
    start = size - 8 - length
    f.seek(start)
    return start, f.read(length)


def _digest(f, size: int, hole: int) -> str:
    """sha256 of the file with the 64 bytes at ``hole`` read as ASCII zeros."""
    h = hashlib.sha256()
    f.seek(0)
    pos = 0
    for start, end in ((0, hole), (hole + _DIGITS, size)):
        f.seek(start)
        pos = start
        while pos < end:
            chunk = f.read(min(_CHUNK, end - pos))
            if not chunk:
                raise CorruptCaptureError("shorter than its footer says")
            h.update(chunk)
            pos += len(chunk)
        if start == 0:
            h.update(b"0" * _DIGITS)
    return h.hexdigest()


# The key and its value as Parquet's footer holds them (Thrift compact KeyValue: the key's
# bytes, the value field's header 0x18, its length 71 as a varint, the value).
_IN_FOOTER = re.compile(re.escape(HASH_KEY.encode()) + rb"\x18\x47(sha256:[0-9a-f]{64})")


def read_hash(path: str | os.PathLike) -> str | None:
    """The ``zym.content_hash`` value (``sha256:<hex>``) the file's footer states, read from
    the footer's bytes (no Parquet reader: ~30 µs a file); None when the footer does not hold
    it once in the form zym writes. Raises ``CorruptCaptureError`` when there is no Parquet
    footer. What it returns is a claim: :func:`verify` checks it against the bytes."""
    with open(path, "rb") as f:
        _, footer = _footer(f, os.fstat(f.fileno()).st_size)
    found = _IN_FOOTER.findall(footer)
    return found[0].decode() if len(found) == 1 else None


def _hole(footer: bytes, value: bytes) -> int:
    """Offset in ``footer`` of the digits of ``value`` (the key's value): exactly one."""
    at = footer.find(value)
    if at < 0 or footer.find(value, at + 1) >= 0:
        raise CorruptCaptureError(f"its {HASH_KEY} cannot be located in the footer")
    return at + len(_ALGO)


def seal(path: str | os.PathLike) -> None:
    """Replace the placeholder hash in a just-written capture by the file's hash."""
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        start, footer = _footer(f, size)
        hole = start + _hole(footer, HASH_PLACEHOLDER.encode())
        digest = _digest(f, size, hole)
        f.seek(hole)
        f.write(digest.encode())


def verify(path: str | os.PathLike, value: str | None) -> None:
    """Raise ``CorruptCaptureError`` unless ``value`` (the key's value) is the file's hash."""
    name = Path(path)
    if value is None:
        raise CorruptCaptureError(f"{name}: no {HASH_KEY} in its metadata (written by a zym "
                                  "before 0.2, or altered): re-import or re-capture it")
    if not (value.startswith(_ALGO) and len(value) == len(HASH_PLACEHOLDER)
            and all(c in "0123456789abcdef" for c in value[len(_ALGO):])):
        raise CorruptCaptureError(f"{name}: malformed {HASH_KEY}")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start, footer = _footer(f, size)
            digest = _digest(f, size, start + _hole(footer, value.encode()))
    except CorruptCaptureError as e:
        raise CorruptCaptureError(f"{name}: corrupt capture ({e})") from None
    except OSError as e:
        raise InputError(f"{name}: cannot read ({e.strerror})") from None
    if digest != value[len(_ALGO):]:
        raise CorruptCaptureError(f"{name}: corrupt capture: its content does not match its "
                                  f"{HASH_KEY} (changed or damaged after zym wrote it); "
                                  "re-import or re-capture it")
