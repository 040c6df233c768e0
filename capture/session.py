"""One ``zym capture``: start or attach to the target, follow its processes, stream records,
stop, finalize.

    cfg = CaptureConfig(output=Path("out.parquet"), command=["python", "serve.py"])
    summary = run_capture(cfg)          # needs root; raises CaptureError with what to do

The loop is single-threaded: it polls the BPF ring buffer and, every ``poll_ms``, detects
interpreters of new or exec'd processes and attaches the CUDA libraries they have mapped since
(CUDA is initialized late, often seconds after start). Libraries already known to the dynamic
linker are attached before the target starts, so a library dlopen'ed later is probed from its
first call.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from zym.schemas.errors import CaptureError
from zym.schemas.meta import CaptureMeta

from . import events
from .bpf_loader import BpfProgram, check_environment
from .cost import Budget, CostInputs, TrapCalibration, capture_cost, cpu_ns
from .interpreter import Interpreter, UnsupportedInterpreter, detect
from .libraries import candidate_libraries
from .probes import DRIVER, LIBRARY_PATTERNS, RUNTIME
from .process import (
    ProcessMemory,
    descendants,
    environ_of,
    host_path,
    is_alive,
    mapped_libraries,
    read_maps,
    thread_group,
)
from .sink import MISSED_FRAME, TRUNCATED_FRAME, RawWriter, finalize, write_raw_meta
from .symbolize import Symbolizer

Log = Callable[[str], None]
# Call records do not wake zym (zym.bpf.c send_call): the loop drains them this often.
DRAIN_MS = 10
# After an exec, look for the new interpreter every few ms for this long.
FAST_DETECT_S = 2.0
# Budget mode (--max-overhead): the sampling period is revisited this often.
BUDGET_S = 0.25


@dataclass
class CaptureConfig:
    output: Path
    pid: int | None = None
    command: list[str] | None = None
    duration: float | None = None
    sample: int = 1
    runtime_api: bool = False
    keep_raw: bool = False
    poll_ms: int = 50
    # Return probes on syncs and blocking copies give their CPU-side duration; off when CUPTI
    # records those durations (capture_with_gpu), which saves a trap per such call.
    return_probes: bool = True
    force_return_probes: bool = False   # keep them even when CUPTI records the durations
    # Budget mode: adapt the stack-walk sampling to keep the estimated overhead under this %.
    max_overhead_pct: float | None = None
    # Native frames: copy the stack of each new native path (unwound after the capture).
    native: bool = True
    # NVTX ranges (the GPU side's agent, see capture/cupti/agent.py ready_nvtx): `zym capture`
    # turns it on for a program it starts (--no-nvtx: off).
    nvtx: bool = False
    # Input shapes of torch's matmul-family operators (capture/cupti/opshapes_target.py): an
    # in-process dispatch mode, opt-in (every operator then passes through Python).
    shapes: bool = False
    # Continuous capture (capture/rotate.py): one file per this many seconds, the newest
    # ``keep`` kept, each labelled with ``labels``.
    rotate_s: float | None = None
    keep: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # Its GPU side (capture/cupti/rolling.py): gives each interval's tables their CUPTI records
    # (``RotatingWriter.gpu``), once CUPTI has had ``rotate_grace_s`` to hand them over.
    interval_gpu: Callable[..., dict] | None = None
    rotate_grace_s: float | None = None
    # Called once the probes are attached and the target tracked (before any of its calls
    # counts), and once recording ends (probes still attached): the GPU side switches a
    # running process's agent on and off here (--pid).
    on_attached: Callable[[], None] | None = None
    on_detach: Callable[[], None] | None = None


@dataclass
class CaptureSummary:
    output: Path
    calls: int
    stacks: int
    seconds: float
    pids: list[int]
    dropped: dict[str, int]
    counters: dict[str, int]
    outputs: list[Path] = field(default_factory=list)  # --rotate: the files kept
    gpu: dict[str, int] = field(default_factory=dict)  # --rotate: GPU work over the files


@dataclass
class Tracked:
    """A process of the target: its interpreter once detected, and its symbolizer."""

    pid: int
    interp: Interpreter | None = None
    symbolizer: Symbolizer | None = None
    detect_failed: str = ""
    await_exec: bool = False    # the command's holder: detect only after it execs
    since: float = field(default_factory=time.monotonic)   # tracked, or exec'd, at
    gone: bool = False


@dataclass
class Collector:
    """Receives ring buffer records; owns the per-process state and the raw writer."""

    bpf: BpfProgram
    writer: RawWriter
    log: Log
    libraries: tuple[str, ...]
    procs: dict[int, Tracked] = field(default_factory=dict)
    stack_keys: dict[tuple[int, int], int] = field(default_factory=dict)
    cuda_libraries: set[str] = field(default_factory=set)
    calls: int = 0
    stacks_received: int = 0
    # per process: the executable mappings recorded for unwinding, by (start, end, path)
    maps_seen: dict[int, dict[tuple, dict]] = field(default_factory=dict)
    calls_by_probe: np.ndarray = field(default_factory=lambda: np.zeros(events.MAX_PROBES, np.int64))

    # ---- records from the kernel
    def on_calls(self, records: np.ndarray) -> None:
        """A batch of call records (``events.CALL_DTYPE``), drained from the ring at once."""
        self.calls += len(records)
        self.calls_by_probe += np.bincount(records["probe"], minlength=events.MAX_PROBES)[
            :events.MAX_PROBES]
        self.writer.add_calls(records)

    def on_record(self, kind: int, rec: object) -> None:
        if kind == events.EV_STACK:
            self._on_stack(rec)
        elif kind == events.EV_PROC:
            self._on_proc(rec)
        elif kind == events.EV_NATIVE:
            self._on_native(rec)

    def _on_native(self, n: events.NativeCopy) -> None:
        """A new native path: keep its stack copy, and the process's executable mappings
        that zym has not recorded yet (the unwinding after the capture needs both)."""
        self.writer.add("natives", pid=n.pid, key=n.key, ip=n.ip, sp=n.sp, bp=n.bp,
                        probe=n.probe, stack=n.stack)
        self._record_mappings(n.pid)

    def _record_mappings(self, pid: int, into: int | None = None) -> None:
        """``pid``'s executable mappings not recorded yet, for ``into`` (default: ``pid``; a
        forked child has its parent's until it execs, and may exit before zym reads its own)."""
        for m in read_maps(pid, executable=True):
            key = (m.start, m.end, m.path)
            known = self.maps_seen.get(pid, {}).get(key)
            if known is None:
                size = mtime = None
                try:
                    st = os.stat(f"/proc/{pid}/root{m.path}")
                    size, mtime = st.st_size, st.st_mtime_ns
                except OSError:
                    pass
                known = {"start": m.start, "end": m.end, "offset": m.offset, "path": m.path,
                         "size": size, "mtime_ns": mtime}
            self._add_mapping(pid if into is None else into, known)

    def _add_mapping(self, pid: int, row: dict) -> None:
        seen = self.maps_seen.setdefault(pid, {})
        key = (row["start"], row["end"], row["path"])
        if key not in seen:
            seen[key] = row
            self.writer.add("maps", pid=pid, **row)

    def _on_stack(self, s: events.Stack) -> None:
        self.stacks_received += 1
        if (s.pid, s.hash) in self.stack_keys:
            return     # sent again after it left the kernel's LRU
        key = len(self.stack_keys) + 1
        self.stack_keys[(s.pid, s.hash)] = key
        proc = self.procs.get(s.pid)
        sym = proc.symbolizer if proc else None
        frames = [sym.frame(f.code, f.instr) if sym else (MISSED_FRAME, "", 0)
                  for f in s.frames[:s.nframes]]
        frames.reverse()        # BPF walks innermost first; depth counts from the root
        if s.flags & events.F_TRUNCATED:
            frames.insert(0, (TRUNCATED_FRAME, "", 0))
        for depth, (name, file, line) in enumerate(frames):
            kind = "python" if file else "native"
            self.writer.add("frames", pid=s.pid, hash=s.hash, stack_key=key, depth=depth,
                            kind=kind, name=name, file=file or None,
                            line=line if file else None,
                            source=sym.source(file, line) if sym and file else None)

    def _on_proc(self, e: events.ProcEvent) -> None:
        if e.what == events.PROC_FORK:
            if thread_group(e.pid) != e.pid or e.pid in self.procs:
                return     # a new thread (or a child that already exited)
            self._add_child(e.pid, self.procs.get(e.ppid))
        elif e.what == events.PROC_EXEC and e.pid in self.procs:
            self.procs[e.pid] = Tracked(e.pid)     # re-detect the new image
        elif e.what == events.PROC_GATE:
            self._release(e.pid)

    def _release(self, pid: int) -> None:
        """A process stopped at CUDA init: detect its interpreter now, then let it go."""
        self.attach_mapped(pid)
        proc = self.procs.get(pid)
        if proc is not None and proc.interp is None and not proc.detect_failed:
            self._try_detect(proc)
            if proc.interp is None and not proc.detect_failed:
                proc.detect_failed = "no CPython interpreter mapped"
                self.bpf.track(pid, None, events.LAYOUT_NONE)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def _add_child(self, pid: int, parent: Tracked | None) -> None:
        """A forked child runs the parent's interpreter at the same addresses until it execs,
        so it starts with a copy of the parent's code-object cache: its stacks stay readable
        even when it exits before zym reads its memory."""
        proc = Tracked(pid)
        if parent is not None:      # the same mappings until it execs (or maps more)
            self._record_mappings(parent.pid, into=pid)
        if parent is not None and parent.interp is not None:
            proc.interp = dataclasses.replace(parent.interp, pid=pid)
            cache = dict(parent.symbolizer.cache) if parent.symbolizer else {}
            try:
                proc.symbolizer = Symbolizer(proc.interp, ProcessMemory(pid), cache)
            except OSError:
                pass
        self.procs[pid] = proc

    # ---- periodic work
    def track(self, pid: int, interp: Interpreter | None, await_exec: bool = False) -> None:
        proc = Tracked(pid, await_exec=await_exec)
        self.procs[pid] = proc
        self.bpf.track(pid, None)
        if interp is not None:
            self._set_interpreter(proc, interp)

    def adopt(self, pid: int) -> None:
        """Track a running process found at attach time: its interpreter, if any, now."""
        self.track(pid, None)
        proc = self.procs[pid]
        self._try_detect(proc)
        if proc.interp is None and not proc.detect_failed:
            proc.detect_failed = "no CPython interpreter mapped"
            self.bpf.track(pid, None, events.LAYOUT_NONE)

    def _set_interpreter(self, proc: Tracked, interp: Interpreter) -> None:
        proc.interp = interp
        proc.symbolizer = Symbolizer(interp, ProcessMemory(proc.pid))
        self.bpf.track(proc.pid, interp.bpf_proc_fields())
        self.log(f"tracking PID {proc.pid}: CPython {interp.version_text} ({interp.path})")

    def detecting(self) -> bool:
        """True while a process that exec'd in the last FAST_DETECT_S seconds has no known
        interpreter. (Later, or for a non-Python image, the CUDA init gate still holds it
        until detection.)"""
        now = time.monotonic()
        return any(p.interp is None and not p.detect_failed and not p.await_exec
                   and not p.gone and now - p.since < FAST_DETECT_S
                   for p in self.procs.values())

    def tick(self) -> None:
        for proc in list(self.procs.values()):
            if proc.gone:
                continue
            if not is_alive(proc.pid):
                self._forget(proc)
                continue
            if proc.interp is None and not proc.detect_failed and not proc.await_exec:
                self._try_detect(proc)
            self.attach_mapped(proc.pid)
        self.writer.maybe_flush()

    def _forget(self, proc: Tracked) -> None:
        """A process exited: close its memory (its code-object cache stays for late records)."""
        proc.gone = True
        if proc.symbolizer is not None:
            proc.symbolizer.mem.close()

    def _try_detect(self, proc: Tracked) -> None:
        try:
            interp = detect(proc.pid)
        except UnsupportedInterpreter as e:
            proc.detect_failed = str(e)
            self.bpf.track(proc.pid, None, events.LAYOUT_NONE)
            self.log(f"warning: {e}; its calls are recorded without Python stacks")
            return
        except OSError:
            return
        if interp is not None:
            self._set_interpreter(proc, interp)

    def attach_mapped(self, pid: int) -> None:
        maps = read_maps(pid)
        for library in self.libraries:
            for path in mapped_libraries(maps, LIBRARY_PATTERNS[library]):
                self.attach(host_path(pid, path), library)
                if library == DRIVER:
                    self.cuda_libraries.add(path)

    def attach(self, path: str, library: str) -> None:
        n = self.bpf.attach_library(path, library)
        if n:
            self.log(f"attached {n} probes to {path}")


