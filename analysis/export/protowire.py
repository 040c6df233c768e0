"""Vectorized protobuf wire encoding: many messages of one shape at once, with numpy.

The Perfetto export writes hundreds of thousands of packets that share a handful of shapes
(slice begin, slice end, counter, ...). Filling one generated ``TracePacket`` per event and
serializing it runs at about 0.4M packets/s; encoding each shape column-wise, one numpy pass per
field, runs at tens of millions. The field numbers and wire types are read from the descriptors of
the ``perfetto`` package's generated classes (:func:`tag`), so those classes stay the single
source of truth, and the tests parse the bytes back with them.

A message column is a :class:`Ragged`: ``n`` byte strings stored flat. :func:`encode` lays out
``n`` messages from a list of fields, each field a column over the same ``n`` rows:

>>> from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
>>> import numpy as np
>>> ev = encode(2, [Varint(tag(TrackEvent, "track_uuid"), np.array([1, 300]))])
>>> [TrackEvent.FromString(b).track_uuid for b in ev.to_list()]
[1, 300]
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..compiled import njit, writes

_WIRE_VARINT, _WIRE_FIXED64, _WIRE_LEN, _WIRE_FIXED32 = 0, 1, 2, 5
# Rows from which a field is written by a compiled loop (one pass over its rows) rather than
# by numpy passes (one scatter per byte of the field: at 10 M GPU operations, 49 M events,
# ~13 s of a Perfetto export's ~22 s of encoding).
JIT_MIN_ROWS = 50_000
# google.protobuf FieldDescriptor.TYPE_*: double 1, float 2, fixed64 6, fixed32 7, string 9,
# message 11, bytes 12, sfixed32 15, sfixed64 16; all others are varints.
_WIRE_OF_TYPE = {1: _WIRE_FIXED64, 6: _WIRE_FIXED64, 16: _WIRE_FIXED64, 2: _WIRE_FIXED32,
                 7: _WIRE_FIXED32, 15: _WIRE_FIXED32, 9: _WIRE_LEN, 11: _WIRE_LEN, 12: _WIRE_LEN}


def tag(message_class, field: str) -> bytes:
    """The encoded key (field number and wire type) of ``message_class.field``."""
    f = message_class.DESCRIPTOR.fields_by_name[field]
    return varint_bytes((f.number << 3) | _WIRE_OF_TYPE.get(f.type, _WIRE_VARINT))


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass
class Ragged:
    """``n`` byte strings stored flat: ``data`` (uint8) and per-string ``lengths`` (int64)."""

    data: np.ndarray
    lengths: np.ndarray

    @classmethod
    def from_list(cls, items: list[bytes]) -> Ragged:
        return cls(np.frombuffer(b"".join(items), np.uint8).copy(),
                   np.fromiter((len(b) for b in items), np.int64, len(items)))

    def to_list(self) -> list[bytes]:
        ends = np.cumsum(self.lengths)
        raw = self.data.tobytes()
        return [raw[e - n:e] for e, n in zip(ends.tolist(), self.lengths.tolist())]

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, index: np.ndarray) -> Ragged:
        """The strings at ``index`` (in that order)."""
        starts = np.cumsum(self.lengths) - self.lengths
        lengths = self.lengths[index]
        src = _ranges(starts[index], lengths)
        return Ragged(self.data[src], lengths)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for every (s, n): a gather index."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Encoded size of each uint64 in ``values`` (1 to 10 bytes)."""
    n = np.ones(len(values), np.int64)
    top = int(values.max()) if len(values) else 0
    for k in range(1, 10):
        if top < 1 << (7 * k):
            break
        n += values >= np.uint64(1 << (7 * k))
    return n


def _as_u64(values) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype == np.uint64:
        return a
    if a.dtype.kind == "f":
        raise TypeError("varint field given floats")
    return a.astype(np.int64, copy=False).view(np.uint64)  # negatives: two's complement


class Field:
    """One field of a message shape: its key bytes and a column over the ``n`` rows.

    ``lengths(n)`` gives the encoded bytes per row (0 where absent); ``write(buf, cursor)``
    writes the present rows, ``cursor`` holding every row's write position.
    """

    key: bytes
    present: np.ndarray | None  # bool mask; None means every row

    def lengths(self, n: int) -> np.ndarray:
        raise NotImplementedError

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        raise NotImplementedError

    def _pos(self, cursor: np.ndarray) -> np.ndarray:
        return cursor if self.present is None else cursor[self.present]

    def _sized(self, n: int, per_row) -> np.ndarray:
        out = np.zeros(n, np.int64)
        if self.present is None:
            out[:] = per_row
        else:
            out[self.present] = per_row
        return out


def _write_key(buf: np.ndarray, pos: np.ndarray, key: bytes) -> None:
    if (compiled := _compiled_writes(len(pos))) is not None:
        compiled.key(buf, pos, np.frombuffer(key, np.uint8))
        return
    for j, byte in enumerate(key):
        buf[pos + j if j else pos] = byte


