"""The GPU side inside `zym capture`: one call, ``capture_with_gpu(cfg)``, in place of
``zym.capture.session.run_capture(cfg)``.

* started command: the command inherits the CUPTI bootstrap (``target_env``) while the eBPF
  session runs; when it ends, ``add_gpu`` joins the eBPF calls of the written capture to CUPTI's
  records and rewrites the file (atomically) with the GPU work;
* no eBPF here (not root, no BTF, no BCC): the command runs under CUPTI alone, and the capture
  has GPU work and API calls without Python stacks (said on the console);
* ``--pid``: a process started by ``zym run`` (or with ``ZYM_AGENT=1``) runs a dormant agent,
  which the capture switches on once the probes are attached and off before they go
  (``remote.py``); any other process gives the CPU side only, and the console says why.

Spools go to ``<output>.cupti/`` (removed after a successful merge unless ``keep_raw``), beside
the eBPF session's ``<output>.raw/``.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from zym.schemas.errors import CaptureError

from . import shapes_env, target_env
from .agent import ENV_FLUSH_MS, ENV_ROLL_S

# Importable where only the capture runs (a lean GPU host without polars/numpy): joining and
# writing import their dependencies when called; a capture that cannot finalize there keeps
# <output>.raw/ and <output>.cupti/ for `zym capture --finalize` elsewhere.
SPOOL_GLOB = "cupti-*.spool"

Log = Callable[[str], None]
STOP_WAIT_S = 3.0


def _log(msg: str) -> None:
    print(f"zym: {msg}", file=sys.stderr)


def spool_dir_for(output: Path) -> Path:
    return Path(output).with_name(Path(output).name + ".cupti")


def capture_with_gpu(cfg, log: Log | None = None):
    """``run_capture(cfg)`` plus the GPU side (see module doc); returns the session's summary,
    or None for a CUPTI-only capture."""
    from zym.capture.bpf_loader import check_environment
    from zym.capture.session import run_capture

    log = log or _log
    if cfg.pid is not None and cfg.command is None:
        return _capture_running(cfg, log)
    if cfg.pid is not None or not cfg.command:  # the session validates and says what is wrong
        return run_capture(cfg)
    try:
        check_environment()
    except CaptureError as e:
        if cfg.rotate_s is not None:
            raise CaptureError(f"--rotate needs the eBPF side: {e}") from None
        log(f"eBPF unavailable ({e}); recording the GPU side only, without Python stacks")
        run_cupti_only(cfg.command, cfg.output, duration=cfg.duration, keep_spool=cfg.keep_raw,
                       log=log, shapes=getattr(cfg, "shapes", False))
        return None
    shapes = shapes_env(getattr(cfg, "shapes", False))   # checked before anything is made
    spool = _fresh(spool_dir_for(cfg.output))
    env = target_env(spool) | shapes
    env["ZYM_NVTX"] = "1" if getattr(cfg, "nvtx", False) else "0"
    # CUPTI's API records carry every call's duration: no return probes (one trap per call).
    cfg = dataclasses.replace(cfg, return_probes=cfg.return_probes and cfg.force_return_probes)
    pool = None
    if cfg.rotate_s is not None:
        env[ENV_ROLL_S] = f"{cfg.rotate_s:g}"
        cfg, pool = _rotating(cfg, spool)
    try:
        with _environment({k: env[k] for k in ("PYTHONPATH", "ZYM_CUPTI_DIR", "ZYM_NVTX",
                                                "ZYM_SHAPES", "ZYM_SHAPES_OPS", ENV_ROLL_S)
                           if k in env}):
            summary = run_capture(cfg)
    except CaptureError:
        # kept beside a kept raw capture (a lean host finalizes elsewhere), else removed
        if not Path(cfg.output).with_name(Path(cfg.output).name + ".raw").exists():
            shutil.rmtree(spool, ignore_errors=True)
        raise
    if pool is None:
        _stop_stragglers(getattr(summary, "pids", []), spool)
        add_gpu(cfg.output, spool, log)
    else:
        summary.gpu = dict(pool.totals)
    if not cfg.keep_raw:
        shutil.rmtree(spool, ignore_errors=True)
    return summary


def _rotating(cfg, spool: Path):
    """A continuous capture's config whose interval files each get their share of CUPTI's
    records in ``spool`` (``rolling.py``), after CUPTI's buffers have been handed over: the
    eBPF grace plus two of the agent's flush periods."""
    from zym.capture.rotate import GRACE_S

    from .finalize import merge_cupti
    from .rolling import GpuPool

    pool = GpuPool(spool, keep_raw=cfg.keep_raw)

    def add(tables: dict, meta, *, start_ns: int, end_ns: int, final: bool) -> dict:
        if final:   # processes still running (a capture cut short): their agents flush, stop
            _stop_stragglers(pool.pids(), spool)
        cupti, headers, counts = pool.take(tables.get("call"), end_ns, final, start_ns)
        meta.extra.setdefault("interval", {})["gpu"] = counts | {
            "rule": "GPU records go with the API record their call joins (else by start time)"}
        if not headers:
            return tables
        merged = merge_cupti(tables, cupti, headers, meta, pool.window())
        cover = meta.extra["cupti"].get("stack_coverage") or {}
        for key in ("gpu_ops", "gpu_ns", "gpu_ns_with_stack"):
            pool.totals[key] = pool.totals.get(key, 0) + int(cover.get(key, 0))
        return merged

    flush_s = int(os.environ.get(ENV_FLUSH_MS, "1000")) / 1000
    return dataclasses.replace(cfg, interval_gpu=add,
                               rotate_grace_s=GRACE_S + 2 * flush_s), pool


