"""A minimal ELF64 little-endian reader: the file type and symbol values, nothing more.

zym needs a handful of data symbols of the target's interpreter (``_PyRuntime``,
``Py_Version``, ``_Py_NoneStruct``, ``PyCode_Type``); reading ``.symtab``/``.dynsym`` directly
keeps binutils and pyelftools out of the install.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path

ET_EXEC = 2
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11


class ElfError(ValueError):
    """Not an ELF64 little-endian file, or a malformed one."""


class ElfFile:
    """Symbols of one ELF file; ``symbols(names)`` maps the wanted names to their values."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # mmap: a libpython with symbols is ~30 MB, of which only headers and symbol tables
        # are touched; reading it all cost tens of ms per detection.
        with open(self.path, "rb") as f:
            self._data = d = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ElfError(f"{path}: not an ELF64 little-endian file")
        self.e_type = struct.unpack_from("<H", d, 16)[0]
        self._shoff = struct.unpack_from("<Q", d, 0x28)[0]
        self._shentsize, self._shnum = struct.unpack_from("<HH", d, 0x3A)

    def _sections(self) -> list[tuple[int, int, int, int, int]]:
        """(type, offset, size, link, entsize) of every section header."""
        out = []
        for i in range(self._shnum):
            base = self._shoff + i * self._shentsize
            _, sh_type, _, _, off, size, link, _, _, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", self._data, base)
            out.append((sh_type, off, size, link, entsize))
        return out

    def symbols(self, names: set[str]) -> dict[str, int]:
        """Values (virtual addresses) of the named symbols found in .symtab or .dynsym."""
        found: dict[str, int] = {}
        wanted = {n.encode() for n in names}
        sections = self._sections()
        # .dynsym first: small, and it holds every symbol zym needs in a shared libpython.
        for sh_type, off, size, link, entsize in sorted(sections, key=lambda s: s[0] != _SHT_DYNSYM):
            if sh_type not in (_SHT_SYMTAB, _SHT_DYNSYM) or not entsize:
                continue
            str_off = sections[link][1]
            for pos in range(off, off + size, entsize):
                st_name, _, _, _, st_value, _ = struct.unpack_from("<IBBHQQ", self._data, pos)
                if not st_value:
                    continue
                end = self._data.find(b"\0", str_off + st_name)
                name = self._data[str_off + st_name:end]
                if name in wanted:
                    found.setdefault(name.decode(), st_value)
            if len(found) == len(names):
                break
        return found
