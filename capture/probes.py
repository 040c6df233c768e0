"""The CUDA entry points zym capture probes, as data. The loader iterates over ``PROBES``.

A probe's position in ``PROBES`` is its BPF slot: the kernel programs are ``zym_entry_<slot>``
and ``zym_return_<slot>`` (zym.bpf.c), and the slot tells the BPF code how to read the
arguments (``struct zym_probe_spec``). Argument *slots* count integer arguments in the SysV
x86-64 ABI: 0-5 travel in registers, 6+ on the stack; a ``dim3`` passed by value takes two.

Driver entry points (libcuda) are the funnel every launch goes through: cudart, the static
cudart inside cuBLAS/cuDNN, Triton and hand-written driver code all reach the exported
``cuLaunchKernel``/``cuLaunchKernelEx`` (measured on an H200: their counts equal CUPTI's
kernel count, ../shared/device/README.md). Runtime entry points (libcudart) only add the
name user code called; they cost two more traps per call, so they are opt-in.

Return probes are used only where the duration is the point (syncs, blocking copies) or the
nesting needs them (every runtime probe: its return ends the "inside a runtime call" window).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DRIVER, RUNTIME = "driver", "runtime"
LIBRARY_PATTERNS: dict[str, re.Pattern[str]] = {
    DRIVER: re.compile(r"libcuda\.so(\.\d+)*$"),
    RUNTIME: re.compile(r"libcudart\.so(\.\d+)*$"),
}
# cudaMemcpyKind (driver_types.h): the copy_slot value of runtime copies.
CUDA_MEMCPY_KIND = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD"}


@dataclass(frozen=True)
class Probe:
    library: str                 # DRIVER or RUNTIME
    symbol: str
    kind: str                    # schema call kind: launch, copy, memset, sync, other
    has_return: bool = False
    size_slot: int = -1
    size_scale: int = 1          # bytes per element (cuMemsetD32: 4)
    stream_slot: int = -1
    stream_deref: int = -1       # stream_slot is a config struct pointer; stream at +this
    copy_kind: str | None = None  # fixed direction
    copy_slot: int = -1          # direction from a cudaMemcpyKind argument
    # probe the return even when CUPTI records the durations: CUPTI records no memory calls
    keep_return: bool = False


def _ptsz(*probes: Probe) -> list[Probe]:
    """Each probe plus its per-thread-default-stream twin (same arguments)."""
    out = []
    for p in probes:
        out += [p, Probe(**{**p.__dict__, "symbol": p.symbol + "_ptsz"})]
    return out


_D = DRIVER
_LAUNCH_DRIVER = _ptsz(
    Probe(_D, "cuLaunchKernel", "launch", stream_slot=8),
    Probe(_D, "cuLaunchKernelEx", "launch", stream_slot=0, stream_deref=32),  # CUlaunchConfig.hStream
    Probe(_D, "cuLaunchCooperativeKernel", "launch", stream_slot=8),
    Probe(_D, "cuGraphLaunch", "launch", stream_slot=1),
)
_COPY_DRIVER = _ptsz(
    Probe(_D, "cuMemcpyHtoDAsync_v2", "copy", size_slot=2, stream_slot=3, copy_kind="HtoD"),
    Probe(_D, "cuMemcpyDtoHAsync_v2", "copy", size_slot=2, stream_slot=3, copy_kind="DtoH"),
    Probe(_D, "cuMemcpyDtoDAsync_v2", "copy", size_slot=2, stream_slot=3, copy_kind="DtoD"),
    Probe(_D, "cuMemcpyAsync", "copy", size_slot=2, stream_slot=3),  # unified: direction unknown
) + [
    Probe(_D, "cuMemcpyHtoD_v2", "copy", True, size_slot=2, copy_kind="HtoD"),
    Probe(_D, "cuMemcpyDtoH_v2", "copy", True, size_slot=2, copy_kind="DtoH"),
    Probe(_D, "cuMemcpyDtoD_v2", "copy", True, size_slot=2, copy_kind="DtoD"),
    Probe(_D, "cuMemcpy", "copy", True, size_slot=2),
]
_MEMSET_DRIVER = _ptsz(
    Probe(_D, "cuMemsetD8Async", "memset", size_slot=2, stream_slot=3),
    Probe(_D, "cuMemsetD32Async", "memset", size_slot=2, size_scale=4, stream_slot=3),
) + [
    Probe(_D, "cuMemsetD16Async", "memset", size_slot=2, size_scale=2, stream_slot=3),
    Probe(_D, "cuMemsetD8_v2", "memset", True, size_slot=2),
    Probe(_D, "cuMemsetD32_v2", "memset", True, size_slot=2, size_scale=4),
]
_SYNC_DRIVER = _ptsz(
    Probe(_D, "cuStreamSynchronize", "sync", True, stream_slot=0),
    Probe(_D, "cuStreamWaitEvent", "other", stream_slot=0),
) + [
    Probe(_D, "cuCtxSynchronize", "sync", True),
    Probe(_D, "cuEventSynchronize", "sync", True),
]

# Device and page-locked host memory given to and taken back from the driver: the caching
# allocator's cudaMalloc/cudaFree (torch.cuda.empty_cache(), a cache that keeps releasing),
# pin_memory(). Frees synchronize the device (schemas/apis.py is_blocking_api).
_MEMORY_DRIVER = _ptsz(
    Probe(_D, "cuMemAllocAsync", "other", True, keep_return=True, size_slot=1, stream_slot=2),
    Probe(_D, "cuMemFreeAsync", "other", True, keep_return=True, stream_slot=1),
) + [
    Probe(_D, "cuMemAlloc_v2", "other", True, keep_return=True, size_slot=1),
    Probe(_D, "cuMemFree_v2", "other", True, keep_return=True),
    Probe(_D, "cuMemHostAlloc", "other", True, keep_return=True, size_slot=1),
    Probe(_D, "cuMemAllocHost_v2", "other", True, keep_return=True, size_slot=1),
    Probe(_D, "cuMemFreeHost", "other", True, keep_return=True),
    Probe(_D, "cuMemHostRegister_v2", "other", True, keep_return=True, size_slot=1),
    Probe(_D, "cuMemHostUnregister", "other", True, keep_return=True),
]

_R = RUNTIME
_RUNTIME = _ptsz(
    Probe(_R, "cudaLaunchKernel", "launch", True, stream_slot=7),  # after two dim3 (4 slots)
    Probe(_R, "cudaLaunchKernelExC", "launch", True, stream_slot=0, stream_deref=32),
    Probe(_R, "cudaMemcpyAsync", "copy", True, size_slot=2, stream_slot=4, copy_slot=3),
    Probe(_R, "cudaMemsetAsync", "memset", True, size_slot=2, stream_slot=3),
    Probe(_R, "cudaStreamSynchronize", "sync", True, stream_slot=0),
    Probe(_R, "cudaGraphLaunch", "launch", True, stream_slot=1),
) + [
    Probe(_R, "cudaMemcpy", "copy", True, size_slot=2, copy_slot=3),
    Probe(_R, "cudaDeviceSynchronize", "sync", True),
    Probe(_R, "cudaEventSynchronize", "sync", True),
]

PROBES: tuple[Probe, ...] = tuple(
    _LAUNCH_DRIVER + _COPY_DRIVER + _MEMSET_DRIVER + _SYNC_DRIVER + _RUNTIME + _MEMORY_DRIVER)


# Driver calls that start CUDA in a process: where a process whose interpreter is not known yet
# is held until it is (zym.bpf.c zym_gate). cudart resolves the driver via cuGetProcAddress.
GATE_SYMBOLS = ("cuInit", "cuGetProcAddress", "cuGetProcAddress_v2")
GATE_FN = "zym_gate"


def entry_fn(slot: int) -> str:
    return f"zym_entry_{slot}"


def return_fn(slot: int) -> str:
    return f"zym_return_{slot}"


def probes_for(library: str) -> list[tuple[int, Probe]]:
    """(slot, probe) pairs of one library."""
    return [(i, p) for i, p in enumerate(PROBES) if p.library == library]
