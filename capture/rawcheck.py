"""Checksums for the raw capture streams, and their validated reading for ``--finalize``.

Arrow IPC streams carry no checksum, so a flipped bit in ``calls.arrow`` either reads as a
plausible wrong value or makes the reader stop early, which used to look like a stream cut
short by a crash ("0 calls", exit 0). Each raw stream now has a sidecar ``<stream>.sums``:
after every batch the writer appends one line ``<end offset> <crc32 of the bytes since the
previous line>``. ``read_checked`` verifies every such segment; a mismatch is a
``RawCorruptError``. Bytes after the last line are a batch the writer had not finished
(SIGKILL, power loss): they are left out and counted, never guessed at.

>>> sink = ChecksummedFile(raw_dir / "calls.arrow")   # doctest: +SKIP
>>> sink.write(batch_bytes); sink.checkpoint()         # doctest: +SKIP
"""
from __future__ import annotations

import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from zym.schemas.errors import InputError

SUMS_SUFFIX = ".sums"
MAX_META_BYTES = 16 << 20


class RawCorruptError(InputError):
    """A raw capture stream or its metadata that does not verify."""


class ChecksummedFile(io.RawIOBase):
    """A binary file that records a CRC-32 per segment in ``<path>.sums`` (``checkpoint``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self._f = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._sums = open(f"{os.fspath(path)}{SUMS_SUFFIX}", "w", encoding="ascii")  # noqa: SIM115
        self._crc = 0
        self._pos = 0
        self._mark = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = bytes(data)
        self._f.write(data)
        self._crc = zlib.crc32(data, self._crc)
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def checkpoint(self) -> None:
        """Flush, then record the segment written since the last checkpoint."""
        self._f.flush()
        if self._pos != self._mark:
            self._sums.write(f"{self._pos} {self._crc:08x}\n")
            self._sums.flush()
            self._mark, self._crc = self._pos, 0

    def close(self) -> None:
        if not self.closed:
            self.checkpoint()
            self._f.close()
            self._sums.close()
        super().close()


@dataclass
class Verified:
    data: bytes  # the verified prefix of the stream
    unverified_bytes: int  # bytes after the last checkpoint (an unfinished batch)


def verify_stream(path: Path) -> Verified:
    """The verified prefix of a raw stream; ``RawCorruptError`` when a segment does not match
    or the checksum file is missing or damaged."""
    sums_path = Path(f"{path}{SUMS_SUFFIX}")
    if not sums_path.exists():
        raise RawCorruptError(f"{path}: no {sums_path.name} beside it, so it cannot be verified "
                              "(written by a zym before 0.2?): finalize it with that zym")
    try:
        data = path.read_bytes()
        sums = sums_path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    start = 0
    # The last piece is empty, or a line the writer was stopped inside: not a checkpoint.
    for n, line in enumerate(sums.split(b"\n")[:-1], 1):
        parts = line.split(b" ")
        try:
            end, crc = int(parts[0]), int(parts[1], 16)
            if len(parts) != 2 or not parts[0].isdigit() or len(parts[1]) != 8:
                raise ValueError
        except (ValueError, IndexError):
            raise RawCorruptError(f"{sums_path}: line {n} is damaged") from None
        if not start < end <= len(data):
            raise RawCorruptError(f"{path}: shorter than its checksums say (segment {n} ends at "
                                  f"byte {end}, the file has {len(data)}): damaged or truncated "
                                  "by something other than a stopped capture")
        if zlib.crc32(data[start:end]) != crc:
            raise RawCorruptError(f"{path}: bytes {start}-{end} do not match their checksum: the "
                                  "raw capture is damaged; it cannot be finalized")
        start = end
    return Verified(data[:start], len(data) - start)


def read_meta_text(path: Path) -> dict:
    """A raw ``meta.json`` as a JSON object; one-line errors for anything else."""
    try:
        if path.stat().st_size > MAX_META_BYTES:
            raise RawCorruptError(f"{path}: larger than {MAX_META_BYTES >> 20} MiB: not zym's")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise RawCorruptError(f"{path}: not valid JSON ({type(e).__name__})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise RawCorruptError(f"{path}: a JSON {type(data).__name__}, not an object")
    return data
