"""ctypes mirrors of bpf/events.h. tests/capture/test_layout.py compiles events.h with gcc and
checks every size and offset here against it, so the two cannot drift."""
from __future__ import annotations

import ctypes as ct
import struct
from dataclasses import dataclass

import numpy as np

MAX_FRAMES = 128
MAX_PROBES = 64
EV_CALL, EV_STACK, EV_PROC, EV_NATIVE = 1, 2, 3, 4
NATIVE_MAX = 131072
F_NO_LAYOUT, F_NO_TSTATE, F_NO_FRAMES, F_NOT_SAMPLED, F_TRUNCATED = 1, 2, 4, 8, 16
PROC_FORK, PROC_EXEC, PROC_GATE = 1, 2, 3
LAYOUT_UNKNOWN, LAYOUT_KNOWN, LAYOUT_NONE = 0, 1, 2
COUNTERS = {"calls": 0, "nested": 1, "lost_calls": 2, "lost_stacks": 3, "not_sampled": 4,
            "bulk_reads": 5, "frame_reads": 6, "native_sent": 7, "lost_native": 8}
NCOUNTERS = 10
CFG_SAMPLE, CFG_NATIVE, NCONFIG = 0, 1, 4


class Call(ct.Structure):
    _fields_ = [("type", ct.c_uint32), ("probe", ct.c_uint32), ("pid", ct.c_uint32),
                ("tid", ct.c_uint32), ("ts_ns", ct.c_uint64), ("dur_ns", ct.c_uint64),
                ("stack_hash", ct.c_uint64), ("size_arg", ct.c_uint64), ("stream", ct.c_uint64),
                ("copy_arg", ct.c_uint64), ("flags", ct.c_uint32), ("pad", ct.c_uint32),
                ("native_key", ct.c_uint64)]


# A call record as numpy sees it: the calls ring is drained into arrays of it (ringbuf.py).
CALL_DTYPE = np.dtype(Call)


class Frame(ct.Structure):
    _fields_ = [("code", ct.c_uint64), ("instr", ct.c_uint64)]


class Stack(ct.Structure):
    _fields_ = [("type", ct.c_uint32), ("pid", ct.c_uint32), ("hash", ct.c_uint64),
                ("nframes", ct.c_uint32), ("flags", ct.c_uint32), ("frames", Frame * MAX_FRAMES)]


class Native(ct.Structure):
    """A native stack copy (``struct zym_native``); only ``len`` bytes of ``stack`` are sent."""

    _fields_ = [("type", ct.c_uint32), ("pid", ct.c_uint32), ("key", ct.c_uint64),
                ("ip", ct.c_uint64), ("sp", ct.c_uint64), ("bp", ct.c_uint64),
                ("len", ct.c_uint32), ("probe", ct.c_uint32), ("stack", ct.c_uint8 * NATIVE_MAX)]


NATIVE_HEADER = Native.stack.offset
# struct zym_native up to its stack: type, pid, key, ip, sp, bp, len, probe
_NATIVE_HEAD = struct.Struct("<IIQQQQII")


@dataclass(frozen=True)
class NativeCopy:
    """A received native stack copy: the registers at the probe and the stack's bytes."""

    pid: int
    key: int
    ip: int
    sp: int
    bp: int
    probe: int
    stack: bytes

    @classmethod
    def from_bytes(cls, data: bytes) -> NativeCopy:
        _, pid, key, ip, sp, bp, length, probe = _NATIVE_HEAD.unpack_from(data)
        return cls(pid, key, ip, sp, bp, probe,
                   bytes(data[NATIVE_HEADER:NATIVE_HEADER + min(length, NATIVE_MAX)]))


class ProcEvent(ct.Structure):
    _fields_ = [("type", ct.c_uint32), ("what", ct.c_uint32), ("pid", ct.c_uint32),
                ("ppid", ct.c_uint32)]


class Proc(ct.Structure):
    _fields_ = [("tss_key_addr", ct.c_uint64), ("none_addr", ct.c_uint64),
                ("tss_key", ct.c_int32), ("ts_chunk", ct.c_int32), ("chunk_data", ct.c_uint32),
                ("ts_lo", ct.c_uint32), ("ts_span", ct.c_uint32),
                ("has_layout", ct.c_uint32), ("tsd_first", ct.c_uint32),
                ("tsd_stride", ct.c_uint32), ("cframe_current", ct.c_int32),
                ("ts_frame", ct.c_uint32), ("f_code", ct.c_uint32), ("f_previous", ct.c_uint32),
                ("f_instr", ct.c_uint32), ("f_owner", ct.c_uint32),
                ("owned_by_cstack", ct.c_uint32), ("frame_read", ct.c_uint32)]


class ProbeSpec(ct.Structure):
    _fields_ = [("size_slot", ct.c_int16), ("stream_slot", ct.c_int16),
                ("copy_slot", ct.c_int16), ("has_return", ct.c_uint16), ("stream_deref", ct.c_int32)]


MIRRORS: dict[str, type[ct.Structure]] = {
    "zym_call": Call, "zym_frame": Frame, "zym_stack": Stack, "zym_proc_event": ProcEvent,
    "zym_native": Native,
    "zym_proc": Proc, "zym_probe_spec": ProbeSpec,
}
