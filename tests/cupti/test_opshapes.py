"""Operator shapes (`zym capture --shapes`): recorded in the target by a dispatch mode
(capture/cupti/opshapes_target.py), carried in the spool, given to calls at finalize
(capture/cupti/opshapes.py).

Three levels: the join against a brute-force second method; the whole path (bootstrap, import
hook, spool, decode, join) with a stand-in torch that dispatches the way torch's modes do; and,
where torch is installed, real torch operators recorded with the shapes the test gave them.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
from zym.analysis.matmul import MATMUL_OPS
from zym.capture.cupti import integrate, target_env
from zym.capture.cupti.decode import decode_spool, read_spool
from zym.capture.cupti.opshapes import SHAPE_SCHEMA, attach_shapes
from zym.schemas import open_capture

TARGET_MODULE = Path(__file__).parents[2] / "capture" / "cupti" / "opshapes_target.py"


def _brute(calls: list[tuple], ops: list[tuple]) -> list[str | None]:
    """Per call (pid, tid, ts): the shapes of the op on its thread whose [start, end] holds ts,
    the latest-starting one where several do."""
    out = []
    for pid, tid, ts in calls:
        best = None
        for opid, otid, start, end, shapes in ops:
            if (opid, otid) == (pid, tid) and start <= ts <= end and (best is None or start >= best[0]):
                best = (start, shapes)
        out.append(best[1] if best else None)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_calls_get_the_shapes_of_the_operator_running_on_their_thread(seed):
    rng = random.Random(seed)
    ops, calls = [], []
    for pid in (10, 11):
        for tid in (1, 2, 3):
            t = rng.randrange(100)
            for k in range(40):   # one at a time per thread, with gaps
                start = t + rng.randrange(0, 30)
                end = start + rng.randrange(0, 50)
                ops.append((pid, tid, start, end, f"[[{pid}, {tid}, {k}]]"))
                t = end + 1
            calls += [(pid, tid, rng.randrange(t + 20)) for _ in range(300)]
    rng.shuffle(calls)
    shapes = pl.DataFrame([(p, t, s, e, "aten::mm", sh, '["float"]') for p, t, s, e, sh in ops],
                          schema=SHAPE_SCHEMA, orient="row")
    frame = pl.DataFrame(calls, schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64},
                         orient="row")
    # a call that already has shapes (a producer that recorded them) keeps them
    frame = frame.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("[[9]]"))
                               .alias("op_shapes"))
    got, stats = attach_shapes(frame, shapes)
    want = _brute(calls, ops)
    assert got["op_shapes"].to_list() == ["[[9]]", *want[1:]]
    assert got["op_dtypes"].null_count() == sum(w is None for w in want)
    assert stats["calls_given_shapes"] == sum(w is not None for w in want)
    assert 0 < stats["calls_given_shapes"] < len(calls)   # the data has both kinds


# A stand-in torch: `torch.utils._python_dispatch.TorchDispatchMode` kept per thread as torch
# keeps its mode stack; `run_op`, which hands an operator to the thread's innermost mode (as
# torch's Python dispatch key does) or runs it; Python entry points (`torch.matmul`, `torch.bmm`,
# `torch.nn.functional.linear`) that run operators. Each operator's body launches on the
# stand-in libcupti, so its call falls inside the operator. `aten::linear` decomposes (as a
# CompositeImplicitAutograd operator does) into an `aten::addmm`.
FAKE_TORCH = {
    "torch/__init__.py": textwrap.dedent("""
        import ctypes, sys
        from . import _C, utils
        from .utils._python_dispatch import run_op
        _lib = ctypes.CDLL(sys.argv[1])

        class _Schema:
            def __init__(self, name): self.name = name

        class Op:
            def __init__(self, name, launches):
                self._schema, self.launches = _Schema(name), launches
            def name(self):
                return self._schema.name
            def __call__(self, *args):
                _lib.fake_launch(self.launches)
            def _op_dk(self, key, x, w, b):   # the CompositeImplicitAutograd kernel
                assert key == _C.DispatchKey.CompositeImplicitAutograd
                return run_op(Op("aten::addmm", 1), b, x, T(*w.shape[::-1], dtype=w.dtype))

        class Size(tuple):
            pass

        class Tensor:
            def __init__(self, *shape, dtype="torch.bfloat16"):
                self.shape, self.dtype = Size(shape), dtype
            def dim(self):
                return len(self.shape)

        T = Tensor

        def matmul(a, b): return run_op(Op("aten::mm", 3), a, b)
        def bmm(a, b): return run_op(Op("aten::bmm", 2), a, b)
        def add(a, b): return run_op(Op("aten::add", 4), a, b)
        from . import nn
    """),
    "torch/nn/__init__.py": "from . import functional\n",
    "torch/nn/functional.py": textwrap.dedent("""
        import torch
        def linear(x, w, b): return torch.run_op(torch.Op("aten::linear", 1), x, w, b)
    """),
    "torch/_C.py": textwrap.dedent("""
        COMPOSITE = {"aten::linear"}

        class DispatchKey:
            CompositeImplicitAutograd = "CompositeImplicitAutograd"

        def _dispatch_has_kernel_for_dispatch_key(name, key):
            return key == "CompositeImplicitAutograd" and name in COMPOSITE
    """),
    "torch/utils/__init__.py": "from . import _python_dispatch\n",
    "torch/utils/_python_dispatch.py": textwrap.dedent("""
        import threading
        _tls = threading.local()

        class TorchDispatchMode:
            def __enter__(self):
                _tls.__dict__.setdefault("stack", []).append(self)
                return self

            def __exit__(self, *exc):
                _tls.stack.pop()

        def run_op(func, *args):
            stack = getattr(_tls, "stack", [])
            if not stack:
                return func(*args)
            mode = stack.pop()          # torch runs the operator with the mode set aside
            try:
                return mode.__torch_dispatch__(func, (), args, {})
            finally:
                stack.append(mode)
    """),
}


def stand_in_torch(tmp_path: Path) -> Path:
    """The stand-in torch package written under ``tmp_path``; the folder to put on PYTHONPATH."""
    mods = tmp_path / "mods"
    for rel, text in FAKE_TORCH.items():
        (mods / rel).parent.mkdir(parents=True, exist_ok=True)
        (mods / rel).write_text(text)
    return mods


FAKE_TARGET = """
import ctypes, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.fake_launch(2)                       # before torch: no operator
import torch
import torch.nn.functional as F
from torch import T

