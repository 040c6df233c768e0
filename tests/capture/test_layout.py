"""The contracts between the BPF C and Python: struct layouts, program names, offset tables."""
from __future__ import annotations

import ctypes as ct
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from zym.capture import events
from zym.capture.bpf_loader import GATE_FN, WALK_FN, bpf_dir, bpf_source
from zym.capture.interpreter import Interpreter
from zym.capture.offsets import SUPPORTED_VERSIONS, TABLES
from zym.capture.offsets.debug_offsets import DEBUG_OFFSETS_SIZE, layout_from_debug_offsets
from zym.capture.probes import PROBES


def c_layout(tmp_path: Path) -> dict[str, int]:
    """sizeof and offsetof of every mirrored struct and field, as gcc compiles events.h."""
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "events.h"', "int main(void) {"]
    for name, cls in events.MIRRORS.items():
        lines.append(f'printf("{name} %zu\\n", sizeof(struct {name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{name}.{field} %zu\\n", offsetof(struct {name}, {field}));')
    lines.append('printf("ZYM_MAX_FRAMES %d\\nZYM_MAX_PROBES %d\\n", ZYM_MAX_FRAMES, ZYM_MAX_PROBES);')
    lines.append("return 0; }")
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines))
    subprocess.run(["gcc", f"-I{bpf_dir()}", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_ctypes_mirrors_match_events_h(tmp_path):
    c = c_layout(tmp_path)
    assert c["ZYM_MAX_FRAMES"] == events.MAX_FRAMES
    assert c["ZYM_MAX_PROBES"] == events.MAX_PROBES
    for name, cls in events.MIRRORS.items():
        assert ct.sizeof(cls) == c[name], name
        for field, _ in cls._fields_:
            assert getattr(cls, field).offset == c[f"{name}.{field}"], f"{name}.{field}"


def test_every_probe_has_its_programs():
    """The loader attaches zym_entry_<slot>/zym_return_<slot>: each slot must be compiled."""
    text = bpf_source()
    assert len(PROBES) <= events.MAX_PROBES
    assert "int zym_entry_##n(" in text and "int zym_return_##n(" in text
    compiled = [int(n) for n in re.findall(r"\bZYM_SLOT\((\d+)\)", text)]
    assert sorted(compiled) == list(range(events.MAX_PROBES))
    assert f"int {GATE_FN}(" in text and f"int {WALK_FN}(" in text
    assert len({p.symbol for p in PROBES}) == len(PROBES)


def test_proc_fields_fill_the_bpf_struct():
    interp = Interpreter(1, "/x", (3, 12), TABLES[(3, 12)], 0x1000, 0x2000, 0x3000)
    fields = interp.bpf_proc_fields()
    assert set(fields) == {f for f, _ in events.Proc._fields_} - {"pad"}
    assert fields["tss_key_addr"] == 0x1000 + 1544 + 4     # _PyRuntime.autoTSSkey._key
    assert events.Proc(**fields).has_layout == events.LAYOUT_KNOWN


def test_supported_versions():
    assert SUPPORTED_VERSIONS == ((3, 10), (3, 11), (3, 12), (3, 13))
    assert {tuple(sorted(t)) for t in TABLES.values()} == {tuple(sorted(TABLES[(3, 13)]))}


LIBPYTHON_313 = sorted(Path("/root/.pyenv/versions").glob("3.13.*/lib/libpython3.13.so.1.0"))


@pytest.mark.skipif(not LIBPYTHON_313, reason="no pyenv CPython 3.13 shared library")
def test_debug_offsets_of_313_agree_with_the_generated_table():
    # _PyRuntime's initializer in .PyRuntime: the cookie followed by PY_VERSION_HEX 3.13.x
    data = LIBPYTHON_313[-1].read_bytes()
    start = next(m.start() for m in re.finditer(b"xdebugpy", data)
                 if data[m.end() + 2:m.end() + 4] == bytes([13, 3]))
    layout = layout_from_debug_offsets(data[start:start + DEBUG_OFFSETS_SIZE], TABLES[(3, 13)])
    assert layout == TABLES[(3, 13)]


def test_debug_offsets_refuse_foreign_data():
    with pytest.raises(ValueError, match="cookie"):
        layout_from_debug_offsets(b"\0" * DEBUG_OFFSETS_SIZE, TABLES[(3, 13)])


def test_a_native_copy_is_read_from_its_header_and_its_bytes():
    """The header is parsed from the bytes the ring hands over (only ``len`` stack bytes are
    sent); the values are those the ctypes mirror (checked against gcc above) lays out."""
    n = events.Native(type=events.EV_NATIVE, pid=7, key=0xABCDEF, ip=0x7F0000001234,
                      sp=0x7FFD00000000, bp=0x7FFD00000100, len=5, probe=3)
    n.stack[:5] = (1, 2, 3, 4, 5)
    got = events.NativeCopy.from_bytes(bytes(n)[:events.NATIVE_HEADER + 5])
    assert got == events.NativeCopy(7, 0xABCDEF, 0x7F0000001234, 0x7FFD00000000,
                                    0x7FFD00000100, 3, bytes([1, 2, 3, 4, 5]))
