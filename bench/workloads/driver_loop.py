"""Per-call cost of CUDA driver calls, timed inside the process: the workload of
bench/capture_overhead.py's per-call microbenchmark.

    python driver_loop.py --lib PATH --kinds launch,copy,sync --depths 10,50,150 --out r.json

``--lib`` is a libcuda stand-in (tests/ebpf/fakecuda.c, built by the benchmark) or ``real``:
the system's libcuda.so.1, driven through ctypes with a one-instruction PTX kernel, so both
machines run the same Python. Each call kind is one driver entry point that zym probes:

* launch: ``cuLaunchKernel`` (an empty kernel, one block of 32 threads);
* copy: ``cuMemcpyHtoDAsync_v2`` (64 bytes from pinned memory);
* sync: ``cuStreamSynchronize`` of an idle stream.

A config is (kind, Python stack depth). The depth is the number of Python frames on the
thread when the call is made (what zym walks), reached by recursion. Every round runs each
config once: ``--batches`` batches of ``--calls`` calls, each batch timed with
``perf_counter_ns``; launches and copies are followed by an untimed stream synchronize so the
GPU's queue never fills. The output holds, per config, every batch's ns per call.
"""
from __future__ import annotations

import argparse
import ctypes as ct
import json
import os
import sys
import time

# An empty kernel. PTX is JIT-compiled by the driver for the GPU at hand.
PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry zym_empty() { ret; }
"""
KINDS = ("launch", "copy", "sync")


class Driver:
    """The three calls, with their arguments converted once."""

    def __init__(self, lib: str) -> None:
        self.real = lib == "real"
        cuda = ct.CDLL("libcuda.so.1" if self.real else lib)
        self.cuda = cuda
        # No argtypes: ctypes instances for the 64-bit arguments, plain ints for the
        # unsigned ones (conversion through argtypes costs ~2 us a call, 4x the call itself).
        self._check(cuda.cuInit(0), "cuInit")
        vp = ct.c_void_p
        self.func, self.stream, self.dptr, self.hptr = vp(0x1), vp(0x5), ct.c_uint64(0x1000), vp(0x2000)
        self.size = ct.c_size_t(64)
        if self.real:
            self._real_setup()
        else:
            cuda.fakecuda_set_sync_us(0)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise SystemExit(f"driver_loop: {what} failed with CUresult {rc}")

    def _real_setup(self) -> None:
        cuda, c = self.cuda, self._check
        dev, ctx = ct.c_int(), ct.c_void_p()
        c(cuda.cuDeviceGet(ct.byref(dev), 0), "cuDeviceGet")
        c(cuda.cuDevicePrimaryCtxRetain(ct.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        c(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        mod, func, stream = ct.c_void_p(), ct.c_void_p(), ct.c_void_p()
        c(cuda.cuModuleLoadData(ct.byref(mod), ct.c_char_p(PTX)), "cuModuleLoadData")
        c(cuda.cuModuleGetFunction(ct.byref(func), mod, b"zym_empty"), "cuModuleGetFunction")
        c(cuda.cuStreamCreate(ct.byref(stream), 0), "cuStreamCreate")
        dptr, hptr = ct.c_uint64(), ct.c_void_p()
        c(cuda.cuMemAlloc_v2(ct.byref(dptr), 4096), "cuMemAlloc_v2")
        c(cuda.cuMemAllocHost_v2(ct.byref(hptr), 4096), "cuMemAllocHost_v2")
        self.func, self.stream, self.dptr, self.hptr = func, stream, dptr, hptr

    def batch(self, kind: str, n: int) -> int:
        """Time ``n`` calls of ``kind``; returns the batch's ns."""
        cuda, f, s = self.cuda, self.func, self.stream
        if kind == "launch":
            call, args = cuda.cuLaunchKernel, (f, 1, 1, 1, 32, 1, 1, 0, s, None, None)
        elif kind == "copy":
            call, args = cuda.cuMemcpyHtoDAsync_v2, (self.dptr, self.hptr, self.size, s)
        else:
            call, args = cuda.cuStreamSynchronize, (s,)
        clock = time.perf_counter_ns
        t0 = clock()
        for _ in range(n):
            call(*args)
        t1 = clock()
        if kind != "sync":
            self._check(cuda.cuStreamSynchronize(s), "cuStreamSynchronize")
        return t1 - t0


def depth_here() -> int:
    """Python frames on this thread, counting the caller's."""
    f, n = sys._getframe(1), 0
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def at_depth(depth: int, fn, *args):
    """Call ``fn(*args)`` with ``depth`` Python frames on the stack, ``fn``'s own included."""
    if depth_here() + 1 >= depth:   # the next frame, fn's, is the last one
        return fn(*args)
    return at_depth(depth, fn, *args)


def run_config(driver: Driver, kind: str, depth: int, calls: int, batches: int) -> dict:
    def body() -> list[float]:   # Driver.batch, which makes the calls, is one frame deeper
        if depth_here() != depth - 1:
            raise SystemExit(f"driver_loop: cannot call at depth {depth} (at {depth_here() + 1})")
        driver.batch(kind, calls)   # warm-up: the capture's first sighting of this stack
        return [driver.batch(kind, calls) / calls for _ in range(batches)]

    sys.setrecursionlimit(max(1000, depth + 100))
    return {"kind": kind, "depth": depth, "ns_per_call": at_depth(depth - 1, body)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libcuda stand-in path, or 'real'")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--depths", default="10,50,150")
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    ap.add_argument("--batches", type=int, default=15, help="timed batches per config and round")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after CUDA init (lets a capture attach)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"driver_loop: unknown kind(s) {sorted(unknown)}; known: {KINDS}")
    driver = Driver(a.lib)
    time.sleep(a.settle)
    results = []
    for r in range(a.rounds):
        for kind in kinds:
            for depth in (int(d) for d in a.depths.split(",")):
                results.append({"round": r, **run_config(driver, kind, depth, a.calls, a.batches)})
    with open(a.out, "w") as f:
        json.dump({"pid": os.getpid(), "lib": a.lib, "calls": a.calls, "results": results}, f)


if __name__ == "__main__":
    main()
