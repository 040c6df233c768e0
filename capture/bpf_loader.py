"""Compile zym.bpf.c with BCC, attach it, and hand ring buffer records to a callback.

Only this module imports ``bcc``, lazily: ``zym analyze`` and the CLI must work without it.
BCC comes from the distribution (python3-bpfcc), not PyPI, so it lives in the system Python's
dist-packages; zym loads that package explicitly when the running interpreter lacks it.
"""
from __future__ import annotations

import ctypes as ct
import importlib.util
import mmap
import os
import platform
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import ModuleType

import numpy as np
from zym.schemas.errors import CaptureError

from . import bpfstats, events
from .btf import BTF_PATH, fsbase_offset
from .elf import ElfError, ElfFile
from .probes import (
    DRIVER,
    GATE_FN,
    GATE_SYMBOLS,
    PROBES,
    RUNTIME,
    Probe,
    entry_fn,
    probes_for,
    return_fn,
)
from .prologue import Placement, choose, read_function_start
from .ringbuf import FixedRecordRing

SYSTEM_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
DEFAULT_RINGBUF_PAGES = 4096     # 16 MiB: ~200,000 call records, 10+ ms at 20 M calls/s
# 32 MiB: stacks (1 KiB each, once per distinct stack), processes, and native stack copies
# (up to 128 KiB each, once per distinct native path: a model's first step sends a burst; a
# copy the ring has no room for is sent again at its path's next call).
EVENT_PAGES = 8192
WALK_FN = "zym_walk"
NATIVE_FN = "zym_native"
CALIB_FN = "zym_calib"
SETUP_HINT = "run scripts/setup-ebpf.sh as root (or apt-get install python3-bpfcc)"


def import_bcc() -> ModuleType:
    """The ``bcc`` package, from this interpreter or from the system Python's dist-packages."""
    try:
        import bcc
        return bcc
    except ImportError:
        pass
    init = SYSTEM_DIST_PACKAGES / "bcc" / "__init__.py"
    if not init.exists():
        raise CaptureError(f"BCC (python3-bpfcc) is not installed: {SETUP_HINT}")
    spec = importlib.util.spec_from_file_location(
        "bcc", init, submodule_search_locations=[str(init.parent)])
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bcc"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 (libbcc.so missing or of another ABI: any error)
        del sys.modules["bcc"]
        raise CaptureError(f"BCC could not be loaded ({e}): {SETUP_HINT}") from None
    return module


def bpf_dir() -> Path:
    return Path(str(resources.files("zym.capture") / "bpf"))


def bpf_source() -> str:
    return (bpf_dir() / "zym.bpf.c").read_text()


def slots_needed(libraries: tuple[str, ...]) -> int:
    """Probe slots to load: up to the last probe of the libraries in use."""
    return 1 + max(slot for lib in libraries for slot, _ in probes_for(lib))


def cflags(fsbase_off: int, ringbuf_pages: int = DEFAULT_RINGBUF_PAGES,
           returns: bool = False) -> list[str]:
    return [f"-I{bpf_dir()}", f"-DZYM_FSBASE_OFF={fsbase_off}",
            f"-DZYM_RINGBUF_PAGES={ringbuf_pages}", f"-DZYM_EVENT_PAGES={EVENT_PAGES}",
            f"-DZYM_RETURNS={int(returns)}", f"-DZYM_NCPUS={possible_cpus()}"]


def possible_cpus() -> int:
    """CPU ids the kernel may use (/sys/devices/system/cpu/possible, e.g. "0-15"): the size of
    maps indexed by CPU."""
    try:
        text = Path("/sys/devices/system/cpu/possible").read_text().strip()
        return max(int(part.split("-")[-1]) for part in text.split(",")) + 1
    except (OSError, ValueError):
        return 1024


def printable_program(returns: bool = False) -> str:
    """The program as BCC compiles it: the -D flags as #defines, then zym.bpf.c."""
    try:
        off = fsbase_offset()
    except (OSError, ValueError, KeyError):
        off = 0
    defines = [f"#define {f[2:].replace('=', ' ', 1)}" for f in cflags(off, returns=returns)
               if f.startswith("-D")]
    return "\n".join([f"// cflags: -I{bpf_dir()}", *defines, "", bpf_source()])


def check_environment() -> None:
    """Fail early, with what to do, when eBPF capture cannot work on this machine."""
    if os.geteuid() != 0:
        raise CaptureError("zym capture needs root (eBPF uprobes): run it with sudo")
    if not BTF_PATH.exists():
        raise CaptureError(f"the kernel has no BTF ({BTF_PATH}): zym capture needs a kernel "
                           "built with CONFIG_DEBUG_INFO_BTF=y")
    build = Path(f"/lib/modules/{platform.release()}/build")
    if not (build / "include").exists():
        raise CaptureError(f"no kernel headers at {build}: {SETUP_HINT}")
    import_bcc()


