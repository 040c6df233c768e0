"""Where a launch-bound step's launches come from: what the step function called that
launched them (a per-item model call in a loop, a per-track update), with its share of the
step's launches, so that the fix can be aimed at that call (the sixth blind round's tracker:
one finding for two loops of small launches, a re-ID call per frame and an update per
track)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kineto_builder import KinetoBuilder

STEPS, EMBED, OWN, UPDATE = 5, 30, 6, 14   # launches a step: by embed, handle's own, update


def _trace(tmp_path: Path) -> Path:
    """Steps of ``handle``: ``EMBED`` launches under ``embed`` (a Python function it calls),
    ``UPDATE`` under ``update`` and ``OWN`` by ops it runs itself; 10 µs kernels after 30 µs
    launches (the CPU sets the pace)."""
    b = KinetoBuilder()
    with b.py("app.py(1): <module>"):
        for _ in range(STEPS):
            with b.py("app.py(20): handle"):
                for _ in range(OWN // 2):
                    with b.op("aten::mul"):
                        b.launch(gpu_us=10.0, cpu_us=30.0)
                with b.py("app.py(40): embed"):
                    for _ in range(EMBED):
                        with b.op("aten::linear"):
                            b.launch(gpu_us=10.0, cpu_us=30.0)
                with b.py("app.py(60): update"):
                    for _ in range(UPDATE):
                        with b.op("aten::add"):
                            b.launch(gpu_us=10.0, cpu_us=30.0)
                b.tick(2.0)   # (the next op starts after update returned)
                for _ in range(OWN - OWN // 2):
                    with b.op("aten::mul"):
                        b.launch(gpu_us=10.0, cpu_us=30.0)
            b.tick(10.0)
        b.launch("cudaDeviceSynchronize", kernel=None, cpu_us=5.0)
    return b.write(tmp_path / "launches.json")


def test_the_launch_bound_finding_says_where_the_launches_come_from(tmp_path):
    from zym.analysis import analyze
    from zym.rules import evaluate

    a = analyze(_trace(tmp_path))
    steps = a.relations.materialize("steps", {"launch_from", "launch_from_share",
                                              "launch_next", "launch_next_share",
                                              "launches"})
    total = EMBED + OWN + UPDATE
    assert steps["launches"].to_list() == [total] * steps.height
    assert set(steps["launch_from"].to_list()) == {"app.py:40 embed"}
    assert set(steps["launch_next"].to_list()) == {"app.py:60 update"}
    assert steps["launch_from_share"].to_list() == [EMBED / total] * steps.height
    assert steps["launch_next_share"].to_list() == [UPDATE / total] * steps.height
    [f] = [f for f in evaluate(a) if f.rule_id == "compute.launch-bound-step"]
    assert "came from app.py:40 embed (60.0% of them)" in " ".join(f.message.split())
    assert "Next: app.py:60 update (28.0%)" in " ".join(f.message.split())


def test_the_step_function_s_own_launches_are_named_as_its_own(tmp_path):
    from zym.analysis import analyze

    a = analyze(_trace(tmp_path))
    rel = a.relations
    calls = rel.calls_table().with_columns(rel.call_steps())
    per = rel._launch_from(calls, a.steps_in_window())
    # embed first; handle's own six ops are a source of their own, after update's 14
    assert per["launch_from"].to_list() == ["app.py:40 embed"] * STEPS
    own = OWN / (EMBED + OWN + UPDATE)
    assert own < per["launch_next_share"][0]


def test_a_library_wrapper_is_looked_through_to_the_user_s_function(tmp_path):
    """A step whose launches all go through a library decorator (``torch.no_grad``'s
    ``decorate_context``) to the user's ``generate``: the user's function is named."""
    from zym.analysis import analyze

    wrapper = ("/usr/lib/python3.11/site-packages/torch/utils/_contextlib.py(120): "
               "decorate_context")
    b = KinetoBuilder()
    with b.py("app.py(1): <module>"):
        for _ in range(STEPS):
            with b.py("app.py(20): handle"):
                with b.py(wrapper), b.py("app.py(80): generate"):
                    for _ in range(EMBED):
                        with b.op("aten::linear"):
                            b.launch(gpu_us=10.0, cpu_us=30.0)
                b.tick(2.0)
                with b.py(wrapper):
                    for _ in range(OWN):
                        with b.op("aten::mul"):
                            b.launch(gpu_us=10.0, cpu_us=30.0)
            b.tick(10.0)
        b.launch("cudaDeviceSynchronize", kernel=None, cpu_us=5.0)
    a = analyze(b.write(tmp_path / "wrapped.json"))
    rel = a.relations
    per = rel._launch_from(rel.calls_table().with_columns(rel.call_steps()),
                           a.steps_in_window())
    assert per["launch_from"].to_list() == ["app.py:80 generate"] * STEPS
    assert per["launch_from_share"].to_list() == [EMBED / (EMBED + OWN)] * STEPS
    # the wrapper with no user function under it: named as the library function it is
    assert {s.split(" ")[-1] for s in per["launch_next"].to_list()} == {"decorate_context"}


ROOT = Path(__file__).resolve().parents[2]
BLIND6 = ROOT / "bench/whatif/results/h100-blind6/kineto"


def _spans_of(raw, function: str):
    """The raw capture's spans whose own frame is ``function`` (a stack's leaf frame), as
    (start, end) arrays sorted by start."""
    import numpy as np
    import polars as pl

    frames = raw.filter((pl.col("record") == "frame") & (pl.col("name") == function))
    stacks = raw.filter((pl.col("record") == "stack")
                        & pl.col("frame_id").is_in(frames["frame_id"].implode()))
    spans = raw.filter((pl.col("record") == "span")
                       & pl.col("stack_id").is_in(stacks["stack_id"].implode())).sort("ts_ns")
    start = spans["ts_ns"].to_numpy()
    return start, start + spans["dur_ns"].to_numpy(), np


def test_cliptag_s_launches_come_from_its_per_frame_encoder_loop():
    """The sixth blind round's video tagger (a real H100 trace): the launch-bound finding names
    embed_frames, whose loop calls the image encoder once a frame; its share checked against
    the launches that fall inside embed_frames' spans by time (not by their stacks)."""
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    path = BLIND6 / "cliptag.parquet"
    raw = pl.read_parquet(path)
    a = analyze(path)
    steps = a.relations.materialize("steps", {"launch_from", "launch_from_share", "ts_ns",
                                              "end_ns", "launches"})
    assert set(steps["launch_from"].to_list()) == {"cliptag.py:180 embed_frames"}
    e0, e1, np = _spans_of(raw, "embed_frames")
    launches = raw.filter((pl.col("record") == "call") & (pl.col("kind") == "launch"))["ts_ns"]
    ts = launches.to_numpy()
    k = np.searchsorted(e0, ts, side="right") - 1
    inside = (k >= 0) & (ts < e1[np.maximum(k, 0)])
    for row in steps.iter_rows(named=True):
        mine = (ts >= row["ts_ns"]) & (ts < row["end_ns"])
        assert mine.sum() == row["launches"]
        assert abs(row["launch_from_share"] - (inside & mine).sum() / mine.sum()) < 1e-9
    [f] = [f for f in evaluate(a) if f.rule_id == "compute.launch-bound-step"]
    assert "came from cliptag.py:180 embed_frames" in " ".join(f.message.split())


