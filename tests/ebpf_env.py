"""For the capture tests (tests/ebpf, tests/cupti): whether this machine can run the eBPF
capture, and where a workload's marked lines are."""
from __future__ import annotations

import os
import re
from pathlib import Path


def ebpf_unavailable() -> str | None:
    """Why the eBPF tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    try:
        from zym.capture.bpf_loader import check_environment
        from zym.schemas.errors import CaptureError

        check_environment()
    except CaptureError as e:
        return str(e)
    return None


def line_markers(workload: Path) -> dict[str, int]:
    """Line numbers of the ``# @name`` markers in a workload script."""
    out = {}
    for n, line in enumerate(workload.read_text().splitlines(), 1):
        m = re.search(r"# @(\w+)", line)
        if m:
            out[m.group(1)] = n
    return out
