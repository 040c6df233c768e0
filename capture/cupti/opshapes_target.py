"""Input shapes and dtypes of torch operators, recorded *inside* the target (stdlib and torch only).

eBPF and CUPTI see a kernel launch, not the tensors it works on; the rules that size a matmul
(FLOPs, arithmetic intensity, 8-alignment) need its operands' shapes, which torch.profiler gets
from ``record_shapes``. ``zym capture --shapes`` loads this file into the target (by path, from
``agent.py``, like the agent itself) once torch is imported, and records operators through a
``TorchDispatchMode``, which sees every ATen operator after autograd and after composite
decomposition (``linear`` arrives as ``addmm``/``mm``), the same innermost operator the native
frames name. Where the mode is on (``$ZYM_SHAPES_SCOPE``):

* ``entry`` (default): only while one of torch's matmul entry points runs (``ENTRY_POINTS``:
  ``F.linear``, ``torch.matmul``, ``@``, ``mm``, ``bmm``, ...; ``Scoped``), in any thread, so
  no other operator passes through Python. Matmuls that C++ code starts on its own are not seen;
* ``all``: on every thread from torch's import on, for every operator (``Installed``).

For the operators named in ``$ZYM_SHAPES_OPS`` (zym passes the matmul family that
``zym.analysis.matmul`` sizes; ``all``: every operator) it keeps

    (thread id, start and end in CLOCK_MONOTONIC ns, operator, input shapes, input dtypes)

in torch.profiler's own notation (``[[8, 1024], [1024, 1024]]``, ``["c10::BFloat16", ...]``), so
one reader serves both producers (shapes and dtypes as JSON text, as the capture file holds
them). Records go to the collector's spool in chunks of ``FLUSH_EVERY`` (``op_shapes`` chunks:
a JSON array of rows), at the collector's periodic flush and at its stop; a call is given the shapes of
the operator running on its thread when it started (``zym.capture.cupti.opshapes``).

Opt-in, because each operator under the mode passes through Python (tens of microseconds a
matmul entry point, see docs/benchmarks.md); while torch.compile traces, entry points run as
they are.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

ENV_SHAPES = "ZYM_SHAPES"          # "1": record operator shapes (``zym capture --shapes``)
ENV_SHAPES_OPS = "ZYM_SHAPES_OPS"  # comma-separated operator names, or "all"
ENV_SHAPES_SCOPE = "ZYM_SHAPES_SCOPE"  # "entry" (default): around matmul entry points; "all"
FLUSH_EVERY = 1024
# torch.profiler's names for tensor dtypes (caffe2 TypeMeta names), so readers of Kineto traces
# read these unchanged; filled in when torch is imported.
_KINETO_DTYPES = {"float32": "float", "float64": "double", "float16": "c10::Half",
                  "bfloat16": "c10::BFloat16", "int64": "long int", "int32": "int",
                  "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
                  "bool": "bool", "complex64": "c10::complex<float>",
                  "complex128": "c10::complex<double>", "float8_e4m3fn": "c10::Float8_e4m3fn",
                  "float8_e5m2": "c10::Float8_e5m2"}


class Recorder:
    """Collects operator records and hands them to ``write(kind, payload)`` in chunks."""

    def __init__(self, write, ops: str) -> None:
        self.write = write
        self.every = ops.strip() == "all"
        self.ops = frozenset(o.strip() for o in ops.split(",") if o.strip())
        self.rows: list[list] = []
        self.lock = threading.Lock()
        self.stats = {"ops_recorded": 0, "chunks": 0, "errors": []}
        self.active = True
        self.dtype_names: dict = {}
        self._names: dict = {}   # OpOverload -> name, or None when not recorded
        self._finished: dict = {}   # raw key -> (operator, shapes, dtypes) or None

    def name_of(self, func) -> str | None:
        try:
            return self._names[func]
        except KeyError:
            name = func._schema.name
            keep = name if (self.every or name in self.ops) else None
            self._names[func] = keep
            return keep

    def name_of_str(self, name: str) -> str | None:
        return name if (self.every or name in self.ops) else None

    def add(self, row) -> None:
        """A final row (a list), or a raw one (a tuple: thread, start, end, and a key that
        ``finish`` turns into operator, shapes, dtypes, once per distinct key, at flush)."""
        self.rows.append(row)   # list.append is atomic under the GIL
        if len(self.rows) >= FLUSH_EVERY:
            self.flush()

    def finish(self, key) -> tuple | None:   # set by the recorder of raw rows
        return None

    def _final(self, row, done: dict) -> list | None:
        if isinstance(row, list):
            return row
        try:
            out = done[row[3]]
        except KeyError:
            try:
                out = done[row[3]] = self.finish(row[3])
            except Exception as e:  # noqa: BLE001 - an unhashable or unexpected key
                out = None
                if len(self.stats["errors"]) < 10:
                    self.stats["errors"].append(f"finish: {type(e).__name__}: {e}")
        return None if out is None else [row[0], row[1], row[2], *out]

    def flush(self) -> None:
        with self.lock:
            rows, self.rows = self.rows, []
        rows = [r for r in (self._final(r, self._finished) for r in rows) if r is not None]
        if not rows:
            return
        try:
            self.write("op_shapes", json.dumps(rows, separators=(",", ":")).encode())
            self.stats["ops_recorded"] += len(rows)
            self.stats["chunks"] += 1
        except Exception as e:  # noqa: BLE001 - a profiler must not break the program
            self.stats["errors"].append(f"write: {e}")

    def stop(self) -> None:
        self.active = False
        self.flush()


def describe(recorder: Recorder, value, shapes: list, dtypes: list) -> None:
    """Append one operator input as torch.profiler writes it: a tensor's sizes and dtype; a
    list of tensors as its tensors' sizes (dtype ``TensorList``); anything else ``[]`` and
    ``Scalar`` (numbers) or ``""``."""
    size = getattr(value, "shape", None)
    if size is not None and hasattr(value, "dtype"):
        shapes.append(list(size))
        d = value.dtype
        name = recorder.dtype_names.get(d)
        if name is None:
            name = recorder.dtype_names[d] = _KINETO_DTYPES.get(str(d).replace("torch.", ""),
                                                                str(d))
        dtypes.append(name)
    elif isinstance(value, (list, tuple)) and value and all(hasattr(v, "shape") for v in value):
        shapes.append([list(v.shape) for v in value])
        dtypes.append("TensorList")
    else:
        shapes.append([])
        dtypes.append("Scalar" if isinstance(value, (int, float, complex, bool)) else "")


def make_mode(recorder: Recorder):
    """A ``TorchDispatchMode`` class that records ``recorder``'s operators (torch imported)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    mono, native_id = time.monotonic_ns, threading.get_native_id
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    # the C++ kernel, not OpOverload.decompose: that prefers torch._decomp's Python
    # decompositions, several times slower
    composite_key = torch._C.DispatchKey.CompositeImplicitAutograd
    composite: dict = {}   # OpOverload -> has a CompositeImplicitAutograd kernel

    def decomposes(func) -> bool:
        try:
            return composite[func]
        except KeyError:
            composite[func] = has_kernel(func.name(), "CompositeImplicitAutograd")
            return composite[func]

    class ShapesMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = recorder.name_of(func) if recorder.active else None
            if name is None:
                if recorder.active and decomposes(func):
                    # Under inference_mode (no autograd key) a composite operator (linear,
                    # matmul) reaches the mode whole: decompose it with the mode on, so that
                    # the operators it runs (addmm, mm) are seen, as torch's FlopCounterMode does
                    with self:
                        return func._op_dk(composite_key, *args, **kwargs)
                return func(*args, **kwargs)
            t0 = mono()
            out = func(*args, **kwargs)
            t1 = mono()
            shapes: list = []
            dtypes: list = []
            for v in args:
                describe(recorder, v, shapes, dtypes)
            for v in kwargs.values():
                describe(recorder, v, shapes, dtypes)
            # as JSON text: the repr of a list of int lists is JSON; dtype names hold no quote
            recorder.add([native_id(), t0, t1, name, repr(shapes),
                          '["' + '","'.join(dtypes) + '"]' if dtypes else "[]"])
            return out

    return ShapesMode


