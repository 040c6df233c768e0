"""Read one struct member offset from the kernel's BTF (/sys/kernel/btf/vmlinux).

BCC compiles against /lib/modules/$(uname -r)/build, which on cloud and microVM kernels is
often another kernel's header tree (setup-ebpf.sh links Debian's in). A field read through
those headers compiles and silently returns garbage; the offset from BTF is the running
kernel's own. Only ``task_struct.thread.fsbase`` is needed (the thread's TLS base).
"""
from __future__ import annotations

import struct
from pathlib import Path

BTF_PATH = Path("/sys/kernel/btf/vmlinux")
_KIND_STRUCT, _KIND_UNION = 4, 5
# Bytes following the 12-byte type header, by BTF kind (include/uapi/linux/btf.h).
_EXTRA = {1: lambda v: 4, 3: lambda v: 12, 4: lambda v: 12 * v, 5: lambda v: 12 * v,
          6: lambda v: 8 * v, 13: lambda v: 8 * v, 14: lambda v: 4, 15: lambda v: 12 * v,
          17: lambda v: 4, 19: lambda v: 12 * v}


def _struct_members(data: bytes, wanted: set[str]) -> dict[str, dict[str, int]]:
    """{struct name: {member name: byte offset}} for the wanted struct names."""
    _, _, _, hdr_len, type_off, type_len, str_off, _ = struct.unpack_from("<HBBIIIII", data)
    t0, s0 = hdr_len + type_off, hdr_len + str_off

    def name(off: int) -> str:
        return data[s0 + off:data.index(b"\0", s0 + off)].decode()

    found: dict[str, dict[str, int]] = {}
    p = t0
    while p < t0 + type_len:
        name_off, info, _ = struct.unpack_from("<III", data, p)
        kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        if kind == _KIND_STRUCT and name(name_off) in wanted and name(name_off) not in found:
            members = {}
            for i in range(vlen):
                m_name, _, m_off = struct.unpack_from("<III", data, p + 12 + 12 * i)
                members[name(m_name)] = ((m_off & 0xFFFFFF) if kflag else m_off) // 8
            found[name(name_off)] = members
        p += 12 + _EXTRA.get(kind, lambda v: 0)(vlen)
    return found


def fsbase_offset(path: Path = BTF_PATH) -> int:
    """offsetof(struct task_struct, thread.fsbase) of the running kernel (x86-64)."""
    data = path.read_bytes()
    if struct.unpack_from("<H", data)[0] != 0xEB9F:
        raise ValueError(f"{path}: not BTF")
    members = _struct_members(data, {"task_struct", "thread_struct"})
    return members["task_struct"]["thread"] + members["thread_struct"]["fsbase"]
