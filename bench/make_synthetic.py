"""Generate a synthetic zym capture of N GPU operations with their calls and stacks.

The shape follows an inference server: a few threads run a decode loop through a few hundred
distinct call sites (Python frames -> torch ops -> CUDA API), each launching kernels, copies or
memsets on two streams, with a host sync every ~100 operations. Values are random but seeded,
so a size reproduces the same file.

The shape's parameters can be changed (``Shape``: call sites, stack depth, distinct kernel
names, threads, streams, GPUs, processes), to look for costs that grow with something other
than the number of events (bench/shape_scale.py); the defaults give the files above.

    python bench/make_synthetic.py --ops 10000000 -o bench/out/synthetic-10m.parquet
    python bench/make_synthetic.py --ops 1000000 --threads 64 -o bench/out/threads64.parquet
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import polars as pl
from zym.schemas import CaptureMeta, write_capture


@dataclass(frozen=True)
class Shape:
    """What a capture has besides its size."""

    sites: int = 400  # distinct call sites (leaf stacks)
    depth: int = 30  # Python frames above a site: depth/2 to depth
    kernel_names: int = 300  # distinct kernel names (past ``sites``: a name per launch, cycled)
    threads: int = 4  # threads making CUDA calls
    streams: int = 2
    devices: int = 1  # GPUs (a site's work runs on one of them)
    processes: int = 1  # a thread belongs to process ``thread % processes``
    python_frames: int = 240  # distinct Python frames the stacks are drawn from


DEFAULT = Shape()


def stack_tables(rng: np.random.Generator, shape: Shape = DEFAULT
                 ) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray, np.ndarray]:
    """Frames, the stack trie, and per site its leaf stack id and API kind."""
    n_py = shape.python_frames
    py = pl.DataFrame({"kind": ["python"] * n_py, "name": [f"fn_{i}" for i in range(n_py)],
                       "file": [f"/srv/app/mod_{i % 12}.py" if i % 3 else
                                f"/usr/lib/python3.12/site-packages/torch/nn/m{i}.py"
                                for i in range(n_py)],
                       "line": (rng.integers(1, 900, n_py)).tolist()})
    ops = pl.DataFrame({"kind": ["torch_op"] * 40, "name": [f"aten::op{i}" for i in range(40)],
                        "file": [None] * 40, "line": [None] * 40}, schema=py.schema)
    apis = ["cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyDtoHAsync_v2", "cuMemsetD8Async",
            "cuStreamSynchronize"]
    api = pl.DataFrame({"kind": ["cuda_api"] * len(apis), "name": apis, "file": [None] * 5,
                        "line": [None] * 5}, schema=py.schema)
    frames = pl.concat([py, ops, api]).with_row_index("frame_id").with_columns(
        pl.col("frame_id").cast(pl.Int64))
    # Sites share a common prefix (the serve loop) and then branch, like real programs.
    trie: dict[tuple[int, int], int] = {}
    rows, leaves = [], []
    for site in range(shape.sites):
        depth = int(rng.integers(shape.depth // 2, shape.depth))
        path = [int(x) for x in rng.integers(0, n_py, depth)]
        path[:4] = [0, 1, 2, 3]
        path += [n_py + int(rng.integers(0, 40)), n_py + 40 + site % len(apis)]
        parent = None
        for d, frame in enumerate(path):
            key = (parent if parent is not None else -1, frame)
            if key not in trie:
                trie[key] = len(trie)
                rows.append((trie[key], parent, frame, d))
            parent = trie[key]
        leaves.append(parent)
    stacks = pl.DataFrame(rows, schema={"stack_id": pl.Int64, "parent_id": pl.Int64,
                                        "frame_id": pl.Int64, "depth": pl.Int32}, orient="row")
    site_api = np.array([site % len(apis) for site in range(shape.sites)])
    return frames, stacks, np.array(leaves), site_api


def events(n: int, rng: np.random.Generator, leaves: np.ndarray, site_api: np.ndarray,
           shape: Shape = DEFAULT) -> tuple[pl.DataFrame, pl.DataFrame]:
    kinds = np.array(["launch", "launch", "copy", "memset", "sync"])
    names = np.array(["cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyDtoHAsync_v2",
                      "cuMemsetD8Async", "cuStreamSynchronize"])
    site = rng.integers(0, shape.sites, n)
    api = site_api[site]
    tid = rng.integers(0, shape.threads, n) + 1000
    gaps = rng.exponential(4_000, n).astype(np.int64) + 500
    ts = 1_000_000_000 + np.cumsum(gaps)
    dur_cpu = np.where(api == 4, rng.exponential(80_000, n), rng.exponential(3_000, n)).astype(np.int64) + 200
    corr = np.arange(n, dtype=np.int64) + 1
    pid = 4242 + (tid - 1000) % shape.processes
    calls = pl.DataFrame({
        "pid": pid, "tid": tid, "ts_ns": ts, "dur_ns": dur_cpu,
        "name": names[api], "kind": kinds[api], "correlation_id": corr,
        "stack_id": leaves[site], "stream_id": (site % shape.streams) + 7,
        "size_bytes": rng.integers(4, 1 << 20, n), "copy_kind": "DtoH", "is_copy": api == 2,
    }).with_columns(pl.when("is_copy").then(pl.col("size_bytes", "copy_kind"))).drop("is_copy")
    gpu_mask = api != 4  # syncs make no GPU work
    g = int(gpu_mask.sum())
    gkind = np.array(["kernel", "kernel", "copy", "memset"])[api[gpu_mask]]
    # past the sites, a name per launch (cycled): only as many names as there are launches
    per_launch = shape.kernel_names > shape.sites
    count = min(shape.kernel_names, g) if per_launch else shape.kernel_names
    kernel_names = np.array([f"void kernel_{i}<float>(float*, int)" for i in range(count)])
    pick = (np.arange(g) if per_launch else site[gpu_mask]) % count
    gname = np.where(gkind == "kernel", kernel_names[pick],
                     np.where(gkind == "copy", "Memcpy DtoH (Device -> Pageable)",
                              "Memset (Device)"))
    gpu = pl.DataFrame({
        "pid": pid[gpu_mask], "device_id": (site[gpu_mask] % shape.devices).astype(np.int32),
        "stream_id": (site[gpu_mask] % shape.streams) + 7, "ts_ns": ts[gpu_mask] + 5_000,
        "dur_ns": rng.lognormal(9, 1.2, g).astype(np.int64) + 1_000,
        "name": gname, "kind": gkind, "correlation_id": corr[gpu_mask],
        "size_bytes": rng.integers(4, 1 << 20, g),
    }).with_columns(
        pl.when(pl.col("kind") == "copy").then(pl.col("size_bytes")),
        pl.when(pl.col("kind") == "copy").then(pl.lit("DtoH")).alias("copy_kind"),
        pl.when(pl.col("kind") == "copy").then(pl.lit("device")).alias("src_mem"),
        pl.when(pl.col("kind") == "copy").then(pl.lit("pageable"))
        .when(pl.col("kind") == "memset").then(pl.lit("device")).alias("dst_mem"),
        pl.when(pl.col("kind") == "kernel").then(pl.lit(128)).alias("grid_x"),
        pl.when(pl.col("kind") == "kernel").then(pl.lit(256)).alias("block_x"),
    )
    return calls, gpu


def make(ops: int, out: Path, seed: int = 7, shape: Shape = DEFAULT) -> Path:
    rng = np.random.default_rng(seed)
    frames, stacks, leaves, site_api = stack_tables(rng, shape)
    # 1 call in 5 is a sync: make enough calls for `ops` GPU operations, then trim.
    calls, gpu = events(int(ops * 1.3), rng, leaves, site_api, shape)
    gpu = gpu.head(ops)
    calls = calls.filter(pl.col("ts_ns") <= gpu["ts_ns"].max())
    meta = CaptureMeta(producer="bench/make_synthetic.py", clock_domain="CLOCK_MONOTONIC",
                       gpus=[{"id": d, "name": "synthetic"} for d in range(shape.devices)],
                       extra={"seed": seed, "ops": ops, "shape": {
                           f.name: getattr(shape, f.name) for f in fields(Shape)
                           if getattr(shape, f.name) != getattr(DEFAULT, f.name)}})
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_capture(out, {"frame": frames, "stack": stacks, "call": calls, "gpu": gpu}, meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000_000)
    parser.add_argument("-o", "--output", type=Path, default=Path("bench/out/synthetic.parquet"))
    parser.add_argument("--seed", type=int, default=7)
    for f in fields(Shape):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default)
    args = parser.parse_args()
    shape = Shape(**{f.name: getattr(args, f.name) for f in fields(Shape)})
    start = time.perf_counter()
    path = make(args.ops, args.output, args.seed, shape)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB, {args.ops:,} GPU ops) "
          f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
