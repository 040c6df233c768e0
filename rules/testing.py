"""Build small synthetic captures for rule tests: tables as a producer would write them.

One CPU thread with a moving clock and one GPU stream that runs work in launch order; a sync
call waits until the GPU is done, so idle gaps and stalls come out as on real hardware.

>>> b = CaptureBuilder()
>>> loop = [("python", "serve", "app.py", 10), ("python", "step", "app.py", 20)]
>>> with b.enclosing(loop):
...     b.kernel(loop + [("torch_op", "aten::add")], "add_kernel", gpu_us=3)
...     b.scalar_readback(loop)
>>> analysis = b.analysis()
>>> b.write("t.parquet")  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
from zym.schemas.apis import FREE_SYNC_PATTERN

Frame = tuple  # (kind, name[, file, line[, source text of the line]])


class CaptureBuilder:
    def __init__(self, pid: int = 1, tid: int = 1, device: int = 0,
                 gpus: list[dict] | None = None) -> None:
        self.pid, self.tid, self.device = pid, tid, device
        self.gpus = gpus or []   # the capture's recorded GPUs (meta.gpus: name, ...)
        self.now = 1_000_000_000  # ns
        self.gpu_free = self.now
        self.stream_free: dict[int, int] = {}  # streams other than 7: when each is free
        self._frames: dict[tuple, int] = {}
        self._stacks: dict[tuple, int] = {}
        self.frames: list[dict] = []
        self.stacks: list[dict] = []
        self.calls: list[dict] = []
        self.gpu: list[dict] = []
        self.spans: list[dict] = []
        self._corr = 1
        self._op = 1

    # -- stacks -------------------------------------------------------------------------------

    def _frame(self, f: Frame) -> int:
        key = (f[0], f[1], f[2] if len(f) > 2 else None, f[3] if len(f) > 3 else None,
               f[4] if len(f) > 4 else None)
        if key not in self._frames:
            self._frames[key] = len(self.frames)
            self.frames.append({"frame_id": len(self.frames), "kind": key[0], "name": key[1],
                                "file": key[2], "line": key[3], "source": key[4]})
        return self._frames[key]

    def stack(self, frames: Sequence[Frame]) -> int:
        """Intern a root-first frame list; returns the leaf stack id."""
        parent, path = None, ()
        for depth, f in enumerate(frames):
            fid = self._frame(f)
            path = path + (fid,)
            if path not in self._stacks:
                self._stacks[path] = len(self.stacks)
                self.stacks.append({"stack_id": len(self.stacks), "parent_id": parent,
                                    "frame_id": fid, "depth": depth})
            parent = self._stacks[path]
        return parent

    @contextlib.contextmanager
    def enclosing(self, frames: Sequence[Frame], op_id: int | None = None,
                  seq: int | None = None) -> Iterator[None]:
        """A span of the innermost frame of ``frames`` around what runs inside (one call of a
        user function, as Kineto records python_function spans; ``op_id``: a torch op's span,
        as Kineto records cpu_op spans; ``seq``: the op's autograd sequence number)."""
        start = self.now
        self.now += 500
        yield
        self.now += 500
        self.spans.append({"pid": self.pid, "tid": self.tid, "ts_ns": start,
                           "dur_ns": self.now - start, "stack_id": self.stack(frames),
                           "op_id": op_id, "op_seq": seq})

    def tick(self, us: float) -> None:
        self.now += int(us * 1000)

    # -- events -------------------------------------------------------------------------------

    def call(self, frames: Sequence[Frame], api: str, kind: str, cpu_us: float = 5.0,
             gpu: dict | None = None, shapes: list | None = None, dtypes: list | None = None,
             copy_kind: str | None = None, op_id: int | None = None,
             nbytes: int | None = None, until_ns: int | None = None) -> int:
        """A CUDA API call at ``frames`` + the API frame, and optionally the GPU work it caused.

        ``gpu``: ``kind, name, dur_us`` and optional ``copy_kind, src_mem, dst_mem, bytes``,
        ``stream`` (default 7, the one syncs wait for; another runs beside it).
        ``copy_kind``/``nbytes``: what the call itself says (driver copy APIs, eBPF).
        A ``sync`` call lasts until the GPU is idle, or until ``until_ns`` (GPU time: an event
        sync, whose event was recorded after the work that ends then). Returns the correlation
        id.
        """
        corr = self._corr
        self._corr += 1
        stack = self.stack(list(frames) + [("cuda_api", api)])
        ts = self.now
        dur = int(cpu_us * 1000)
        if gpu is not None:
            stream = gpu.get("stream", 7)
            free = self.gpu_free if stream == 7 else self.stream_free.get(stream, 0)
            start = max(ts + 1000, free)
            g_dur = int(gpu.get("dur_us", 1.0) * 1000)
            self.gpu.append({"pid": self.pid, "device_id": self.device, "stream_id": stream,
                             "ts_ns": start, "dur_ns": g_dur, "name": gpu["name"],
                             "kind": gpu["kind"], "correlation_id": corr,
                             "size_bytes": gpu.get("bytes"), "copy_kind": gpu.get("copy_kind"),
                             "src_mem": gpu.get("src_mem"), "dst_mem": gpu.get("dst_mem"),
                             "grid_x": gpu.get("grid_x")})
            if stream == 7:
                self.gpu_free = start + g_dur
            else:
                self.stream_free[stream] = start + g_dur
            if gpu.get("blocking"):  # a copy that returns when the GPU copy is done
                dur = max(dur, start + g_dur - ts + 1000)
        if until_ns is not None:
            dur = max(dur, until_ns - ts + 1000)
        elif kind == "sync" or re.match(FREE_SYNC_PATTERN, api):  # a free waits for the device
            dur = max(dur, self.gpu_free - ts + 1000)
        self.calls.append({"pid": self.pid, "tid": self.tid, "ts_ns": ts, "dur_ns": dur,
                           "name": api, "kind": kind, "correlation_id": corr, "stack_id": stack,
                           "copy_kind": copy_kind, "op_id": op_id, "size_bytes": nbytes,
                           "op_shapes": None if shapes is None else json.dumps(shapes),
                           "op_dtypes": None if dtypes is None else json.dumps(dtypes)})
        self.now = ts + dur + 1000
        return corr

    def kernel(self, frames: Sequence[Frame], name: str = "kernel", gpu_us: float = 5.0,
               cpu_us: float = 5.0, api: str = "cudaLaunchKernel", shapes: list | None = None,
               dtypes: list | None = None, grid: int | None = None) -> int:
        """A kernel launch; ``grid``: its grid size in x (what changes with the shapes)."""
        return self.call(frames, api, "launch", cpu_us,
                         {"kind": "kernel", "name": name, "dur_us": gpu_us, "grid_x": grid},
                         shapes, dtypes)

    def copy(self, frames: Sequence[Frame], direction: str = "DtoH", nbytes: int = 64,
             host_mem: str = "pageable", gpu_us: float = 2.0, sync: bool = True) -> None:
        """A torch copy (``aten::to > _to_copy > copy_``): cudaMemcpyAsync, then (``sync``) a
        cudaStreamSynchronize, as ``tensor.cpu()`` does."""
        op = self._op
        self._op += 1
        ops = list(frames) + [("torch_op", "aten::to"), ("torch_op", "aten::_to_copy"),
                              ("torch_op", "aten::copy_")]
        src, dst = ("device", host_mem) if direction == "DtoH" else (host_mem, "device")
        self.call(ops, "cudaMemcpyAsync", "copy", 4.0,
                  {"kind": "copy", "name": f"Memcpy {direction}", "dur_us": gpu_us,
                   "copy_kind": direction, "src_mem": src, "dst_mem": dst, "bytes": nbytes,
                   "blocking": host_mem == "pageable"}, op_id=op)
        if sync:
            self.call(ops, "cudaStreamSynchronize", "sync", 2.0, op_id=op)

    def scalar_readback(self, frames: Sequence[Frame], method: str = "item") -> None:
        """``tensor.item()``: aten::item > _local_scalar_dense, a DtoH copy and a sync."""
        ops = list(frames) + [("native", f"<built-in method {method} of Tensor object>"),
                              ("torch_op", "aten::item"), ("torch_op", "aten::_local_scalar_dense")]
        self.call(ops, "cudaMemcpyAsync", "copy", 4.0,
                  {"kind": "copy", "name": "Memcpy DtoH", "dur_us": 1.0, "copy_kind": "DtoH",
                   "src_mem": "device", "dst_mem": "pinned", "bytes": 1})
        self.call(ops, "cudaStreamSynchronize", "sync", 2.0)

    # -- outputs ------------------------------------------------------------------------------

    def tables(self) -> dict[str, pl.DataFrame]:
        """The capture tables, conformed to the capture schema."""
        from zym.schemas.io import conform
        from zym.schemas.tables import polars_schema

        rows = {"frame": self.frames, "stack": self.stacks, "span": self.spans,
                "call": self.calls, "gpu": self.gpu}
        out = {}
        for table, data in rows.items():
            schema = polars_schema(table)
            df = (pl.DataFrame(data, schema={c: schema[c] for c in data[0]}) if data
                  else pl.DataFrame(schema={c: t for c, t in schema.items() if c != "record"}))
            out[table] = conform(table, df).drop("record")
        return out

    def analysis(self, spans: bool = True, window: str = "all", drop: str | None = None,
                 extra: dict | None = None):
        """The ``Analysis`` of this capture (as ``zym.analysis.analyze`` would build it; the
        whole capture unless ``window`` says otherwise). ``drop``: a table (``call``, ``gpu``)
        to leave empty, as a producer that recorded one side only would. ``extra``: the
        capture's metadata ``extra`` (``{"capture_cost": {"added_ns_per_call": N}}``: what
        recording cost each call, as zym capture states it)."""
        from zym.analysis import analyze_data
        from zym.analysis.load import CaptureData
        from zym.schemas.meta import CaptureMeta

        t = self.tables()
        if drop is not None:
            t[drop] = t[drop].clear()
        data = CaptureData(Path("synthetic"), CaptureMeta(producer="zym.rules.testing",
                                                          gpus=list(self.gpus),
                                                          extra=dict(extra or {})),
                           t["frame"], t["stack"], t["call"], t["gpu"],
                           t["span"] if spans else None)
        return analyze_data(data, window)

    def write(self, path: str | Path) -> Path:
        """Write a zym capture file (Parquet) of this capture."""
        from zym.schemas.io import write_capture
        from zym.schemas.meta import CaptureMeta

        return write_capture(path, self.tables(), CaptureMeta(producer="zym.rules.testing",
                                                              gpus=list(self.gpus)))
