"""Where the target will find its CUDA libraries before it has loaded them.

A uprobe is set on a file (inode), so probing the libcuda the dynamic linker would pick
before the target dlopens it means no call is missed between the mapping and the attach.
Candidates: the target's LD_LIBRARY_PATH, then the linker cache (``ldconfig -p``).
Libraries found elsewhere are still picked up from /proc/PID/maps while capturing.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .probes import LIBRARY_PATTERNS


def _ldconfig_paths() -> list[str]:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                             timeout=5, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.rsplit("=>", 1)[1].strip() for line in out.splitlines() if "=>" in line]


def candidate_libraries(library: str, env: dict[str, str]) -> list[str]:
    """Existing files that the target may load as ``library`` (DRIVER or RUNTIME)."""
    pattern = LIBRARY_PATTERNS[library]
    found: list[str] = []
    for d in filter(None, env.get("LD_LIBRARY_PATH", "").split(":")):
        try:
            found += sorted(str(p) for p in Path(d).iterdir() if pattern.match(p.name))
        except OSError:
            continue
    found += [p for p in _ldconfig_paths() if pattern.match(os.path.basename(p))]
    unique: dict[str, str] = {}
    for p in found:
        if os.path.isfile(p):
            unique.setdefault(os.path.realpath(p), p)
    return list(unique.values())
