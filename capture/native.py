"""Native frames of a call, from a copy of its thread's stack: unwound with the libraries'
``.eh_frame`` call frame information, symbolised from their symbol tables, demangled.

The BPF probe copies the stack above the stack pointer once per distinct native path
(``struct zym_native``). After the capture, ``unwind`` replays the DWARF CFI rules
(DWARF 5 section 6.4; the ``.eh_frame`` variant of the LSB) from the probed instruction up
through the callers until the first interpreter frame: what lies between the innermost Python
frame and the CUDA API. Only ``.eh_frame`` is needed, which every C++ library keeps for
exceptions, so torch, cuBLAS and cudart (built without frame pointers) unwind. This is
``perf --call-graph dwarf`` done once per path instead of per sample.

x86-64 only: DWARF registers 6 (rbp), 7 (rsp), 16 (return address).

>>> ElfUnwind("/usr/lib/x86_64-linux-gnu/libc.so.6").symbol(0x29d90)  # doctest: +SKIP
('__libc_start_call_main', 0x29d10)
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
import re
import struct
from dataclasses import dataclass

import numpy as np

from .process import Mapping

RBP, RSP, RA = 6, 7, 16
MAX_NATIVE_FRAMES = 96
CUT_FRAME = "[native stack cut]"     # outermost frame of a native part not unwound to Python
MAX_NAME = 240          # longer demangled names have their template arguments elided
_PT_LOAD, _SHT_SYMTAB, _SHT_DYNSYM = 1, 2, 11
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                 ("value", "<u8"), ("size", "<u8")])
# Interpreter images: the first frame in one of them ends the native part of a stack (the
# Python frames above are the eBPF walk's).
INTERPRETER = re.compile(r"^(lib)?python\d*(\.\d+)?[a-z]*(\.so.*)?$")


class UnwindError(ValueError):
    """Call frame information zym cannot read (a malformed or unsupported entry)."""


# ---------------------------------------------------------------------------- LEB128, pointers
def _leb(d, i: int, signed: bool) -> tuple[int, int]:
    """A LEB128 number at ``i``: (value, index after it)."""
    v = shift = 0
    while True:
        b = d[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if signed and b & 0x40:
                v -= 1 << shift
            return v, i


def _uleb(d, i: int) -> tuple[int, int]:
    return _leb(d, i, False)


def _sleb(d, i: int) -> tuple[int, int]:
    return _leb(d, i, True)


_FIXED = {0x02: "<H", 0x03: "<I", 0x04: "<Q", 0x0A: "<h", 0x0B: "<i", 0x0C: "<q", 0x00: "<Q"}


def _pointer(d, i: int, enc: int, vaddr_of_i: int, datarel: int = 0) -> tuple[int, int]:
    """A DW_EH_PE-encoded pointer at file offset ``i`` (its address ``vaddr_of_i``)."""
    fmt = enc & 0x0F
    if fmt == 0x01:
        v, j = _uleb(d, i)
    elif fmt == 0x09:
        v, j = _sleb(d, i)
    elif fmt in _FIXED:
        v = struct.unpack_from(_FIXED[fmt], d, i)[0]
        j = i + struct.calcsize(_FIXED[fmt])
    else:
        raise UnwindError(f"pointer encoding {enc:#x}")
    app = enc & 0x70
    if app == 0x10:
        v += vaddr_of_i
    elif app == 0x30:
        v += datarel
    elif app not in (0x00,):
        raise UnwindError(f"pointer application {enc:#x}")
    return v & 0xFFFFFFFFFFFFFFFF, j


# ---------------------------------------------------------------------------- CFI rows
@dataclass
class Row:
    """The unwind rule in effect at one address: CFA = reg + offset; saved registers at
    CFA + offset (``offsets``) or as CFA + offset values (``values``)."""

    cfa_reg: int
    cfa_off: int
    offsets: dict[int, int]
    values: dict[int, int]
    undefined: frozenset[int] = frozenset()
    cfa_expr: bytes | None = None       # DW_CFA_def_cfa_expression: the CFA is its value
    exprs: dict[int, tuple[bool, bytes]] | None = None   # reg -> (is a value, expression)


@dataclass
class _Cie:
    code_align: int
    data_align: int
    ra_reg: int
    fde_enc: int
    has_z: bool
    initial: bytes


class ElfUnwind:
    """One ELF file's unwind table (``.eh_frame_hdr`` + ``.eh_frame``) and function symbols."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            self._d = d = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise UnwindError(f"{path}: not an ELF64 little-endian file")
        phoff, shoff = struct.unpack_from("<QQ", d, 0x20)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", d, 0x36)
        self.loads = []     # (p_offset, p_vaddr, p_filesz)
        for k in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", d, phoff + k * phentsize)
            if p_type == _PT_LOAD:
                self.loads.append((p_offset, p_vaddr, p_filesz))
        secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + k * shentsize) for k in range(shnum)]
        names_off = secs[shstrndx][4] if shnum else 0

        def name(s) -> str:
            end = d.find(b"\0", names_off + s[0])
            return d[names_off + s[0]:end].decode("latin-1")

        self._secs = {name(s): s for s in secs}
        self._fdes = self._fde_table()
        self._cies: dict[int, _Cie] = {}
        self._syms = self._symbols(secs)

    # ---- addresses
    def vaddr_of_offset(self, offset: int) -> int | None:
        """The virtual address of a file offset (as mapped by a PT_LOAD segment)."""
        for p_offset, p_vaddr, p_filesz in self.loads:
            if p_offset <= offset < p_offset + max(p_filesz, 1):
                return offset - p_offset + p_vaddr
        return None

    def _sec_vaddr_to_off(self, sec: str, vaddr: int) -> int:
        s = self._secs[sec]
        return s[4] + (vaddr - s[3])

    # ---- .eh_frame_hdr: the binary search table of FDEs
    def _fde_table(self) -> tuple[np.ndarray, np.ndarray] | None:
        hdr = self._secs.get(".eh_frame_hdr")
        if hdr is None or ".eh_frame" not in self._secs:
            return None
        d, off, addr = self._d, hdr[4], hdr[3]
        version, ptr_enc, count_enc, table_enc = d[off:off + 4]
        if version != 1:
            return None
        i = off + 4
        _, i = _pointer(d, i, ptr_enc, addr + (i - off), addr)
        count, i = _pointer(d, i, count_enc, addr + (i - off), addr)
        if table_enc != 0x3B:       # datarel | sdata4: what every linker writes
            return None
        table = np.frombuffer(d, dtype="<i4", count=2 * count, offset=i).reshape(-1, 2)
        return (table[:, 0].astype(np.int64) + addr, table[:, 1].astype(np.int64) + addr)

    def _cie(self, off: int) -> _Cie:
        cie = self._cies.get(off)
        if cie is not None:
            return cie
        d = self._d
        length = struct.unpack_from("<I", d, off)[0]
        i, end = off + 4, off + 4 + length
        if length == 0xFFFFFFFF:
            raise UnwindError("64-bit DWARF CIE")
        i += 4      # CIE id
        version = d[i]
        i += 1
        aug_end = d.find(b"\0", i)
        aug = d[i:aug_end].decode("latin-1")
        i = aug_end + 1
        if "eh" in aug:
            i += 8
        if version >= 4:
            i += 2      # address size, segment size
        code_align, i = _uleb(d, i)
        data_align, i = _sleb(d, i)
        if version == 1:
            ra_reg, i = d[i], i + 1
        else:
            ra_reg, i = _uleb(d, i)
        fde_enc, has_z = 0x00, aug.startswith("z")
        if has_z:
            aug_len, i = _uleb(d, i)
            j = i
            eh_vaddr = self._secs[".eh_frame"][3] - self._secs[".eh_frame"][4]
            for ch in aug[1:]:
                if ch == "R":
                    fde_enc, j = d[j], j + 1
                elif ch == "P":
                    enc, j = d[j], j + 1
                    _, j = _pointer(d, j, enc & 0x7F, eh_vaddr + j)
                elif ch == "L":
                    j += 1
                elif ch in "SB":
                    pass
                else:
                    break
            i += aug_len
        cie = _Cie(code_align, data_align, ra_reg, fde_enc, has_z, bytes(d[i:end]))
        self._cies[off] = cie
        return cie

    def row_at(self, vaddr: int) -> Row | None:
        """The unwind row in effect at ``vaddr``; None without an FDE covering it."""
        if self._fdes is None:
            return None
        starts, fdes = self._fdes
        k = int(np.searchsorted(starts, vaddr, side="right")) - 1
        if k < 0:
            return None
        d = self._d
        off = self._sec_vaddr_to_off(".eh_frame", int(fdes[k]))
        length = struct.unpack_from("<I", d, off)[0]
        if length in (0, 0xFFFFFFFF):
            return None
        end = off + 4 + length
        cie_ptr = struct.unpack_from("<I", d, off + 4)[0]
        cie = self._cie(off + 4 - cie_ptr)
        i = off + 8
        eh = self._secs[".eh_frame"]
        vaddr_of = eh[3] - eh[4]
        pc_begin, i = _pointer(d, i, cie.fde_enc, vaddr_of + i)
        pc_range, i = _pointer(d, i, cie.fde_enc & 0x0F, 0)
        if not pc_begin <= vaddr < pc_begin + pc_range:
            return None
        if cie.has_z:
            aug_len, i = _uleb(d, i)
            i += aug_len
        return _execute(cie, bytes(d[i:end]), pc_begin, vaddr)

    # ---- symbols
    def _symbols(self, secs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        values, sizes, names, str_offs = [], [], [], []
        for s in secs:
            if s[1] not in (_SHT_SYMTAB, _SHT_DYNSYM) or not s[9]:
                continue
            n = s[5] // _SYM.itemsize
            syms = np.frombuffer(self._d, dtype=_SYM, count=n, offset=s[4])
            kind = syms["info"] & 0x0F
            keep = ((kind == _STT_FUNC) | (kind == _STT_GNU_IFUNC)) & (syms["value"] != 0)
            syms = syms[keep]
            values.append(syms["value"].astype(np.int64))
            sizes.append(syms["size"].astype(np.int64))
            names.append(syms["name"].astype(np.int64))
            str_offs.append(np.full(len(syms), secs[s[6]][4], np.int64))
        if not values:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        v, sz = np.concatenate(values), np.concatenate(sizes)
        name_at = np.concatenate(names) + np.concatenate(str_offs)
        order = np.lexsort((-sz, v))      # by address; aliases: the largest size first
        v, sz, name_at = v[order], sz[order], name_at[order]
        _, first = np.unique(v, return_index=True)
        return v[first], sz[first], name_at[first]

    def symbol(self, vaddr: int) -> tuple[str, int] | None:
        """(mangled name, start) of the function holding ``vaddr``, from .symtab/.dynsym."""
        values, sizes, name_at = self._syms
        k = int(np.searchsorted(values, vaddr, side="right")) - 1
        if k < 0 or (sizes[k] and vaddr >= values[k] + sizes[k]):
            return None
        start = int(name_at[k])
        end = self._d.find(b"\0", start)
        return self._d[start:end].decode("latin-1"), int(values[k])


def _execute(cie: _Cie, fde_ins: bytes, pc_begin: int, target: int) -> Row:
    """Run the CIE's initial instructions, then the FDE's up to ``target``."""
    row = Row(RSP, 8, {}, {})
    initial = _run(cie, cie.initial, pc_begin, 1 << 64, row, None)
    return _run(cie, fde_ins, pc_begin, target, initial, initial)


def _copy(r: Row) -> Row:
    return Row(r.cfa_reg, r.cfa_off, dict(r.offsets), dict(r.values), r.undefined, r.cfa_expr,
               dict(r.exprs or {}))


def evaluate(expr: bytes, regs: dict[int, int], mem, push: int | None = None) -> int | None:
    """A DWARF location expression of the kinds compilers write in CFI (GCC's stack
    realignment: ``DW_OP_breg6 -8; DW_OP_deref``; PLT stubs: ``breg7 8; breg16 0; lit15; and;
    lit11; ge; lit3; shl; plus``). None when it needs a register or memory zym does not have,
    or an operation it does not evaluate."""
    stack = [] if push is None else [push]
    i, n = 0, len(expr)
    while i < n:
        op = expr[i]
        i += 1
        if 0x70 <= op <= 0x8F or op == 0x92:             # DW_OP_breg<n>, DW_OP_bregx
            if op == 0x92:
                reg, i = _uleb(expr, i)
            else:
                reg = op - 0x70
            off, i = _sleb(expr, i)
            if reg not in regs:
                return None
            stack.append(regs[reg] + off)
        elif 0x30 <= op <= 0x4F:                          # DW_OP_lit<n>
            stack.append(op - 0x30)
        elif op in (0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F):
            fmt = {0x08: "<B", 0x09: "<b", 0x0A: "<H", 0x0B: "<h", 0x0C: "<I", 0x0D: "<i",
                   0x0E: "<Q", 0x0F: "<q"}[op]
            stack.append(struct.unpack_from(fmt, expr, i)[0])
            i += struct.calcsize(fmt)
        elif op in (0x10, 0x11):
            v, i = (_uleb if op == 0x10 else _sleb)(expr, i)
            stack.append(v)
        elif op == 0x23:                                  # DW_OP_plus_uconst
            v, i = _uleb(expr, i)
            if not stack:
                return None
            stack[-1] += v
        elif op == 0x06:                                  # DW_OP_deref
            if not stack:
                return None
            v = mem(stack.pop() & 0xFFFFFFFFFFFFFFFF)
            if v is None:
                return None
            stack.append(v)
        elif op == 0x12 and stack:                        # dup
            stack.append(stack[-1])
        elif op == 0x13 and stack:                        # drop
            stack.pop()
        elif op in (0x1A, 0x1C, 0x22, 0x24, 0x2A, 0x1E) and len(stack) >= 2:
            b, a = stack.pop(), stack.pop()
            stack.append({0x1A: a & b, 0x1C: a - b, 0x22: a + b, 0x24: a << b,
                          0x2A: int(a >= b), 0x1E: a * b}[op])
        else:
            return None
    return stack[-1] & 0xFFFFFFFFFFFFFFFF if stack else None


def _run(cie: _Cie, ins: bytes, loc: int, target: int, row: Row, initial: Row | None) -> Row:
    row = _copy(row)
    stack: list[Row] = []
    i, n = 0, len(ins)
    ca, da = cie.code_align, cie.data_align

    def restore(reg: int) -> None:
        row.offsets.pop(reg, None)
        row.values.pop(reg, None)
        if row.exprs:
            row.exprs.pop(reg, None)
        if initial is not None:
            if reg in initial.offsets:
                row.offsets[reg] = initial.offsets[reg]
            if reg in initial.values:
                row.values[reg] = initial.values[reg]

    while i < n:
        op = ins[i]
        i += 1
        hi, lo = op & 0xC0, op & 0x3F
        if hi == 0x40:
            loc += lo * ca
            if loc > target:
                return row
            continue
        if hi == 0x80:
            off, i = _uleb(ins, i)
            row.offsets[lo] = off * da
            row.values.pop(lo, None)
            continue
        if hi == 0xC0:
            restore(lo)
            continue
        if op == 0x00:
            continue
        if op in (0x02, 0x03, 0x04):
            fmt = {0x02: "<B", 0x03: "<H", 0x04: "<I"}[op]
            delta = struct.unpack_from(fmt, ins, i)[0]
            i += struct.calcsize(fmt)
            loc += delta * ca
            if loc > target:
                return row
        elif op == 0x01:
            raise UnwindError("DW_CFA_set_loc")
        elif op in (0x05, 0x11):
            reg, i = _uleb(ins, i)
            off, i = (_uleb if op == 0x05 else _sleb)(ins, i)
            row.offsets[reg] = off * da
            row.values.pop(reg, None)
        elif op in (0x14, 0x15):
            reg, i = _uleb(ins, i)
            off, i = (_uleb if op == 0x14 else _sleb)(ins, i)
            row.values[reg] = off * da
            row.offsets.pop(reg, None)
        elif op == 0x06:
            reg, i = _uleb(ins, i)
            restore(reg)
        elif op in (0x07, 0x08):
            reg, i = _uleb(ins, i)
            row.offsets.pop(reg, None)
            row.values.pop(reg, None)
            if op == 0x07:
                row.undefined = row.undefined | {reg}
        elif op == 0x09:
            _, i = _uleb(ins, i)
            _, i = _uleb(ins, i)
            raise UnwindError("DW_CFA_register")
        elif op == 0x0A:
            stack.append(_copy(row))
        elif op == 0x0B:
            if stack:
                saved = stack.pop()
                row.offsets, row.values = saved.offsets, saved.values
                row.undefined, row.exprs = saved.undefined, saved.exprs
                # the whole row, CFA rule included (DWARF 5 6.4.2.4): GCC remembers the row
                # before an epilogue and restores it after, also when the CFA is an expression
                row.cfa_reg, row.cfa_off = saved.cfa_reg, saved.cfa_off
                row.cfa_expr = saved.cfa_expr
        elif op == 0x0C:
            row.cfa_reg, i = _uleb(ins, i)
            row.cfa_off, i = _uleb(ins, i)
            row.cfa_expr = None
        elif op == 0x12:
            row.cfa_reg, i = _uleb(ins, i)
            row.cfa_expr = None
            off, i = _sleb(ins, i)
            row.cfa_off = off * da
        elif op == 0x0D:
            row.cfa_reg, i = _uleb(ins, i)
            row.cfa_expr = None
        elif op == 0x0E:
            row.cfa_off, i = _uleb(ins, i)
        elif op == 0x13:
            off, i = _sleb(ins, i)
            row.cfa_off = off * da
        elif op == 0x0F:
            ln, i = _uleb(ins, i)
            row.cfa_reg, row.cfa_expr = -1, bytes(ins[i:i + ln])
            i += ln
        elif op in (0x10, 0x16):
            reg, i = _uleb(ins, i)
            ln, i = _uleb(ins, i)
            row.offsets.pop(reg, None)
            row.values.pop(reg, None)
            row.exprs = {**(row.exprs or {}), reg: (op == 0x16, bytes(ins[i:i + ln]))}
            i += ln
        elif op == 0x2E:
            _, i = _uleb(ins, i)
        elif op == 0x2F:
            reg, i = _uleb(ins, i)
            off, i = _uleb(ins, i)
            row.offsets[reg] = -off * da
        else:
            raise UnwindError(f"CFA instruction {op:#x}")
    return row


# ---------------------------------------------------------------------------- unwinding
@dataclass(frozen=True)
class NativeFrame:
    pc: int
    library: str         # the mapped file's path
    vaddr: int           # the pc in the file's own addresses


class Images:
    """ELF files by path, opened once; ``root`` prefixes paths (a target's /proc/PID/root)."""

    def __init__(self, root: str = "") -> None:
        self.root = root
        self._open: dict[str, ElfUnwind | None] = {}
        self.errors: dict[str, str] = {}

    def get(self, path: str) -> ElfUnwind | None:
        if path not in self._open:
            try:
                self._open[path] = ElfUnwind(self.root + path)
            except (OSError, ValueError, struct.error, IndexError) as e:
                self._open[path] = None
                self.errors[path] = str(e)
        return self._open[path]


def find_mapping(maps: list[Mapping], starts: np.ndarray, pc: int) -> Mapping | None:
    k = int(np.searchsorted(starts, pc, side="right")) - 1
    if k >= 0 and maps[k].start <= pc < maps[k].end:
        return maps[k]
    return None


def unwind(ip: int, sp: int, bp: int, stack: bytes, maps: list[Mapping], images: Images,
           max_frames: int = MAX_NATIVE_FRAMES) -> tuple[list[NativeFrame], str]:
    """Frames from the probed instruction outwards, up to and excluding the first interpreter
    frame. Returns (frames, why the walk stopped: "python", "end", or what failed)."""
    maps = sorted(maps, key=lambda m: m.start)
    starts = np.array([m.start for m in maps], dtype=np.uint64)
    regs: dict[int, int] = {RSP: sp, RBP: bp}
    pc, first = ip, True
    frames: list[NativeFrame] = []

    def mem(addr: int) -> int | None:
        k = addr - sp
        if 0 <= k <= len(stack) - 8:
            return struct.unpack_from("<Q", stack, k)[0]
        return None

    while len(frames) < max_frames:
        m = find_mapping(maps, starts, pc)
        if m is None:
            return frames, "end" if pc == 0 else "unmapped pc"
        if INTERPRETER.match(os.path.basename(m.path)):
            return frames, "python"
        elf = images.get(m.path)
        vaddr = elf.vaddr_of_offset(pc - m.start + m.offset) if elf else None
        if elf is None or vaddr is None:
            frames.append(NativeFrame(pc, m.path, pc - m.start + m.offset))
            return frames, "unreadable library"
        frames.append(NativeFrame(pc, m.path, vaddr))
        try:
            row = elf.row_at(vaddr if first else vaddr - 1)
        except (UnwindError, struct.error, IndexError) as e:
            return frames, f"cfi: {e}"
        if row is None:
            return frames, "no cfi"
        if RA in row.undefined:
            return frames, "end"
        if row.cfa_expr is not None:
            cfa = evaluate(row.cfa_expr, {**regs, RA: pc}, mem)
            if cfa is None:
                return frames, (f"cfa expression {row.cfa_expr.hex(' ')} not evaluated "
                                f"(registers {sorted(regs)})")
        elif row.cfa_reg in regs:
            cfa = (regs[row.cfa_reg] + row.cfa_off) & 0xFFFFFFFFFFFFFFFF
        else:
            return frames, f"cfa register {row.cfa_reg} unknown"
        new = {r: v for r, v in regs.items() if r not in row.undefined}
        for reg, (is_value, expr) in (row.exprs or {}).items():
            at = evaluate(expr, {**regs, RA: pc}, mem, push=cfa)
            v = at if is_value or at is None else mem(at)
            if v is None:
                new.pop(reg, None)
            else:
                new[reg] = v
        for reg, off in row.offsets.items():
            v = mem(cfa + off)
            if v is None:
                new.pop(reg, None)
                if reg == RA:
                    return frames, "stack copy too short"
            else:
                new[reg] = v
        for reg, off in row.values.items():
            new[reg] = cfa + off
        ra = new.get(RA)
        if ra is None:
            return frames, "no return address"
        new[RSP] = cfa
        new.pop(RA, None)
        if ra == 0:
            return frames, "end"
        regs, pc, first = new, ra, False
    return frames, "too deep"


# ---------------------------------------------------------------------------- names
@functools.cache
def _demangler():
    for name in ("libstdc++.so.6", "libc++abi.so.1"):
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        return fn, libc.free
    return None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The C++ name of an Itanium-mangled symbol (the name itself when it is not one)."""
    if not name.startswith("_Z"):
        return name
    d = _demangler()
    if d is None:
        return name
    fn, free = d
    status = ctypes.c_int(0)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out or status.value != 0:
        return name
    try:
        return ctypes.string_at(out).decode("utf-8", "replace")
    finally:
        free(out)


def shorten(name: str, limit: int = MAX_NAME) -> str:
    """Template arguments elided (``<…>``) when a demangled name is longer than ``limit``;
    then the argument list; then cut."""
    if len(name) <= limit:
        return name
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            if depth == 0:
                out.append("<…>")
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    short = "".join(out).replace("operator<…>", "operator<")
    if len(short) > limit:
        paren = short.find("(")
        if paren > 0:
            short = short[:paren] + "(…)"
    return short[:limit]


# ---------------------------------------------------------------------------- the op layer
# at::_ops::<name>[_<overload>]::{call,redispatch}: the ATen dispatcher's entry for one operator
# (torchgen's Operators.h). The struct is named after the operator and its overload joined by
# "_"; an overload is made of these words (native_functions.yaml's overload names).
_OPS = re.compile(r"^at::_ops::(\w+)::(?:call|redispatch)\(")
_OVERLOAD_WORDS = frozenset((
    "out", "int", "dim", "dimname", "names", "self", "other", "dtype", "device", "layout",
    "memory_format", "correction", "using_ints", "using_names", "symint", "src", "source",
    "start", "low", "generator", "prim"))


def _overload_word(part: str) -> bool:
    return bool(part) and (part[0].isupper() or part in _OVERLOAD_WORDS)


def torch_op(function: str) -> str | None:
    """``aten::<operator>`` for a dispatcher entry frame (``at::_ops::addmm::call(...)``),
    its overload dropped; None for other frames."""
    m = _OPS.match(function)
    if m is None:
        return None
    parts = m.group(1).split("_")
    # drop trailing overload words, keeping at least the first part (and a leading "_")
    while len(parts) > 1 and _overload_word(parts[-1]) and any(parts[:-1]):
        parts.pop()
    return "aten::" + "_".join(parts)


# ---------------------------------------------------------------------------- raw captures
def _raw_rows(raw_dir, table: str) -> list[dict]:
    """The verified rows of one raw stream (Arrow or JSON lines), as dicts: natives and maps
    are one row per distinct path and per mapping, never per call."""
    from pathlib import Path

    from .rawcheck import verify_stream
    from .sink import json_row

    arrow, jsonl = Path(raw_dir) / f"{table}.arrow", Path(raw_dir) / f"{table}.jsonl"
    if jsonl.exists():
        return [json_row(ln) for ln in verify_stream(jsonl).data.decode().splitlines()]
    if not arrow.exists():
        return []
    import pyarrow as pa
    from pyarrow import ipc

    data = verify_stream(arrow).data
    if not data:
        return []
    with ipc.open_stream(pa.BufferReader(data)) as reader:
        return reader.read_all().to_pylist()


@dataclass
class NativeSummary:
    """What the unwinding of one capture's native paths found (capture metadata)."""

    paths: int = 0
    to_python: int = 0          # unwound up to the interpreter: the whole native part
    with_op: int = 0            # passing through the ATen dispatcher
    frames: int = 0
    symbolised: int = 0
    stopped: dict[str, int] | None = None
    unreadable: dict[str, str] | None = None

    def as_meta(self) -> dict:
        return {"paths": self.paths, "unwound_to_python": self.to_python,
                "with_torch_op": self.with_op, "frames": self.frames,
                "frames_symbolised": self.symbolised, "stopped": self.stopped or {},
                "unreadable_libraries": self.unreadable or {}}


def _same_file(path: str, size: int | None, mtime_ns: int | None) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return size is None or (st.st_size == size and (mtime_ns is None or st.st_mtime_ns == mtime_ns))


def native_rows(copy: dict, maps: list[Mapping], images: Images, summary: NativeSummary
                ) -> list[dict]:
    """One native path's rows of ``native_frames``: outermost first, a ``torch_op`` row before
    each dispatcher entry of a new operator."""
    frames, why = unwind(copy["ip"], copy["sp"], copy["bp"], copy["stack"] or b"", maps, images)
    summary.paths += 1
    summary.stopped = summary.stopped or {}
    summary.stopped[why] = summary.stopped.get(why, 0) + 1
    summary.to_python += why == "python"
    rows, last_op = [], None
    if why not in ("python", "end"):    # the callers above are unknown: said, not guessed
        rows.append({"kind": "native", "name": f"{CUT_FRAME} ({why})", "file": None})
    for f in reversed(frames[1:]):      # frames[0] is the probed API function itself
        elf = images.get(f.library)
        sym = elf.symbol(f.vaddr) if elf is not None else None
        full = demangle(sym[0]) if sym else None
        op = torch_op(full) if full else None
        if op is not None and op != last_op:
            rows.append({"kind": "torch_op", "name": op, "file": None})
            last_op = op
        rows.append({"kind": "native", "file": f.library,
                     "name": shorten(full) if full else
                     f"[{os.path.basename(f.library)}+{f.vaddr:#x}]"})
        summary.frames += 1
        summary.symbolised += full is not None
    summary.with_op += last_op is not None
    return [{"pid": copy["pid"], "key": copy["key"], "depth": d, **r} for d, r in enumerate(rows)]


def unwind_raw(raw_dir, meta) -> NativeSummary | None:
    """``resolve_raw`` once: a raw capture that holds stack copies and was not unwound yet is
    unwound now, its summary put in ``meta.extra["native"]``. None when there was nothing to do
    (no copies, or unwound where the capture ran)."""
    from pathlib import Path

    raw_dir = Path(raw_dir)
    if (raw_dir / "native_frames.arrow").exists():
        return None
    summary = resolve_raw(raw_dir)
    if summary is not None:
        meta.extra["native"] = summary.as_meta()
    return summary


def resolve_raw(raw_dir) -> NativeSummary | None:
    """Unwinds and symbolises every native stack copy of a raw capture into its
    ``native_frames`` stream (written whole, then renamed into place). The libraries are read
    from the paths the target mapped, and only when their size and mtime are those recorded:
    run it where the capture ran (``zym capture`` does, before finalizing). None when the
    capture has no native stack copies."""
    from pathlib import Path

    raw_dir = Path(raw_dir)
    copies = _raw_rows(raw_dir, "natives")
    if not copies:
        return None
    by_pid: dict[int, dict[tuple, Mapping]] = {}
    identity: dict[str, tuple[int | None, int | None]] = {}
    for m in _raw_rows(raw_dir, "maps"):
        mapping = Mapping(m["start"], m["end"], m["offset"], m["path"])
        by_pid.setdefault(m["pid"], {})[(mapping.start, mapping.end)] = mapping
        identity[m["path"]] = (m.get("size"), m.get("mtime_ns"))
    images = _CheckedImages(identity)
    summary = NativeSummary()
    rows: list[dict] = []
    seen: set[tuple[int, int]] = set()
    for c in copies:
        if (c["pid"], c["key"]) in seen:
            continue
        seen.add((c["pid"], c["key"]))
        rows.extend(native_rows(c, list(by_pid.get(c["pid"], {}).values()), images, summary))
    summary.unreadable = dict(images.errors)
    _write_native_frames(raw_dir, rows)
    return summary


class _CheckedImages(Images):
    """Images whose files must still be the ones the target mapped (size and mtime)."""

    def __init__(self, identity: dict[str, tuple[int | None, int | None]]) -> None:
        super().__init__()
        self._identity = identity

    def get(self, path: str) -> ElfUnwind | None:
        if path not in self._open and not _same_file(path, *self._identity.get(path, (None, None))):
            self._open[path] = None
            self.errors[path] = "not the file the target mapped (missing, or another size/mtime)"
        return super().get(path)


def _write_native_frames(raw_dir, rows: list[dict]) -> None:
    import pyarrow as pa
    from pyarrow import ipc

    from .rawcheck import ChecksummedFile
    from .sink import raw_schema

    schema = raw_schema("native_frames")
    tmp = raw_dir / "native_frames.arrow.tmp"
    sink = ChecksummedFile(tmp)
    writer = ipc.new_stream(sink, schema)
    if rows:
        writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=schema))
    writer.close()
    sink.checkpoint()
    sink.close()
    for suffix in (".sums", ""):
        os.replace(f"{tmp}{suffix}" if suffix else tmp,
                   raw_dir / f"native_frames.arrow{suffix}")
