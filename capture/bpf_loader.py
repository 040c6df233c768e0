"""Compile zym.bpf.c with BCC, attach it, and hand ring buffer records to a callback.

Only this module imports ``bcc``, lazily: ``zym analyze`` and the CLI must work without it.
BCC comes from the distribution (python3-bpfcc), not PyPI, so it lives in the system Python's
dist-packages; zym loads that package explicitly when the running interpreter lacks it.
"""
from __future__ import annotations

import ctypes as ct
import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import ModuleType

from zym.schemas.errors import CaptureError

from . import events
from .btf import BTF_PATH, fsbase_offset
from .probes import DRIVER, GATE_FN, GATE_SYMBOLS, PROBES, Probe, entry_fn, probes_for, return_fn

SYSTEM_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
DEFAULT_RINGBUF_PAGES = 4096     # 16 MiB: ~230,000 call records, 10+ ms at 20 M calls/s
WALK_FN = "zym_walk"
_CALL_SIZE = ct.sizeof(events.Call)
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


def cflags(sample: int, fsbase_off: int, ringbuf_pages: int = DEFAULT_RINGBUF_PAGES) -> list[str]:
    return [f"-I{bpf_dir()}", f"-DZYM_FSBASE_OFF={fsbase_off}", f"-DZYM_SAMPLE={sample}",
            f"-DZYM_RINGBUF_PAGES={ringbuf_pages}"]


def printable_program(sample: int) -> str:
    """The program as BCC compiles it: the -D flags as #defines, then zym.bpf.c."""
    try:
        off = fsbase_offset()
    except (OSError, ValueError, KeyError):
        off = 0
    defines = [f"#define {f[2:].replace('=', ' ', 1)}" for f in cflags(sample, off)
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


def _spec(probe: Probe) -> events.ProbeSpec:
    return events.ProbeSpec(probe.size_slot, probe.stream_slot, probe.copy_slot,
                            int(probe.has_return), probe.stream_deref)


class BpfProgram:
    """The loaded program. A context manager: leaving it detaches every probe.

    ``on_record(kind, record)`` receives each ring buffer record: a call as the bytes of
    ``struct zym_call``, the others as owned ctypes structs (``events.Stack``,
    ``events.ProcEvent``).
    """

    def __init__(self, on_record: Callable[[int, ct.Structure], None],
                 libraries: tuple[str, ...] = (DRIVER,), sample: int = 1,
                 ringbuf_pages: int = DEFAULT_RINGBUF_PAGES) -> None:
        self._on_record = on_record
        self._libraries = libraries
        self._sample = sample
        self._pages = ringbuf_pages
        self._bpf = None
        self.attached: dict[str, int] = {}   # library path -> number of probes attached

    def __enter__(self) -> BpfProgram:  # noqa: PYI034 (typing.Self needs 3.11; not subclassed)
        bcc = import_bcc()
        try:
            self._bpf = bcc.BPF(text=bpf_source(),
                                cflags=cflags(self._sample, fsbase_offset(), self._pages))
        except Exception as e:  # noqa: BLE001 (BCC raises bare Exception)
            raise CaptureError(f"the BPF program did not compile or load ({e}): check the "
                               f"kernel headers ({SETUP_HINT})") from None
        specs = self._bpf["probes"]
        for slot, probe in enumerate(PROBES):
            specs[ct.c_uint32(slot)] = _spec(probe)
        self._bpf["events"].open_ring_buffer(self._dispatch)
        self._load_programs()
        return self

    def _load_programs(self) -> None:
        """Verify and load every program now, before the target runs: attaching to a library
        that was just mapped then costs only the perf events (the target is already calling
        into it)."""
        bcc = import_bcc()
        for slot, probe in enumerate(PROBES[:slots_needed(self._libraries)]):
            self._bpf.load_func(entry_fn(slot), bcc.BPF.KPROBE)
            if probe.has_return:
                self._bpf.load_func(return_fn(slot), bcc.BPF.KPROBE)
        self._bpf.load_func(GATE_FN, bcc.BPF.KPROBE)
        walk = self._bpf.load_func(WALK_FN, bcc.BPF.KPROBE)
        self._bpf["walker"][ct.c_int(0)] = ct.c_int(walk.fd)

    def __exit__(self, *exc: object) -> None:
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None

    def _dispatch(self, _ctx: object, data: int, size: int) -> None:
        kind = ct.cast(data, ct.POINTER(ct.c_uint32))[0]
        if kind == events.EV_CALL:     # the hot path: bytes, decoded in batches by the sink
            self._on_record(kind, ct.string_at(data, _CALL_SIZE))
            return
        cls = {events.EV_STACK: events.Stack, events.EV_PROC: events.ProcEvent}.get(kind)
        if cls is not None and size >= ct.sizeof(cls):
            self._on_record(kind, cls.from_buffer_copy(ct.string_at(data, ct.sizeof(cls))))

    def track(self, pid: int, fields: dict[str, int] | None,
              no_layout: int = events.LAYOUT_UNKNOWN) -> None:
        """Record calls of process ``pid``; walk its stacks when its layout (``fields``) is
        known. Without one, ``no_layout`` says whether CUDA init waits for it (UNKNOWN) or
        not (NONE)."""
        self._bpf["procs"][ct.c_uint32(pid)] = events.Proc(**(fields or {"has_layout": no_layout}))

    def attach_library(self, path: str, library: str) -> int:
        """Attach every probe of ``library`` that ``path`` exports, for all processes (the
        BPF side filters by tracked pid, so children and threads are seen too)."""
        path = os.path.realpath(path)   # one inode, one set of probes (symlinks share it)
        if path in self.attached:
            return 0
        n = 0
        for slot, probe in probes_for(library):
            try:
                self._bpf.attach_uprobe(name=path, sym=probe.symbol, fn_name=entry_fn(slot))
            except Exception:  # noqa: BLE001, S112 (BCC raises bare Exception)
                continue   # this library version lacks the symbol
            if probe.has_return:
                self._bpf.attach_uretprobe(name=path, sym=probe.symbol, fn_name=return_fn(slot))
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
        """Wait up to ``timeout_ms`` for a record that wakes the reader, then drain every
        record, including the call records that never wake it."""
        self._bpf.ring_buffer_poll(timeout_ms)
        self._bpf.ring_buffer_consume()

    def counters(self) -> dict[str, int]:
        table = self._bpf["counters"]
        return {name: int(sum(table[ct.c_int(slot)])) for name, slot in events.COUNTERS.items()}
