"""Switch a process's dormant agent on and off from `zym capture --pid` (the agent's side is
``agent.Dormant``; the process was started by ``zym run`` or with ``ZYM_AGENT=1``).

The two talk through the agent's control folder: zym writes ``control`` (replaced atomically,
a new ``seq`` each time), the agent answers in ``state`` with the same ``seq`` once done.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from zym.schemas.errors import CaptureError

from ..process import environ_of, is_alive
from . import agent

ANSWER_S = 10.0  # a switch waits this long for the agent (CUPTI's start, or its final flush)


@dataclass
class AgentHandle:
    pid: int
    folder: Path

    def state(self) -> dict:
        try:
            doc = json.loads((self.folder / "state").read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def switch(self, action: str, spool_dir: Path | None = None,
               timeout_s: float = ANSWER_S, *, roll_s: float | None = None) -> dict:
        """Ask for ``action`` (on|off) and wait for the answer; returns the agent's state.
        ``roll_s`` (--rotate): the spool goes on in a new segment this often."""
        seq = int(self.state().get("seq", 0)) + 1
        doc = {"seq": seq, "action": action, "spool_dir": str(spool_dir) if spool_dir else None,
               "roll_s": roll_s}
        tmp = self.folder / f".control.{os.getpid()}"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.folder / "control")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            st = self.state()
            if st.get("seq") == seq:
                return st
            if not is_alive(self.pid):
                raise CaptureError(f"PID {self.pid} exited while its agent was switched {action}")
            time.sleep(0.05)
        raise CaptureError(f"the agent of PID {self.pid} did not answer '{action}' within "
                           f"{timeout_s:.0f} s")


GPU_WINDOW = "gpu_window.json"


def write_gpu_window(spool_dir: str | Path, from_ns: int, to_ns: int) -> None:
    """Record, beside the spools, when CUPTI recorded (CLOCK_MONOTONIC): a dormant agent
    switched on after the probes were attached and off before they were detached."""
    Path(spool_dir, GPU_WINDOW).write_text(json.dumps({"from_mono_ns": from_ns,
                                                       "to_mono_ns": to_ns}))


def read_gpu_window(spool_dir: str | Path) -> tuple[int, int] | None:
    try:
        doc = json.loads(Path(spool_dir, GPU_WINDOW).read_text())
        return int(doc["from_mono_ns"]), int(doc["to_mono_ns"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_agent(pid: int, base: str | None = None) -> AgentHandle | None:
    """The dormant agent of ``pid``, if that process runs one (its state file names it)."""
    folder = Path(agent.agent_folder(pid, base or _agent_dir_of(pid)))
    h = AgentHandle(pid, folder)
    return h if h.state().get("pid") == pid and is_alive(pid) else None


def _agent_dir_of(pid: int) -> str | None:
    """The target's ``$ZYM_AGENT_DIR``, when it set one."""
    return environ_of(pid).get(agent.ENV_AGENT_DIR)


def owner_of(pid: int) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/{pid}")
    except OSError:
        return None
    return st.st_uid, st.st_gid


def why_no_agent(pid: int, python_version: str | None) -> str:
    """One line: why the GPU side of ``pid`` cannot be recorded, and what would make it so."""
    late = ("Python 3.14's sys.remote_exec could load it late, but zym's eBPF side reads "
            "CPython 3.10-3.13" if _version(python_version) >= (3, 14) else
            f"CPython {python_version or '3.10-3.13'} has no safe way to load it into a "
            "running process")
    return (f"PID {pid} runs without zym's agent: CPU side only (CUDA calls and their Python "
            f"lines, no GPU time); start it with `zym run -- COMMAND` (or ZYM_AGENT=1 and zym's bootstrap on "
            f"PYTHONPATH) to attach with the GPU side; {late}")


def _version(text: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in (text or "").split(".")[:2])
    except ValueError:
        return ()
