"""Turn (code object, instruction) pairs read by BPF into (qualified name, file, line).

Code objects are read from the live target through /proc/PID/mem, once per address (a hot
loop's stack reads nothing after the first time). Line numbers come from decoding the code
object's line table:

* 3.11+: the location table (CPython ``Objects/locations.md``);
* 3.10: PEP 626 ``co_linetable`` (byte-range delta, line delta) pairs
  (CPython v3.10 ``Objects/lnotab_notes.txt``).

A frame that cannot be read degrades to a named placeholder and is counted, never raised.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from .interpreter import Interpreter
from .process import ProcessMemory

UNREADABLE = ("[unreadable frame]", "", 0)
MAX_STRING = 4096
MAX_LINETABLE = 1 << 20
MAX_SOURCE_FILE = 4 << 20    # larger source files are not read (their lines stay null)
MAX_SOURCE_TEXT = 200        # characters kept of a line's text


@dataclass
class SourceLines:
    """The text of source lines as the target sees them: its files are read through
    ``/proc/PID/root`` (its mount namespace, a container's included), relative names against
    ``/proc/PID/cwd``, once per file (cached, bounded by ``MAX_SOURCE_FILE``)."""

    pid: int
    files: dict[str, list[str] | None] = field(default_factory=dict)

    def line(self, file: str, line: int | None) -> str | None:
        """Line ``line`` of ``file``, indentation stripped, at most ``MAX_SOURCE_TEXT``
        characters; None when the file or the line cannot be read."""
        if not file or line is None:
            return None
        lines = self.files[file] if file in self.files else self._load(file)
        if not lines or not 1 <= line <= len(lines):
            return None
        return lines[line - 1].strip()[:MAX_SOURCE_TEXT] or None

    def _load(self, file: str) -> list[str] | None:
        lines = None
        if not file.startswith("<"):     # "<frozen ...>", "<string>": no file
            if os.path.isabs(file):
                path = f"/proc/{self.pid}/root{file}"
            else:
                path = os.path.join(f"/proc/{self.pid}/cwd", file)
            try:
                if os.stat(path).st_size <= MAX_SOURCE_FILE:
                    with open(path, "rb") as f:
                        lines = f.read(MAX_SOURCE_FILE).decode("utf-8", "replace").splitlines()
            except OSError:
                lines = None
        self.files[file] = lines
        return lines


@dataclass
class LineTable:
    """Instruction ranges (in code units) with their line; ``line_at`` bisects."""

    starts: list[int]
    ends: list[int]
    lines: list[int | None]

    def line_at(self, index: int) -> int | None:
        i = bisect.bisect_right(self.starts, index) - 1
        if i >= 0 and index < self.ends[i]:
            return self.lines[i]
        return None


def _varint(data: bytes, i: int) -> tuple[int, int]:
    b = data[i]
    i += 1
    val, shift = b & 63, 0
    while b & 64:
        b = data[i]
        i += 1
        shift += 6
        val |= (b & 63) << shift
    return val, i


def _svarint(data: bytes, i: int) -> tuple[int, int]:
    v, i = _varint(data, i)
    return (-(v >> 1) if v & 1 else v >> 1), i


def parse_location_table(data: bytes, firstlineno: int) -> LineTable:
    """3.11+ location table: entries of (code units, line delta, columns) in several forms."""
    starts, ends, lines = [], [], []
    line, index, i = firstlineno, 0, 0
    while i < len(data):
        first = data[i]
        i += 1
        code, length = (first >> 3) & 15, (first & 7) + 1
        entry_line: int | None = line
        if code == 15:              # no location
            entry_line = None
        elif code == 14:            # long form: line delta, end line, columns
            delta, i = _svarint(data, i)
            line += delta
            entry_line = line
            for _ in range(3):
                _, i = _varint(data, i)
        elif code == 13:            # no columns
            delta, i = _svarint(data, i)
            line += delta
            entry_line = line
        elif code >= 10:            # one-line forms: delta in the code, two column bytes
            line += code - 10
            entry_line = line
            i += 2
        else:                       # short form: same line, one column byte
            i += 1
        starts.append(index)
        ends.append(index + length)
        lines.append(entry_line)
        index += length
    return LineTable(starts, ends, lines)


def parse_pep626_table(data: bytes, firstlineno: int) -> LineTable:
    """3.10 ``co_linetable``: (byte delta: u8, line delta: s8) pairs; -128 means no line.
    Ranges are converted from bytes to code units (2 bytes each) like 3.11's."""
    starts, ends, lines = [], [], []
    line, end = firstlineno, 0
    for i in range(0, len(data) - 1, 2):
        sdelta, ldelta = data[i], data[i + 1] - 256 if data[i + 1] > 127 else data[i + 1]
        start, end = end, end + sdelta
        entry_line: int | None = None
        if ldelta != -128:
            line += ldelta
            entry_line = line
        if end > start:
            starts.append(start // 2)
            ends.append(end // 2)
            lines.append(entry_line)
    return LineTable(starts, ends, lines)


@dataclass
class CodeInfo:
    name: str
    file: str
    firstlineno: int
    table: LineTable


@dataclass
class Symbolizer:
    """Symbolizes the frames of one process; keeps a code-object cache for its lifetime."""

    interp: Interpreter
    mem: ProcessMemory
    cache: dict[int, CodeInfo | None] = field(default_factory=dict)
    unreadable: int = 0
    sources: SourceLines | None = None

    def source(self, file: str, line: int | None) -> str | None:
        """The text of ``file``'s line ``line`` in the target (see ``SourceLines``)."""
        if self.sources is None:
            self.sources = SourceLines(self.interp.pid)
        return self.sources.line(file, line)

    def frame(self, code: int, instr: int) -> tuple[str, str, int]:
        """(qualified name, file, executing line) of one frame; placeholders when unreadable.
        3.10 has no co_qualname, so its names are the bare function name."""
        info = self.cache.get(code) if code in self.cache else self._load(code)
        if info is None:
            self.unreadable += 1
            return UNREADABLE
        line = info.table.line_at(self._instruction_index(code, instr))
        return info.name, info.file, line if line is not None else info.firstlineno

    def _instruction_index(self, code: int, instr: int) -> int:
        if self.interp.version < (3, 11):
            return instr & 0xFFFFFFFF      # f_lasti: already an index in code units
        return (instr - (code + self.interp.layout["co_code_adaptive"])) // 2

    def _load(self, code: int) -> CodeInfo | None:
        lay, mem = self.interp.layout, self.mem
        try:
            if self.interp.code_type_addr and mem.u64(code + lay["ob_type"]) != self.interp.code_type_addr:
                info = None     # freed and reused, or not a code object at all
            else:
                name_field = "co_qualname" if lay["co_qualname"] >= 0 else "co_name"
                first = mem.i32(code + lay["co_firstlineno"])
                table_obj = mem.u64(code + lay["co_linetable"])
                size = min(mem.u64(table_obj + lay["ob_size"]), MAX_LINETABLE)
                raw = mem.read(table_obj + lay["bytes_sval"], size)
                parse = parse_location_table if self.interp.version >= (3, 11) else parse_pep626_table
                info = CodeInfo(self._string(mem.u64(code + lay[name_field])),
                                self._string(mem.u64(code + lay["co_filename"])),
                                first, parse(raw, first))
        except (OSError, IndexError, ValueError):
            info = None
        self.cache[code] = info
        return info

    def _string(self, obj: int) -> str:
        """A str object's text (compact ASCII, or compact latin-1/UCS-2/UCS-4)."""
        lay, mem = self.interp.layout, self.mem
        state = mem.u32(obj + lay["unicode_state"])
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        length = min(mem.u64(obj + 16), MAX_STRING)     # PyASCIIObject.length follows ob_type
        if not compact or kind not in (1, 2, 4):
            raise ValueError("non-compact string")
        if ascii_:
            return mem.read(obj + lay["ascii_data"], length).decode("ascii", "replace")
        data = mem.read(obj + lay["compact_data"], length * kind)
        return data.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind], "replace")
