"""CUPTI timestamps to CLOCK_MONOTONIC (the clock of eBPF's ``bpf_ktime_get_ns``).

The target records calibration points ``[mono_ns, cupti_ns, err_ns]`` (a ``cuptiGetTimestamp``
sandwiched between two ``monotonic_ns`` reads; ``err_ns`` is the sandwich width), at start, at
every buffer completion and at stop. ``fit_clock`` fits ``mono = cupti + offset + drift *
(cupti - ref)`` by least squares, weighting each point by its sandwich width, after discarding
points taken before CUPTI's clock settled (wprof: ``cuptiGetTimestamp`` may only reach its final
domain once CUDA is up; such points sit far from the line the later ones agree on).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

OUTLIER_NS = 50_000  # a point this far from the fit is not on the settled clock


@dataclass(frozen=True)
class ClockFit:
    offset_ns: int
    drift_ppm: float
    ref_cupti_ns: int
    points: int
    used: int
    max_residual_ns: float
    median_err_ns: float

    def to_mono(self, cupti_ns: np.ndarray) -> np.ndarray:
        """Convert CUPTI ns (uint64/int64 array) to CLOCK_MONOTONIC ns (int64)."""
        t = np.asarray(cupti_ns).astype(np.int64)
        rel = (t - self.ref_cupti_ns).astype(np.float64)
        return t + self.offset_ns + np.rint(self.drift_ppm * 1e-6 * rel).astype(np.int64)

    def delta_to(self, other: ClockFit, mono_ns: np.ndarray) -> np.ndarray:
        """What to add to times converted by this fit so that they read as ``other`` converts
        them (a later fit, with more calibration points). The CUPTI time behind ``mono_ns`` is
        taken as ``mono_ns - offset_ns``: off by this fit's drift term only, which moves the
        difference of two drift terms by well under a nanosecond."""
        c = np.asarray(mono_ns).astype(np.int64) - self.offset_ns
        mine = np.rint(self.drift_ppm * 1e-6 * (c - self.ref_cupti_ns).astype(np.float64))
        theirs = np.rint(other.drift_ppm * 1e-6 * (c - other.ref_cupti_ns).astype(np.float64))
        return (other.offset_ns - self.offset_ns) + (theirs - mine).astype(np.int64)

    def to_meta(self) -> dict:
        return {"model": "mono_ns = cupti_ns + offset_ns + drift_ppm*1e-6*(cupti_ns - ref_cupti_ns)",
                **asdict(self)}

    @classmethod
    def identity(cls) -> ClockFit:
        return cls(0, 0.0, 0, 0, 0, 0.0, 0.0)


def fit_clock(points: list[list[int]] | np.ndarray) -> ClockFit:
    """Fit CUPTI time to monotonic time from calibration points (see module doc).

    >>> pts = [[1_000 + 2 * i, 10 + 2 * i, 100] for i in range(0, 10**9, 10**8)]
    >>> f = fit_clock(pts); round(f.offset_ns), round(f.drift_ppm, 3)
    (990, 0.0)
    """
    # int64 first: CUPTI's clock may be epoch-based (~1.8e18 ns), beyond float64's ns precision
    p = np.asarray(points, dtype=np.int64).reshape(-1, 3)
    if len(p) == 0:
        return ClockFit.identity()
    ref = int(p[-1, 1])
    base = int(p[-1, 0] - p[-1, 1])
    x = (p[:, 1] - ref).astype(np.float64)
    y = ((p[:, 0] - p[:, 1]) - base).astype(np.float64)  # offset at each point, relative to base
    err = np.maximum(p[:, 2].astype(np.float64), 1.0)
    # Start from the later half (settled clock), then keep every point near that line.
    keep = np.zeros(len(p), dtype=bool)
    keep[len(p) // 2:] = True
    for _ in range(3):
        a, b = _wls(x[keep], y[keep], err[keep])
        resid = np.abs(y - (a + b * x))
        new = resid <= max(OUTLIER_NS, 0.0)
        if not new.any() or (new == keep).all():
            keep = new if new.any() else keep
            break
        keep = new
    a, b = _wls(x[keep], y[keep], err[keep])
    resid = np.abs(y[keep] - (a + b * x[keep]))
    return ClockFit(offset_ns=base + round(a), drift_ppm=float(b * 1e6), ref_cupti_ns=ref,
                    points=len(p), used=int(keep.sum()),
                    max_residual_ns=float(resid.max()) if len(resid) else 0.0,
                    median_err_ns=float(np.median(p[keep, 2])) if keep.any() else 0.0)


def _wls(x: np.ndarray, y: np.ndarray, err: np.ndarray) -> tuple[float, float]:
    """Weighted least squares y = a + b x (weights 1/err^2); a constant when x has no spread."""
    if len(x) == 0:
        return 0.0, 0.0
    w = 1.0 / err**2
    if len(x) < 2 or np.ptp(x) < 1e6:  # under 1 ms of spread: drift is not measurable
        return float(np.sum(w * y) / np.sum(w)), 0.0
    xm = np.sum(w * x) / np.sum(w)
    ym = np.sum(w * y) / np.sum(w)
    b = np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2)
    return float(ym - b * xm), float(b)
