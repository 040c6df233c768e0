"""Synthetic CUPTI activity buffers and spool files, built with the record dtypes.

Records are laid out back to back as CUPTI lays them out in a buffer; a spool is written with
the agent's own ``SpoolWriter`` so the reader is tested on the writer's output.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
from zym.capture.cupti import agent
from zym.capture.cupti.layouts import LAYOUTS

DT = LAYOUTS[13]
K = agent


def record(kind: int, **fields) -> bytes:
    """One raw record of ``kind`` with the given fields (others zero)."""
    dt = DT[kind]
    a = np.zeros(1, dtype=dt)
    a["kind"] = kind
    for name, value in fields.items():
        a[name] = value
    return a.tobytes()


def api(start, end, tid, corr, cbid, kind=K.KIND_RUNTIME, pid=100) -> bytes:
    return record(kind, start=start, end=end, thread_id=tid, process_id=pid,
                  correlation_id=corr, cbid=cbid)


def kernel(start, end, corr, name_ptr=0x1000, stream=7, graph_id=0, device=0, ctx=1) -> bytes:
    return record(K.KIND_CONCURRENT_KERNEL, start=start, end=end, correlation_id=corr,
                  name=name_ptr, stream_id=stream, graph_id=graph_id, device_id=device,
                  context_id=ctx, grid_x=8, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1)


def memcpy(start, end, corr, nbytes, copy_kind=2, src=3, dst=1, stream=7, ctx=1) -> bytes:
    return record(K.KIND_MEMCPY, start=start, end=end, correlation_id=corr, bytes=nbytes,
                  copy_kind=copy_kind, src_kind=src, dst_kind=dst, stream_id=stream,
                  context_id=ctx)


def memset(start, end, corr, nbytes, stream=7, ctx=1) -> bytes:
    return record(K.KIND_MEMSET, start=start, end=end, correlation_id=corr, bytes=nbytes,
                  memory_kind=3, stream_id=stream, context_id=ctx)


def sync(start, end, corr, sync_type=3, stream=7, ctx=1) -> bytes:
    return record(K.KIND_SYNCHRONIZATION, start=start, end=end, correlation_id=corr,
                  type=sync_type, stream_id=stream, context_id=ctx)


API_NAMES = {"runtime": {"211": "cudaLaunchKernel_v7000", "41": "cudaMemcpyAsync_v3020",
                         "131": "cudaStreamSynchronize_v3020", "51": "cudaMemsetAsync_v3020",
                         "311": "cudaGraphLaunch_v10000"},
             "driver": {"307": "cuLaunchKernel", "442": "cuLaunchKernelEx"}}
CBID = {"launch": 211, "copy": 41, "sync": 131, "memset": 51, "graph": 311,
        "cuLaunchKernel": 307, "cuLaunchKernelEx": 442}


def write_spool(path, buffers: list[bytes], calibrations, names=None, pid=100, fmt="framed",
                footer=True) -> str:
    w = agent.SpoolWriter(str(path), fmt)
    w.write("header", json.dumps({"pid": pid, "cupti_api_version": 130001,
                                  "api_names": API_NAMES}).encode())
    for c in calibrations[:1]:
        w.write("calib", json.dumps(c).encode())
    for b in buffers:
        w.write("activity", b)
    for c in calibrations[1:]:
        w.write("calib", json.dumps(c).encode())
    w.write("names", json.dumps({str(k): v for k, v in (names or {}).items()}).encode())
    if footer:
        w.write("footer", json.dumps({"dropped": 0}).encode())
    w.close()
    return str(path)


def build_fake_cupti(out_dir: Path) -> Path | None:
    """The stand-in libcupti (fakecupti.c) built in ``out_dir``; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out = out_dir / "libcupti.so.13"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out),
                    str(Path(__file__).resolve().parent / "fakecupti.c"), "-lpthread"], check=True)
    return out