torch.matmul(T(8, 16), T(16, 32))
F.linear(T(8, 16), T(32, 16), T(32))    # reaches the mode whole (as under inference_mode)
torch.add(T(8), T(8))                    # not a matmul: launches, no shapes
t = threading.Thread(target=lambda: torch.bmm(T(4, 8, 16, dtype="torch.float32"),
                                              T(4, 16, 8, dtype="torch.float32")))
t.start(); t.join()
lib.fake_launch(1)                       # between operators: none
"""


@pytest.mark.parametrize("scope", ["entry", "all"])
def test_capture_with_shapes_gives_each_call_its_operators_shapes(tmp_path, fake_lib, monkeypatch,
                                                                  scope):
    monkeypatch.setenv("ZYM_SHAPES_SCOPE", scope)
    mods = stand_in_torch(tmp_path)
    script = tmp_path / "serve.py"
    script.write_text(FAKE_TARGET)
    monkeypatch.setenv("ZYM_CUPTI_LIB", str(fake_lib))
    monkeypatch.setenv("ZYM_CUPTI_EAGER", "1")   # recording before torch's import too
    monkeypatch.setenv("PYTHONPATH", str(mods))
    out = tmp_path / "t.parquet"
    meta = integrate.run_cupti_only([sys.executable, str(script), str(fake_lib)], out,
                                    keep_spool=True, log=lambda _m: None, shapes=True)
    calls = open_capture(out).load("call").sort("ts_ns")
    rows = list(zip(calls["op_shapes"].to_list(), calls["op_dtypes"].to_list(), strict=True))
    mm = ("[[8, 16], [16, 32]]", '["c10::BFloat16","c10::BFloat16"]')
    addmm = ("[[32], [8, 16], [16, 32]]", '["c10::BFloat16","c10::BFloat16","c10::BFloat16"]')
    bmm = ("[[4, 8, 16], [4, 16, 8]]", '["float","float"]')
    none = (None, None)
    assert rows == [none] * 2 + [mm] * 3 + [addmm] + [none] * 4 + [bmm] * 2 + [none]
    assert calls.filter(pl.col("op_shapes") == bmm[0])["tid"].n_unique() == 1
    assert calls.filter(pl.col("op_shapes") == bmm[0])["tid"][0] != calls["tid"][0]
    assert meta.extra["op_shapes"]["calls_given_shapes"] == 6
    assert meta.extra["op_shapes"]["by_operator"] == {"aten::addmm": 1, "aten::bmm": 2, "aten::mm": 3}
    (rec,) = meta.extra["op_shapes"]["recording"].values()
    assert rec == {"ops_recorded": 3, "chunks": 1, "errors": [], "scope": scope}


def test_without_shapes_the_target_records_none(tmp_path, fake_lib, monkeypatch):
    mods = stand_in_torch(tmp_path)
    (tmp_path / "serve.py").write_text(FAKE_TARGET)
    monkeypatch.setenv("ZYM_CUPTI_LIB", str(fake_lib))
    monkeypatch.setenv("ZYM_CUPTI_EAGER", "1")
    monkeypatch.setenv("PYTHONPATH", str(mods))
    monkeypatch.setenv("ZYM_SHAPES", "1")    # left in the user's environment: zym says 0
    out = tmp_path / "t.parquet"
    meta = integrate.run_cupti_only([sys.executable, str(tmp_path / "serve.py"), str(fake_lib)],
                                    out, log=lambda _m: None)
    calls = open_capture(out).load("call")
    assert calls.height == 13 and calls["op_shapes"].null_count() == 13
    assert "op_shapes" not in meta.extra


REAL_TARGET = """
import json, sys, threading
sys.path.insert(0, sys.argv[2])
import importlib.util
spec = importlib.util.spec_from_file_location("ot", sys.argv[1])
ot = importlib.util.module_from_spec(spec); spec.loader.exec_module(ot)
import torch
chunks = []
rec, inst = ot.install(lambda kind, payload: chunks.append(payload), sys.argv[3], sys.argv[4])
x, lin = torch.randn(8, 16), torch.nn.Linear(16, 32)
lin(x)                                                     # linear -> addmm(bias, x, weight.t())
with torch.inference_mode():     # no autograd key: linear and matmul reach the mode whole
    lin(x)
    x @ torch.randn(16, 4)                                 # matmul -> mm