_HOLD = ("import os, sys\n"
         "os.write(int(sys.argv[1]), b'r')\n"
         "os.read(int(sys.argv[2]), 1)\n"
         "try:\n"
         "    os.execvp(sys.argv[3], sys.argv[3:])\n"
         "except OSError as e:\n"
         "    sys.exit(f'zym capture: cannot run {sys.argv[3]!r}: {e.strerror}')\n")


def _start_command(command: list[str]) -> tuple[subprocess.Popen, int]:
    """Start ``command`` held just before its exec; returns it and the fd that releases it,
    so it is tracked before it runs its first instruction. The hold is a small Python that
    says it is ready (its own exec is over, so its exec event cannot be mistaken for the
    command's), waits on a pipe, then execs the command. (Popen returns once its child has
    exec'd, so the wait cannot be in Popen's preexec_fn.)"""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    hold = [sys.executable, "-c", _HOLD, str(ready_w), str(go_r), *command]
    try:
        popen = subprocess.Popen(hold, pass_fds=(ready_w, go_r))
    except OSError as e:
        os.close(go_w)
        raise CaptureError(f"cannot start {command[0]!r}: {e.strerror}") from None
    finally:
        os.close(ready_w)
        os.close(go_r)
    os.read(ready_r, 1)
    os.close(ready_r)
    return popen, go_w


