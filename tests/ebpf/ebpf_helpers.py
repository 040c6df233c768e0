"""Helpers of the eBPF capture tests: the CPython versions pyenv has, a runner for
`zym capture` in a subprocess, the workload's line markers, and calls with their stacks."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ebpf_env import ebpf_unavailable, line_markers  # noqa: F401 (ebpf_unavailable: re-exported for conftest)
from zym.schemas import open_capture

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.py"
PYENV_VERSIONS = ("3.10", "3.11", "3.12", "3.13")


def python_for(version: str) -> str | None:
    """A pyenv interpreter of that minor version, or None."""
    found = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
    return found[-1] if found else None


@dataclass
class Run:
    rc: int
    stderr: str
    output: Path


def zym_capture(args: list[str], output: Path, env: dict[str, str] | None = None,
                timeout: float = 60) -> Run:
    """Run `zym capture -o OUTPUT ARGS...` to completion."""
    proc = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "-o", str(output),
                           *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)
    return Run(proc.returncode, proc.stderr, output)


def start_zym(args: list[str], output: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zym.cli.main", "capture", "-o", str(output),
                             *args], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def wait_for_line(stream, pattern: str, timeout: float = 30) -> str:
    """Read lines from ``stream`` until one matches ``pattern``; returns the text read."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return "".join(seen)
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


def markers() -> dict[str, int]:
    """Line numbers of the ``# @name`` markers in workload.py."""
    return line_markers(WORKLOAD)


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()




def calls_with_stacks(path, native: bool = False) -> list[dict]:
    """Each call with its stack, innermost first: (kind, name, file, line). The native frames
    and torch ops between the Python frames and the API frame are left out unless
    ``native`` (tests of the Python stacks compare Python frames)."""
    cap = open_capture(path)
    calls, stacks, frames = cap.load("call"), cap.load("stack"), cap.load("frame")
    nodes = {r["stack_id"]: r for r in stacks.join(frames, on="frame_id").iter_rows(named=True)}
    out = []
    for call in calls.iter_rows(named=True):
        path, node = [], nodes.get(call["stack_id"])
        while node is not None:
            unwound = node["kind"] == "torch_op" or (
                node["kind"] == "native" and (node["file"] or node["name"].startswith(
                    "[native stack cut]")))
            if native or not unwound:
                path.append((node["kind"], node["name"], node["file"], node["line"]))
            node = nodes.get(node["parent_id"])
        out.append({**call, "stack": path})
    return out