torch.bmm(torch.randn(2, 3, 5, dtype=torch.float64), torch.randn(2, 5, 7, dtype=torch.float64))
x + 1                                                      # add: not asked for
t = threading.Thread(target=lambda: torch.randn(3, 9, dtype=torch.bfloat16)
                     @ torch.randn(9, 2, dtype=torch.bfloat16))
t.start(); t.join()
rec.stop()
rows = [r for c in chunks for r in json.loads(c)]
print(json.dumps({"rows": rows, "main": threading.get_native_id(), "stats": rec.stats}))
"""


def _real(tmp_path: Path, ops: str, scope: str) -> dict:
    pytest.importorskip("torch", reason="torch is not installed here (the H200 run checks it)")
    script = tmp_path / "t.py"
    script.write_text(REAL_TARGET)
    out = subprocess.run([sys.executable, str(script), str(TARGET_MODULE), str(tmp_path), ops,
                          scope], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_only_matmul_entry_points_pass_through_python_by_default(tmp_path):
    """Scope ``entry``: the mode is on only inside torch's matmul entry points, so with every
    operator asked for, the ``add`` outside them is not seen; scope ``all`` sees it."""
    entry = {r[3] for r in _real(tmp_path, "all", "entry")["rows"]}
    everywhere = {r[3] for r in _real(tmp_path, "all", "all")["rows"]}
    assert "aten::add" not in entry and "aten::add" in everywhere
    assert {"aten::addmm", "aten::mm", "aten::bmm"} <= entry
    assert "aten::randn" in everywhere - entry


@pytest.mark.parametrize("scope", ["entry", "all"])
def test_real_torch_operators_are_recorded_with_their_inputs(tmp_path, scope):
    doc = _real(tmp_path, ",".join(MATMUL_OPS), scope)
    rows = [(r[3], json.loads(r[4]), json.loads(r[5]), r[0] == doc["main"]) for r in doc["rows"]]
    assert rows == [
        ("aten::addmm", [[32], [8, 16], [16, 32]], ["float"] * 3, True),
        ("aten::addmm", [[32], [8, 16], [16, 32]], ["float"] * 3, True),
        ("aten::mm", [[8, 16], [16, 4]], ["float"] * 2, True),
        ("aten::bmm", [[2, 3, 5], [2, 5, 7]], ["double"] * 2, True),
        ("aten::mm", [[3, 9], [9, 2]], ["c10::BFloat16"] * 2, False),
    ]
    assert all(r[1] <= r[2] for r in doc["rows"])
    assert doc["stats"] == {"ops_recorded": 5, "chunks": 1, "errors": [], "scope": scope}


def test_spool_chunks_decode_to_the_operators(tmp_path, fake_lib):
    """The recorder's chunks, written by the real agent's spool writer, read back by decode."""
    spool = tmp_path / "spool"
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(fake_lib), "ZYM_CUPTI_EAGER": "1"}
    code = textwrap.dedent(f"""
        import sys, importlib.util
        agent = sys.modules["_zym_cupti_agent"]
        spec = importlib.util.spec_from_file_location("ot", {str(TARGET_MODULE)!r})
        ot = importlib.util.module_from_spec(spec); spec.loader.exec_module(ot)
        rec = ot.Recorder(agent._collector.spool.write, "aten::mm")
        for i in range(ot.FLUSH_EVERY + 5):
            rec.add([7, i, i + 1, "aten::mm", "[[%d]]" % i, '["float"]'])
        agent._collector.flushers.append(lambda final: rec.stop() if final else rec.flush())
    """)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (path,) = spool.glob("cupti-*.spool")
    shapes = decode_spool(read_spool(path)).shapes
    assert shapes["op_shapes"].to_list() == [f"[[{i}]]" for i in range(1029)]
    assert shapes["tid"].unique().to_list() == [7]


def _path(frames: pl.DataFrame, stacks: pl.DataFrame, sid: int) -> list[tuple[str, str]]:
    """Root-first (kind, name) of a stack, walked from the tables."""
    kind = dict(zip(frames["frame_id"], frames["kind"], strict=True))
    name = dict(zip(frames["frame_id"], frames["name"], strict=True))
    up = {s: (p, f) for s, p, f in stacks.select("stack_id", "parent_id", "frame_id").iter_rows()}
    out = []
    while sid is not None:
        parent, fid = up[sid]
        out.append((kind[fid], name[fid]))
        sid = parent
    return out[::-1]


def test_the_recorded_operator_becomes_a_layer_below_the_innermost_python_frame():
    from zym.capture.cupti.opshapes import OP_COLUMN, add_op_layer

    frames = pl.DataFrame({"frame_id": [1, 2, 3, 4, 5, 6],
                           "kind": ["python", "python", "native", "native", "torch_op", "cuda_api"],
                           "name": ["forward", "__torch_dispatch__", "callBoxed", "gemm",
                                    "aten::addmm", "cuLaunchKernel"]})
    # 10-11-12-13-14: python, python, native, native, api; 10-21-22: python, torch_op, api
    stacks = pl.DataFrame({"stack_id": [10, 11, 12, 13, 14, 21, 22],
                           "parent_id": [None, 10, 11, 12, 13, 10, 21],
                           "frame_id": [1, 2, 3, 4, 6, 5, 6],
                           "depth": [0, 1, 2, 3, 4, 1, 2]})
    calls = pl.DataFrame({"stack_id": [14, 14, 14, 22, None, 12],
                          OP_COLUMN: ["aten::mm", "aten::bmm", None, "aten::mm", "aten::mm",
                                      "aten::addmm"]})
    f2, s2, c2, n = add_op_layer(frames, stacks, calls)
    assert n == 3 and OP_COLUMN not in c2.columns
    got = [None if s is None else _path(f2, s2, s) for s in c2["stack_id"]]
    below = [("native", "callBoxed"), ("native", "gemm"), ("cuda_api", "cuLaunchKernel")]
    py = [("python", "forward"), ("python", "__torch_dispatch__")]
    assert got == [
        [*py, ("torch_op", "aten::mm"), *below],
        [*py, ("torch_op", "aten::bmm"), *below],
        [*py, *below],                                  # no operator recorded: unchanged
        [("python", "forward"), ("torch_op", "aten::addmm"), ("cuda_api", "cuLaunchKernel")],
        None,
        [*py, ("torch_op", "aten::addmm"), ("native", "callBoxed")],  # the existing frame reused
    ]
    assert f2.filter(pl.col("kind") == "torch_op")["name"].sort().to_list() == [
        "aten::addmm", "aten::bmm", "aten::mm"]
    # the trie stays a trie: one node per (parent, frame), depths consistent
    assert s2.select("parent_id", "frame_id").is_duplicated().sum() == 0
    depth = dict(zip(s2["stack_id"], s2["depth"], strict=True))
    assert all(depth[s] == (0 if p is None else depth[p] + 1)
               for s, p in s2.select("stack_id", "parent_id").iter_rows())


def _target_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_zym_opshapes_test", TARGET_MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gemm_flops(gemm) -> int:
    """2*M*K*N (*batch) from the last two operand shapes, as zym.analysis.matmul reads them."""
    a, b = [shape for shape, _ in gemm[1]][-2:]
    return 2 * (a[0] if len(a) == 3 else 1) * a[-2] * a[-1] * b[-1]


def test_entry_point_gemms_have_numpys_matmul_flops():
    """The GEMM an entry point's arguments imply (torch.matmul's and F.linear's decomposition,
    restated) against numpy's own matmul broadcasting: FLOPs = 2 * output elements * K."""
    np = pytest.importorskip("numpy")
    ot = _target_module()
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        d1, d2 = rng.randint(1, 4), rng.randint(1, 4)
        m, k, n = (rng.randint(1, 9) for _ in range(3))
        batch = [rng.choice([1, rng.randint(2, 4)]) for _ in range(2)]
        s1 = ([*[rng.choice([1, b]) for b in batch][4 - d1:], m, k][-d1:] if d1 > 1 else [k])
        s2 = ([*[rng.choice([1, b]) for b in batch][4 - d2:], k, n][-d2:] if d2 > 1 else [k])
        gemm = ot.gemm_of_matmul(ot._T(s1, "f"), ot._T(s2, "f"))
        out = np.matmul(np.zeros(s1), np.zeros(s2)).shape
        if d2 == 1 or (d1 == 1 and d2 > 2):
            assert gemm is None, (s1, s2)   # a vector result, or a case not restated
            continue
        assert _gemm_flops(gemm) == 2 * int(np.prod(out)) * k, (s1, s2, gemm)
        checked += 1
    assert checked > 200
    for lead in ([5], [3, 5], [2, 3, 5]):
        for bias in (None, ot._T([7], "f")):
            x, w = ot._T([*lead, 4], "f"), ot._T([7, 4], "f")
            gemm = ot.gemm_of_linear(x, w, bias)
            out = np.matmul(np.zeros(x.shape), np.zeros(w.shape).T).shape
            assert _gemm_flops(gemm) == 2 * int(np.prod(out)) * 4
            assert gemm[0] == ("aten::mm" if bias is None else "aten::addmm")