class Installed:
    """The mode pushed on the importing thread and on every thread started after it."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.mode_cls = make_mode(recorder)
        self.threads: set[int] = set()
        self.enter()
        # threading's profile hook runs once in each new thread: push the mode there, then
        # step aside (the hook is left alone when the program set its own)
        if threading.getprofile() is None:
            threading.setprofile(self._thread_start)

    def enter(self) -> None:
        tid = threading.get_ident()
        if tid in self.threads:
            return
        self.threads.add(tid)
        self.mode_cls().__enter__()   # one instance per thread: the mode stack is per thread

    def _thread_start(self, frame, event, arg) -> None:
        sys.setprofile(None)
        try:
            self.enter()
        except Exception as e:  # noqa: BLE001
            self.recorder.stats["errors"].append(f"thread: {e}")


# torch's Python entry points to its matmuls: (module or class, attribute, how the GEMM's
# operands are known). "linear", "matmul", "rmatmul": computed from the arguments as torch
# decomposes the call (``gemm_of_linear``, ``gemm_of_matmul``); an operator name: that operator,
# its arguments as given; "mode": the mode pushed for the call (rare entry points whose
# decomposition is not worth restating).
ENTRY_POINTS = (
    ("torch.nn.functional", "linear", "linear"),
    ("torch", "matmul", "matmul"), ("torch.Tensor", "matmul", "matmul"),
    ("torch.Tensor", "__matmul__", "matmul"), ("torch.Tensor", "__rmatmul__", "rmatmul"),
    ("torch", "mm", "aten::mm"), ("torch.Tensor", "mm", "aten::mm"),
    ("torch", "bmm", "aten::bmm"), ("torch.Tensor", "bmm", "aten::bmm"),
    ("torch", "addmm", "aten::addmm"), ("torch.Tensor", "addmm", "aten::addmm"),
    ("torch", "baddbmm", "aten::baddbmm"), ("torch.Tensor", "baddbmm", "aten::baddbmm"),
    ("torch", "einsum", "mode"), ("torch", "tensordot", "mode"),
    ("torch.nn.functional", "bilinear", "mode"),
)


KWARGS = "__zym_kwargs__"   # in an entry point's key: keyword arguments follow
# The parameters of the entry points whose GEMM is worked out, in order (torch's names).
_PARAMS = {"linear": ("input", "weight", "bias"), "matmul": ("input", "other"),
           "rmatmul": ("self", "other")}


class _T:
    """A tensor as an entry point's key holds it: its shape and dtype."""

    size_type: type = tuple   # torch.Size, once torch is imported

    def __init__(self, shape, dtype) -> None:
        self.shape, self.dtype = list(shape), dtype

    def dim(self) -> int:
        return len(self.shape)

    @classmethod
    def of(cls, value):
        if (isinstance(value, tuple) and len(value) == 2
                and isinstance(value[0], cls.size_type)):
            return cls(*value)
        return value


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def gemm_of_linear(x, weight, bias=None) -> tuple[str, list] | None:
    """``F.linear(x, weight, bias)`` as the GEMM torch runs: ``addmm(bias, x2d, weight.t())``,
    or ``mm(x2d, weight.t())`` without a bias, ``x2d`` being ``x`` folded to [rows, K] (a
    non-contiguous input runs as mm plus an add: the same FLOPs). Inputs: shapes or tensors."""
    if x.dim() < 2:
        return None
    k, n = x.shape[-1], weight.shape[0]
    a, b = [_prod(x.shape[:-1]), int(k)], [int(k), int(n)]
    if bias is None:
        return "aten::mm", [(a, x), (b, weight)]
    return "aten::addmm", [(list(bias.shape), bias), (a, x), (b, weight)]