def _capture_running(cfg, log: Log):
    """``--pid``: the eBPF session on the running process; its GPU side too when the process
    runs zym's dormant agent (``zym run``): switched on once the probes are attached, off
    before they are detached, so every call of the window has both sides."""
    from zym.capture.session import run_capture

    from .remote import find_agent, owner_of, why_no_agent, write_gpu_window

    if getattr(cfg, "nvtx", False):
        log("--nvtx readies NVTX when zym starts the program; a running process records its "
            "NVTX ranges only if it was started by `zym run --nvtx` (the capture says which)")
    agent = find_agent(cfg.pid)
    if agent is None:
        summary = run_capture(cfg)
        log(why_no_agent(cfg.pid, _python_version(cfg.pid)))
        return summary
    spool = _fresh(spool_dir_for(cfg.output))
    owner = owner_of(cfg.pid)
    if owner is not None and os.geteuid() == 0:
        os.chown(spool, *owner)   # the target writes its spool there
    switched: dict = {}
    pool = None
    if cfg.rotate_s is not None:   # each interval file gets its GPU records (rolling.py)
        cfg, pool = _rotating(cfg, spool)

    def on() -> None:
        try:
            st = agent.switch("on", spool, roll_s=cfg.rotate_s)
        except CaptureError as e:   # a stale folder, an agent that hangs: the CPU side goes on
            log(f"{e}; CPU side only")
            return
        switched["on"] = st
        if st.get("state") != "on":
            log(f"the agent of PID {cfg.pid} did not start CUPTI ({'; '.join(st.get('errors') or [])})"
                "; CPU side only")
        elif st.get("errors"):
            log(f"agent: {'; '.join(st['errors'][:3])}")
        if pool is not None and st.get("state") == "on":
            pool.window_from_ns = st.get("enabled_mono_ns")

    def off() -> None:
        if switched.get("on", {}).get("state") == "on":
            try:
                switched["off"] = agent.switch("off")
            except CaptureError as e:   # the process died: its spool keeps what was flushed
                log(str(e))
            lo = switched["on"].get("enabled_mono_ns")
            hi = switched.get("off", {}).get("disabled_mono_ns") or time.monotonic_ns()
            if lo:
                write_gpu_window(spool, lo, hi)
            if pool is not None:
                pool.window_to_ns = hi

    # Return probes stay: CUPTI started late records no runtime API, so no call durations.
    cfg = dataclasses.replace(cfg, on_attached=on, on_detach=off)
    try:
        summary = run_capture(cfg)
    except CaptureError:
        # kept beside a kept raw capture (a lean host finalizes elsewhere), else removed
        if not Path(cfg.output).with_name(Path(cfg.output).name + ".raw").exists():
            shutil.rmtree(spool, ignore_errors=True)
        raise
    if switched.get("on", {}).get("state") == "on" and pool is None:
        add_gpu(cfg.output, spool, log)
    elif pool is not None:
        summary.gpu = dict(pool.totals)
    if not cfg.keep_raw:
        shutil.rmtree(spool, ignore_errors=True)
    return summary


def _python_version(pid: int) -> str | None:
    from zym.capture.interpreter import detect

    try:
        interp = detect(pid)
    except Exception:  # noqa: BLE001 - only for the message
        return None
    return interp.version_text if interp is not None else None