def _loop_trace(tmp_path: Path, items: int, beside: int = 0) -> Path:
    """Steps of ``handle`` (``OWN`` launches of its own, then ``embed``) whose ``embed``
    calls ``encode`` once an item (``items`` a step, no CUDA call between two calls: a loop
    that stacks alone cannot split), 24 launches a call. ``beside``: another thread calls
    ``encode`` that many times during each step, down the same Python path, with no CUDA
    call."""
    b = KinetoBuilder()
    with b.py("app.py(1): <module>"):
        for _ in range(STEPS):
            if beside:
                main = (b.now, b.tid, b._py_stack)
                b.now, b.tid, b._py_stack = b.now + 2.0, 200, []
                with b.py("app.py(1): <module>"), b.py("app.py(20): handle"), \
                        b.py("app.py(40): embed"):
                    for _ in range(beside):
                        with b.py("app.py(70): encode"):
                            b.tick(1.0)
                b.now, b.tid, b._py_stack = main
            with b.py("app.py(20): handle"):
                for _ in range(OWN):   # the request's own ops (its input's upload)
                    with b.op("aten::copy_"):
                        b.launch(gpu_us=10.0, cpu_us=30.0)
                with b.py("app.py(40): embed"):
                    for _ in range(items):
                        with b.py("app.py(70): encode"):
                            for _ in range(24):
                                with b.op("aten::linear"):
                                    b.launch(gpu_us=10.0, cpu_us=30.0)
            b.tick(10.0)
        b.launch("cudaDeviceSynchronize", kernel=None, cpu_us=5.0)
    return b.write(tmp_path / f"loop{items}-{beside}.json")