def gemm_of_matmul(t1, t2) -> tuple[str, list] | None:
    """``torch.matmul(t1, t2)`` as the GEMM torch runs: 2-D x 2-D and N-D x 2-D (folded to
    rows) ``mm``; 1-D x 2-D ``mm`` of one row; batched (either side 3-D or more, broadcast)
    ``bmm`` of [batch, M, K] x [batch, K, N]; a vector result (dot, mv) is no GEMM: None."""
    d1, d2 = t1.dim(), t2.dim()
    if d1 == 0 or d2 < 2:
        return None
    if d2 == 2:
        rows = 1 if d1 == 1 else _prod(t1.shape[:-1])
        return "aten::mm", [([rows, int(t1.shape[-1])], t1), (list(map(int, t2.shape)), t2)]
    if d1 == 1:
        return None
    batch = _prod(_broadcast(list(t1.shape[:-2]), list(t2.shape[:-2])))
    m, k, n = int(t1.shape[-2]), int(t1.shape[-1]), int(t2.shape[-1])
    return "aten::bmm", [([batch, m, k], t1), ([batch, k, n], t2)]


def _broadcast(a: list, b: list) -> list:
    width = max(len(a), len(b))
    a, b = [1] * (width - len(a)) + a, [1] * (width - len(b)) + b
    return [max(int(x), int(y)) for x, y in zip(a, b, strict=True)]