def add_gpu(output: Path, spool: Path, log: Log | None = None):
    """Join the calls of the capture at ``output`` to the CUPTI spools in ``spool`` and
    rewrite it with the GPU work (works on captures finalized elsewhere, too); returns the
    capture's updated ``CaptureMeta``."""
    from zym.schemas import open_capture, write_capture

    from .finalize import merge_gpu

    log = log or _log
    cap = open_capture(output)
    tables = {t: cap.load(t) for t in ("frame", "stack", "span", "call")}
    meta = cap.meta
    if not any(Path(spool).glob(SPOOL_GLOB)):
        log(f"no CUPTI spool in {spool}: the capture has no GPU side (was the command a Python "
            "program that used CUDA?)")
        return meta
    merged = merge_gpu(tables, spool, meta)
    write_capture(output, merged, meta)
    log(summary_line(output, meta))
    return meta


def run_cupti_only(command: list[str], output: Path, duration: float | None = None,
                   keep_spool: bool = False, log: Log | None = None, shapes: bool = False):
    """Run ``command`` under the CUPTI collector alone and write ``output``; returns its
    ``CaptureMeta``."""
    from zym.schemas import CaptureMeta

    from .finalize import finalize_capture

    log = log or _log
    shape_vars = shapes_env(shapes)   # checked before anything is made
    spool = _fresh(spool_dir_for(output))
    try:
        proc = subprocess.Popen(command, env=target_env(spool) | shape_vars)
    except OSError as e:
        raise CaptureError(f"cannot start {command[0]!r}: {e.strerror}") from None
    try:
        proc.wait(timeout=duration)
    except subprocess.TimeoutExpired:  # --duration: interrupt it, as the eBPF session does
        _interrupt(proc)
    except KeyboardInterrupt:
        _interrupt(proc)
    _stop_stragglers([proc.pid] if proc.poll() is None else [], spool)
    path, meta = finalize_capture(spool, output,
                                  meta=CaptureMeta(producer="zym capture (CUPTI only)",
                                                   source=" ".join(command)))
    log(summary_line(path, meta))
    if not keep_spool:
        shutil.rmtree(spool, ignore_errors=True)
    return meta


def summary_line(path: Path, meta) -> str:
    c = meta.extra.get("cupti", {})
    cov, join = c.get("stack_coverage", {}), c.get("join", {})
    fits = c.get("clock_fit", {}).values()
    err = max((f.get("max_residual_ns", 0) for f in fits), default=0)
    dropped = meta.dropped.get("cupti", 0)
    return (f"GPU: {cov.get('gpu_ops', 0)} kernels/copies/memsets, "
            f"{cov.get('gpu_time_with_stack_pct', 0.0)}% of GPU time with its Python stack; "
            f"{join.get('ebpf_matched_pct', 0.0)}% of eBPF calls matched a CUPTI record; "
            f"clock fit residual {err:.0f} ns" + (f"; CUPTI LOST {dropped} records" if dropped else "")
            + (f"; {meta.dropped['cupti_undecoded_bytes']} bytes of CUPTI records not decoded "
               "(unknown record layout)" if meta.dropped.get("cupti_undecoded_bytes") else "")
            + f"\nnext: zym analyze {path}")


def _fresh(spool: Path) -> Path:
    if spool.exists():
        shutil.rmtree(spool)
    spool.mkdir(parents=True)
    return spool


@contextmanager
def _environment(updates: dict[str, str]):
    """Children started inside inherit ``updates`` (zym's own interpreter is unaffected)."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _interrupt(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        pass


def _stop_stragglers(pids: list[int], spool: Path) -> None:
    """Processes still running when the capture ends get SIGUSR2 (the agent's stop: flush,
    kernel names, footer) and a moment to write their footer."""
    live = []
    for pid in pids:
        path = _spool_of(spool, pid)
        if path is not None and not _has_footer(path) and _runs_agent(pid, spool):
            try:
                os.kill(pid, signal.SIGUSR2)
                live.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + STOP_WAIT_S
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = [p for p in live if (path := _spool_of(spool, p)) and not _has_footer(path)]


def _spool_of(spool: Path, pid: int) -> Path | None:
    """The spool file process ``pid`` writes now: its only one, or its newest segment."""
    one = spool / f"cupti-{pid}.spool"
    if one.exists():
        return one
    segments = sorted(spool.glob(f"cupti-{pid}-*.spool"))
    return segments[-1] if segments else None


def _has_footer(path: Path) -> bool:
    from .agent import read_chunks

    return any(kind == "footer" for kind, _, _ in read_chunks(str(path)))


def _runs_agent(pid: int, spool: Path) -> bool:
    """``pid`` is alive and is the process that writes to ``spool`` (not a reused pid)."""
    from zym.capture.process import environ_of

    return environ_of(pid).get("ZYM_CUPTI_DIR") == str(spool)
