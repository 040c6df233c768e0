"""Build small torch.profiler (Kineto) traces for tests, shaped like real ones.

>>> b = KinetoBuilder()
>>> with b.py("app.py(10): main"):
...     with b.op("aten::mm"):
...         b.launch("cudaLaunchKernel", kernel="gemm", gpu_us=5.0)
>>> trace = b.trace()  # a dict ready for json.dump
"""
from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator
from pathlib import Path


class KinetoBuilder:
    """Appends events on one CPU thread with a moving clock (µs), like Kineto's JSON."""

    def __init__(self, pid: int = 100, tid: int = 100, with_stack: bool = True) -> None:
        self.pid, self.tid, self.with_stack = pid, tid, with_stack
        self.now = 1_000_000.0
        self.gpu_now = 1_000_000.0
        self.events: list[dict] = []
        self._py_stack: list[int] = []
        self._next_py, self._next_ext, self._next_corr = 1, 1, 1
        self._op_stack: list[int] = []

    def tick(self, us: float = 1.0) -> None:
        self.now += us

    @contextlib.contextmanager
    def py(self, name: str) -> Iterator[None]:
        """A python_function span (skipped without with_stack, as Kineto does)."""
        if not self.with_stack:
            yield
            return
        py_id, parent = self._next_py, (self._py_stack[-1] if self._py_stack else None)
        self._next_py += 1
        ev = {"ph": "X", "cat": "python_function", "name": name, "pid": self.pid,
              "tid": self.tid, "ts": self.now,
              "args": {"Python parent id": parent, "Python id": py_id}}
        self.events.append(ev)
        self._py_stack.append(py_id)
        self.tick(0.5)
        yield
        self.tick(0.5)
        self._py_stack.pop()
        ev["dur"] = round(self.now - ev["ts"], 3)

    @contextlib.contextmanager
    def op(self, name: str, dims: list | None = None, types: list | None = None,
           seq: int | None = None) -> Iterator[None]:
        """A torch op; ``seq``: autograd's sequence number (the op ran with autograd on)."""
        ext = self._next_ext
        self._next_ext += 1
        args = {"External id": ext}
        if seq is not None:
            args["Sequence number"] = seq
        if dims is not None:
            args["Input Dims"] = dims
        if types is not None:
            args["Input type"] = types
        ev = {"ph": "X", "cat": "cpu_op", "name": name, "pid": self.pid, "tid": self.tid,
              "ts": self.now, "args": args}
        self.events.append(ev)
        self._op_stack.append(ext)
        self.tick(0.5)
        yield
        self.tick(0.5)
        self._op_stack.pop()
        ev["dur"] = round(self.now - ev["ts"], 3)

    def open_op(self, name: str, cat: str = "user_annotation") -> dict:
        """An op left open past the Python frames that opened it, as ``prof.step()`` leaves
        ``ProfilerStep#N`` (and ``record_function.__enter__`` its range): :meth:`close_op`
        ends it. Not on the op stack: what runs inside it is issued by later frames."""
        ext = self._next_ext
        self._next_ext += 1
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid,
              "ts": self.now, "args": {"External id": ext}}
        self.events.append(ev)
        self.tick(0.5)
        return ev

    def close_op(self, ev: dict) -> None:
        self.tick(0.5)
        ev["dur"] = round(self.now - ev["ts"], 3)

    def launch(self, api: str = "cudaLaunchKernel", kernel: str | None = "kernel",
               gpu_us: float = 1.0, cpu_us: float = 2.0, cat: str = "cuda_runtime",
               gpu_cat: str = "kernel", gpu_args: dict | None = None) -> int:
        """A CUDA API call and (unless ``kernel`` is None) the GPU work it caused."""
        corr = self._next_corr
        self._next_corr += 1
        args = {"cbid": 211, "correlation": corr}
        if self._op_stack:
            args["External id"] = self._op_stack[-1]
        self.events.append({"ph": "X", "cat": cat, "name": api, "pid": self.pid,
                            "tid": self.tid, "ts": self.now, "dur": cpu_us, "args": args})
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid,
                            "ts": self.now, "cat": "ac2g", "name": "ac2g"})
        if kernel is not None:
            self.gpu_now = max(self.gpu_now, self.now + cpu_us)
            gargs = {"device": 0, "stream": 7, "correlation": corr,
                     "grid": [1, 1, 1], "block": [128, 1, 1]} | (gpu_args or {})
            if self._op_stack:
                gargs["External id"] = self._op_stack[-1]
            self.events.append({"ph": "X", "cat": gpu_cat, "name": kernel, "pid": 0, "tid": 7,
                                "ts": self.gpu_now, "dur": gpu_us, "args": gargs})
            self.gpu_now += gpu_us
        self.tick(cpu_us)
        return corr

    def trace(self) -> dict:
        return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}],
                "cuda_driver_version": 13000, "with_stack": int(self.with_stack),
                "traceEvents": self.events + [
                    {"name": "process_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": 0,
                     "args": {"name": "python3"}}]}

    def write(self, path: Path, gz: bool | None = None, kineto_layout: bool = False) -> Path:
        """Write the trace compact, or laid out as Kineto prints it (``kineto_layout``)."""
        data = (kineto_text(self.trace()) if kineto_layout else json.dumps(self.trace())).encode()
        if gz if gz is not None else path.suffix == ".gz":
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


def kineto_text(trace: dict) -> str:
    """JSON laid out as libkineto's output_json.cpp writes it: top-level keys and the events of
    ``traceEvents`` at two spaces, one block per event, the array closed by ``\n  ]``."""
    header = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in trace.items()
                         if k != "traceEvents")
    events = ",".join("\n  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in trace["traceEvents"])
    return ("{\n" + header + ',\n  "traceEvents": [' + events
            + '\n  ],\n  "traceName": "test.json"\n}')
