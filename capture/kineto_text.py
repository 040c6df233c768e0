"""Where a torch.profiler trace's events start, and where a batch of them can be cut: the
text-level rules that the streaming reader (``kineto_json``) and the decode-ahead child
(``kineto_prefetch``) share, so both take the same path on the same text, and the gunzip
loop both read a gzip trace with. The standard library only (and ISA-L, imported by
:func:`gunzip`): the child runs before numpy and polars are imported."""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
BETWEEN_EVENTS = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
HEADER_LIMIT = 1 << 24  # text before the events; past this, decoded whole (MAX_WHOLE_JSON)
CUT_TRIES = 16  # candidate cuts tried before the batch is taken as not JSON


# A UTF-8 byte order mark: JSON text must not begin with one, but a reader may ignore it
# (RFC 8259, 8.1), and an editor or a Windows tool that saved the trace may have written it.
BOM = b"\xef\xbb\xbf"


def without_bom(pieces: Iterator[bytes | None]) -> Iterator[bytes | None]:
    """``pieces`` with a byte order mark at the start of the text left out (a None piece, a
    source that is not whole, passed on)."""
    pieces = iter(pieces)
    head = b""
    for piece in pieces:
        if piece is None:
            if head:
                yield head.removeprefix(BOM)
            yield None
            return
        head += piece
        if len(head) >= len(BOM):
            break
    if head:
        yield head.removeprefix(BOM)
    yield from pieces


def starts_like_json(head: bytes) -> bool:
    """Whether text starts like a JSON object or array (after a byte order mark and
    whitespace)."""
    return head.removeprefix(BOM).lstrip()[:1] in (b"{", b"[")


def events_start(buf: bytearray) -> int | None:
    """Offset of the ``[`` that opens the events (a bare array's own, or the value of
    ``traceEvents``), None while not known yet."""
    text = buf.lstrip()
    if text[:1] == b"[":
        return len(buf) - len(text)
    found = EVENTS_KEY.search(buf)
    return None if found is None else found.end() - 1


def read_header(pieces: Iterator[bytes | None]) -> tuple[bytearray, bytes, bool] | None:
    """Read ``pieces`` up to the events' ``[``: the text after it, the text before it, and
    whether the events are a bare array (no top object); None where the text is not JSON, a
    piece is None (the source is not whole) or the events do not start within
    ``HEADER_LIMIT`` bytes. The caller reads the rest of ``pieces`` on from there."""
    buf = bytearray()
    for piece in pieces:
        if piece is None:
            return None
        buf += piece
        head = buf.lstrip()[:1]
        if head and head not in b"{[":
            return None  # not JSON: the whole-text reader says so
        start = events_start(buf)
        if start is not None:
            break
        if len(buf) > HEADER_LIMIT:
            return None
    else:
        return None
    header = bytes(buf[:start])
    del buf[:start + 1]  # the rest starts after the array's "["
    return buf, header, not header.lstrip().startswith(b"{")


class GzipCut(Exception):
    """A gzip stream that ends before its end (a file cut short): raised by :func:`gunzip` once
    the text it held is yielded."""


def gunzip(f: BinaryIO, read_size: int, cap: int) -> Iterator[bytes]:
    """The text of the gzip file ``f`` (read from where it is, ``read_size`` compressed bytes a
    read), every member of it (RFC 1952 lets a file hold several), in pieces of at most
    ``cap`` bytes. :class:`GzipCut` where the stream ends early; ISA-L's ``isal_zlib.error``
    where the data is corrupt. ISA-L takes all the input it is given and holds back the text
    past ``cap``: with no input left it is asked for that text, and the stream is taken as cut
    only when none is left and its end was not reached."""
    from isal import isal_zlib  # (ISA-L: zlib's format, about 3x the speed)

    d = isal_zlib.decompressobj(wbits=31)
    while True:
        if d.eof:
            rest = d.unused_data or f.read(read_size)
            if not rest:
                return
            d = isal_zlib.decompressobj(wbits=31)
        else:
            rest = d.unconsumed_tail or f.read(read_size)
        piece = d.decompress(rest, cap)
        if not piece and not rest and not d.eof:
            raise GzipCut
        if piece:
            yield piece