CASES = """
import torch
lin3, lin0 = torch.nn.Linear(16, 32), torch.nn.Linear(16, 32, bias=False)
x2, x3, x4 = torch.randn(8, 16), torch.randn(2, 8, 16), torch.randn(2, 3, 8, 16)
def run():
    lin3(x2); lin3(x3); lin3(x4); lin0(x3); lin3(x3.transpose(0, 1))     # linear
    x2 @ torch.randn(16, 4); x3 @ torch.randn(16, 4); x3 @ torch.randn(2, 16, 4)
    torch.matmul(x4, torch.randn(1, 3, 16, 5)); torch.randn(16) @ torch.randn(16, 4)
    torch.randn(4, 16).matmul(x3.transpose(-1, -2))                       # 2-D x 3-D
    torch.mm(x2, torch.randn(16, 4)); torch.bmm(x3, torch.randn(2, 16, 4))
    torch.addmm(torch.randn(4), x2, torch.randn(16, 4), beta=0.5)
    torch.baddbmm(torch.randn(2, 8, 4), x3, torch.randn(2, 16, 4))
    torch.nn.functional.linear(input=x3, weight=lin3.weight, bias=lin3.bias)  # by keyword
    torch.matmul(input=x2, other=torch.randn(16, 4))
    torch.randn(16, 4).__rmatmul__(x3)                                     # x3 @ it
with torch.no_grad():
    run()
with torch.inference_mode():
    run()
"""