class Scoped:
    """torch's matmul entry points (``ENTRY_POINTS``) wrapped to record their GEMM, in any
    thread: no other operator passes through Python, and mostly no mode at all (not inside
    another wrapped call, nor while torch.compile traces)."""

    def __init__(self, recorder: Recorder) -> None:
        import importlib

        import torch

        self.recorder = recorder
        recorder.finish = self.finish
        self.tensor = torch.Tensor
        _T.size_type = torch.Size
        self.mode_cls = make_mode(recorder)
        self.inside = threading.local()
        self.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        for where, attr, how in ENTRY_POINTS:
            owner = torch.Tensor if where == "torch.Tensor" else importlib.import_module(where)
            orig = getattr(owner, attr, None)
            if orig is not None:
                setattr(owner, attr, self._wrap(orig, how))   # the original: __wrapped__

    def finish(self, key: tuple) -> tuple | None:
        """(operator, shapes JSON, dtypes JSON) of one entry-point call, from its key: how the
        GEMM is known, then each argument (a tensor as its (shape, dtype); keyword arguments
        as (name, value) pairs after ``KWARGS``)."""
        how, *values = key
        split = values.index(KWARGS) if KWARGS in values else len(values)
        args = [_T.of(v) for v in values[:split]]
        kwargs = {k: _T.of(v) for k, v in values[split + 1:]}
        if how in _PARAMS:   # torch's own parameter names: keyword arguments in their place
            names = _PARAMS[how]
            args += [kwargs.pop(n) for n in names[len(args):] if n in kwargs]
            if len(args) < 2:
                return None
            gemm = (gemm_of_linear(*args[:3]) if how == "linear" else
                    gemm_of_matmul(*(args[:2] if how == "matmul" else args[1::-1])))
        else:
            gemm = (how, [(None, v) for v in (*args, *kwargs.values())])
        if gemm is None or self.recorder.name_of_str(gemm[0]) is None:
            return None
        shapes: list = []
        dtypes: list = []
        for shape, value in gemm[1]:
            describe(self.recorder, value, shapes, dtypes)
            if shape is not None:
                shapes[-1] = shape
        return gemm[0], repr(shapes), '["' + '","'.join(dtypes) + '"]' if dtypes else "[]"

    def _wrap(self, orig, how: str):
        mode_cls, inside, recorder, compiling = (self.mode_cls, self.inside, self.recorder,
                                                 self.compiling)
        mono, native_id, tensor = time.monotonic_ns, threading.get_native_id, self.tensor

        def scoped(*args, **kwargs):
            # compiling() first: under torch.compile tracing it is a constant (True) and the
            # rest is never traced
            if compiling() or not recorder.active or getattr(inside, "on", False):
                return orig(*args, **kwargs)
            inside.on = True
            try:
                if how == "mode":
                    with mode_cls():
                        return orig(*args, **kwargs)
                t0 = mono()
                out = orig(*args, **kwargs)
                t1 = mono()
                # the hot path keeps references only (sizes and dtypes are immutable); the
                # shapes are worked out once per distinct key, at flush (``finish``)
                key = (how, *[(v.shape, v.dtype) if isinstance(v, tensor) else v for v in args])
                if kwargs:
                    key += (KWARGS, *[(k, (v.shape, v.dtype) if isinstance(v, tensor) else v)
                                      for k, v in kwargs.items()])
                recorder.add((native_id(), t0, t1, key))
                return out
            finally:
                inside.on = False

        scoped.__name__ = getattr(orig, "__name__", "scoped")
        scoped.__qualname__ = getattr(orig, "__qualname__", scoped.__name__)
        scoped.__doc__ = getattr(orig, "__doc__", None)
        scoped.__wrapped__ = orig
        return scoped


def install(write, ops: str | None = None, scope: str | None = None
            ) -> tuple[Recorder, Installed | Scoped | None]:
    """Record operator shapes through ``write`` (the spool's ``write(kind, payload)``); torch
    must be imported. ``scope`` (default ``$ZYM_SHAPES_SCOPE``, else ``entry``): ``entry``, the
    mode around torch's matmul entry points only (``Scoped``); ``all``, on every thread for
    every operator (``Installed``: sees matmuls that C++ code calls too, at a cost per
    operator). Never raises: a failure is in ``recorder.stats['errors']``."""
    recorder = Recorder(write, ops if ops is not None else os.environ.get(ENV_SHAPES_OPS, "all"))
    scope = scope or os.environ.get(ENV_SHAPES_SCOPE) or "entry"
    recorder.stats["scope"] = scope
    try:
        return recorder, (Installed if scope == "all" else Scoped)(recorder)
    except Exception as e:  # noqa: BLE001 - an old torch without TorchDispatchMode, ...
        recorder.stats["errors"].append(f"install: {type(e).__name__}: {e}")
        recorder.active = False
        return recorder, None