def _python_of(pid: int) -> Interpreter:
    """The interpreter of a process to attach to; checked before any BPF is compiled."""
    if not is_alive(pid):
        raise CaptureError(f"no process with PID {pid}")
    interp = detect(pid)    # raises UnsupportedInterpreter
    if interp is None:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        raise CaptureError(f"PID {pid} ({comm}) is not a CPython process: no libpython or "
                           "_PyRuntime in its mappings; attach to the Python process itself")
    return interp


def _start_target(cfg: CaptureConfig, collector: Collector, interp: Interpreter | None,
                  libraries: tuple[str, ...]) -> tuple[subprocess.Popen | None, int | None]:
    """Track the target and attach the CUDA libraries it will load; a command is started
    held (returns its release fd), a PID is tracked as it runs."""
    popen = go_fd = None
    if cfg.command:
        popen, go_fd = _start_command(cfg.command)
        collector.track(popen.pid, None, await_exec=True)
        env = dict(os.environ)
    else:
        collector.track(cfg.pid, interp)
        for child in descendants(cfg.pid):   # workers forked before the attach
            collector.adopt(child)
        env = environ_of(cfg.pid)
    for library in libraries:
        for path in candidate_libraries(library, env):
            collector.attach(path, library)
    return popen, go_fd


class _Stop:
    """SIGINT/SIGTERM end the capture cleanly (the file is finalized) instead of killing it."""

    def __init__(self) -> None:
        self.requested = False
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handler(self, signum: int, _frame: object) -> None:
        self.requested = True

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _meta(cfg: CaptureConfig, collector: Collector, counters: dict[str, int],
          cost: dict) -> CaptureMeta:
    interps = [p.interp for p in collector.procs.values() if p.interp]
    return CaptureMeta(
        producer="zym capture", producer_version="0.1.0",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        source=" ".join(cfg.command) if cfg.command else f"pid {cfg.pid}",
        host=socket.gethostname(), clock_domain="CLOCK_MONOTONIC",
        python_version=interps[0].version_text if interps else "",
        dropped={"ebpf_ringbuf": counters.get("lost_calls", 0),
                 "ebpf_ringbuf_stacks": counters.get("lost_stacks", 0),
                 "ebpf_ringbuf_native": counters.get("lost_native", 0)},
        extra={"sample": cfg.sample, "unreadable_frames": sum(p.symbolizer.unreadable for p in collector.procs.values()
                                        if p.symbolizer),
               "nested_calls": counters.get("nested", 0), "calls_seen": counters.get("calls", 0),
               "pids": sorted(collector.procs), "libraries": sorted(collector.bpf.attached),
               "stream_id": "CUstream handle value (0: legacy default stream)",
               "capture_cost": cost,
               "probe_placement": {sym: {"offset": p.offset, "emulated": p.emulated,
                                         "first_bytes": p.first}
                                   for sym, p in sorted(collector.bpf.placements.items())}},
    )


