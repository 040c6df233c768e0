"""Human-readable durations and sizes, shared by the CLI, rule messages and reports."""
from __future__ import annotations


def fmt_ns(ns: float | None) -> str:
    """1.23 s, 45.6 ms, 789 µs, 12 ns; "-" for a missing value."""
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.1f} {unit}"
    return f"{int(ns)} ns"


def fmt_bytes(n: float) -> str:
    """1.5 GB, 20 MB, 3 kB, 12 B (decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