def test_a_loop_over_items_is_told_by_its_calls_a_step(tmp_path):
    """embed calls encode 4 times a step: the steps name encode and its 4 calls, and the
    finding says so; called once a step, no count (not a loop); calls of the same function
    on another thread during the step are not the step's."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    for items, calls, beside in ((4, 4, 0), (1, None, 0), (4, 4, 3)):
        a = analyze(_loop_trace(tmp_path, items, beside))
        steps = a.relations.materialize("steps", {"launch_from", "launch_from_callee",
                                                  "launch_from_calls"})
        assert steps.height == STEPS
        assert set(steps["launch_from"].to_list()) == {"app.py:40 embed"}
        assert set(steps["launch_from_callee"].to_list()) == {"app.py:70 encode"}
        assert steps["launch_from_calls"].to_list() == [calls] * STEPS
        [f] = [f for f in evaluate(a) if f.rule_id == "compute.launch-bound-step"]
        said = "It called app.py:70 encode 4 times a step." in " ".join(f.message.split())
        assert said == (calls is not None)


def test_cliptag_s_encoder_is_called_once_a_frame_and_ctseg_s_unet_once_a_window():
    """The sixth blind round's traces: cliptag's embed_frames calls the image encoder once per
    frame (FRAMES in its source), ctseg's segment calls the U-Net once per sliding window
    (its outermost forward spans per request, read from the raw rows by time)."""
    import ast

    import polars as pl
    from zym.analysis import analyze

    tree = ast.parse((ROOT / "bench" / "whatif" / "workloads" / "cliptag.py").read_text())
    frames = next(int(ast.literal_eval(n.value.orelse if isinstance(n.value, ast.IfExp)
                                       else n.value))
                  for n in tree.body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", None) == "FRAMES")
    steps = analyze(BLIND6 / "cliptag.parquet").relations.materialize(
        "steps", {"launch_from_callee", "launch_from_calls"})
    assert set(steps["launch_from_callee"].to_list()) == {"cliptag.py:107 ImageEncoder.forward"}
    assert steps["launch_from_calls"].to_list() == [frames] * steps.height

    raw = pl.read_parquet(BLIND6 / "ctseg.parquet")
    f0, f1, np = _spans_of(raw, "forward")
    h0, h1, _ = _spans_of(raw, "handle")
    outer = f0 >= np.r_[0, np.maximum.accumulate(f1)[:-1]]     # not inside another forward
    windows = [int(((f0[outer] >= a) & (f0[outer] < b)).sum()) for a, b in zip(h0, h1)]
    steps = analyze(BLIND6 / "ctseg.parquet").relations.materialize(
        "steps", {"launch_from_callee", "launch_from_calls"})
    assert set(steps["launch_from_callee"].to_list()) == {"ctseg.py:108 UNet3d.forward"}
    assert steps["launch_from_calls"].to_list() == windows and min(windows) >= 3