def run_capture(cfg: CaptureConfig, log: Log | None = None) -> CaptureSummary:
    """Capture until --duration, SIGINT/SIGTERM, or the target's exit; write cfg.output."""
    log = log or (lambda msg: print(f"zym: {msg}", file=sys.stderr))
    if (cfg.pid is None) == (not cfg.command):
        raise CaptureError("give either --pid PID or a command after --")
    if cfg.sample < 1:
        raise CaptureError("--sample must be 1 or more")
    if cfg.max_overhead_pct is not None and not 0 < cfg.max_overhead_pct < 100:
        raise CaptureError("--max-overhead must be a percentage between 0 and 100 (e.g. 1%)")
    check_environment()
    interp = _python_of(cfg.pid) if cfg.pid is not None else None
    raw_dir = cfg.output.with_name(cfg.output.name + ".raw")
    if raw_dir.exists():
        _remove_raw(raw_dir)
    rotating = cfg.rotate_s is not None
    collector: Collector | None = None
    bpf_ref: list[BpfProgram] = []
    writer = (_rotating_writer(cfg, lambda: _meta(cfg, collector, bpf_ref[0].counters(), {}),
                               log) if rotating else RawWriter(raw_dir))
    libraries = (DRIVER, RUNTIME) if cfg.runtime_api else (DRIVER,)
    stop = _Stop()
    popen = None
    try:
        with BpfProgram(lambda k, r: collector.on_record(k, r),
                        lambda recs: collector.on_calls(recs), libraries, cfg.sample,
                        return_probes=cfg.return_probes, native=cfg.native) as bpf:
            bpf_ref.append(bpf)
            collector = Collector(bpf, writer, log, libraries)
            calibration = bpf.calibrate(log)
            if rotating:
                writer.begin(time.monotonic_ns())
            popen, go_fd = _start_target(cfg, collector, interp, libraries)
            if go_fd is not None:     # the command may exec now: it is tracked
                os.write(go_fd, b"go\n")
                os.close(go_fd)
            if cfg.on_attached is not None:
                collector.tick()    # the libraries it has mapped are probed before the hook
                cfg.on_attached()
            start, cpu0 = time.monotonic(), cpu_ns()
            try:
                budget = _loop(cfg, collector, bpf, stop, popen, start, calibration)
            finally:
                if cfg.on_detach is not None:
                    cfg.on_detach()
            seconds = time.monotonic() - start
            _end_command(popen, log)
            _drain(collector, bpf)
            counters = bpf.counters()
            cost = _cost(cfg, collector, bpf, counters, calibration, cpu_ns() - cpu0, seconds,
                         budget)
            meta = _meta(cfg, collector, counters, cost)
            if rotating:
                outputs = writer.finish(time.monotonic_ns())
    except CaptureError:
        if rotating:
            writer.abandon()
        else:
            writer.close()
            _remove_raw(raw_dir)
        if popen is not None and popen.poll() is None:
            popen.kill()
        raise
    finally:
        stop.restore()
        writer.close()
    if rotating:
        return CaptureSummary(outputs[-1] if outputs else cfg.output, collector.calls,
                              len(collector.stack_keys), seconds, sorted(collector.procs),
                              meta.dropped, counters, outputs)
    _unwind_natives(raw_dir, meta, log)
    write_raw_meta(raw_dir, meta)
    return _finish(cfg, collector, meta, counters, seconds, raw_dir, log)


