"""The CUPTI collector that runs *inside* the target process (stdlib and ctypes only).

Loaded by the bootstrap ``sitecustomize`` that ``zym capture`` puts on the target's PYTHONPATH
(see ``bootstrap/sitecustomize.py``); it must not import zym, numpy or anything the target may
lack. What it does:

* loads the ``libcupti`` that matches the target's CUDA major (the one torch's wheels ship in
  ``nvidia/cu13/lib`` or ``nvidia/cuda_cupti/lib``, so Kineto and zym share one copy);
* enables CONCURRENT_KERNEL, MEMCPY, MEMSET, SYNCHRONIZATION, INTERNAL_LAUNCH_API, and
  RUNTIME/DRIVER API records *only* for the launch, copy, memset and sync callback ids
  (``cuptiActivityEnableRuntimeApi``/``...DriverApi``: CUPTI reports ~17,000 API calls a batch
  on the sample workload when every callback is on, most of them cudaGetDevice);
* thread ids are system tids (``CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM``), the ids eBPF sees;
* NVTX: names its libcupti in ``NVTX_INJECTION64_PATH`` when it starts (``ready_nvtx``, before
  the program's first NVTX call) and enables MARKER records; their name strings are read when
  their buffer completes (``marker_name_pointers``, ``read_strings``);
* the buffer callbacks are registered through ctypes, not cupti-python: cupti-python builds a
  Python object per record before calling back (the per-event Python work that cost 12-22x in
  our measurement). Here a completed buffer is copied as raw bytes in one ``string_at`` and
  appended to the spool file: O(1) Python per buffer, none per record. Records are decoded in
  bulk after the capture with numpy structured dtypes (``zym.capture.cupti.decode``);
* every buffer completion also takes a clock calibration (best of 16 sandwiched
  ``monotonic_ns``/``cuptiGetTimestamp`` reads) so the finalizer can fit CUPTI time to
  CLOCK_MONOTONIC (the eBPF clock);
* at stop (interpreter exit, SIGTERM, or the stop signal zym sends), it flushes CUPTI, walks the
  records once to resolve kernel name pointers (they point into CUPTI's memory, so only the
  target can read them) and writes a footer.

One file on purpose: the bootstrap loads it by path into the target, where zym's package may
not be importable, so it cannot import its siblings.

Spool format: an Arrow IPC stream (``kind: string, t_mono_ns: int64, payload: binary``, one
batch per chunk) when pyarrow is importable in the target, otherwise a framed file with the same
chunks (``MAGIC`` then ``u16 len, kind, i64 t_mono_ns, u64 len, payload`` per chunk). Each chunk
is flushed as written, so a crash keeps every completed buffer. With ``ZYM_CUPTI_ROLL_S``
(``zym capture --rotate``) the spool is a series of segments, ``cupti-<pid>-<n>.spool``, each
opened by the header, which zym reads and removes while the target runs.
"""
from __future__ import annotations

import atexit
import ctypes as ct
import glob
import json
import os
import re
import signal
import struct
import sys
import threading
import time

MAGIC = b"ZYMCUPT1"
ENV_DIR = "ZYM_CUPTI_DIR"            # where spool files go (one per process: cupti-<pid>.spool)
ENV_LIB = "ZYM_CUPTI_LIB"            # explicit libcupti path
ENV_BUFFER_MB = "ZYM_CUPTI_BUFFER_MB"
ENV_FLUSH_MS = "ZYM_CUPTI_FLUSH_MS"  # CUPTI flush period: bounds what a crash can lose
ENV_FORMAT = "ZYM_CUPTI_FORMAT"      # "arrow" (default when pyarrow imports) or "framed"
ENV_ROLL_S = "ZYM_CUPTI_ROLL_S"      # seconds (`zym capture --rotate`): the spool goes on in a new
                                     # segment, cupti-<pid>-<n>.spool, this often; zym removes
                                     # the segments it has read, so the disk use stays bounded
ENV_ALL_APIS = "ZYM_CUPTI_ALL_APIS"  # "1": every runtime/driver API record (slow; debugging);
                                     # "0": none (GPU records only; measures their cost)
ENV_AGENT = "ZYM_AGENT"              # "1": a dormant agent (`zym run`): CUPTI stays unloaded
                                     # until `zym capture --pid` switches it on
ENV_AGENT_DIR = "ZYM_AGENT_DIR"      # where dormant agents keep their control folders
ENV_AGENT_FINALIZE = "ZYM_AGENT_FINALIZE"  # "0": switched off, CUPTI stays attached (disabled)
ENV_NVTX = "ZYM_NVTX"                # "1": record NVTX ranges (`zym capture` sets it)
ENV_AGENT_NVTX = "ZYM_AGENT_NVTX"    # "1" (`zym run --nvtx`): a dormant agent readies NVTX too
ENV_SHAPES = "ZYM_SHAPES"            # "1" (`zym capture --shapes`): torch operator shapes
                                     # (opshapes_target.py, loaded by path when asked)
ENV_AGENT_SHAPES = "ZYM_AGENT_SHAPES"  # "1" (`zym run --shapes`): a dormant agent readies them,
                                       # recording while a capture has it switched on
NVTX_INJECTION = "NVTX_INJECTION64_PATH"  # read by NVTX v3 at a library's first NVTX call
DEFAULT_AGENT_DIR = "/tmp/zym-agent"
AGENT_POLL_S = 0.2                   # how often a dormant agent looks at its control file

# cupti_activity.h (CUPTI 12.x and 13.x; values checked against cupti-python 13.0.1's enums)
KIND_MEMCPY, KIND_MEMSET, KIND_DRIVER, KIND_RUNTIME = 1, 2, 4, 5
KIND_CONCURRENT_KERNEL, KIND_SYNCHRONIZATION, KIND_INTERNAL_LAUNCH_API = 10, 38, 48
KIND_MARKER = 12                     # NVTX marks and ranges (CUpti_ActivityMarker2)
DOMAIN_DRIVER, DOMAIN_RUNTIME = 1, 2
THREAD_ID_SYSTEM = 1
FLUSH_FORCED = 1
ENABLED_KINDS = (KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_SYNCHRONIZATION,
                 KIND_INTERNAL_LAUNCH_API, KIND_MARKER)
