"""CUPTI clock -> CLOCK_MONOTONIC fit."""
from __future__ import annotations

import numpy as np
from zym.capture.cupti.clock import ClockFit, fit_clock

EPOCH = 1_795_941_770_251_820_603  # CUPTI on the H200 counted from the Unix epoch


def _points(n, offset, drift, noise, span=30 * 10**9, seed=0):
    rng = np.random.default_rng(seed)
    mono = np.linspace(10**10, 10**10 + span, n).astype(np.int64)
    cupti = mono + offset + np.rint((mono - mono[0]) * drift).astype(np.int64)
    return [[int(m + rng.integers(-noise, noise + 1)), int(c), 2 * noise + 1]
            for m, c in zip(mono, cupti)], mono, cupti


def test_epoch_offset_is_exact_to_the_nanosecond():
    pts, mono, cupti = _points(10, EPOCH, 0.0, 0)
    fit = fit_clock(pts)
    assert fit.offset_ns == -EPOCH and fit.drift_ppm == 0.0
    assert (fit.to_mono(cupti) == mono).all()


def test_drift_is_fitted():
    pts, mono, cupti = _points(50, EPOCH, 40e-6, 200)
    fit = fit_clock(pts)
    assert abs(fit.drift_ppm + 40) < 0.1
    assert np.abs(fit.to_mono(cupti) - mono).max() < 200
    assert fit.used == 50 and fit.max_residual_ns < 400


def test_points_before_the_clock_settled_are_rejected():
    pts, mono, cupti = _points(20, EPOCH, 0.0, 100)
    early = [[5 * 10**9, 10**15, 300], [6 * 10**9, 10**15 + 10**9, 300]]  # another domain
    fit = fit_clock(early + pts)
    assert fit.points == 22 and fit.used == 20
    assert np.abs(fit.to_mono(cupti) - mono).max() < 150


def test_one_point_gives_an_offset_and_none_gives_identity():
    fit = fit_clock([[5_000, 1_000, 50]])
    assert fit.offset_ns == 4_000 and fit.drift_ppm == 0.0
    assert fit_clock([]) == ClockFit.identity()
    assert "model" in fit.to_meta()