def _unwind_natives(raw_dir: Path, meta: CaptureMeta, log: Log) -> None:
    """Unwinds the native stack copies here, where the libraries the target ran are: a raw
    capture finalized on another host keeps its native frames."""
    from .native import unwind_raw

    try:
        summary = unwind_raw(raw_dir, meta)
    except ImportError:     # no pyarrow: --finalize unwinds, on a host with the libraries
        return
    if summary is not None:
        log(f"{summary.paths} native paths: {summary.to_python} unwound up to Python, "
            f"{summary.with_op} through a torch operator")


def _rotating_writer(cfg: CaptureConfig, meta_for: Callable[[], CaptureMeta], log: Log):
    from .rotate import RotatingWriter

    labels = {"process": (Path(cfg.command[0]).name if cfg.command
                          else _comm(cfg.pid))} | cfg.labels
    labels.setdefault("service", labels["process"])
    writer = RotatingWriter(cfg.output, cfg.rotate_s, meta_for, labels, cfg.keep, log,
                            gpu=cfg.interval_gpu)
    if cfg.rotate_grace_s is not None:
        writer.grace_s = cfg.rotate_grace_s
    return writer


def _comm(pid: int | None) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"


def _cost(cfg: CaptureConfig, collector: Collector, bpf: BpfProgram, counters: dict[str, int],
          calibration: TrapCalibration, consumer_ns: int, seconds: float,
          budget: Budget | None) -> dict:
    cost = capture_cost(CostInputs(
        calls_seen=counters.get("calls", 0),
        calls_by_probe={i: int(n) for i, n in enumerate(collector.calls_by_probe) if n},
        prog_stats=bpf.prog_stats(), calibration=calibration,
        emulated={sym: p.emulated for sym, p in bpf.placements.items()},
        returns=bpf.returns, consumer_cpu_ns=consumer_ns, wall_ns=int(seconds * 1e9),
        ring_bytes=bpf.ring_bytes, stack_bytes=collector.stacks_received * ctypes.sizeof(events.Stack),
        dropped=counters.get("lost_calls", 0) + counters.get("lost_stacks", 0),
        counters=counters, sample=cfg.sample))
    cost["return_probes"] = bpf.any_returns
    if budget is not None:
        cost["max_overhead_pct"] = budget.max_pct
        cost["sample_periods"] = budget.history[-20:]
        cost["budget_unreachable"] = budget.warned
    return cost


