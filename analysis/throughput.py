"""How much faster a kernel would run in another math precision: the GPU's documented peak
rates (``gpus.yaml``), and the kernel's own FLOPs and bytes where the capture recorded its
shapes.

* Shapes known (torch.profiler ``record_shapes``): a roofline. The kernel keeps the share of the
  peak it reaches now (its achieved FLOP/s over the current precision's peak), and cannot run
  faster than moving its operands at the GPU's memory bandwidth in the new precision:
  ``new = max(flops / (efficiency * peak_new), bytes_new / bandwidth)``.
* Shapes unknown (``zym capture``): the same efficiency assumption without the memory bound,
  ``new = old * peak_old / peak_new``: right for compute-bound GEMMs (prefill, batched
  serving), an overestimate of the saving for memory-bound ones (small-batch decode), and said
  so in the finding.

Every kernel keeps at least ``FLOOR_NS`` (a kernel launch on the GPU is not free).
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import numpy as np

FLOOR_NS = 2_500
MATH = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


@lru_cache(maxsize=1)
def _table() -> tuple[list[dict], str]:
    import yaml

    doc = yaml.safe_load(resources.files("zym.analysis").joinpath("gpus.yaml").read_text("utf-8"))
    return doc["gpus"], doc["default"]


def gpu_spec(name: str | None) -> tuple[dict, bool]:
    """The throughput row for a GPU name, and whether it is that GPU's own (False: default)."""
    rows, default = _table()
    for row in rows:
        if name and re.search(row["match"], name):
            return row, True
    return next(r for r in rows if r["match"] == default), False


def speedup_durations(dur_ns: np.ndarray, precision: str, target: str, gpu: str | None,
                      flops: np.ndarray | None = None, bytes_now: np.ndarray | None = None
                      ) -> tuple[np.ndarray, str]:
    """New durations of kernels now in ``precision`` if run in ``target``, and how that was
    estimated (one sentence for the finding). ``flops``/``bytes_now``: per kernel, NaN where
    unknown."""
    spec, own = gpu_spec(gpu)
    old_peak, new_peak = spec.get(precision), spec.get(target)
    if not old_peak or not new_peak:
        return dur_ns.copy(), f"no documented {precision}/{target} rate for this GPU"
    ratio = new_peak / old_peak
    where = (gpu or "this GPU") if own else f"{gpu or 'unknown GPU'} (H100 ratios)"
    new = np.maximum(dur_ns / ratio, np.minimum(dur_ns, FLOOR_NS))
    how = (f"{target} runs at {new_peak:g} vs {old_peak:g} TFLOP/s for {precision} on {where} "
           f"(datasheet, dense): {ratio:.1f}x faster at the same efficiency")
    if flops is not None and bytes_now is not None:
        known = np.isfinite(flops) & np.isfinite(bytes_now) & (flops > 0) & (dur_ns > 0)
        if known.any():
            eff = np.clip(flops[known] / (dur_ns[known] * 1e-9) / (old_peak * 1e12), 0, 1)
            compute = flops[known] / (eff * new_peak * 1e12) * 1e9
            moved = bytes_now[known] * BYTES[target] / BYTES[precision]
            memory = moved / (spec["hbm_tbs"] * 1e12) * 1e9
            new[known] = np.maximum(np.maximum(compute, memory),
                                    np.minimum(dur_ns[known], FLOOR_NS))
            how += (f"; {known.sum():,} of {len(dur_ns):,} kernels from their shapes (roofline: "
                    f"their own efficiency, {spec['hbm_tbs']:g} TB/s)")
        else:
            how += "; no shapes recorded, so assuming the kernels are compute-bound"
    else:
        how += "; no shapes recorded, so assuming the kernels are compute-bound"
    return new.astype(np.int64), how
