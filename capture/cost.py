"""What a capture costs the process it records, measured while it runs, and the budget mode.

The target pays, per probed call: the uprobe trap (the kernel's breakpoint handling; more when
the probed instruction is single-stepped than when it is emulated, ``prologue.py``), the BPF
programs that run inside it (the kernel's own run-time statistics, ``bpfstats.py``), and a
second trap plus a program for a return probe. zym's collector (the consumer) runs in its own
process: it costs the target only when they share a core. Traps cannot be timed from BPF, so
the trap cost is *calibrated* when the capture starts: zym times ``CALIB_CALLS`` calls of a
function of its own interpreter with and without a probe that does nothing, for each of the two
instruction classes it can find.

``capture_cost`` (``CaptureMeta.extra["capture_cost"]``) is a flat dict; its keys are
documented in docs/capture.md.
"""
from __future__ import annotations

import ctypes as ct
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .bpfstats import ProgStats
from .interpreter import detect
from .probes import PROBES, entry_fn, return_fn
from .prologue import choose, read_function_start

CALIB_CALLS = 2000
CALIB_ROUNDS = 3
# Functions of the capturing interpreter that are safe to call any number of times without
# arguments: the calibration probes one whose probe is emulated and one that is single-stepped.
CALIB_SYMBOLS = ("Py_IsInitialized", "PyGILState_Check", "Py_GetVersion", "Py_GetPlatform",
                 "Py_GetCompiler", "Py_GetBuildInfo", "Py_GetCopyright", "PyEval_ThreadsInitialized")
CALIB_FN = "zym_calib"   # bpf_loader.CALIB_FN (kept here to avoid importing BCC glue)


@dataclass
class TrapCalibration:
    """ns added by one uprobe trap whose program does nothing, per instruction class."""

    emulated_ns: float | None = None
    single_step_ns: float | None = None
    symbols: dict[str, str] = field(default_factory=dict)  # class -> symbol calibrated on

    def trap_ns(self, emulated: bool) -> float | None:
        return self.emulated_ns if emulated else self.single_step_ns