def _loop(cfg: CaptureConfig, collector: Collector, bpf: BpfProgram, stop: _Stop,
          popen: subprocess.Popen | None, start: float,
          calibration: TrapCalibration) -> Budget | None:
    budget = Budget(cfg.max_overhead_pct, period=cfg.sample) if cfg.max_overhead_pct else None
    next_tick = next_budget = 0.0
    fast_ms = 2     # right after an exec: libpython is mapped within milliseconds, and the
    # layout must be in the BPF map before the program's first CUDA call
    while not stop.requested:
        now = time.monotonic()
        if cfg.duration is not None and now - start >= cfg.duration:
            break
        if popen is not None and popen.poll() is not None:
            break
        if cfg.pid is not None and not is_alive(cfg.pid):
            break
        detecting = collector.detecting()
        if now >= next_tick or detecting:
            collector.tick()
            next_tick = now + cfg.poll_ms / 1000
        if budget is not None and now >= next_budget:
            _steer(budget, bpf, collector.log, calibration)
            next_budget = now + BUDGET_S
        bpf.poll(fast_ms if detecting else DRAIN_MS)
    return budget


def _steer(budget: Budget, bpf: BpfProgram, log: Log, calibration: TrapCalibration) -> None:
    """Budget mode: move the sampling period toward the overhead budget."""
    stats = bpf.prog_stats()
    bpf_ns = sum(s.run_time_ns for n, s in stats.items() if n.startswith(("zym_entry_", "zym_return_")))
    hits = sum(s.run_cnt for n, s in stats.items() if n.startswith("zym_entry_"))
    warned = budget.warned
    trap = calibration.emulated_ns if not bpf.single_stepped else calibration.single_step_ns
    period = budget.update(time.monotonic_ns(), bpf_ns, hits, trap)
    if period is not None:
        bpf.set_sample(period)
    if budget.warned and not warned:
        log(f"warning: the probes' traps alone cost more than --max-overhead "
            f"{budget.max_pct}%; walking fewer stacks cannot meet it")