def test_entry_points_record_the_flops_the_mode_sees(tmp_path):
    """Second method: the every-operator mode records the operators torch really ran; the
    entry points' restated GEMMs must have the same FLOPs, call by call (arguments given by
    position or by keyword)."""
    pytest.importorskip("torch", reason="torch is not installed here (the H200 run checks it)")
    from zym.analysis.matmul import with_flops

    script = tmp_path / "cases.py"
    script.write_text(REAL_TARGET.split("import torch\n", 1)[0] + "import torch\nchunks = []\n"
                      "rec, inst = ot.install(lambda kind, payload: chunks.append(payload), "
                      "sys.argv[3], sys.argv[4])\n" + CASES + "rec.stop()\n"
                      "print(json.dumps([r for c in chunks for r in json.loads(c)]))\n")
    flops = {}
    for scope in ("entry", "all"):
        out = subprocess.run([sys.executable, str(script), str(TARGET_MODULE), str(tmp_path),
                              ",".join(MATMUL_OPS), scope], capture_output=True, text=True,
                             timeout=300, check=False)
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout.splitlines()[-1])
        frame = pl.DataFrame({"op_shapes": [r[4] for r in rows], "op_dtypes": [r[5] for r in rows]})
        flops[scope] = with_flops(frame)["flops"].to_list()
    assert len(flops["entry"]) == 2 * 18
    assert flops["entry"] == flops["all"]
    assert None not in flops["entry"]


