"""How much faster a kernel would run in another math precision.

Two sources, both data:

* ``gemm_rates.yaml``: GEMM throughput *measured* on a GPU (bench/whatif/calibrate.py), by math
  and problem size. Small GEMMs are bound by memory and launch, not math, so the gain of a
  faster precision grows with size (on the H200, fp32 -> tf32 is ~1x at 0.1 GFLOP, ~3.4x at
  8.6 GFLOP and ~7.4x at 137 GFLOP). A GPU without its own measurements uses the measured
  curves scaled by the datasheet peaks (``gpus.yaml``) of that GPU over the measured one's.
* ``gpus.yaml``: datasheet peaks, for compute-bound kernels that are not GEMMs (attention,
  convolution): the same share of the peak in the new precision.
* Memory-bound kernels (element-wise, norms, softmax, reductions, copies, indexing): the
  bytes they move, in proportion to the size of an element (``ELEMENT_BYTES``): float32 to
  bfloat16 halves them.

A GEMM's size comes from its recorded input shapes (torch.profiler ``record_shapes``); without
shapes (``zym capture``) it is the size whose measured fp32 time matches the kernel's duration
(the time a size takes grows with the size, so one size fits). Every kernel keeps at least
``FLOOR_NS``.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

FLOOR_NS = 2_500
MATH = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
# Kernels whose time is the bytes they move, and the bytes of an element in each precision
# (tf32 tensors are float32 in memory).
MEMORY_BOUND = ("elementwise", "norm", "softmax", "reduction", "copy", "index")
ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
MEASURED = ("fp32", "tf32", "fp16", "bf16")


@lru_cache(maxsize=1)
def _peaks() -> tuple[list[dict], str]:
    from .bundled import bundled_yaml

    doc = bundled_yaml("gpus.yaml")
    return doc["gpus"], doc["default"]


@lru_cache(maxsize=1)
def _measured() -> list[dict]:
    from .bundled import bundled_yaml

    return bundled_yaml("gemm_rates.yaml")["gpus"]


def gpu_spec(name: str | None) -> tuple[dict, bool]:
    """The datasheet row for a GPU name, and whether it is that GPU's own (False: default)."""
    rows, default = _peaks()
    for row in rows:
        if name and re.search(row["match"], name):
            return row, True
    return next(r for r in rows if r["match"] == default), False


def gpu_maths(gpu: dict) -> frozenset[str] | None:
    """The maths a recorded GPU (``meta.gpus`` entry: ``name``, and ``computeMajor``/
    ``computeMinor`` where the trace has them) runs, from its own datasheet row, else from its
    compute capability (Volta/Turing: no TF32 or bf16; fp8 from 8.9); None when unknown."""
    row, own = gpu_spec(str(gpu["name"]) if gpu.get("name") else None)
    if own:
        return frozenset(m for m in MATH if row.get(m))
    major, minor = gpu.get("computeMajor"), gpu.get("computeMinor") or 0
    if not isinstance(major, int):
        return None
    maths = {"fp64", "fp32"} | ({"fp16", "int8"} if major >= 7 else set())
    if major >= 8:
        maths |= {"tf32", "bf16"}
    if (major, minor) >= (8, 9):
        maths.add("fp8")
    return frozenset(maths)


def gemm_curve(name: str | None, math: str) -> tuple[np.ndarray, np.ndarray, str] | None:
    """``(gflop, tflops)`` measured points for ``math`` on this GPU (or another GPU's, scaled by
    the datasheet peaks), and where they come from; None when nothing was measured."""
    table = _measured()
    own = next((g for g in table if name and re.search(g["match"], name)), None)
    ref = own or (table[0] if table else None)
    if ref is None or math not in ref:
        return None
    pts = np.array(ref[math], dtype=float)
    gflop, tflops = pts[:, 0], pts[:, 1]
    if own is not None:
        return gflop, tflops, f"measured on the {ref['match']}"
    spec, known = gpu_spec(name)
    ref_spec, _ = gpu_spec(ref["match"])
    if not spec.get(math) or not ref_spec.get(math):
        return None   # no documented rate for this math on this GPU
    scale = spec[math] / ref_spec[math]
    to = (f"{name or 'this GPU'} by datasheet peaks" if known else
          f"{name or 'this GPU'} by the default GPU's datasheet peaks ({spec['match']}: no "
          "row for it in gpus.yaml)")
    return gflop, tflops * scale, f"measured on the {ref['match']}, scaled to {to}"


def _rate(curve: tuple[np.ndarray, np.ndarray], gflop: np.ndarray) -> np.ndarray:
    """TFLOP/s at each size: log-log interpolation, flat past the measured ends."""
    x, y = np.log(curve[0]), np.log(curve[1])
    return np.exp(np.interp(np.log(np.clip(gflop, 1e-9, None)), x, y))


def _size_from_time(curve: tuple[np.ndarray, np.ndarray], dur_ns: np.ndarray) -> np.ndarray:
    """The GEMM size (GFLOP) whose time on ``curve`` is ``dur_ns``: bisection in log size
    (time = size / rate(size) grows with size)."""
    lo = np.full(len(dur_ns), np.log(1e-6))
    hi = np.full(len(dur_ns), np.log(1e5))
    for _ in range(60):
        mid = (lo + hi) / 2
        g = np.exp(mid)
        t_ns = g / _rate(curve, g) * 1e6  # GFLOP / (TFLOP/s) = ms; * 1e6: ns
        longer = t_ns > dur_ns
        hi = np.where(longer, mid, hi)
        lo = np.where(longer, lo, mid)
    return np.exp((lo + hi) / 2)