def _write_varints(buf: np.ndarray, pos: np.ndarray, v: np.ndarray, n: np.ndarray) -> None:
    if not len(n):
        return
    if (compiled := _compiled_writes(len(n))) is not None:
        compiled.varints(buf, pos, v, n)
        return
    lo, hi = int(n.min()), int(n.max())
    if lo == hi:  # one size for all (timestamps, small ids): no masks
        for k in range(hi):
            byte = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
            buf[pos + k if k else pos] = byte | np.uint8(0x80) if k < hi - 1 else byte
        return
    for k in range(hi):
        if k < lo:  # every value has this byte: no mask
            vk, nk, pk = v, n, pos
        else:
            m = n > k
            vk, nk, pk = v[m], n[m], pos[m]
        byte = ((vk >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        if k < lo - 1:
            byte |= np.uint8(0x80)
        else:
            byte |= np.where(nk > k + 1, np.uint8(0x80), np.uint8(0))
        buf[pk + k] = byte


class Varint(Field):
    """A varint field (uint64, int64, int32, enum, bool). Absent where ``present`` is False."""

    def __init__(self, key: bytes, values, present: np.ndarray | None = None) -> None:
        self.key, self.present = key, present
        v = _as_u64(values)
        self.values = v if present is None else v[present]
        self._vlen = varint_lengths(self.values)

    def lengths(self, n: int) -> np.ndarray:
        return self._sized(n, len(self.key) + self._vlen)

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        pos = self._pos(cursor)
        _write_key(buf, pos, self.key)
        _write_varints(buf, pos + len(self.key), self.values, self._vlen)


class Fixed64(Field):
    """A fixed64 or double field: 8 little-endian bytes."""

    def __init__(self, key: bytes, values, present: np.ndarray | None = None) -> None:
        self.key, self.present = key, present
        a = np.asarray(values)
        a = a.astype("<f8" if a.dtype.kind == "f" else "<u8", copy=False)
        a = a if present is None else a[present]
        self.raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1, 8)

    def lengths(self, n: int) -> np.ndarray:
        return self._sized(n, len(self.key) + 8)

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        pos = self._pos(cursor)
        _write_key(buf, pos, self.key)
        pos = pos + len(self.key)
        if (compiled := _compiled_writes(len(pos))) is not None:
            compiled.fixed64(buf, pos, self.raw)
            return
        for j in range(8):
            buf[pos + j] = self.raw[:, j]


class RepeatedFixed64(Field):
    """A repeated fixed64 field (not packed): ``counts[i]`` entries for row i, from ``flat``."""

    def __init__(self, key: bytes, counts: np.ndarray, flat) -> None:
        self.key, self.present = key, None
        self.counts = np.asarray(counts, np.int64)
        self.entries = Fixed64(key, flat)

    def lengths(self, n: int) -> np.ndarray:
        return self.counts * (len(self.key) + 8)

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        if not len(self.entries.raw):
            return
        size = len(self.key) + 8
        first = np.cumsum(self.counts) - self.counts
        within = np.arange(int(self.counts.sum())) - np.repeat(first, self.counts)
        self.entries.write(buf, np.repeat(cursor, self.counts) + within * size)


class Bytes(Field):
    """A length-delimited field (string or bytes) from a :class:`Ragged` column.

    Rows where ``present`` is False are skipped (their strings must be empty).
    """

    def __init__(self, key: bytes, values: Ragged, present: np.ndarray | None = None) -> None:
        self.key, self.present, self.values = key, present, values
        lens = values.lengths if present is None else values.lengths[present]
        self._len = Varint(b"", lens)

    def lengths(self, n: int) -> np.ndarray:
        return self._sized(n, len(self.key) + self._len._vlen + self._len.values.astype(np.int64))

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        pos = self._pos(cursor)
        _write_key(buf, pos, self.key)
        pos = pos + len(self.key)
        _write_varints(buf, pos, self._len.values, self._len._vlen)
        _copy_ragged(buf, pos + self._len._vlen, self.values, self.present)


class Message(Field):
    """A sub-message field whose own fields are columns over the same rows, written in place
    (no intermediate buffer). Its fields must be absent wherever the message is."""

    def __init__(self, key: bytes, fields: list[Field], present: np.ndarray | None = None) -> None:
        self.key, self.present, self.fields = key, present, fields
        self._inner: np.ndarray | None = None

    def lengths(self, n: int) -> np.ndarray:
        self._per_field = [f.lengths(n) for f in self.fields]
        inner = _row_sum(n, self._per_field)
        self._inner = inner if self.present is None else inner[self.present]
        self._lenlen = varint_lengths(self._inner.astype(np.uint64))
        return self._sized(n, len(self.key) + self._lenlen + self._inner)

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        pos = self._pos(cursor)
        _write_key(buf, pos, self.key)
        pos = pos + len(self.key)
        _write_varints(buf, pos, self._inner.astype(np.uint64), self._lenlen)
        inner_cursor = cursor.copy()
        if self.present is None:
            inner_cursor = pos + self._lenlen
        else:
            inner_cursor[self.present] = pos + self._lenlen
        _write_fields(buf, inner_cursor, self.fields, self._per_field)


class Raw(Field):
    """Bytes inserted verbatim (already-encoded fields)."""

    def __init__(self, values: Ragged) -> None:
        self.key, self.present, self.values = b"", None, values

    def lengths(self, n: int) -> np.ndarray:
        return self.values.lengths.astype(np.int64, copy=False)

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        _copy_ragged(buf, cursor, self.values, None)


class Const(Field):
    """The same encoded bytes in every present row (a constant field, or a flag)."""

    def __init__(self, raw: bytes, present: np.ndarray | None = None) -> None:
        self.key, self.present = raw, present

    def lengths(self, n: int) -> np.ndarray:
        return self._sized(n, len(self.key))

    def write(self, buf: np.ndarray, cursor: np.ndarray) -> None:
        _write_key(buf, self._pos(cursor), self.key)


def _copy_ragged(buf: np.ndarray, dst_starts: np.ndarray, values: Ragged,
                 present: np.ndarray | None) -> None:
    lens = values.lengths if present is None else values.lengths[present]
    if len(values.data) != int(lens.sum()):
        raise ValueError("absent rows of a Ragged column must be empty")
    if not len(values.data):
        return
    if (compiled := _compiled_writes(len(lens))) is not None:
        compiled.ragged(buf, dst_starts, values.data, lens)
        return
    buf[np.repeat(dst_starts, lens) + _ranges(np.zeros(len(lens), np.int64), lens)] = \
        values.data


def _write_fields(buf: np.ndarray, cursor: np.ndarray, fields: list[Field],
                  per_field: list[np.ndarray]) -> None:
    cursor = cursor.copy()
    for f, lens in zip(fields, per_field):
        f.write(buf, cursor)
        cursor += lens


def _row_sum(n: int, columns: list[np.ndarray]) -> np.ndarray:
    total = np.zeros(n, np.int64)
    for c in columns:
        total += c
    return total


def encode(n: int, fields: list[Field]) -> Ragged:
    """Encode ``n`` messages whose fields (in wire order) are ``fields``."""
    per_field = [f.lengths(n) for f in fields]
    total = _row_sum(n, per_field)
    buf = np.empty(int(total.sum()), np.uint8)
    _write_fields(buf, np.cumsum(total) - total, fields, per_field)
    return Ragged(buf, np.asarray(total, np.int64))


# -- the compiled writes (numba): each a pass over its rows, the same bytes as the numpy ones

_LOW7, _HIGH, _SEVEN = np.uint64(0x7F), np.uint64(0x80), np.uint64(7)


@writes("buf")
def _key_loop(buf, pos, key) -> None:
    """``key``'s bytes at each of ``pos``."""
    for i in range(len(pos)):
        p = pos[i]
        for j in range(len(key)):
            buf[p + j] = key[j]


@writes("buf")
def _varint_loop(buf, pos, v, n) -> None:
    """Each of ``v`` (uint64) as a varint of ``n[i]`` bytes (its encoded size) at ``pos[i]``."""
    for i in range(len(pos)):
        p, x, k = pos[i], v[i], n[i]
        for j in range(k - 1):
            buf[p + j] = np.uint8((x & _LOW7) | _HIGH)
            x = x >> _SEVEN
        buf[p + k - 1] = np.uint8(x & _LOW7)


@writes("buf")
def _fixed64_loop(buf, pos, raw) -> None:
    """Row ``i`` of ``raw`` (8 bytes a row) at ``pos[i]``."""
    for i in range(len(pos)):
        p = pos[i]
        for j in range(8):
            buf[p + j] = raw[i, j]


@writes("buf")
def _ragged_loop(buf, dst, data, lens) -> None:
    """The strings of ``data`` (``lens[i]`` bytes each, one after another) at ``dst[i]``."""
    at = 0
    for i in range(len(dst)):
        p = dst[i]
        for j in range(lens[i]):
            buf[p + j] = data[at + j]
        at += lens[i]


class _Writes(NamedTuple):
    key: Callable
    varints: Callable
    fixed64: Callable
    ragged: Callable


def _compiled_writes(rows: int) -> _Writes | None:
    """The loops above, for a field of ``rows`` rows: compiled where there are at least
    ``JIT_MIN_ROWS`` of them and numba is there; else None (the numpy passes then)."""
    return _loops() if rows >= JIT_MIN_ROWS else None


@functools.cache
def _loops() -> _Writes | None:
    compiled = njit(_key_loop, _varint_loop, _fixed64_loop, _ragged_loop)
    return _Writes(*compiled) if compiled else None