DORMANT_TARGET = """
import ctypes, json, os, sys, time
import torch
from torch import T
times = []
while not os.path.exists(sys.argv[2]):
    t0 = time.monotonic_ns()
    torch.matmul(T(8, 16), T(16, 32))
    times.append([t0, time.monotonic_ns()])
    time.sleep(0.005)
print(json.dumps(times))
"""


def test_a_dormant_agent_records_shapes_only_while_a_capture_has_it_on(tmp_path, fake_lib):
    """`zym run --shapes`: torch's entry points are wrapped at its import, but shapes are
    recorded only between a capture's on and off, into that capture's spool, twice."""
    import time

    from zym.capture.cupti import agent_env
    from zym.capture.cupti.remote import find_agent

    mods = stand_in_torch(tmp_path)
    script, stop = tmp_path / "serve.py", tmp_path / "stop"
    script.write_text(DORMANT_TARGET)
    env = agent_env(agent_dir=str(tmp_path / "agents"), shapes=True) | {
        "ZYM_CUPTI_LIB": str(fake_lib)}
    env["PYTHONPATH"] += f":{mods}"
    proc = subprocess.Popen([sys.executable, str(script), str(fake_lib), str(stop)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while (agent := find_agent(proc.pid, str(tmp_path / "agents"))) is None:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        time.sleep(0.3)                                  # dormant: nothing recorded
        windows = []
        for n in (1, 2):
            asked = time.monotonic_ns()
            on = agent.switch("on", tmp_path / f"spool{n}")
            assert on["state"] == "on", on
            time.sleep(0.3)
            off = agent.switch("off")
            windows.append((asked, on["enabled_mono_ns"], off["disabled_mono_ns"],
                            time.monotonic_ns()))
            time.sleep(0.2)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    calls = json.loads(out.splitlines()[-1])
    for n, (asked, lo, hi, answered) in enumerate(windows, 1):
        (path,) = (tmp_path / f"spool{n}").glob("cupti-*.spool")
        spool = decode_spool(read_spool(path))
        rows = spool.shapes.sort("start_ns")
        spans = list(zip(rows["start_ns"], rows["end_ns"], strict=True))
        # every matmul call wholly inside the GPU window is recorded (its record inside the
        # call), and nothing from before the capture asked or after it was answered
        inside = [c for c in calls if lo <= c[0] and c[1] <= hi]
        assert len(inside) >= 10
        assert all(any(c0 <= s <= e <= c1 for s, e in spans) for c0, c1 in inside)
        assert asked <= spans[0][0] and spans[-1][1] <= answered
        assert rows["op_shapes"].unique().to_list() == ["[[8, 16], [16, 32]]"]
        assert spool.stats["op_shapes"]["scope"] == "entry"


def test_the_perfetto_export_shows_each_launch_with_its_shapes(tmp_path):
    """Each cuda_api slice of a --shapes capture carries its call's shapes (``debug.shapes``):
    the same multiset as the capture's calls with shapes, read from the file's own rows."""
    from collections import Counter

    from zym.analysis.export.check import check_trace
    from zym.analysis.export.perfetto import export_perfetto
    from zym.analysis.export.source import load_export_source

    cap = Path(__file__).parents[2] / "bench" / "shapes" / "results" / "h200" / "matmul-shapes.parquet"
    raw = pl.read_parquet(cap).filter(pl.col("record") == "call")
    out = tmp_path / "t.pftrace"
    export_perfetto(load_export_source(cap), out)
    trace = check_trace(out.read_bytes())
    got = Counter(s.args.get("shapes") for sl in trace.slices.values() for s in sl
                  if s.category == "cuda_api" and "shapes" in s.args)
    assert got == Counter(raw["op_shapes"].drop_nulls().to_list())
    assert sum(got.values()) == 270
