"""Whether this machine can run the eBPF capture, for tests that need it (tests/ebpf, tests/cupti)."""
from __future__ import annotations

import os


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
