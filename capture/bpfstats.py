"""The kernel's own accounting of zym's BPF programs: run count and run time per program.

The kernel counts ``run_cnt`` and ``run_time_ns`` per BPF program while run-time statistics
are on. ``enable_run_time_stats()`` turns them on for as long as zym holds the returned file
descriptor (the ``BPF_ENABLE_STATS`` command, Linux 5.8), so zym never leaves the global
``kernel.bpf_stats_enabled`` sysctl changed behind it; each counted run costs two clock reads
(~20-40 ns), which the figures then include. The counters are read from the program's file
descriptor (``/proc/self/fdinfo/FD``: ``run_time_ns``, ``run_cnt``), as ``bpftool prog show``
reads them.
"""
from __future__ import annotations

import ctypes as ct
import os
from dataclasses import dataclass

SYS_BPF = 321            # x86-64
BPF_ENABLE_STATS = 32    # enum bpf_cmd (include/uapi/linux/bpf.h)
BPF_STATS_RUN_TIME = 0   # enum bpf_stats_type


@dataclass(frozen=True)
class ProgStats:
    run_cnt: int
    run_time_ns: int


def enable_run_time_stats() -> int | None:
    """A file descriptor that keeps run-time statistics on until closed; None when the kernel
    refuses (older than 5.8, or no CAP_SYS_ADMIN)."""
    libc = ct.CDLL(None, use_errno=True)
    attr = (ct.c_uint32 * 32)()          # union bpf_attr, zeroed; enable_stats.type first
    attr[0] = BPF_STATS_RUN_TIME
    fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, ct.byref(attr), ct.sizeof(attr))
    return fd if fd >= 0 else None


def prog_stats(fd: int) -> ProgStats | None:
    """The counters of the BPF program behind ``fd`` (this process's); None when unreadable."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return ProgStats(int(fields["run_cnt"]), int(fields["run_time_ns"]))
    except (OSError, KeyError, ValueError):
        return None


def close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