def _end_command(popen: subprocess.Popen | None, log: Log) -> None:
    """A started command that is still running gets SIGINT (as Ctrl-C in a terminal would) and
    a moment to exit, so its last calls land in the capture."""
    if popen is None or popen.poll() is not None:
        return
    popen.send_signal(signal.SIGINT)
    try:
        popen.wait(timeout=3)
    except subprocess.TimeoutExpired:
        log(f"PID {popen.pid} still running after SIGINT; leaving it running")


def _drain(collector: Collector, bpf: BpfProgram) -> None:
    """Read what the kernel still holds (records sent just before the stop)."""
    before = -1
    while collector.calls != before:
        before = collector.calls
        bpf.poll(0)
        while bpf.drain_calls():
            pass


def _finish(cfg: CaptureConfig, collector: Collector, meta: CaptureMeta,
            counters: dict[str, int], seconds: float, raw_dir: Path, log: Log) -> CaptureSummary:
    if not collector.cuda_libraries and not collector.calls:
        if not cfg.keep_raw:
            _remove_raw(raw_dir)
        what = f"PID {cfg.pid}" if cfg.pid else "the command"
        raise CaptureError(f"no CUDA library (libcuda.so) was mapped by {what} during the "
                           "capture: is it using the GPU? Capture longer, or start the capture "
                           "before the work")
    try:
        tables = finalize(raw_dir, cfg.output, meta)
    except ImportError as e:    # a lean capture host: finalize elsewhere
        raise CaptureError(f"cannot finalize here ({e}); the raw capture is kept: run "
                           f"`zym capture --finalize {raw_dir} -o {cfg.output}` where zym is "
                           "fully installed") from None
    if not cfg.keep_raw:
        _remove_raw(raw_dir)
    summary = CaptureSummary(cfg.output, tables["call"].height, len(collector.stack_keys),
                             seconds, sorted(collector.procs), meta.dropped, counters)
    dropped = sum(meta.dropped.values())
    log(f"{summary.calls} calls, {summary.stacks} distinct stacks in {seconds:.1f} s -> "
        f"{cfg.output}" + (f"; LOST {dropped} ring buffer records (consider --sample N)"
                           if dropped else ""))
    return summary


def _remove_raw(raw_dir: Path) -> None:
    for f in raw_dir.glob("*"):
        f.unlink()
    raw_dir.rmdir()