def _spec(probe: Probe, has_return: bool) -> events.ProbeSpec:
    return events.ProbeSpec(probe.size_slot, probe.stream_slot, probe.copy_slot,
                            int(has_return), probe.stream_deref)


class BpfProgram:
    """The loaded program. A context manager: leaving it detaches every probe.

    ``on_calls(records)`` receives call records a batch at a time, as a numpy array of
    ``struct zym_call`` (``events.CALL_DTYPE``); ``on_record(kind, record)`` receives stack and
    process records as owned ctypes structs (``events.Stack``, ``events.ProcEvent``).

    ``return_probes``: also probe the return of syncs and blocking copies (their CPU-side
    duration). Without them (when CUPTI records those durations) every driver call takes one
    trap. Runtime probes (``--runtime-api``) always have theirs: they bound the nesting window.
    """

    def __init__(self, on_record: Callable[[int, ct.Structure], None],
                 on_calls: Callable[[np.ndarray], None],
                 libraries: tuple[str, ...] = (DRIVER,), sample: int = 1,
                 ringbuf_pages: int = DEFAULT_RINGBUF_PAGES, return_probes: bool = True,
                 native: bool = True) -> None:
        self._on_record = on_record
        self._native = native
        self._on_calls = on_calls
        self._libraries = libraries
        self._sample = sample
        self._pages = ringbuf_pages
        self._bpf = None
        self._ring: FixedRecordRing | None = None
        self._stats_fd: int | None = None
        self._returns = {slot: p.has_return and (return_probes or p.library == RUNTIME
                                                 or p.keep_return)
                         for slot, p in enumerate(PROBES)}
        self.attached: dict[str, int] = {}   # library path -> number of probes attached
        self.placements: dict[str, Placement] = {}   # "symbol" -> where its probe went
        self.single_stepped: set[str] = set()  # probed symbols whose probe is single-stepped

    @property
    def any_returns(self) -> bool:
        return any(self._returns[slot] for lib in self._libraries for slot, _ in probes_for(lib))

    def __enter__(self) -> BpfProgram:  # noqa: PYI034 (typing.Self needs 3.11; not subclassed)
        bcc = import_bcc()
        self._stats_fd = bpfstats.enable_run_time_stats()
        try:
            self._bpf = bcc.BPF(text=bpf_source(), cflags=cflags(
                fsbase_offset(), self._pages, self.any_returns))
        except Exception as e:  # noqa: BLE001 (BCC raises bare Exception)
            raise CaptureError(f"the BPF program did not compile or load ({e}): check the "
                               f"kernel headers ({SETUP_HINT})") from None
        specs = self._bpf["probes"]
        for slot, probe in enumerate(PROBES):
            specs[ct.c_uint32(slot)] = _spec(probe, self._returns[slot])
        self.set_sample(self._sample)
        self._bpf["config"][ct.c_int(events.CFG_NATIVE)] = ct.c_uint64(int(self._native))
        self._bpf["events"].open_ring_buffer(self._dispatch)
        calls = self._bpf["calls"]
        self._ring = FixedRecordRing(calls.map_fd, self._pages * mmap.PAGESIZE, events.CALL_DTYPE)
        self._load_programs()
        return self

    def _load_programs(self) -> None:
        """Verify and load every program now, before the target runs: attaching to a library
        that was just mapped then costs only the perf events (the target is already calling
        into it)."""
        bcc = import_bcc()
        for slot, _ in enumerate(PROBES[:slots_needed(self._libraries)]):
            self._bpf.load_func(entry_fn(slot), bcc.BPF.KPROBE)
            if self._returns[slot]:
                self._bpf.load_func(return_fn(slot), bcc.BPF.KPROBE)
        self._bpf.load_func(GATE_FN, bcc.BPF.KPROBE)
        self._bpf.load_func(CALIB_FN, bcc.BPF.KPROBE)
        walk = self._bpf.load_func(WALK_FN, bcc.BPF.KPROBE)
        self._bpf["walker"][ct.c_int(0)] = ct.c_int(walk.fd)
        native = self._bpf.load_func(NATIVE_FN, bcc.BPF.KPROBE)
        self._bpf["walker"][ct.c_int(1)] = ct.c_int(native.fd)

    def __exit__(self, *exc: object) -> None:
        if self._ring is not None:
            try:
                self._ring.close()
            except BufferError:
                pass    # a view still exported: the mapping goes with the process
            self._ring = None
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None
        bpfstats.close(self._stats_fd)
        self._stats_fd = None

    def _dispatch(self, _ctx: object, data: int, size: int) -> None:
        kind = ct.cast(data, ct.POINTER(ct.c_uint32))[0]
        if kind == events.EV_NATIVE:
            if size >= events.NATIVE_HEADER:
                self._on_record(kind, events.NativeCopy.from_bytes(ct.string_at(data, size)))
            return
        cls = {events.EV_STACK: events.Stack, events.EV_PROC: events.ProcEvent}.get(kind)
        if cls is not None and size >= ct.sizeof(cls):
            self._on_record(kind, cls.from_buffer_copy(ct.string_at(data, ct.sizeof(cls))))

    def calibrate(self, log: Callable[[str], None] | None = None):
        """Time the uprobe trap on this machine (``cost.calibrate_traps``)."""
        from .cost import calibrate_traps

        return calibrate_traps(self._bpf, log)

    @property
    def returns(self) -> dict[int, bool]:
        return dict(self._returns)

    def set_sample(self, period: int) -> None:
        """Walk the stack of every ``period``-th call per thread from now on."""
        self._bpf["config"][ct.c_int(events.CFG_SAMPLE)] = ct.c_uint64(max(1, int(period)))

    def track(self, pid: int, fields: dict[str, int] | None,
              no_layout: int = events.LAYOUT_UNKNOWN) -> None:
        """Record calls of process ``pid``; walk its stacks when its layout (``fields``) is
        known. Without one, ``no_layout`` says whether CUDA init waits for it (UNKNOWN) or
        not (NONE)."""
        values = fields or {"has_layout": no_layout, "tss_key": -1, "ts_chunk": -1}
        self._bpf["procs"][ct.c_uint32(pid)] = events.Proc(**values)

    def attach_library(self, path: str, library: str) -> int:
        """Attach every probe of ``library`` that ``path`` exports, for all processes (the
        BPF side filters by tracked pid, so children and threads are seen too). Each probe
        goes on the first instruction the kernel emulates if only ``endbr64`` precedes it
        (``prologue.py``), else on the function's first instruction."""
        path = os.path.realpath(path)   # one inode, one set of probes (symlinks share it)
        if path in self.attached:
            return 0
        n = 0
        probes = probes_for(library)
        try:    # virtual addresses, for return probes placed past the entry
            vaddrs = ElfFile(path).symbols({p.symbol for _, p in probes})
        except (OSError, ElfError):
            vaddrs = {}
        for slot, probe in probes:
            try:    # BCC's resolution gives the file offset the kernel probes
                _, offset = self._bpf._check_path_symbol(path.encode(), probe.symbol.encode(),
                                                         None, -1)
            except Exception:  # noqa: BLE001, S112 (BCC raises bare Exception)
                continue   # this library version lacks the symbol
            place = choose(read_function_start(path, offset))
            if self._returns[slot] and place.offset and probe.symbol not in vaddrs:
                place = Placement(0, False, place.first)   # endbr64 at the entry: stepped
            try:
                self._bpf.attach_uprobe(name=path, sym=probe.symbol, sym_off=place.offset,
                                        fn_name=entry_fn(slot))
                if self._returns[slot]:
                    self._bpf.attach_uretprobe(name=path, addr=vaddrs[probe.symbol] + place.offset
                                               if place.offset else None,
                                               sym="" if place.offset else probe.symbol,
                                               fn_name=return_fn(slot))
            except Exception:  # noqa: BLE001, S112 (BCC raises bare Exception)
                continue
            self.placements[probe.symbol] = place
            if not place.emulated:
                self.single_stepped.add(probe.symbol)
            n += 1
        if library == DRIVER:
            for symbol in GATE_SYMBOLS:
                try:
                    self._bpf.attach_uprobe(name=path, sym=symbol, fn_name=GATE_FN)
                except Exception:  # noqa: BLE001, S112 (a driver without this gate symbol)
                    continue
        self.attached[path] = n
        return n

    def poll(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` for a record that wakes the reader (stacks, processes),
        handle those, then drain the call records, which never wake it."""
        self._bpf.ring_buffer_poll(timeout_ms)
        self._bpf.ring_buffer_consume()
        self.drain_calls()

    def drain_calls(self) -> int:
        records = self._ring.drain()
        if len(records):
            self._on_calls(records)
        return len(records)

    @property
    def ring_bytes(self) -> int:
        """Bytes of call records read from the calls ring so far (headers included)."""
        return self._ring.bytes_read if self._ring is not None else 0

    def prog_stats(self) -> dict[str, bpfstats.ProgStats]:
        """The kernel's run count and run time of each loaded program (empty when the kernel
        keeps no statistics). A tail call's time counts toward the program that made it."""
        if self._stats_fd is None:
            return {}
        out = {}
        for name, fn in self._bpf.funcs.items():
            st = bpfstats.prog_stats(fn.fd)
            if st is not None:
                out[name.decode() if isinstance(name, bytes) else name] = st
        return out

    def counters(self) -> dict[str, int]:
        table = self._bpf["counters"]
        return {name: int(sum(table[ct.c_int(slot)])) for name, slot in events.COUNTERS.items()}
