"""Read a BPF ring buffer of fixed-size records by mmap, a batch at a time: no Python per record.

The kernel maps a ring buffer map as (linux/kernel/bpf/ringbuf.c, and libbpf's
``ring_buffer__add``): at offset 0 one page holding ``consumer_pos`` (the reader writes it),
then, from offset one page, one page holding ``producer_pos`` followed by the data pages mapped
twice in a row, so a record that wraps around the end reads as contiguous bytes. Each record is
an 8-byte header (``u32 len``, with ``BPF_RINGBUF_BUSY_BIT`` while the producer has reserved
but not committed it and ``BPF_RINGBUF_DISCARD_BIT`` when it was discarded; ``u32 pg_off``),
then the payload, padded to 8 bytes.

Every record of zym's ``calls`` ring is one ``struct zym_call``, so a drained span is a numpy
array of (header, call) records: the busy and discard bits are checked for all of them at once,
the committed prefix is copied out, and ``consumer_pos`` moves past it. x86-64 only (as zym's
capture is): its loads are not reordered with other loads, nor stores with older loads, which
gives the acquire/release order libbpf asks of ``smp_load_acquire``/``smp_store_release``.
"""
from __future__ import annotations

import ctypes as ct
import mmap

import numpy as np

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HEADER_SIZE = 8


def record_dtype(payload: np.dtype) -> np.dtype:
    """The dtype of one ring record: the header, then ``payload``, padded to 8 bytes."""
    size = (HEADER_SIZE + payload.itemsize + 7) & ~7
    return np.dtype({"names": ["len", "pg_off", "payload"],
                     "formats": ["<u4", "<u4", payload],
                     "offsets": [0, 4, HEADER_SIZE], "itemsize": size})


class FixedRecordRing:
    """The reading side of one ring buffer map whose records all have the dtype ``payload``."""

    def __init__(self, map_fd: int, data_size: int, payload: np.dtype) -> None:
        page = mmap.PAGESIZE
        self._dtype = record_dtype(payload)
        self._payload_size = payload.itemsize
        self._mask = data_size - 1
        self._cons_map = mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._prod_map = mmap.mmap(map_fd, page + 2 * data_size, mmap.MAP_SHARED,
                                   mmap.PROT_READ, offset=page)
        self._cons = ct.c_uint64.from_buffer(self._cons_map)
        self._prod = np.frombuffer(self._prod_map, dtype="<u8", count=1)
        self._data = np.frombuffer(self._prod_map, dtype=np.uint8, offset=page)
        self.bytes_read = 0

    def drain(self) -> np.ndarray:
        """Every committed record, in order, as an owned array of payloads (maybe empty)."""
        cons, prod = self._cons.value, int(self._prod[0])
        avail = prod - cons
        n = avail // self._dtype.itemsize
        if n <= 0:
            return np.empty(0, self._dtype["payload"])
        start = cons & self._mask
        recs = self._data[start:start + n * self._dtype.itemsize].view(self._dtype)
        lens = recs["len"]
        busy = (lens & BUSY_BIT) != 0
        k = int(np.argmax(busy)) if busy.any() else n
        sizes = lens[:k] & ~np.uint32(BUSY_BIT | DISCARD_BIT)
        if k and (sizes != self._payload_size).any():
            raise RuntimeError(f"ring buffer record of {int(sizes.max())} bytes in a ring of "
                               f"{self._payload_size}-byte records")
        keep = (lens[:k] & DISCARD_BIT) == 0
        out = recs["payload"][:k][keep] if not keep.all() else recs["payload"][:k].copy()
        self._cons.value = cons + k * self._dtype.itemsize   # release the records read
        self.bytes_read += k * self._dtype.itemsize
        return out

    def close(self) -> None:
        del self._cons, self._prod, self._data
        self._cons_map.close()
        self._prod_map.close()
