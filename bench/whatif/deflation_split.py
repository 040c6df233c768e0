"""Would torch.profiler's cost of recording an op fit the timed traces better split in two? The
op's one cost (``KINETO_NS_PER_EVENT["cpu_op"]``, scaled by each trace's host speed as zym
scales it) replaced by two, fitted on a grid: ``nested``, an op that starts inside another op
on its thread (``aten::_to_copy`` inside ``aten::to``) against one that does not; or
``module``, an ``nn.Module: ...`` event of the Python tracer (not scaled, as a Python call's
cost is not) against every other op. The runtime call's, a Python call's and a built-in's
costs stay zym's. Scored as ``deflation_fit.py`` scores: per trace, the unfixed replay of its
window per step against its service's measured request; the median and the mean |log|, the
pair chosen on all traces and with each results folder left out in turn (scored on it).

    python bench/whatif/deflation_split.py nested|module OUT.json [RESULTS_DIR=W=N,...]...
"""
from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
GRIDS = {"nested": ((1_000, 2_000, 3_000, 3_934, 5_000, 6_000, 8_000),
                    (1_000, 2_000, 3_000, 3_934, 5_000, 6_000, 8_000)),
         "module": ((1_000, 1_500, 2_000, 2_500, 3_000, 3_500, 3_934, 4_500),
                    (0, 2_000, 4_000, 8_000, 12_000, 16_000, 24_000, 32_000))}


def _kind(split: str):
    """Each span's kind for ``deflation_fit.gap_counts``: the first kind of op (0), the
    second (1), a built-in (2), any other Python call (3)."""
    from zym.analysis.replay import KINETO_BUILTIN_PREFIX

    op = pl.col("op_id").is_not_null()
    if split == "nested":   # starts before an earlier op on its thread has ended
        end = (pl.when(op).then(pl.col("ts_ns") + pl.col("dur_ns")).cum_max().shift(1)
               .over("pid", "tid"))
        second = op & (pl.col("ts_ns") < end.fill_null(0))
    else:
        second = pl.col("name").str.starts_with("nn.Module")
    return lambda _: (pl.when(second).then(1).when(op).then(0)
                      .when(pl.col("name").str.starts_with(KINETO_BUILTIN_PREFIX)).then(2)
                      .otherwise(3))


def _replayed_ms(t: dict, split: str, one: float, two: float) -> float:
    from deflation_fit import replay_ms
    from zym.analysis.replay import KINETO_NS_PER_EVENT as COST

    c, s = t["counts"], t["s"]
    second = s * two if split == "nested" else two
    cost = (s * (COST["cuda_runtime"] + one * c[0]) + second * c[1]
            + COST["python_builtin"] * c[2] + COST["python_function"] * c[3])
    return replay_ms(t, cost)


def main() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from bench_scale import write_json
    from kineto_costs import fail

    argv = sys.argv[1:]
    if len(argv) < 2 or argv[0] not in GRIDS:
        fail("usage: deflation_split.py nested|module OUT.json [RESULTS_DIR=W=N,...]...",
             "deflation_split")
    split = argv[0]
    from deflation_fit import gap_counts, load_traces
    from zym.analysis.replay import KINETO_NS_PER_EVENT

    kind = _kind(split)
    traces = load_traces(argv[2:], "deflation_split", lambda a: gap_counts(a, kind, 4))
    op = KINETO_NS_PER_EVENT["cpu_op"]
    zym = (op, op if split == "nested" else 0)   # what zym does now
    grid = sorted(set(itertools.product(*GRIDS[split])) | {zym})
    logs = {g: np.array([math.log(_replayed_ms(t, split, *g) / t["measured_ms"])
                         for t in traces]) for g in grid}

    def summary(e: np.ndarray) -> dict:
        return {"median_abs_log": float(np.median(np.abs(e))),
                "mean_abs_log": float(np.mean(np.abs(e))),
                "within_30pct": int((np.abs(e) < math.log(1.3)).sum())}

    names = np.array([t["folder"] for t in traces])
    out = {"split": split, "zym": {"costs": list(zym)} | summary(logs[zym])}
    for key in ("median_abs_log", "mean_abs_log"):
        best = min(grid, key=lambda g, k=key: summary(logs[g])[k])
        held = np.zeros(len(traces))
        for f in sorted(set(names)):
            train = names != f
            g = min(grid, key=lambda g, k=key: summary(logs[g][train])[k])
            held[~train] = logs[g][~train]
        out[f"best_by_{key}"] = {"costs": list(best)} | summary(logs[best])
        out[f"left_one_folder_out_by_{key}"] = summary(held)
    best = out["best_by_mean_abs_log"]["costs"]
    out["traces"] = [{"folder": t["folder"], "workload": t["workload"],
                      "zym": math.exp(a), "best_by_mean": math.exp(b)}
                     for t, a, b in zip(traces, logs[zym], logs[tuple(best)], strict=True)]
    write_json(Path(argv[1]), out)
    for k, v in out.items():
        if k != "traces":
            print(k, v)


if __name__ == "__main__":
    main()
