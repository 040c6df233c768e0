"""A target process seen from outside: its memory mappings and its memory (/proc/PID/mem)."""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    path: str


def read_maps(pid: int, executable: bool = False) -> list[Mapping]:
    """File-backed mappings of ``pid`` (``executable``: only those mapped executable, the code
    an unwinder meets); [] when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and (not executable or "x" in parts[1]):
            lo, hi = parts[0].split("-")
            out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5]))
    return out


def load_bias(maps: list[Mapping], path: str) -> int | None:
    """Address where ``path``'s file offset 0 is mapped (its load bias for a shared object or
    PIE whose first segment starts at virtual address 0), or None when it is not mapped."""
    return next((m.start for m in maps if m.path == path and m.offset == 0), None)


def mapped_libraries(maps: list[Mapping], pattern: re.Pattern[str]) -> list[str]:
    """Distinct paths of mapped files whose base name matches ``pattern``, in map order."""
    seen: dict[str, None] = {}
    for m in maps:
        if pattern.match(os.path.basename(m.path)):
            seen.setdefault(m.path, None)
    return list(seen)


def host_path(pid: int, path: str) -> str:
    """``path`` as seen from the target's mount namespace, reachable from ours (containers)."""
    via_root = f"/proc/{pid}/root{path}"
    return path if os.path.exists(path) else via_root


def thread_group(pid: int) -> int | None:
    """The tgid of task ``pid`` (equal to ``pid`` for a process, not for a thread)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (threads excluded)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    """Children, grandchildren... of ``pid``, parents before their children."""
    found, frontier = [], [pid]
    while frontier:
        kids = [c for p in frontier for c in children(p)]
        found += kids
        frontier = kids
    return found


def environ_of(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with (empty when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class ProcessMemory:
    """Reads another process's memory through /proc/PID/mem (root, or ptrace permission).

    Addresses refer to the target's address space; nothing here dereferences them locally.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._f = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115 (closed by close())

    def read(self, addr: int, size: int) -> bytes:
        if self._f.closed:
            raise OSError(f"pid {self.pid} has exited")
        self._f.seek(addr)
        data = self._f.read(size)
        if len(data) != size:
            raise OSError(f"short read of {size} bytes at {addr:#x} in pid {self.pid}")
        return data

    def u64(self, addr: int) -> int:
        return struct.unpack("<Q", self.read(addr, 8))[0]

    def u32(self, addr: int) -> int:
        return struct.unpack("<I", self.read(addr, 4))[0]

    def i32(self, addr: int) -> int:
        return struct.unpack("<i", self.read(addr, 4))[0]

    def close(self) -> None:
        self._f.close()