# Record sizes by CUPTI major (CUpti_ActivityAPI, Kernel10 or Kernel9, Memcpy6, Memset4,
# Synchronization2, Marker2); zym.capture.cupti.layouts holds the full dtypes and checks these.
RECORD_SIZES_13 = {KIND_DRIVER: 40, KIND_RUNTIME: 40, KIND_INTERNAL_LAUNCH_API: 40,
                   KIND_CONCURRENT_KERNEL: 216, KIND_MEMCPY: 96, KIND_MEMSET: 88,
                   KIND_SYNCHRONIZATION: 56, KIND_MARKER: 56}
RECORD_SIZES = {13: RECORD_SIZES_13, 12: {**RECORD_SIZES_13, KIND_CONCURRENT_KERNEL: 208}}
KERNEL_NAME_OFFSET = 104  # same in Kernel9 and Kernel10
MARKER_NAME_OFFSET, MARKER_DOMAIN_OFFSET = 40, 48  # CUpti_ActivityMarker2 (CUPTI 9.2 to 13.x)


def cupti_major(api_version: int) -> int:
    """CUPTI's major version from ``cuptiGetVersion``: 130001 -> 13; CUDA 12.x reports a small
    API number (26 for 12.8, 18 or more for 12.0+)."""
    if api_version >= 10000:
        return api_version // 10000
    return 12 if api_version >= 18 else 11

# Which API callbacks to record: the same name patterns as zym.schemas.apis (launch, copy,
# memset, sync), applied to CUPTI's callback names with their _vNNNN suffix removed.
API_PATTERN = re.compile(
    r"^(cuda|cu)(LaunchKernel|LaunchKernelEx|LaunchKernelExC|LaunchCooperativeKernel"
    r"|LaunchCooperativeKernelMultiDevice|GraphLaunch|LaunchHostFunc|Mem[cC]py|Memset"
    r"|DeviceSynchronize|StreamSynchronize|CtxSynchronize|EventSynchronize|ThreadSynchronize"
    r"|StreamWaitEvent)")
_SUFFIX = re.compile(r"_v\d{4,5}$")
MAX_CBID = 4096
CALIB_ROUNDS = 16


def api_name(raw: str) -> str:
    """CUPTI callback name to API name: ``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``,
    ``__cudaLaunchKernel_v13000`` -> ``cudaLaunchKernel``; driver ``_v2`` suffixes stay."""
    return _SUFFIX.sub("", raw).lstrip("_")


def record_offsets(buf: bytes, sizes: dict[int, int]) -> tuple[list[int], list[int], int]:
    """Walk one activity buffer: (offsets, kinds) of its records, and where the walk stopped.

    Records lie back to back, each ``sizes[kind]`` bytes (CUPTI pads every record to 8 bytes).
    The walk stops at the end or at a kind it has no size for (reported by the caller).
    """
    offsets, kinds, off, n = [], [], 0, len(buf)
    unpack = struct.Struct("<i").unpack_from
    while off + 4 <= n:
        k = unpack(buf, off)[0]
        size = sizes.get(k)
        if size is None:
            break
        offsets.append(off)
        kinds.append(k)
        off += size
    return offsets, kinds, off


# A marker record's head: kind 12, then flags (INSTANT 1, START 2 or END 4, maybe with the sync
# flags 8-64).
_MARKER_HEAD = re.compile(rb"\x0c\x00\x00\x00[\x01-\x7f]\x00\x00\x00")
_MARKER_WORDS = 7  # 56 bytes


def marker_name_pointers(buf: bytes) -> set[int]:
    """The name and domain pointers of the marker records in ``buf``, found without walking it
    record by record: every 8-aligned marker head (records start 8-aligned) whose object kind
    is a process or a thread. With numpy already imported by the target, one vectorised pass;
    else a regex scan (C speed, Python per candidate). A false candidate (another record's
    fields that look like a marker head) yields pointers no marker has: ``read_strings`` reads
    only inside readable mappings, so they cost nothing but a lookup."""
    np = sys.modules.get("numpy")
    ptrs = _pointers_numpy(np, buf) if np is not None else _pointers_scan(buf)
    ptrs.discard(0)
    return ptrs