def speedup_durations(dur_ns: np.ndarray, precision: str, target: str, gpu: str | None,
                      flops: np.ndarray | None = None, op_class: str = "gemm"
                      ) -> tuple[np.ndarray, str]:
    """New durations of kernels now in ``precision`` if run in ``target``, and how that was
    estimated (one sentence for the finding). ``flops``: per kernel, NaN where unknown."""
    dur = dur_ns.astype(float)
    old_c, new_c = gemm_curve(gpu, precision), gemm_curve(gpu, target)
    if op_class in ("gemm", "gemv") and old_c is not None and new_c is not None:
        how_size = "sized from their fp32 times" if precision == "fp32" else "sized from times"
        known = (np.isfinite(flops) & (flops > 0) if flops is not None
                 else np.zeros(len(dur), bool))
        # sized from their times only where their shapes do not say (the bisection's 60
        # passes over every kernel, discarded where the shapes said: at the bundled trace
        # x600 ~0.4 s of the estimate's ~0.8 s)
        size = np.where(known, flops / 1e9 if flops is not None else 0.0, 0.0)
        if not known.all():
            size[~known] = _size_from_time(old_c[:2], dur[~known])
        if flops is not None:
            n_known = int(known.sum())
            if n_known == len(dur):
                how_size = "sized from their recorded shapes"
            elif n_known:
                how_size = (f"{n_known:,} of {len(dur):,} sized from their recorded shapes, the "
                            "rest from their times")
        ratio = _rate(new_c[:2], size) / _rate(old_c[:2], size)
        new = np.maximum(dur / ratio, np.minimum(dur, FLOOR_NS))
        mean = float(dur.sum() / new.sum()) if new.sum() else 1.0
        how = (f"{target} GEMMs run {mean:.1f}x faster than {precision} at these sizes "
               f"(achieved TFLOP/s {new_c[2]}; kernels {how_size})")
        return new.astype(np.int64), how
    if op_class in MEMORY_BOUND and precision in ELEMENT_BYTES and target in ELEMENT_BYTES:
        ratio = ELEMENT_BYTES[precision] / ELEMENT_BYTES[target]
        new = np.maximum(dur / ratio, np.minimum(dur, FLOOR_NS))
        return new.astype(np.int64), (
            f"{op_class} kernels move {ratio:g}x fewer bytes in {target} than in {precision} "
            "(memory-bound: time in proportion to the bytes)")
    spec, own = gpu_spec(gpu)
    old_peak, new_peak = spec.get(precision), spec.get(target)
    if not old_peak or not new_peak:
        return dur_ns.copy(), f"no documented {precision}/{target} rate for this GPU"
    ratio = new_peak / old_peak
    where = (gpu or "this GPU") if own else f"{gpu or 'unknown GPU'} (H100 ratios)"
    new = np.maximum(dur / ratio, np.minimum(dur, FLOOR_NS))
    return new.astype(np.int64), (f"{target} runs at {new_peak:g} vs {old_peak:g} TFLOP/s for "
                                  f"{precision} on {where} (datasheet, dense): {ratio:.1f}x "
                                  "faster at the same share of the peak")


def sm_count(gpu: dict | None) -> int | None:
    """A recorded GPU's streaming multiprocessors: the trace's own count (Kineto's device
    properties, ``numSms``), else its datasheet row's (``gpus.yaml``: a GPU it lists by
    name), else None."""
    if not gpu:
        return None
    if gpu.get("numSms"):
        return int(gpu["numSms"])
    row, own = gpu_spec(gpu.get("name"))
    return int(row["sms"]) if own and row.get("sms") else None


def wave_fill(blocks: np.ndarray, sms: int) -> np.ndarray:
    """The share of a GPU's ``sms`` multiprocessors that a kernel of ``blocks`` thread blocks
    keeps busy over its waves, counting one block an SM at a time: ``blocks / (sms x
    ceil(blocks / sms))``. Where an SM runs several blocks at once the kernel fills less: this
    is the most it fills. 1 where the blocks are not known (0 or fewer)."""
    b = np.asarray(blocks, np.float64)
    waves = np.ceil(np.maximum(b, 1) / sms)
    return np.where(b > 0, np.minimum(b / (sms * waves), 1.0), 1.0)


def batched_gemm_durations(dur_ns: np.ndarray, precision: np.ndarray, items: np.ndarray,
                           gpu: str | None) -> np.ndarray:
    """Each GEMM kernel's share of one GEMM doing ``items`` such GEMMs' work (a batch of
    items, stacked along M): its duration times the rate at its own size over the rate at
    ``items`` times it (``gemm_rates.yaml``'s measured curve for its math, ``precision``, its
    size from its time on that curve: where small GEMMs of several sizes take the same time,
    as the half-precision curves' do, one of them, the bisection's, which may be the larger:
    the smaller gain), never longer than it was. NaN where its math has no curve."""
    out = np.full(len(dur_ns), np.nan)
    prec = np.asarray(precision).astype(str)
    for math in np.unique(prec):
        curve = gemm_curve(gpu, math)
        at = np.flatnonzero(prec == math)
        if curve is None or not len(at):
            continue
        size = _size_from_time(curve[:2], dur_ns[at].astype(float))
        ratio = _rate(curve[:2], size) / _rate(curve[:2], size * np.maximum(items[at], 1))
        out[at] = dur_ns[at] * np.minimum(ratio, 1.0)
    return out