def _time_calls(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def calibrate_traps(bpf, log: Callable[[str], None] | None = None) -> TrapCalibration:
    """Time the trap of a do-nothing probe on functions of this interpreter (see module doc).
    ``bpf`` is the loaded BCC object. Never raises: a class it cannot time stays None."""
    cal = TrapCalibration()
    try:
        interp = detect(os.getpid())
    except Exception:  # noqa: BLE001 (calibration is best effort: any failure leaves None)
        return cal
    if interp is None:
        return cal
    api = ct.PyDLL(None)
    for sym in CALIB_SYMBOLS:
        if cal.emulated_ns is not None and cal.single_step_ns is not None:
            break
        try:
            _, off = bpf._check_path_symbol(interp.path.encode(), sym.encode(), None, -1)
            fn = getattr(api, sym)
        except Exception:  # noqa: BLE001, S112 (BCC raises bare Exception; symbol absent)
            continue
        place = choose(read_function_start(interp.path, off))
        key = "emulated" if place.emulated else "single_step"
        if getattr(cal, f"{key}_ns") is not None:
            continue
        added = []
        for _ in range(CALIB_ROUNDS):
            plain = _time_calls(fn, CALIB_CALLS)
            try:
                bpf.attach_uprobe(name=interp.path, sym=sym, sym_off=place.offset, fn_name=CALIB_FN)
            except Exception:  # noqa: BLE001 (BCC raises bare Exception)
                break
            try:
                probed = _time_calls(fn, CALIB_CALLS)
            finally:
                bpf.detach_uprobe(name=interp.path, sym=sym, sym_off=place.offset)
            added.append(probed - plain)
        if added:
            setattr(cal, f"{key}_ns", max(0.0, statistics.median(added)))
            cal.symbols[key] = sym
    if log and (cal.emulated_ns is not None or cal.single_step_ns is not None):
        log("uprobe trap, calibrated: "
            + ", ".join(f"{k.replace('_', '-')} {v / 1000:.2f} µs"
                        for k, v in (("emulated", cal.emulated_ns),
                                     ("single_step", cal.single_step_ns)) if v is not None))
    return cal


def cpu_ns() -> int:
    """CPU time of this process (the consumer) so far, user + system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


@dataclass
class CostInputs:
    """What the session knows at the end of a capture."""

    calls_seen: int
    calls_by_probe: dict[int, int]          # probe slot -> calls recorded
    prog_stats: dict[str, ProgStats]
    calibration: TrapCalibration
    emulated: dict[str, bool]               # probed symbol -> its probe is emulated
    returns: dict[int, bool]                # probe slot -> has a return probe
    consumer_cpu_ns: int
    wall_ns: int
    ring_bytes: int
    stack_bytes: int
    dropped: int
    counters: dict[str, int]
    sample: int


def _per_call_ns(inp: CostInputs, slot: int) -> float | None:
    """Estimated ns the target spends in zym's probes for one call of probe ``slot``."""
    probe = PROBES[slot]
    trap = inp.calibration.trap_ns(inp.emulated.get(probe.symbol, False))
    entry = inp.prog_stats.get(entry_fn(slot))
    if trap is None or entry is None or not entry.run_cnt:
        return None
    ns = trap + entry.run_time_ns / entry.run_cnt
    if inp.returns.get(slot):
        ret = inp.prog_stats.get(return_fn(slot))
        # a return probe takes its own trap (emulated: the kernel's return trampoline)
        ns += inp.calibration.emulated_ns or trap
        if ret is not None and ret.run_cnt:
            ns += ret.run_time_ns / ret.run_cnt
    return ns


def capture_cost(inp: CostInputs) -> dict:
    """The flat ``capture_cost`` dict (docs/capture.md lists its keys)."""
    progs = inp.prog_stats
    bpf_ns = sum(s.run_time_ns for name, s in progs.items()
                 if name.startswith(("zym_entry_", "zym_return_")))
    hits = sum(s.run_cnt for name, s in progs.items() if name.startswith("zym_entry_"))
    ret_hits = sum(s.run_cnt for name, s in progs.items() if name.startswith("zym_return_"))
    by_kind: dict[str, list[float]] = {}
    total_added = 0.0
    estimated_calls = 0
    for slot, n in inp.calls_by_probe.items():
        ns = _per_call_ns(inp, slot)
        if ns is None or not n:
            continue
        by_kind.setdefault(PROBES[slot].kind, []).extend([ns * n, n])
        total_added += ns * n
        estimated_calls += n
    calls = max(inp.calls_seen, 1)
    out = {
        "calls_seen": inp.calls_seen,
        "probe_hits": hits,
        "return_probe_hits": ret_hits,
        "bpf_ns_total": bpf_ns,
        "bpf_ns_per_call": round(bpf_ns / calls, 1) if inp.calls_seen else None,
        "trap_ns_emulated": _round(inp.calibration.emulated_ns),
        "trap_ns_single_step": _round(inp.calibration.single_step_ns),
        "probes_single_stepped": sorted(s for s, e in inp.emulated.items() if not e),
        "added_ns_per_call": round(total_added / estimated_calls, 1) if estimated_calls else None,
        "consumer_cpu_ns": inp.consumer_cpu_ns,
        "consumer_cpu_ns_per_call": round(inp.consumer_cpu_ns / calls, 1),
        "consumer_cpu_pct": round(100 * inp.consumer_cpu_ns / max(inp.wall_ns, 1), 2),
        "ring_bytes": inp.ring_bytes + inp.stack_bytes,
        "dropped_events": inp.dropped,
        "stacks_walked": inp.calls_seen - inp.counters.get("nested", 0)
        - inp.counters.get("not_sampled", 0),
        "bulk_reads": inp.counters.get("bulk_reads", 0),
        "frame_reads": inp.counters.get("frame_reads", 0),
        "wall_ns": inp.wall_ns,
        "sample": inp.sample,
    }
    for kind, (weighted, n) in ((k, _pair_sum(v)) for k, v in sorted(by_kind.items())):
        out[f"added_ns_per_call_{kind}"] = round(weighted / n, 1)
    # The calling threads' time in zym's probes as a share of the capture's duration.
    out["estimated_overhead_pct"] = (round(100 * total_added / max(inp.wall_ns, 1), 2)
                           if estimated_calls else None)
    return out


def _pair_sum(values: list[float]) -> tuple[float, float]:
    return sum(values[0::2]), sum(values[1::2])


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


@dataclass
class Budget:
    """Budget mode: adapt the stack-walk sampling period so that the estimated share of the
    target's time spent in zym's probes stays under ``max_pct``. Every call is still recorded
    (only the walk is sampled); the trap itself cannot be sampled, so a budget below the traps'
    own share cannot be met (said once)."""

    max_pct: float
    period: int = 1
    max_period: int = 1 << 16
    _last: tuple[int, int, int] | None = None   # (wall ns, bpf ns, hits)
    warned: bool = False
    history: list[int] = field(default_factory=list)

    def update(self, now_ns: int, bpf_ns: int, hits: int, trap_ns: float | None) -> int | None:
        """The new period when it should change, else None. Called every interval."""
        last, self._last = self._last, (now_ns, bpf_ns, hits)
        if last is None or now_ns <= last[0]:
            return None
        wall, dbpf, dhits = now_ns - last[0], bpf_ns - last[1], hits - last[2]
        traps = (trap_ns or 0.0) * dhits
        pct = 100 * (dbpf + traps) / wall
        floor = 100 * traps / wall
        new = self.period
        if pct > self.max_pct and self.period < self.max_period:
            # walked calls dominate the BPF time: scale the period by the excess
            new = min(self.max_period, max(self.period * 2, int(self.period * pct / self.max_pct)))
        elif pct < self.max_pct / 3 and self.period > 1:
            new = max(1, self.period // 2)
        if floor > self.max_pct:
            self.warned = True
        if new != self.period:
            self.period = new
            self.history.append(new)
            return new
        return None