def _pointers_numpy(np, buf: bytes) -> set[int]:
    n = len(buf) // 8
    if n < _MARKER_WORDS:
        return set()
    w = np.frombuffer(buf, dtype="<i4", count=2 * n).reshape(n, 2)
    cand = np.flatnonzero((w[:, 0] == KIND_MARKER) & (w[:, 1] > 0) & (w[:, 1] < 128))
    cand = cand[cand <= n - _MARKER_WORDS]
    obj = w[cand + 2, 1]   # objectKind, at byte 20
    cand = cand[(obj == 1) | (obj == 2)]
    q = np.frombuffer(buf, dtype="<i8", count=n)
    return set(q[cand + MARKER_NAME_OFFSET // 8].tolist()) | set(
        q[cand + MARKER_DOMAIN_OFFSET // 8].tolist())


def _pointers_scan(buf: bytes) -> set[int]:
    q = struct.Struct("<q").unpack_from
    i32 = struct.Struct("<i").unpack_from
    ptrs: set[int] = set()
    last = len(buf) - 8 * _MARKER_WORDS
    m = _MARKER_HEAD.search(buf)
    while m:
        o = m.start()
        if o % 8 == 0 and o <= last and i32(buf, o + 20)[0] in (1, 2):
            ptrs.add(q(buf, o + MARKER_NAME_OFFSET)[0])
            ptrs.add(q(buf, o + MARKER_DOMAIN_OFFSET)[0])
        m = _MARKER_HEAD.search(buf, o + 1)   # from the next byte: matches may overlap
    return ptrs


def _readable_ranges() -> tuple[list[int], list[int]]:
    """Starts and ends of this process's readable mappings, sorted (/proc/self/maps)."""
    starts, ends = [], []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                span, perms = line.split(" ", 2)[:2]
                if perms[0] == "r":
                    lo, hi = span.split("-")
                    starts.append(int(lo, 16))
                    ends.append(int(hi, 16))
    except OSError:
        pass
    return starts, ends


def read_strings(ptrs: set[int], limit: int) -> dict[str, str]:
    """{pointer: NUL-terminated string} for pointers into readable memory, each read at most
    ``limit`` bytes and never past its mapping's end (a pointer elsewhere is left out)."""
    import bisect

    starts, ends = _readable_ranges()
    out = {}
    for p in ptrs:
        i = bisect.bisect_right(starts, p) - 1
        if i < 0 or p >= ends[i]:
            continue
        raw = ct.string_at(p, min(limit, ends[i] - p))
        out[str(p)] = raw.split(b"\0", 1)[0].decode(errors="replace")
    return out


MAX_NAME = 16384  # characters kept of a marker's name (the capture file's bound on names)


def ready_nvtx(lib_path: str | None, asked: bool | None = None) -> str:
    """Name ``lib_path`` (this process's libcupti) as the NVTX injection library, so that NVTX
    calls reach CUPTI and become marker records. NVTX v3 reads ``NVTX_INJECTION64_PATH`` once,
    at each library's first NVTX call: this must run before it (the agent starts before the
    first import of a CUDA framework). Only when asked (``asked``; default: ``ZYM_NVTX=1``,
    which `zym capture` sets for a program it starts unless ``--no-nvtx``): an agent started
    another way leaves NVTX alone. On the H200 recording showed no cost above the host's own
    swings of a step time (bench/nvtx/results/h200/cost2). Returns "on" or "off: <why>"."""
    if asked is None:
        asked = os.environ.get(ENV_NVTX) == "1"
    if not asked:
        return f"off: not asked ({ENV_NVTX}=1; `zym capture --no-nvtx` turns it off)"
    if not lib_path:
        return "off: no libcupti"
    current = os.environ.get(NVTX_INJECTION)
    if current and os.path.realpath(current) != os.path.realpath(lib_path):
        return f"off: {NVTX_INJECTION} already names another library ({current})"
    os.environ[NVTX_INJECTION] = lib_path  # putenv too: NVTX reads it with getenv
    return "on"


class SpoolWriter:
    """Appends chunks to the spool file and flushes each one (crash safety)."""

    def __init__(self, path: str, fmt: str) -> None:
        self._lock = threading.Lock()
        self._pa = None
        if fmt == "arrow":
            try:
                import pyarrow as pa

                self._pa = pa
                self._schema = pa.schema([("kind", pa.string()), ("t_mono_ns", pa.int64()),
                                          ("payload", pa.binary())])
            except Exception:  # noqa: BLE001 - no pyarrow: framed format
                self._pa = None
        self.format = "arrow" if self._pa is not None else "framed"
        self._open(path)

    def _open(self, path: str) -> None:
        f = open(path, "wb")  # noqa: SIM115 - open for the session
        self.path, self._f, self._arrow = path, f, None
        if self._pa is not None:
            self._arrow = self._pa.ipc.new_stream(f, self._schema)
        else:
            f.write(MAGIC)

    def roll(self, path: str, first: list[tuple[str, bytes]]) -> None:
        """Go on in a new file (a segment) that starts with the chunks ``first``; whoever holds
        this writer writes there from now on (no chunk is written between the two files)."""
        with self._lock:
            if self._f.closed:
                return
            old_f, old_arrow = self._f, self._arrow
            self._open(path)   # an OSError (the folder is gone) leaves the old file in use
            if old_arrow is not None:
                old_arrow.close()
            old_f.close()
            for kind, payload in first:
                self._put(kind, payload, time.monotonic_ns())

    def write(self, kind: str, payload: bytes, t_mono_ns: int | None = None) -> None:
        t = time.monotonic_ns() if t_mono_ns is None else t_mono_ns
        with self._lock:
            if not self._f.closed:
                self._put(kind, payload, t)

    def _put(self, kind: str, payload: bytes, t: int) -> None:
        if self._arrow is not None:
            pa = self._pa
            batch = pa.record_batch([pa.array([kind]), pa.array([t], pa.int64()),
                                     pa.array([payload], pa.binary())], schema=self._schema)
            self._arrow.write_batch(batch)
        else:
            k = kind.encode()
            self._f.write(struct.pack("<H", len(k)) + k + struct.pack("<qQ", t, len(payload)))
            self._f.write(payload)
        self._f.flush()

    def close(self) -> None:
        with self._lock:
            if self._f.closed:
                return
            if self._arrow is not None:
                self._arrow.close()
            self._f.close()


def find_libcupti() -> str | None:
    """The libcupti to load: ``$ZYM_CUPTI_LIB``, else the one of the CUDA major torch was built
    for (read from torch/version.py without importing torch), else any pip-installed one, else
    the CUDA toolkit's."""
    if os.environ.get(ENV_LIB):
        return os.environ[ENV_LIB]
    major = _torch_cuda_major()
    found: list[str] = []
    for p in sys.path:
        found += glob.glob(os.path.join(p, "nvidia", "cu*", "lib", "libcupti.so*"))
        found += glob.glob(os.path.join(p, "nvidia", "cuda_cupti", "lib", "libcupti.so*"))
    found += glob.glob("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*")

    def lib_major(path: str) -> int | None:
        m = re.search(r"libcupti\.so\.(\d+)", path)
        return int(m.group(1)) if m else None

    if major is not None:
        matching = [f for f in found if lib_major(f) == major]
        if matching:
            return min(matching)
    return min(found, key=lambda f: -(lib_major(f) or 0)) if found else None


def _torch_cuda_major() -> int | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        try:
            with open(os.path.join(loc, "version.py")) as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"](\d+)\.", text, re.MULTILINE)
        if m:
            return int(m.group(1))
    return None


class Collector:
    """One CUPTI activity session in this process."""

    def __init__(self, out_dir: str, nvtx: str | None = None,
                 roll_s: float | None = None) -> None:
        self.pid = os.getpid()
        self.out_dir = out_dir
        self.lib_path = find_libcupti()
        if not self.lib_path:
            raise OSError("no libcupti found: install nvidia-cuda-cupti (torch's CUDA major) or "
                          f"set {ENV_LIB}")
        # a dormant agent says what it did at the process's start; too late to change it now
        self.nvtx = ready_nvtx(self.lib_path) if nvtx is None else nvtx
        self._activity_seq = 0
        self._write_lock = threading.Lock()
        self.lib = ct.CDLL(self.lib_path, mode=ct.RTLD_GLOBAL)
        self.buffer_bytes = int(float(os.environ.get(ENV_BUFFER_MB, "16")) * (1 << 20)) // 8 * 8
        self._free: list = []
        self._live: dict[int, object] = {}
        self._lock = threading.Lock()
        self.stats = {"buffers": 0, "bytes": 0, "dropped": 0, "declined": 0, "errors": [],
                      "callback_ns": 0, "stop_ns": 0}
        self.calibrations: list[list[int]] = []
        self.enabled_apis: dict[str, dict[int, str]] = {}
        self.version = 0
        self.stopped = False
        # held by the periodic flush and by stop: a buffer the flusher has taken from CUPTI is
        # written before stop writes the footer and closes the spool (else it would be lost)
        self._flush_lock = threading.Lock()
        self.enabled_mono_ns = self.disabled_mono_ns = None
        self.flushers: list = []   # flushed with CUPTI's buffers and at stop (operator shapes)
        fmt = os.environ.get(ENV_FORMAT, "arrow")
        os.makedirs(out_dir, exist_ok=True)
        # segments (--rotate): a new spool file every roll_s seconds, each opened by the header
        self.roll_s = float(os.environ.get(ENV_ROLL_S) or 0) if roll_s is None else roll_s
        self.segments = [self._segment_path(0)]
        self._rolled_at = time.monotonic()
        self._header: dict = {}
        self.spool = SpoolWriter(self.segments[0], fmt)
        self._setup_api()

    # -- CUPTI calls -------------------------------------------------------------------------
    def _setup_api(self) -> None:
        L = self.lib
        self._get_ts = L.cuptiGetTimestamp
        self._get_ts.argtypes = [ct.POINTER(ct.c_uint64)]
        self._ts = ct.c_uint64()
        self._ts_ref = ct.byref(self._ts)
        L.cuptiGetCallbackName.argtypes = [ct.c_int, ct.c_uint32, ct.POINTER(ct.c_char_p)]
        L.cuptiActivityGetNumDroppedRecords.argtypes = [ct.c_void_p, ct.c_uint32,
                                                        ct.POINTER(ct.c_size_t)]
        L.cuptiActivityFlushAll.argtypes = [ct.c_uint32]
        self.REQ = ct.CFUNCTYPE(None, ct.POINTER(ct.c_void_p), ct.POINTER(ct.c_size_t),
                                ct.POINTER(ct.c_size_t))
        self.CMP = ct.CFUNCTYPE(None, ct.c_void_p, ct.c_uint32, ct.c_void_p, ct.c_size_t,
                                ct.c_size_t)

    def _check(self, what: str, rc: int) -> bool:
        if rc != 0:
            self.stats["errors"].append(f"{what}: CUPTI error {rc}")
            return False
        return True

    def calibrate(self, rounds: int = CALIB_ROUNDS) -> list[int]:
        """Best-of-``rounds`` sandwich: [mono_mid_ns, cupti_ns, err_ns] (wprof's method)."""
        best = None
        ts = ct.c_uint64()
        mono, get, ref = time.monotonic_ns, self._get_ts, ct.byref(ts)
        for _ in range(rounds):
            t1 = mono(); get(ref); t2 = mono()
            if best is None or t2 - t1 < best[2]:
                best = [(t1 + t2) // 2, ts.value, t2 - t1]
        self.calibrations.append(best)
        return best

    def api_names(self, domain: int) -> dict[int, str]:
        """cbid -> raw CUPTI name, for every cbid CUPTI names in ``domain``."""
        out, name = {}, ct.c_char_p()
        get, ref = self.lib.cuptiGetCallbackName, ct.byref(name)
        for cbid in range(1, MAX_CBID):  # ~2 ms: CUPTI 13 names ~530 runtime, ~900 driver ids
            if get(domain, cbid, ref) == 0 and name.value:
                out[cbid] = name.value.decode()
        return out

    # -- buffers -------------------------------------------------------------------------------
    def _requested(self, buf_pp, size_p, max_p) -> None:
        try:
            with self._lock:
                arr = self._free.pop() if self._free else (ct.c_uint64 * (self.buffer_bytes // 8))()
                addr = ct.addressof(arr)
                self._live[addr] = arr
            buf_pp[0] = addr
            size_p[0] = self.buffer_bytes
            max_p[0] = 0
        except Exception as e:  # noqa: BLE001 - never raise into CUPTI
            self.stats["declined"] += 1
            self.stats["errors"].append(f"buffer request: {e}")
            buf_pp[0] = None
            size_p[0] = 0

    def _completed(self, ctx, stream_id, buf, size, valid) -> None:
        t0 = time.perf_counter_ns()
        try:
            data = ct.string_at(buf, valid) if valid else b""
            with self._lock:
                arr = self._live.pop(buf, None)
                if arr is not None:
                    self._free.append(arr)
            dropped = ct.c_size_t(0)
            self.lib.cuptiActivityGetNumDroppedRecords(ctx, stream_id, ct.byref(dropped))
            self.stats["buffers"] += 1
            self.stats["bytes"] += len(data)
            self.stats["dropped"] += dropped.value
            if dropped.value:   # said where it happened, not only in the footer's total
                self.spool.write("dropped", str(dropped.value).encode())
            if data:
                self._write_activity(data)
            self.spool.write("calib", json.dumps(self.calibrate()).encode())
        except Exception as e:  # noqa: BLE001
            self.stats["errors"].append(f"buffer completed: {e}")
        self.stats["callback_ns"] += time.perf_counter_ns() - t0

    def _write_activity(self, data: bytes) -> None:
        """One activity chunk, followed, when it holds NVTX markers, by their names: read now,
        in the completion callback, as CUPTI's samples do (a marker's strings are CUPTI's, with
        no promise that they outlive the buffer)."""
        names: dict[str, str] = {}
        if self.nvtx == "on":
            ptrs = marker_name_pointers(data)
            if ptrs:
                names = {k: v[:MAX_NAME] for k, v in read_strings(ptrs, 4 * MAX_NAME).items()}
        with self._write_lock:  # the names chunk names its buffer: completions may overlap
            seq = self._activity_seq
            self._activity_seq += 1
            self.spool.write("activity", data)
            if names:
                self.spool.write("marker_names", json.dumps({"buffer": seq, "names": names}
                                                            ).encode())

    # -- session ------------------------------------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic_ns()
        apis = os.environ.get(ENV_ALL_APIS)
        L = self.lib
        self._req_cb, self._cmp_cb = self.REQ(self._requested), self.CMP(self._completed)
        self._check("cuptiSetThreadIdType", L.cuptiSetThreadIdType(THREAD_ID_SYSTEM))
        self._check("cuptiActivityRegisterCallbacks",
                    L.cuptiActivityRegisterCallbacks(self._req_cb, self._cmp_cb))
        version = ct.c_uint32()
        L.cuptiGetVersion(ct.byref(version))
        self.version = version.value
        names = {"runtime": self.api_names(DOMAIN_RUNTIME), "driver": self.api_names(DOMAIN_DRIVER)}
        enabled: dict[str, dict[int, str]] = {"runtime": {}, "driver": {}}
        if apis == "1":
            self._check("enable RUNTIME", L.cuptiActivityEnable(KIND_RUNTIME))
            self._check("enable DRIVER", L.cuptiActivityEnable(KIND_DRIVER))
            enabled = names
        elif apis != "0":
            for domain, fn in (("runtime", L.cuptiActivityEnableRuntimeApi),
                               ("driver", L.cuptiActivityEnableDriverApi)):
                fn.argtypes = [ct.c_uint32, ct.c_uint8]
                for cbid, raw in names[domain].items():
                    if API_PATTERN.match(api_name(raw)) and fn(cbid, 1) == 0:
                        enabled[domain][cbid] = raw
        self.enabled_apis = enabled
        for kind in ENABLED_KINDS:
            self._check(f"enable kind {kind}", L.cuptiActivityEnable(kind))
        # Every API and kind is on from here: a call after this has all its records (the
        # window of an attach starts here, not when enabling began: launches made while the
        # kinds were being switched on had API records but no kernel records).
        self.enabled_mono_ns = time.monotonic_ns()
        flush_ms = int(os.environ.get(ENV_FLUSH_MS, "1000"))
        if flush_ms > 0:  # a forced flush hands over partly filled buffers: a crash loses < 1 period
            threading.Thread(target=self._flusher, args=(flush_ms / 1000,), daemon=True,
                             name="zym-cupti-flush").start()
        header = {
            "pid": self.pid, "ppid": os.getppid(), "argv": sys.argv, "cupti_lib": self.lib_path,
            "cupti_api_version": version.value, "python": sys.version.split()[0],
            "buffer_bytes": self.buffer_bytes, "flush_ms": flush_ms, "thread_id_type": "system",
            "api_names": {d: {str(k): v for k, v in m.items()} for d, m in enabled.items()},
            "kinds": list(ENABLED_KINDS), "spool_format": self.spool.format, "nvtx": self.nvtx,
            "started_mono_ns": time.monotonic_ns(), "setup_ns": time.monotonic_ns() - t0,
            "errors": list(self.stats["errors"]), "roll_s": self.roll_s,
        }
        self._header = header
        self.spool.write("header", json.dumps(header).encode())
        self.spool.write("calib", json.dumps(self.calibrate(64)).encode())

    def pause(self) -> None:
        """Stop recording (every kind and API callback off) without ending the session."""
        for kind in ENABLED_KINDS:
            self.lib.cuptiActivityDisable(kind)
        self._set_apis(0)

    def resume(self) -> None:
        """Record again after ``pause``."""
        self._set_apis(1)
        for kind in ENABLED_KINDS:
            self.lib.cuptiActivityEnable(kind)

    def _set_apis(self, on: int) -> None:
        for domain, fn in (("runtime", self.lib.cuptiActivityEnableRuntimeApi),
                           ("driver", self.lib.cuptiActivityEnableDriverApi)):
            for cbid in self.enabled_apis.get(domain, {}):
                fn(cbid, on)

    def _flusher(self, period_s: float) -> None:
        while not self.stopped:
            time.sleep(period_s)
            with self._flush_lock:
                if self.stopped:
                    return
                self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
                for flush in list(self.flushers):
                    flush(False)
                if self.roll_s and time.monotonic() - self._rolled_at >= self.roll_s:
                    try:
                        self.roll()
                    except OSError as e:   # zym removed the folder (it has ended): stay put
                        self.roll_s = 0
                        self.stats["errors"].append(f"spool segment: {e}")

    def _segment_path(self, index: int) -> str:
        name = f"cupti-{self.pid}-{index:06d}.spool" if self.roll_s else f"cupti-{self.pid}.spool"
        return os.path.join(self.out_dir, name)

    def roll(self) -> None:
        """Go on in a new spool segment (opened by the header and a calibration); an activity
        chunk and its NVTX names stay in one segment, whose buffers count from 0."""
        with self._write_lock:
            self._rolled_at = time.monotonic()
            path = self._segment_path(len(self.segments))
            header = {**self._header, "segment": len(self.segments)}
            self.spool.roll(path, [("header", json.dumps(header).encode()),
                                   ("calib", json.dumps(self.calibrate()).encode())])
            self.segments.append(path)
            self._activity_seq = 0

    def stop(self, reason: str = "exit") -> None:
        """Flush CUPTI, resolve kernel names, write the footer. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        t0 = time.perf_counter_ns()
        with self._flush_lock:   # a periodic flush under way completes first: its buffer is kept
            self._stop_flushed(reason, t0)

    def _stop_flushed(self, reason: str, t0: int) -> None:
        for flush in list(self.flushers):
            flush(True)
        try:
            self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
            for kind in ENABLED_KINDS:
                self.lib.cuptiActivityDisable(kind)
            self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        except Exception as e:  # noqa: BLE001
            self.stats["errors"].append(f"flush: {e}")
        self.spool.write("calib", json.dumps(self.calibrate(64)).encode())
        try:
            self.spool.write("names", json.dumps(self.kernel_names()).encode())
        except Exception as e:  # noqa: BLE001
            self.stats["errors"].append(f"kernel names: {e}")
        self.stats["stop_ns"] = time.perf_counter_ns() - t0
        self.spool.write("footer", json.dumps({**self.stats, "reason": reason, **_process_facts(),
                                               "stopped_mono_ns": time.monotonic_ns()}).encode())
        self.spool.close()

    def detach(self, finalize: bool = True) -> None:
        """End this session while the process runs on (``zym capture --pid`` switching off):
        every record and API callback off, flushed, footer written (``stop``); then, with
        ``finalize``, CUPTI detached from the process (``cuptiFinalize``), so the process runs
        as if it had never been profiled, and a later session attaches afresh."""
        # Everything is still on: a call before this has all its records (the window of an
        # attach ends here, before anything is switched off).
        self.disabled_mono_ns = time.monotonic_ns()
        for kind in ENABLED_KINDS:
            self.lib.cuptiActivityDisable(kind)
        self._set_apis(0)
        self.stop("detach")
        fin = getattr(self.lib, "cuptiFinalize", None) if finalize else None
        if fin is not None:
            rc = fin()
            if rc != 0:
                self.stats["errors"].append(f"cuptiFinalize returned {rc}")

    def kernel_names(self) -> dict[str, str]:
        """{name pointer: kernel name} for every kernel record in the spool so far.

        CUPTI shares one name string per kernel function, so the pointers are few; reading them
        is the only per-record pass the target makes, once, at stop.
        """
        sizes = RECORD_SIZES.get(cupti_major(self.version))
        if sizes is None:
            self.stats["errors"].append(f"kernel names: no record layout for CUPTI {self.version}")
            return {}
        ptrs: set[int] = set()
        q = struct.Struct("<q").unpack_from
        for path in self.segments:   # those zym has not read and removed yet (--rotate)
            try:
                chunks = list(read_activity_chunks(path))
            except OSError:
                continue
            for data in chunks:
                offsets, kinds, end = record_offsets(data, sizes)
                if end != len(data):  # a layout that does not fit: never follow its pointers
                    self.stats["errors"].append("kernel names: a buffer did not walk to its end")
                    continue
                ptrs.update(q(data, o + KERNEL_NAME_OFFSET)[0]
                            for o, k in zip(offsets, kinds) if k == KIND_CONCURRENT_KERNEL)
        return {str(p): ct.string_at(p).decode(errors="replace") for p in ptrs if p}


def _process_facts() -> dict:
    """GPUs, driver and torch versions, read at stop (CUDA is up by then, if the target used it;
    libcuda is only asked when the process has it loaded already)."""
    out: dict = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_version"] = str(getattr(torch, "__version__", ""))
        out["cuda_runtime_version"] = str(getattr(getattr(torch, "version", None), "cuda", "") or "")
    try:
        with open("/proc/self/maps") as f:
            if "libcuda.so" not in f.read():
                return out
        cuda = ct.CDLL("libcuda.so.1")
        v, n = ct.c_int(), ct.c_int()
        if cuda.cuInit(0) == 0 and cuda.cuDriverGetVersion(ct.byref(v)) == 0:
            out["cuda_driver_api_version"] = v.value
        gpus = []
        if cuda.cuDeviceGetCount(ct.byref(n)) == 0:
            for i in range(n.value):
                name = ct.create_string_buffer(256)
                mem = ct.c_size_t()
                cuda.cuDeviceGetName(name, 256, i)
                cuda.cuDeviceTotalMem_v2(ct.byref(mem), i)
                gpus.append({"id": i, "name": name.value.decode(errors="replace"),
                             "memory_bytes": mem.value})
        out["gpus"] = gpus
    except (OSError, AttributeError):
        pass
    return out


def read_chunks(path: str):
    """Yield (kind, t_mono_ns, payload) from a spool file, either format, stopping cleanly at a
    torn tail (a crash mid-write)."""
    with open(path, "rb") as f:
        head = f.read(len(MAGIC))
        if head == MAGIC:
            while True:
                h = f.read(2)
                if len(h) < 2:
                    return
                (n,) = struct.unpack("<H", h)
                kind = f.read(n).decode(errors="replace")
                tl = f.read(16)
                if len(tl) < 16:
                    return
                t, size = struct.unpack("<qQ", tl)
                payload = f.read(size)
                if len(payload) < size:
                    return
                yield kind, t, payload
        else:
            f.seek(0)
            import pyarrow as pa

            try:
                reader = pa.ipc.open_stream(f)
                for batch in reader:
                    kinds = batch.column(0).to_pylist()
                    ts = batch.column(1).to_pylist()
                    for i, kind in enumerate(kinds):
                        yield kind, ts[i], batch.column(2)[i].as_py()
            except (pa.ArrowInvalid, OSError, EOFError):
                return


def read_activity_chunks(path: str):
    for kind, _, payload in read_chunks(path):
        if kind == "activity":
            yield payload


_collector: Collector | None = None
ENV_EAGER = "ZYM_CUPTI_EAGER"        # "1": start at interpreter start, not at the first CUDA import
# Importing one of these starts the collector (before the module runs, so before any CUDA call);
# Python processes that never import one (launchers, zym's own exec hold, tool subprocesses) never
# load CUPTI.
TRIGGER_MODULES = frozenset({
    "torch", "cupy", "jax", "jaxlib", "tensorflow", "numba", "cuda", "pycuda", "tensorrt",
    "triton", "onnxruntime", "paddle", "mxnet", "cudf", "cuml", "vllm", "sglang",
    "nvtx"})  # NVIDIA's nvtx package: its ranges need the injection path set before its first call


class _StartOnImport:
    """A meta-path finder that starts the collector when a CUDA framework is first imported,
    then steps aside (it never finds anything itself)."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in TRIGGER_MODULES:
            _remove_hook()
            _start()


_hook = _StartOnImport()


def _remove_hook() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass


class _ShapesOnImport:
    """``$ZYM_SHAPES=1``: at the first import of torch, finds torch's spec through the other
    finders and returns it with its loader's ``exec_module`` wrapped, so that operator shapes
    start being recorded once torch has finished importing (``_start_shapes``)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        run = getattr(spec.loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            _start_shapes()

        try:
            spec.loader.exec_module = exec_module   # this spec's own loader instance
        except (AttributeError, TypeError):
            pass
        return spec


_shapes = None   # the operator-shapes recorder (opshapes_target.Recorder), once started


def _torch_imported() -> bool:
    m = sys.modules.get("torch")
    return m is not None and not getattr(getattr(m, "__spec__", None), "_initializing", False)


def _start_shapes() -> None:
    """Record torch operator shapes into the collector's spool (``zym capture --shapes``), or
    ready them for a dormant agent's sessions (``zym run --shapes``: recorded only while one is
    on, into its spool); never raise into the target."""
    global _shapes
    c = _collector
    if _shapes is not None:
        return
    if c is None or c.stopped:
        if _dormant is not None and os.environ.get(ENV_AGENT_SHAPES) == "1":
            _dormant.ready_shapes()
        return
    recorder = _load_shapes(c.spool.write, c.stats["errors"])
    if recorder is None:
        return
    _shapes = recorder
    c.stats["op_shapes"] = recorder.stats
    c.flushers.append(lambda final: recorder.stop() if final else recorder.flush())
    os.register_at_fork(after_in_child=lambda: setattr(recorder, "active", False))


def _load_shapes(write, errors: list):
    """opshapes_target.py's recorder, writing through ``write``; None (and why in ``errors``)
    when it cannot start."""
    try:
        import types

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opshapes_target.py")
        with open(path) as f:
            source = f.read()
        mod = types.ModuleType("_zym_opshapes")
        sys.modules[mod.__name__] = mod
        # compiled under a "<...>" name: its frame (between the user's line and torch's kernel
        # in every recorded operator's stack) reads as zym's, never as the user's code
        exec(compile(source, "<zym opshapes_target.py>", "exec"), mod.__dict__)  # noqa: S102
        recorder, installed = mod.install(write)
    except Exception as e:  # noqa: BLE001
        errors.append(f"operator shapes: {type(e).__name__}: {e}")
        return None
    if installed is None:
        errors += [f"operator shapes: {e}" for e in recorder.stats["errors"]]
        return None
    return recorder


def install() -> None:
    """Called by the bootstrap. ``$ZYM_CUPTI_DIR`` (``zym capture -- COMMAND``): start
    collecting now (``$ZYM_CUPTI_EAGER=1``, or a trigger module is already imported), else at
    the first import of a CUDA framework. ``$ZYM_AGENT=1`` (``zym run``): the same moments, but
    only a dormant agent starts (see ``Dormant``). ``$ZYM_SHAPES=1`` with ``$ZYM_CUPTI_DIR``:
    operator shapes too, from the end of torch's import."""
    if not os.environ.get(ENV_DIR) and os.environ.get(ENV_AGENT) != "1":
        return
    if os.environ.get(ENV_EAGER) == "1" or TRIGGER_MODULES & set(sys.modules):
        _start()
    elif _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
    if (os.environ.get(ENV_DIR) and os.environ.get(ENV_SHAPES) == "1") or (
            not os.environ.get(ENV_DIR) and os.environ.get(ENV_AGENT) == "1"
            and os.environ.get(ENV_AGENT_SHAPES) == "1"):
        if _torch_imported():
            _start_shapes()
        else:
            sys.meta_path.insert(0, _ShapesOnImport())


def _start() -> None:
    if os.environ.get(ENV_DIR):
        start_from_env()
    elif os.environ.get(ENV_AGENT) == "1":
        start_dormant()


def agent_folder(pid: int, base: str | None = None) -> str:
    """The control folder of the dormant agent of process ``pid``."""
    return os.path.join(base or os.environ.get(ENV_AGENT_DIR) or DEFAULT_AGENT_DIR, str(pid))


class Dormant:
    """An agent that records nothing until asked: no CUPTI loaded, one thread that looks at a
    control file every ``AGENT_POLL_S`` (a ``stat``; nothing else runs in the process).

    Its folder ``agent_folder(pid)`` (mode 0700, the process's own user; root may write it)
    holds ``state`` (JSON, replaced atomically: ``pid``, ``seq``, ``state`` dormant|on|off,
    ``errors``) and, from ``zym capture --pid``, ``control`` (JSON: ``seq``, ``action``
    on|off, ``spool_dir``, ``roll_s``: spool segments, for --rotate). A request is handled once, when its ``seq`` is new: "on" starts a
    CUPTI session writing to ``spool_dir``; "off" ends it (``Collector.detach``). The state
    file answers with the same ``seq`` when the request is done."""

    def __init__(self, base: str | None = None) -> None:
        self.pid = os.getpid()
        self.folder = agent_folder(self.pid, base)
        os.makedirs(os.path.dirname(self.folder), mode=0o1777, exist_ok=True)
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        st = os.lstat(self.folder)
        if not os.path.isdir(self.folder) or os.path.islink(self.folder) or \
                st.st_uid != os.geteuid():
            raise OSError(f"{self.folder} is not this user's own folder")
        self.seq = 0
        self.collector: Collector | None = None
        self.finalize = os.environ.get(ENV_AGENT_FINALIZE, "1") != "0"
        # NVTX reads its injection path at the program's first NVTX call: now or never. Opt-in,
        # because it loads libcupti at that call, long before any capture switches CUPTI on.
        self.nvtx = (ready_nvtx(find_libcupti(), asked=True)
                     if os.environ.get(ENV_AGENT_NVTX) == "1" else
                     f"off: the dormant agent was started without {ENV_AGENT_NVTX}=1 "
                     "(`zym run --nvtx`)")
        self.shapes = None    # opshapes_target's recorder, once torch is imported (--shapes)
        self.shapes_errors: list[str] = []
        self.write_state("dormant")
        threading.Thread(target=self._watch, daemon=True, name="zym-agent").start()

    def write_state(self, state: str, errors: list[str] | None = None, **extra) -> None:
        doc = {"pid": self.pid, "seq": self.seq, "state": state, "errors": errors or [],
               "python": sys.version.split()[0], "t_mono_ns": time.monotonic_ns(),
               "nvtx": getattr(self, "nvtx", None), **extra}
        tmp = os.path.join(self.folder, f".state.{self.seq}")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, os.path.join(self.folder, "state"))

    def _watch(self) -> None:
        path = os.path.join(self.folder, "control")
        seen = None
        while True:
            time.sleep(AGENT_POLL_S)
            try:
                st = os.stat(path)
                # zym replaces the file (a new inode) for each request: a coarse mtime alone
                # could hide a second request written within one clock tick
                if (st.st_ino, st.st_mtime_ns) == seen:
                    continue
                seen = (st.st_ino, st.st_mtime_ns)
                with open(path) as f:
                    req = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(req, dict) and isinstance(req.get("seq"), int) and req["seq"] > self.seq:
                self.seq = req["seq"]
                self.handle(req)

    def ready_shapes(self) -> None:
        """torch is imported: wrap its matmul entry points now (the program's start), recording
        nothing until a session is switched on (``_shapes_on``)."""
        if self.shapes is None:
            self.shapes = _load_shapes(lambda kind, payload: None, self.shapes_errors)
            if self.shapes is not None:
                self.shapes.active = False
                os.register_at_fork(after_in_child=lambda: setattr(self, "shapes", None))

    def _shapes_on(self, c: Collector) -> None:
        rec = self.shapes
        if rec is None:
            if self.shapes_errors:
                c.stats["errors"] += self.shapes_errors
            return
        rec.write = c.spool.write   # this session's spool, until the next one's
        rec.active = True   # stopped (flushed, inactive) with the session: Collector.stop
        c.stats["op_shapes"] = rec.stats
        c.flushers.append(lambda final: rec.stop() if final else rec.flush())

    def handle(self, req: dict) -> None:
        """Carry out one request and answer in the state file; never raise."""
        errors: list[str] = []
        extra: dict = {}
        try:
            if req.get("action") == "on":
                if self.collector is None:
                    c = Collector(str(req["spool_dir"]), nvtx=self.nvtx,
                                  roll_s=float(req.get("roll_s") or 0))
                    # shapes on first: c.start() spends a while after its window opens
                    # (header, first spool write); a record before the window matches no call
                    self._shapes_on(c)
                    try:
                        c.start()
                    except Exception:
                        if self.shapes is not None:
                            self.shapes.active = False
                        raise
                    self.collector = c
                    errors = list(c.stats["errors"])
                state = "on"
                extra["enabled_mono_ns"] = self.collector.enabled_mono_ns
            elif req.get("action") == "off":
                c, self.collector = self.collector, None
                if c is not None:
                    c.detach(self.finalize)
                    errors = list(c.stats["errors"])
                    extra["disabled_mono_ns"] = c.disabled_mono_ns
                state = "off"
            else:
                state, errors = ("on" if self.collector else "off"), [f"unknown request {req!r}"]
        except Exception as e:  # noqa: BLE001 - a profiler must not break the program it watches
            self.collector = None
            state, errors = "off", [f"{type(e).__name__}: {e}"]
        self.write_state(state, errors, **extra)

    def at_exit(self) -> None:
        c = self.collector
        if c is not None:
            c.stop("exit")


_dormant: Dormant | None = None


def start_dormant() -> Dormant | None:
    """Start the dormant agent (``$ZYM_AGENT=1``); never raise into the target."""
    global _dormant
    if _dormant is not None:
        return _dormant
    try:
        _dormant = Dormant()
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"zym: agent not started ({e}); `zym capture --pid` will record the "
                         "CPU side only\n")
        return None
    atexit.register(_dormant.at_exit)
    return _dormant


def start_from_env() -> Collector | None:
    """Start collecting when ``$ZYM_CUPTI_DIR`` is set; never raise into the target."""
    global _collector
    out_dir = os.environ.get(ENV_DIR)
    if not out_dir or _collector is not None:
        return _collector
    try:
        c = Collector(out_dir)
        c.start()
    except Exception as e:  # noqa: BLE001 - a profiler must not break the program it watches
        sys.stderr.write(f"zym: CUPTI collector not started ({e}); GPU activity is not recorded\n")
        return None
    if c.stats["errors"]:  # e.g. another CUPTI client (nsys, an attached profiler) holds CUPTI
        sys.stderr.write(f"zym: CUPTI collector started with errors ({'; '.join(c.stats['errors'][:3])}); "
                         "GPU activity may be incomplete\n")
    _collector = c
    atexit.register(c.stop, "exit")
    # A forked child shares the spool file but not CUPTI's state: it must not write or stop.
    os.register_at_fork(after_in_child=lambda: setattr(c, "stopped", True))
    _install_signal_stop(c)
    return c


def _install_signal_stop(c: Collector) -> None:
    """SIGUSR2 (zym's --duration) stops collection; SIGTERM, if the target leaves it at its
    default, exits through atexit so the spool is finalized."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGUSR2) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGUSR2, lambda *_: c.stop("signal"))
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    except (ValueError, OSError):
        pass
