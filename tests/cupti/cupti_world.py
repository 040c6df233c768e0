"""A synthetic process for join tests: threads making CUDA calls from known Python stacks.

``make_world`` returns what each side would have recorded (eBPF calls with stacks and no
correlation ids; CUPTI API records and GPU work with correlation ids, no stacks) and the truth
(which stack caused each correlation id), so a test can check the join against it exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

DUR = {"launch": 4_000, "copy": 9_000, "memset": 3_000, "sync": 60_000}
RUNTIME = {"launch": "cudaLaunchKernel", "copy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync",
           "sync": "cudaStreamSynchronize", "graph": "cudaGraphLaunch"}
DRIVER = {"launch": "cuLaunchKernel", "copy": "cuMemcpyDtoHAsync_v2", "memset": "cuMemsetD8Async",
          "sync": "cuStreamSynchronize", "graph": "cuGraphLaunch"}


@dataclass
class World:
    calls: pl.DataFrame   # eBPF side: pid, tid, ts_ns, dur_ns, name, kind, stack_id
    api: pl.DataFrame     # CUPTI API records (CLOCK_MONOTONIC): ... correlation_id, cbid
    gpu: pl.DataFrame     # GPU work: pid, ts_ns, dur_ns, name, kind, correlation_id, graph_id
    truth: pl.DataFrame   # pid, correlation_id, stack_id


def make_world(threads: dict[int, list[str]], pid: int = 100, gap_ns: int = 20_000,
               start_ns: int = 10**12, stagger_ns: int = 7_000, direct: set[int] = frozenset(),
               graph_kernels: int = 40, seed: int = 0) -> World:
    """``threads``: tid -> call kinds in order (launch, copy, memset, sync, graph, nogpu).
    Thread k starts ``k * stagger_ns`` later, so threads interleave in time. Call indexes in
    ``direct`` are direct driver calls (the uprobe fires just before CUPTI's record starts);
    the others are driver calls inside a runtime call (the uprobe fires inside the record)."""
    rng = np.random.default_rng(seed)
    calls, api, gpu, truth = [], [], [], []
    corr = 1
    for k, (tid, kinds) in enumerate(sorted(threads.items())):
        t = start_ns + k * stagger_ns
        for i, kind in enumerate(kinds):
            t += gap_ns + int(rng.integers(0, gap_ns // 4)) + (20_000 if i in direct else 0)
            call_kind = {"graph": "launch", "nogpu": "sync"}.get(kind, kind)
            base = {"graph": "graph", "nogpu": "sync"}.get(kind, kind)
            dur = DUR[call_kind]
            stack = 1_000 * tid + (i % 7)
            if i in direct:  # the uprobe fires 1.2-20 us before CUPTI's start (as on the H200)
                rec = (t, dur, DRIVER[base], "driver")
                ebpf_ts = t - int(rng.integers(1_200, 20_000))
            else:  # the driver call inside the runtime call
                rec = (t, dur, RUNTIME[base], "runtime")
                ebpf_ts = t + int(rng.integers(700, min(dur, 28_000) - 500))
            api.append({"pid": pid, "tid": tid, "ts_ns": rec[0], "dur_ns": rec[1], "name": rec[2],
                        "kind": call_kind, "correlation_id": corr, "cbid": 1, "domain": rec[3]})
            calls.append({"pid": pid, "tid": tid, "ts_ns": ebpf_ts, "dur_ns": 0,
                          "name": DRIVER[base], "kind": call_kind, "stack_id": stack})
            truth.append({"pid": pid, "correlation_id": corr, "stack_id": stack})
            g0 = t + dur + 2_000
            if kind == "graph":
                for j in range(graph_kernels):
                    gpu.append(_gpu(pid, g0 + j * 1_000, 900, f"graph_kernel_{j}", "kernel", corr, 5))
            elif kind in ("launch", "copy", "memset"):
                gpu.append(_gpu(pid, g0, 5_000, f"{kind}_{i % 3}", {"launch": "kernel"}.get(kind, kind),
                                corr, None))
            elif kind == "sync":
                gpu.append(_gpu(pid, t, dur, "Stream Sync", "sync", corr, None))
            corr += 1
            t += dur  # calls on one thread do not overlap
    return World(pl.DataFrame(calls), pl.DataFrame(api), pl.DataFrame(gpu), pl.DataFrame(truth))


def _gpu(pid, ts, dur, name, kind, corr, graph_id) -> dict:
    return {"pid": pid, "ts_ns": ts, "dur_ns": dur, "name": name, "kind": kind,
            "correlation_id": corr, "graph_id": graph_id, "device_id": 0, "stream_id": 7}


def attributed(calls: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU rows with the stack the joined calls give them (null: unknown stack)."""
    from zym.analysis.correlate import launch_stack_ids

    stack = launch_stack_ids(calls, gpu)
    return gpu.with_columns(pl.when(stack >= 0).then(stack).alias("stack_id"))


def drop_rows(df: pl.DataFrame, rows: list[int]) -> pl.DataFrame:
    return df.with_row_index("_i").filter(~pl.col("_i").is_in(rows)).drop("_i")
