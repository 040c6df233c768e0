"""Find the CPython interpreter inside a target process and describe its layout.

The interpreter lives in ``libpython3.X.so`` (shared builds: pyenv, most venvs) or in the
executable itself (static builds: Debian/Ubuntu ``/usr/bin/python3.X``). Either way the object
that defines ``_PyRuntime`` is the one to read; its version comes from ``Py_Version``
(3.11+) or from the library/executable name (3.10, which lacks ``Py_Version``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from zym.schemas.errors import CaptureError

from .elf import ET_EXEC, ElfError, ElfFile
from .offsets import SUPPORTED_VERSIONS, TABLES, layout_from_debug_offsets
from .offsets.debug_offsets import DEBUG_OFFSETS_SIZE
from .process import Mapping, ProcessMemory, host_path, load_bias, read_maps

_LIBPYTHON = re.compile(r"libpython(3\.\d+)t?\.so")
_EXE_VERSION = re.compile(r"python(3\.\d+)")
_SYMBOLS = {"_PyRuntime", "Py_Version", "_Py_NoneStruct", "PyCode_Type"}
# glibc x86-64 struct pthread: specific_1stblock[key].data = fsbase + 0x310 + key * 16 + 8
# (glibc 2.26-2.39 `nptl/descr.h`; same constants in BCC PyPerf and OTel's libc tables).
GLIBC_TSD_FIRST = 0x310 + 8
GLIBC_TSD_STRIDE = 16


class UnsupportedInterpreter(CaptureError):
    """The target runs a Python zym cannot read."""


@dataclass(frozen=True)
class Interpreter:
    """Where the interpreter of one process lives and how its structs are laid out."""

    pid: int
    path: str                 # libpython or executable defining _PyRuntime
    version: tuple[int, int]
    layout: dict[str, int]    # offsets/cpython.py field names
    runtime_addr: int         # &_PyRuntime in the target
    none_addr: int
    code_type_addr: int

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def bpf_proc_fields(self) -> dict[str, int]:
        """Values for events.h ``struct zym_proc`` (the BPF program's per-process layout)."""
        lay = self.layout
        ts = [lay["ts_frame"]] + ([lay["ts_datastack_chunk"]] if lay["ts_datastack_chunk"] >= 0 else [])
        copied = ("cframe_current", "ts_frame", "f_code", "f_previous", "f_instr", "f_owner",
                  "owned_by_cstack")
        return {
            "tss_key_addr": self.runtime_addr + lay["rt_autotss"] + lay["tss_key"],
            "none_addr": self.none_addr, "has_layout": 1, "tss_key": -1,
            "ts_chunk": lay["ts_datastack_chunk"], "chunk_data": max(lay["chunk_data"], 0),
            "ts_lo": min(ts), "ts_span": max(ts) + 8 - min(ts),
            "tsd_first": GLIBC_TSD_FIRST, "tsd_stride": GLIBC_TSD_STRIDE,
            **{name: lay[name] for name in copied},
            "frame_read": max(lay["f_code"] + 8, lay["f_previous"] + 8, lay["f_instr"] + 8,
                              lay["f_owner"] + 1),
        }


def _python_object(pid: int, maps: list[Mapping]) -> str | None:
    for m in maps:
        if _LIBPYTHON.search(os.path.basename(m.path)):
            return m.path
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    return exe if any(m.path == exe for m in maps) else None


def _version(mem: ProcessMemory, path: str, syms: dict[str, int], bias: int) -> tuple[int, int]:
    if "Py_Version" in syms:    # 3.11+: PY_VERSION_HEX as data
        hexv = mem.u32(bias + syms["Py_Version"])
        return hexv >> 24, (hexv >> 16) & 0xFF
    m = _LIBPYTHON.search(os.path.basename(path)) or _EXE_VERSION.search(os.path.basename(path))
    if not m:
        raise UnsupportedInterpreter(
            f"cannot tell the Python version of {path}: no Py_Version symbol and no version "
            "in its name; zym capture supports CPython " + _supported())
    major, minor = m.group(1).split(".")
    return int(major), int(minor)


def _supported() -> str:
    return ", ".join(f"{a}.{b}" for a, b in SUPPORTED_VERSIONS)


def detect(pid: int) -> Interpreter | None:
    """The interpreter of ``pid``, or None when no CPython is mapped (yet: a process that just
    exec'd maps libpython a moment later). Raises UnsupportedInterpreter for a CPython that
    zym cannot read."""
    maps = read_maps(pid)
    path = _python_object(pid, maps)
    if path is None:
        return None
    try:
        elf = ElfFile(host_path(pid, path))
    except (OSError, ElfError):
        return None
    syms = elf.symbols(_SYMBOLS)
    if "_PyRuntime" not in syms:
        return None
    bias = 0 if elf.e_type == ET_EXEC else load_bias(maps, path)
    if bias is None:
        return None
    mem = ProcessMemory(pid)
    try:
        version = _version(mem, path, syms, bias)
        if version not in TABLES:
            raise UnsupportedInterpreter(
                f"PID {pid} runs Python {version[0]}.{version[1]}; zym capture supports "
                f"CPython {_supported()}")
        runtime = bias + syms["_PyRuntime"]
        layout = TABLES[version]
        if version >= (3, 13):
            try:
                layout = layout_from_debug_offsets(mem.read(runtime, DEBUG_OFFSETS_SIZE), layout)
            except ValueError as e:
                raise UnsupportedInterpreter(f"PID {pid} ({path}): {e}") from None
    finally:
        mem.close()
    return Interpreter(pid, path, version, layout, runtime,
                       bias + syms.get("_Py_NoneStruct", 0), bias + syms.get("PyCode_Type", 0))
