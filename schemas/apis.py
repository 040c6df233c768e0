"""What a CUDA runtime or driver API call does, from its name.

Shared by every producer (Kineto import, eBPF capture, CUPTI) so that a call's ``kind`` means the
same thing whichever tool saw it. Names follow the CUDA 12/13 runtime and driver APIs, with their
``_v2``/``_v3`` and per-thread-stream (``_ptsz``, ``_ptds``) suffixes.
"""
from __future__ import annotations

import polars as pl

# First match wins. Patterns are regular expressions on the API name.
# HIP (ROCm's Kineto traces) names the same calls ``hip...``, and launches modules' kernels
# with ``hipModuleLaunchKernel``/``hipExtModuleLaunchKernel``.
KIND_PATTERNS: tuple[tuple[str, str], ...] = (
    ("launch", (r"^(cuda|cu|hip)(LaunchKernel|LaunchKernelEx|LaunchKernelExC"
                r"|LaunchCooperativeKernel|LaunchCooperativeKernelMultiDevice|GraphLaunch"
                r"|LaunchHostFunc|ExtLaunchKernel|ModuleLaunchKernel|ExtModuleLaunchKernel"
                r"|HccModuleLaunchKernel|ExtLaunchMultiKernelMultiDevice)")),
    ("copy", r"^(cuda|cu|hip)Mem[cC]py"),
    ("memset", r"^(cuda|cu|hip)Memset"),
    ("sync", (r"^(cuda|cu|hip)(DeviceSynchronize|StreamSynchronize|CtxSynchronize"
              r"|EventSynchronize|ThreadSynchronize)")),
)

# Memory given to or taken back from the driver (device, page-locked host, stream-ordered).
MEMORY_PATTERN = (r"^(cuda|cu|hip)(Malloc|Free|MemAlloc|MemFree|MallocHost|FreeHost|HostAlloc"
                  r"|MemHostAlloc|MemAllocHost|MemFreeHost|HostRegister|MemHostRegister"
                  r"|HostUnregister|MemHostUnregister|MallocAsync|FreeAsync|MemAllocAsync"
                  r"|MemFreeAsync|MallocManaged|MemAllocManaged|MallocPitch|MemAllocPitch)"
                  r"(_v\d)?(_ptsz|_ptds)?$")
# Frees wait for the device to finish its work first (CUDA's implicit synchronization); the
# stream-ordered ones (FreeAsync) do not.
FREE_SYNC_PATTERN = r"^(cuda|cu|hip)(Free|MemFree|FreeHost|MemFreeHost|HostUnregister|MemHostUnregister)(_v\d)?$"

# Event syncs wait for one recorded event, not for all the work queued before them.
EVENT_SYNC_PATTERN = r"^(cuda|cu|hip)EventSynchronize"
# Stream syncs wait for one stream's work (where there are several, not for all of it).
STREAM_SYNC_PATTERN = r"^(cuda|cu|hip)StreamSynchronize"

# Driver copies name their direction; runtime ones (cudaMemcpyAsync) take it from an argument.
_DIRECTION = r"^(?:cu|hip)Memcpy(?:Peer)?(HtoD|DtoH|DtoD|HtoA|AtoH|DtoA|AtoD|AtoA|Peer)"
_DIRECTION_MAP = {"HtoA": "HtoD", "AtoH": "DtoH", "DtoA": "DtoD", "AtoD": "DtoD",
                  "AtoA": "DtoD", "Peer": "PtoP"}


def api_kind(name: pl.Expr) -> pl.Expr:
    """Expression: the call kind (launch, copy, memset, sync, other) of an API name column."""
    expr = pl.lit("other")
    for kind, pattern in reversed(KIND_PATTERNS):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(kind)).otherwise(expr)
    return expr


def api_copy_kind(name: pl.Expr) -> pl.Expr:
    """Expression: the copy direction named by a driver copy API (null when the name has none)."""
    raw = name.str.extract(_DIRECTION, 1)
    return raw.replace(_DIRECTION_MAP)


def is_memory_api(name: pl.Expr) -> pl.Expr:
    """Expression: true for calls that give memory to the driver or take it back
    (:data:`MEMORY_PATTERN`)."""
    return name.str.contains(MEMORY_PATTERN)


def is_event_sync(name: pl.Expr) -> pl.Expr:
    """Expression: true for a wait on one event (:data:`EVENT_SYNC_PATTERN`)."""
    return name.str.contains(EVENT_SYNC_PATTERN)


def is_stream_sync(name: pl.Expr) -> pl.Expr:
    """Expression: true for a wait on one stream (:data:`STREAM_SYNC_PATTERN`)."""
    return name.str.contains(STREAM_SYNC_PATTERN)


def is_blocking_api(name: pl.Expr) -> pl.Expr:
    """Expression: true for calls that block the CPU thread until the GPU catches up: syncs,
    synchronous copies/memsets (those without ``Async`` in their name) and memory frees."""
    sync_like = name.str.contains(KIND_PATTERNS[3][1])
    sync_copy = (name.str.contains(r"^(cuda|cu|hip)(Mem[cC]py|Memset)")
                 & ~name.str.contains("Async"))
    return sync_like | sync_copy | name.str.contains(FREE_SYNC_PATTERN)
