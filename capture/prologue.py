"""Where in a probed function the uprobe goes: on an instruction the kernel emulates.

A uprobe replaces one instruction with ``int3``. When it fires, the kernel either *emulates*
the replaced instruction (x86-64: ``push reg``, ``nop`` forms, ``call``/``jmp``/``jcc`` with a
relative target; ``arch/x86/kernel/uprobes.c``) or *single-steps* a copy of it out of line,
which takes a second trap (#DB). In a KVM guest (the Firecracker VMs zym was measured on) that
second trap costs ~15 µs against ~1 µs for the whole emulated path (docs/benchmarks.md), so a
probe on the first instruction of a CET-built function (``endbr64``, never emulated) costs 15x
what it must.

``endbr64`` changes no register and no memory, so a probe on the instruction after it sees the
same arguments (registers and stack, the return address still at ``[rsp]``, which return
probes need). That is the only instruction skipped: anything else may move an argument.

>>> choose(bytes.fromhex("f30f1efa55"))
Placement(offset=4, emulated=True, first='f30f1efa55')
>>> choose(bytes.fromhex("4883ec08")).emulated
False
"""
from __future__ import annotations

from dataclasses import dataclass

ENDBR64 = bytes.fromhex("f30f1efa")
PROLOGUE_BYTES = 16


@dataclass(frozen=True)
class Placement:
    offset: int       # bytes from the symbol's start
    emulated: bool    # the probed instruction is one the kernel emulates (no single-step)
    first: str        # the function's first bytes, hex (recorded in the capture metadata)


def emulated(code: bytes) -> bool:
    """True when the instruction at the start of ``code`` is one x86-64 uprobes emulate."""
    if not code:
        return False
    b0 = code[0]
    if 0x50 <= b0 <= 0x57 or b0 == 0x90:                   # push r64, nop
        return True
    if b0 == 0x41 and len(code) > 1 and 0x50 <= code[1] <= 0x57:   # push r8-r15
        return True
    if b0 in (0xE8, 0xE9, 0xEB) or 0x70 <= b0 <= 0x7F:     # call/jmp rel, jcc rel8
        return True
    if b0 == 0x66 and code[1:2] == b"\x90":                 # 2-byte nop
        return True
    if b0 == 0x0F and len(code) > 1:
        return code[1] == 0x1F or 0x80 <= code[1] <= 0x8F   # nopl/nopw forms, jcc rel32
    return b0 == 0x66 and code[1:3] == b"\x0f\x1f"      # nopw


def choose(code: bytes) -> Placement:
    """Where to probe a function whose first bytes are ``code``."""
    first = code[:PROLOGUE_BYTES].hex()
    if code.startswith(ENDBR64) and emulated(code[len(ENDBR64):]):
        return Placement(len(ENDBR64), True, first)
    return Placement(0, emulated(code), first)


def read_function_start(path: str, file_offset: int) -> bytes:
    """The first bytes of a function at ``file_offset`` of a library (empty when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(file_offset)
            return f.read(PROLOGUE_BYTES)
    except OSError:
        return b""
