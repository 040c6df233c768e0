"""A function called once per item of a loop (``compute.per-item-calls``, ``saving: {model:
items}``): which function, how many calls a step, and what one call on all the items saves.

CaptureBuilder times (rules/testing.py): a call lasts its ``cpu_us`` and the next starts 1 us
after it; a span (``enclosing``) opens 0.5 us before what runs in it and closes 0.5 us after.
Here a launch is 5 us of CPU, its kernel 10 ns of GPU (1 us after the launch began): the
steps are CPU-bound, so the window is the CPU's time and every microsecond the fix takes off
the CPU comes off the window.

One item's call of ``embed`` (K launches, spans): it opens 0.5 us into its span, its K
launches take 6K - 1 us with the gaps between them, and it closes 0.5 + 1 us later. The
fix takes from each call after a step's first its launches' 5K us, the K - 1 us between them,
and the 0.5 us from its span's start to its first launch: the 1.5 us before the span (the
loop's) stays. Without spans (eBPF stacks), where the loop launches a kernel of its own
before each item (which splits the runs of calls into items), the CPU time before each
item's first call is not known to be the function's and stays: 6K - 1 us a call.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from zym.rules import load_packs
from zym.rules.engine import evaluate_rules
from zym.rules.testing import CaptureBuilder

RULE = next(r for p in load_packs(plugins=False) for r in p.rules
            if r.id == "compute.per-item-calls")
US = 1_000
SERVE = [("python", "main", "app.py", 1), ("python", "serve", "app.py", 10)]
STEP = SERVE + [("python", "handle", "app.py", 20)]   # Kineto: a frame's line is its first


def at(line: int, spans_style: bool) -> list:
    """``handle``'s frame at ``line``: with eBPF stacks each frame has its executing line."""
    return STEP if spans_style else SERVE + [("python", "handle", "app.py", line)]


EMBED = ("python", "embed", "model.py", 5)
REQUESTS, ITEMS, K = 3, 8, 20


def one_call(b: CaptureBuilder, frames: list, gpu_us: float = 0.01, grid: int | None = None
             ) -> None:
    """One call of the function whose frame ends ``frames`` (its span): K launches of a
    GEMM kernel from it."""
    with b.enclosing(frames):
        for _ in range(K):
            b.kernel(frames + [("torch_op", "aten::linear")], "gemm", gpu_us=gpu_us, grid=grid)


def service(*, spans_style: bool = True, separator: bool = False, items: int = ITEMS,
            gpu_us: float = 0.01, batched: bool = False) -> CaptureBuilder:
    """REQUESTS calls of ``handle``: an upload of the request's input (a pinned copy, not
    waiting: 4 + 1 us), ``embed`` called on ``items`` items (K launches each; ``separator``:
    the loop launches a kernel of its own before each item), one launch of its own and a value
    read back (a copy and a sync: 4 + 1 + 2 + 1 us). ``batched``: one call of ``embed`` whose
    K launches do every item's work (each kernel ``items`` times as long): what the fix makes
    of the loop."""
    b = CaptureBuilder()
    model = at(23, spans_style) + [EMBED]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(at(21, spans_style), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(1 if batched else items):
                if separator:
                    b.kernel(at(22, spans_style) + [("torch_op", "aten::contiguous")], "copy_",
                             gpu_us=gpu_us)
                one_call(b, model, gpu_us * (items if batched else 1))
            b.kernel(at(24, spans_style) + [("torch_op", "aten::cat")], "cat", gpu_us=gpu_us)
            b.scalar_readback(at(25, spans_style))   # the request's answer read back
    return b


def run(b: CaptureBuilder, spans: bool = True):
    analysis = b.analysis(spans=spans)
    return analysis, evaluate_rules(analysis, [RULE])


def test_the_function_and_its_calls_per_step_from_the_spans():
    analysis, [f] = run(service())
    table = analysis.relations.item_calls().table
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert table["item_launches"].to_list() == [ITEMS * K] * REQUESTS
    assert set(table["item_function"]) == {"model.py:5 embed"}
    assert f.evidence["calls_per_step"] == ITEMS and f.evidence["launches_per_call"] == K
    assert f.evidence["count"] == REQUESTS and "model.py:5 embed" in f.message


def test_the_saving_is_the_later_calls_cpu_time():
    analysis, [f] = run(service())
    per_call_us = 6 * K - 0.5         # launches, the gaps between them, the span's opening
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * per_call_us * US, rel=1e-3)
    # each step's first call stays: none of its calls is edited
    items = analysis.relations.item_calls()
    edited = set(f.edit.cost_calls.tolist())
    firsts = {int(items.call_idx[items.step == s].min()) for s in range(REQUESTS)}
    assert not edited & firsts and len(edited) == REQUESTS * (ITEMS - 1) * K


def test_the_saving_matches_the_batched_service_when_cpu_bound():
    """The loop against its batched form (one call, each kernel the items' work), captured
    alike: the window the fix's replay gives is the batched capture's window (within the
    1.5 us a call the fix leaves before each later call: the loop's own time)."""
    loop, [f] = run(service())
    batched, _ = run(service(batched=True))
    window = loop.facts.window_ns - f.saving_ns
    kept = REQUESTS * (ITEMS - 1) * 1.5 * US
    assert window == pytest.approx(batched.facts.window_ns + kept, rel=1e-3)


def test_without_spans_the_loops_own_launch_splits_the_items():
    """The loop's own launch (``aten::contiguous`` at handle's line 22, once an item) splits
    the runs of calls into items; an op the step function runs itself is no item function."""
    analysis, [f] = run(service(spans_style=False, separator=True), spans=False)
    table = analysis.relations.item_calls().table
    assert set(table["item_function"]) == {"model.py:5 embed"}
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 1) * US, rel=1e-3)


def test_without_spans_back_to_back_calls_at_one_line_are_one_run():
    """eBPF stacks: calls of the same function from the same line with no CUDA call between
    them, all their CUDA calls from one line of it, are one run (zym.analysis.instances):
    the items are not told apart, no finding."""
    analysis, findings = run(service(spans_style=False), spans=False)
    assert analysis.relations.item_calls().table.height == 0 and findings == []


def ebpf_items(stop_check: bool) -> CaptureBuilder:
    """eBPF stacks, no spans: ``embed`` called back to back on ITEMS items (a list
    comprehension at handle's line 23), its K launches from its lines 5, 6, ... (the line
    goes back to 5 as each call starts); ``stop_check``: ``embed`` is instead a loop inside
    one function (lines 5, 6, ... each iteration) that reads a scalar back at its own line
    4 after each iteration (a generation loop's stop check)."""
    b = CaptureBuilder()
    caller = at(23, False)
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(at(21, False), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(ITEMS):
                for k in range(K):
                    frame = [("python", "embed", "model.py", 5 + k)]
                    b.kernel(caller + frame + [("torch_op", "aten::linear")], "gemm",
                             gpu_us=0.01)
                if stop_check:
                    b.scalar_readback(caller + [("python", "embed", "model.py", 4 + K + 1)])
            b.scalar_readback(at(25, False))
    return b


def test_without_spans_a_calls_line_going_back_starts_the_next():
    analysis, [f] = run(ebpf_items(stop_check=False), spans=False)
    assert analysis.relations.item_calls().table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 1) * US, rel=1e-3)


def test_without_spans_a_loop_reading_a_scalar_in_its_own_code_is_not_items():
    analysis, findings = run(ebpf_items(stop_check=True), spans=False)
    assert analysis.relations.item_calls().table.height == 0 and findings == []



AFFINE = ("python", "affine_grid", "torch/nn/functional.py", 5245)
GRID = ("python", "grid_sample", "torch/nn/functional.py", 5120)
EMBEDDER = [("python", "Module._call_impl", "torch/nn/modules/module.py", 1783),
            ("python", "Embedder.forward", "model.py", 60)]


def loop_in_embed(after: bool) -> CaptureBuilder:
    """eBPF stacks: ``embed`` called once a step (handle's line 23) loops over ITEMS faces
    itself (the twelfth blind round's facegate): each iteration uploads the face's
    parameters (its line 10: a pinned copy, not waiting, 4 + 1 us), then calls F.affine_grid
    (line 11: 2 launches) and F.grid_sample (line 12: 1 launch), 5 + 1 us a launch; every GPU
    operation 10 ns (the CPU sets the pace, as in the other cases here). ``after``:
    after the loop, ``torch.cat`` of the crops (line 13: 1 launch) and the embedder on all of
    them (line 14: K launches through torch's module frame)."""
    b = CaptureBuilder()
    embed = at(23, False)
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(at(21, False), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(ITEMS):
                b.copy(embed + [("python", "embed", "model.py", 10)], "HtoD", nbytes=24,
                       host_mem="pinned", gpu_us=0.01, sync=False)
                for kernel in ("affine", "affine"):
                    b.kernel(embed + [("python", "embed", "model.py", 11), AFFINE,
                                      ("torch_op", f"aten::{kernel}")], kernel, gpu_us=0.01)
                b.kernel(embed + [("python", "embed", "model.py", 12), GRID,
                                  ("torch_op", "aten::grid_sampler_2d")], "grid", gpu_us=0.01)
            if after:
                b.kernel(embed + [("python", "embed", "model.py", 13), ("torch_op", "aten::cat")],
                         "cat", gpu_us=0.01)
                for _ in range(K):
                    b.kernel(embed + [("python", "embed", "model.py", 14), *EMBEDDER,
                                      ("torch_op", "aten::linear")], "gemm", gpu_us=0.01)
            b.scalar_readback(at(25, False))
    return b


def test_without_spans_a_loop_inside_one_call_is_named_as_the_loop():
    """The line of ``embed`` goes back to its first (10) at each face, as a new call's would,
    but the last part then runs lines 13 and 14, which no other part has: one call of
    ``embed`` looping over its faces, not ITEMS calls of it. The finding names the loop by
    its lines, counts its iterations, and leaves the code after it out of every item: the
    saving is each later iteration's whole time, its copy's 4 us and 3 launches' 15 us with
    the 1 us after each of the 4 calls, 23 us (the loop's own work between two iterations is
    the function's: one pass on all the items does it once). Before, the finding said
    "called model.py:14 embed 8 times" and the last item took the code after the loop along:
    its 1 + K launches' CPU time was saved too."""
    analysis, [f] = run(loop_in_embed(after=True), spans=False)
    items = analysis.relations.item_calls()
    assert set(items.table["item_function"]) == {"the loop at model.py:10-12 in embed"}
    assert items.table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert items.table["item_loop"].all()
    assert f.evidence["launches_per_call"] == 3
    assert "ran the loop at model.py:10-12 in embed 8 times each" in " ".join(f.message.split())
    # the items' CUDA calls are the iterations' 4 each, none of the 1 + K after the loop
    assert len(items.call_idx) == REQUESTS * ITEMS * 4
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * 23 * US, rel=1e-3)
    assert "its first iteration stays" in f.edit.describe


def test_without_spans_a_loop_with_nothing_after_it_is_calls_of_the_function():
    """Without code after the loop, a loop inside one call and calls back to back through
    the same lines are the same stacks: the parts are taken for calls of ``embed``, as before
    (the time before each call's first CUDA call, 1 us, stays: 22 us a later call)."""
    analysis, [f] = run(loop_in_embed(after=False), spans=False)
    items = analysis.relations.item_calls()
    assert set(items.table["item_function"]) == {"model.py:11 embed"}
    assert not items.table["item_loop"].any()
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * 22 * US, rel=1e-3)

# torch's frames below one line of a user function: a stage's convolution and activation
# (two torch modules' calls) and a pooling call between two stages
CONV = [("python", "Module._call_impl", "torch/nn/modules/module.py", 1783),
        ("python", "Conv2d.forward", "torch/nn/modules/conv.py", 554)]
ACT = [("python", "Module._call_impl", "torch/nn/modules/module.py", 1783),
       ("python", "ReLU.forward", "torch/nn/modules/activation.py", 144)]
POOL = [("python", "boolean_dispatch.<locals>.fn", "torch/_jit_internal.py", 636)]
STAGES = [(CONV, "conv"), (ACT, "relu"), (POOL, "max_pool"), (CONV, "conv"), (ACT, "relu")]


def one_line_items(outer: bool = False, helper: bool = False) -> CaptureBuilder:
    """eBPF stacks: ``encode`` called on ITEMS items back to back from one line of the step
    (a comprehension: changedet's tiles), every CUDA call of it from its one line 7 (``x =
    stage(pool(x) if i else x)`` over two stages), through torch's frames: a call is the
    5 launches of STAGES, and neither the caller's line nor ``encode``'s goes back between
    two calls. ``outer``: the comprehension is in ``encode_all``, called once a step, whose
    line 41 calls ``encode`` (a user function looping over its items' calls of another).
    ``helper``: line 7 first calls the user's ``prep`` (one launch from its line 3: ``x =
    stage(prep(x))``), then the stages."""
    b = CaptureBuilder()
    caller = at(23, False) + ([("python", "encode_all", "model.py", 41)] if outer else [])
    encode = caller + [("python", "encode", "model.py", 7)]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(at(21, False), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(ITEMS):
                if helper:
                    b.kernel(encode + [("python", "prep", "model.py", 3),
                                       ("torch_op", "aten::mul")], "mul", gpu_us=0.01)
                for frames, kernel in STAGES:
                    b.kernel(encode + frames + [("torch_op", f"aten::{kernel}")], kernel,
                             gpu_us=0.01)
            b.scalar_readback(at(25, False))
    return b


def test_without_spans_calls_repeating_one_sequence_of_stacks_are_the_items():
    """One run of ITEMS x 5 CUDA calls through ``encode``, the same 5 stacks repeated: split
    into its repetitions, ``encode`` is called ITEMS times a step, 5 launches a call (before,
    one call of 40 launches, and no finding). The saving: each later call's 5 launches and
    the 1 us gaps between them, 6 x 5 - 1 us (the builder's times, as above)."""
    analysis, [f] = run(one_line_items(), spans=False)
    table = analysis.relations.item_calls().table
    assert set(table["item_function"]) == {"model.py:7 encode"}
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert f.evidence["launches_per_call"] == len(STAGES)
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * len(STAGES) - 1) * US,
                                        rel=1e-3)


def test_without_spans_the_repeating_calls_are_the_innermost_user_functions():
    """The same run also repeats under ``encode_all`` (called once a step): the calls of
    ``encode``, the innermost user function, are the items, not ``encode_all``'s one call."""
    analysis, [f] = run(one_line_items(outer=True), spans=False)
    table = analysis.relations.item_calls().table
    assert set(table["item_function"]) == {"model.py:7 encode"}
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert "model.py:7 encode" in f.message


def test_without_spans_a_torch_models_identical_layers_are_not_items():
    """The step calls torch's ``nn.TransformerEncoder`` once: its four identical layers run
    one after the other inside torch's frames, the same stacks each (the NVTX workload's
    model): the run of the module wrapper's call repeats four times, but a frame not the
    user's own is not split: no items (without that condition, a finding of
    "Module._wrapped_call_impl called 4 times each")."""
    wrap = ("python", "Module._wrapped_call_impl", "torch/nn/modules/module.py", 1779)
    impl = ("python", "Module._call_impl", "torch/nn/modules/module.py", 1790)
    b = CaptureBuilder()
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(at(21, False), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(4):
                for line, kernel in ((905, "gemm"), (906, "softmax"), (912, "gemm")):
                    b.kernel([*at(23, False), wrap, impl,
                              ("python", "TransformerEncoder.forward",
                               "torch/nn/modules/transformer.py", 517), wrap, impl,
                              ("python", "TransformerEncoderLayer.forward",
                               "torch/nn/modules/transformer.py", line),
                              ("torch_op", f"aten::{kernel}")], kernel, gpu_us=0.01)
            b.scalar_readback(at(25, False))
    analysis, findings = run(b, spans=False)
    assert analysis.relations.item_calls().table.height == 0 and findings == []


def test_without_spans_a_function_calling_a_helper_and_torch_is_the_item_function():
    """``encode`` calling the user's ``prep`` and torch's modules from its one line: its calls
    are the items (6 launches each), not ``prep``'s (one each)."""
    analysis, [f] = run(one_line_items(helper=True), spans=False)
    table = analysis.relations.item_calls().table
    assert set(table["item_function"]) == {"model.py:7 encode"}
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert f.evidence["launches_per_call"] == len(STAGES) + 1


def test_with_spans_a_function_reading_scalars_in_its_own_code_is_items():
    """With spans each call of the function is known (no loop inside it is taken for calls):
    a per-item decode that reads its results back with .item() in its own code (kwspot's
    decode_clip: its maxima and peaks, keyword by keyword) is called once per item. The fix
    takes from each later call its launches and reads as well: the copy (4 us) and the sync
    (2 us) with the 1 us after each, 8 us on top of the launches' 6K - 0.5 (the GPU's kernels
    are done by each read: no wait to take)."""
    b = CaptureBuilder()
    model = STEP + [EMBED]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(ITEMS):
                with b.enclosing(model):
                    for _ in range(K):
                        b.kernel(model + [("torch_op", "aten::linear")], "gemm", gpu_us=0.01)
                    b.scalar_readback(model)
    [f] = run(b)[1]
    assert f.evidence["calls_per_step"] == ITEMS
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K + 7.5) * US, rel=1e-3)


def test_silent_below_four_calls_a_step():
    analysis, findings = run(service(items=3))
    assert analysis.relations.item_calls().table.height == 0 and findings == []


def test_gpu_bound_items_save_little():
    """Kernels of 200 us: the GPU sets the pace, and the items' kernels stay (back to back,
    as a batch's would run): the fix takes off at most the gaps between them."""
    analysis, [f] = run(service(gpu_us=200))
    later = REQUESTS * (ITEMS - 1) * K  # the kernels of the calls after each step's first
    assert 0 <= f.saving_ns <= later * 1.0 * US + 0.01 * analysis.facts.window_ns
    assert np.all(f.edit.gapless_ops >= 0) and len(f.edit.gapless_ops) == later


# -- several loops over items in one step ------------------------------------------------

SCORE = ("python", "score", "model.py", 40)
ITEMS2, K2 = 6, 12


REFERENCE = ("python", "reference", "app.py", 30)


def two_loops(one_place: bool = False) -> CaptureBuilder:
    """REQUESTS calls of ``handle``: ``embed`` on ITEMS items (K launches each), then ``score``
    on ITEMS2 items (K2 launches each), then a value read back; ``one_place``: instead
    ``reference``, called once, runs ``embed`` on ITEMS2 items (the same function run once
    per item from two places: the reference scene's tiles and the new scene's)."""
    b = CaptureBuilder()
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(ITEMS):
                one_call(b, STEP + [EMBED])
            if one_place:
                with b.enclosing(STEP + [REFERENCE]):
                    for _ in range(ITEMS2):
                        one_call(b, STEP + [REFERENCE, EMBED])
            else:
                for _ in range(ITEMS2):
                    with b.enclosing(STEP + [SCORE]):
                        for _ in range(K2):
                            b.kernel(STEP + [SCORE, ("torch_op", "aten::linear")], "gemm",
                                     gpu_us=0.01)
            b.scalar_readback(STEP)
    return b


def test_each_loop_over_items_in_a_step_is_its_own_finding():
    """Two functions a step calls once per item: two findings, each saving its later calls'
    CPU time (as the one loop does: 6K - 0.5 us a call, K its launches), and both together
    their sum (the service is CPU-bound: every microsecond off the CPU is off the window)."""
    analysis, found = run(two_loops())
    by = {f.evidence["item_function"]: f for f in found}
    assert set(by) == {"model.py:5 embed", "model.py:40 score"}
    assert by["model.py:5 embed"].evidence["calls_per_step"] == ITEMS
    assert by["model.py:40 score"].evidence["calls_per_step"] == ITEMS2
    embed = REQUESTS * (ITEMS - 1) * (6 * K - 0.5) * US
    score = REQUESTS * (ITEMS2 - 1) * (6 * K2 - 0.5) * US
    assert by["model.py:5 embed"].saving_ns == pytest.approx(embed, rel=1e-3)
    assert by["model.py:40 score"].saving_ns == pytest.approx(score, rel=1e-3)
    from zym.rules.whatif import what_if

    both = what_if(analysis, found, ["compute.per-item-calls"])["saving_ns"]
    assert both == pytest.approx(embed + score, rel=1e-3)


def test_one_function_once_per_item_from_two_places_is_one_finding():
    """``embed`` once per item from handle (ITEMS calls) and from ``reference`` (ITEMS2): one
    finding of ITEMS + ITEMS2 calls a step, whose fix keeps one call from each place (one
    batch each) and takes the CPU time of the others."""
    analysis, [f] = run(two_loops(one_place=True))
    assert f.evidence["calls_per_step"] == ITEMS + ITEMS2
    assert f.saving_ns == pytest.approx(
        REQUESTS * (ITEMS - 1 + ITEMS2 - 1) * (6 * K - 0.5) * US, rel=1e-3)
    assert "its first from each of the 2 places that call it" in f.edit.describe
    items = analysis.relations.item_calls()
    assert sorted(items.table["item_calls"].to_list()) == sorted([ITEMS, ITEMS2] * REQUESTS)


def test_a_loop_beside_a_function_launching_more_is_still_found():
    """Python 3.12 inlines list comprehensions: ``[self.score(e) for e in embs]`` calls
    ``score`` from the step function itself, beside ``cluster``, called once, which launches
    more kernels (its per-item ops, one after the other, with a value read back each: the
    sequential clustering). The search looks past ``cluster`` at that level and finds
    ``score`` (the tenth blind round's spkdiar and docparse: their per-segment and per-line
    helpers were missed)."""
    cluster = ("python", "cluster", "app.py", 70)
    b = CaptureBuilder()
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            for _ in range(ITEMS):
                one_call(b, STEP + [EMBED])
            with b.enclosing(STEP + [cluster]):
                for _ in range(ITEMS):
                    for _ in range(4):
                        b.kernel(STEP + [cluster, ("torch_op", "aten::mm")], "mm", gpu_us=0.01)
                    b.scalar_readback(STEP + [cluster])
            for _ in range(ITEMS):
                with b.enclosing(STEP + [SCORE]):
                    for _ in range(2):
                        b.kernel(STEP + [SCORE, ("torch_op", "aten::mv")], "mv", gpu_us=0.01)
            b.scalar_readback(STEP)
    calls = {f.evidence["item_function"]: f.evidence["calls_per_step"] for f in run(b)[1]}
    assert calls == {"model.py:5 embed": ITEMS, "model.py:40 score": ITEMS}


def test_a_function_whose_loop_needs_its_outputs_is_no_item_function_elsewhere_in_the_step():
    """A recurrent model run over the observed frames from handle (ITEMS calls, nothing read
    back between them: its state carried), then once per forecast lead in ``forecast`` with a
    scalar read after each: the second loop needs each call's output, and so the first, of
    the same function, is no loop of items either (the ninth blind round's nowcast: its
    spin-up was taken for items once several functions a step were looked for)."""
    forecast = ("python", "forecast", "app.py", 60)

    def service(first: tuple) -> CaptureBuilder:
        b = CaptureBuilder()
        for _ in range(REQUESTS):
            with b.enclosing(STEP):
                for _ in range(ITEMS):
                    one_call(b, STEP + [first])
                with b.enclosing(STEP + [forecast]):
                    for _ in range(ITEMS):
                        one_call(b, STEP + [forecast, EMBED])
                        b.scalar_readback(STEP + [forecast])
        return b

    analysis, findings = run(service(EMBED))
    assert analysis.relations.item_calls().table.height == 0 and findings == []
    # the same with another function in the first loop: its calls are items
    [f] = run(service(SCORE))[1]
    assert f.evidence["item_function"] == "model.py:40 score"


def loop_with_ops(every: int = 1, upload: bool = False) -> CaptureBuilder:
    """``for x in items: y = embed(0.9 * x + 0.1 * z)``: before each call of ``embed``
    (every ``every``-th), the step function's own two ops (``aten::mul``, ``aten::add``: one
    launch each) in the loop's body; ``upload``: and before them the item's upload (a pinned
    copy, 4 us of CPU, next to no GPU time), the same op (``aten::to``) as the step's own upload before the loop."""
    b = CaptureBuilder()
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for i in range(ITEMS):
                if upload:
                    b.copy(STEP, "HtoD", nbytes=1024, host_mem="pinned", sync=False,
                           gpu_us=0.01)
                if i % every == 0:
                    for op in ("aten::mul", "aten::add"):
                        b.kernel(STEP + [("torch_op", op)], op[6:], gpu_us=0.01)
                one_call(b, STEP + [EMBED])
            b.scalar_readback(STEP)
    return b


def test_the_loops_own_ops_before_each_call_are_part_of_its_item():
    """The loop body's ops before each call are done once by a batched call too: they join
    the item (2 more launches a call), and the fix takes from each later item their CPU
    time as well: its two launches (5 us each) and the 1 us after each (the builder's), on
    top of the call's 6K - 0.5 us (the 1 us before the first op, the loop's, stays)."""
    analysis, [f] = run(loop_with_ops())
    table = analysis.relations.item_calls().table
    assert set(table["item_function"]) == {"model.py:5 embed"}
    assert f.evidence["launches_per_call"] == K + 2
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 0.5 + 12) * US,
                                        rel=1e-3)


def test_the_items_uploads_are_part_of_them_not_the_steps_own():
    """An upload before each item's ops joins the item too (4 us of CPU and the 1 us after it
    a later item: 5 us more than the ops' 12), not the step's own upload before the loop (the
    same op, before the first item's): each step's first call keeps both."""
    analysis, [f] = run(loop_with_ops(upload=True))
    assert f.evidence["launches_per_call"] == K + 2      # (copies are no launches)
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 0.5 + 17) * US,
                                        rel=1e-3)
    items = analysis.relations.item_calls()
    copies = analysis.facts.calls.filter(pl.col("kind") == "copy")["call_idx"].to_numpy()
    # per step: each item's upload is a member, the step's own (its first copy) is not
    assert np.isin(copies, items.call_idx).sum() == REQUESTS * ITEMS


def test_ops_not_once_before_each_call_stay_the_loops():
    """The same ops before every other call only: not the item's (the finding prices the
    calls alone, as without them)."""
    [f] = run(loop_with_ops(every=2))[1]
    assert f.evidence["launches_per_call"] == K
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 0.5) * US, rel=2e-3)


# -- a loop in the user's code over a library's functions --------------------------------

AFFINE = ("python", "affine_grid", "torch/nn/functional.py", 5245)
SAMPLE = ("python", "grid_sample", "torch/nn/functional.py", 5085)


def library_loop(after_op: bool = False, sample: bool = True) -> CaptureBuilder:
    """``embed`` (the user's, called once a step) loops over the items calling a library's
    Python functions: ``F.affine_grid`` (K launches, its span) and after it ``F.grid_sample``
    (one launch, its span); ``after_op``: then one op of ``embed``'s own (``aten::add``, one
    launch) after each; facegate's crops on torch.profiler's trace."""
    b = CaptureBuilder()
    caller = STEP + [EMBED]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            with b.enclosing(caller):
                for _ in range(ITEMS):
                    one_call(b, caller + [AFFINE])
                    if sample:
                        with b.enclosing(caller + [SAMPLE]):
                            b.kernel(caller + [SAMPLE, ("torch_op", "aten::grid_sampler")],
                                     "grid_sampler", gpu_us=0.01)
                    if after_op:
                        b.kernel(caller + [("torch_op", "aten::add")], "add", gpu_us=0.01)
            b.scalar_readback(STEP)
    return b


def test_a_library_function_called_per_item_from_the_users_loop_is_the_item_function():
    """Below ``embed``, called once, the library's ``affine_grid`` is called once per item:
    the item function, named with the user function that calls it; ``grid_sample``, called
    after each, is no item of its own but part of each item (its launch: K + 1 a call). The
    fix takes from each later item the ``affine_grid`` call's 6K - 0.5 us (as ``embed``'s
    own calls in the tests above) and ``grid_sample``'s launch (5 us) with the 2 us before
    it (the builder's 1 us after ``affine_grid``'s last launch, its span's closing 0.5 us,
    ``grid_sample``'s span's opening 0.5 us)."""
    analysis, [f] = run(library_loop())
    table = analysis.relations.item_calls().table
    assert set(table["item_function"]) == {
        "torch/nn/functional.py:5245 affine_grid (from model.py:5 embed)"}
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert f.evidence["launches_per_call"] == K + 1
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 0.5 + 7) * US,
                                        rel=1e-3)


def test_the_callers_own_op_after_each_call_is_part_of_its_item():
    """An op ``embed`` runs itself after each item's library calls joins that item too (one
    launch more a call), where nothing of it comes before the first: 6.5 us more a later
    item (its launch, the 1 us after ``grid_sample``'s launch and that span's closing
    0.5 us)."""
    [f] = run(library_loop(after_op=True))[1]
    assert f.evidence["launches_per_call"] == K + 2
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * (6 * K - 0.5 + 7 + 6.5) * US,
                                        rel=1e-3)
    # without grid_sample, the op alone after each call joins the same way
    [f] = run(library_loop(after_op=True, sample=False))[1]
    assert f.evidence["launches_per_call"] == K + 1


def test_a_loop_over_a_models_stages_through_torchs_module_calls_is_not_items():
    """``for stage in self.enc: x = stage(x)`` in a method of the model that is not its
    forward (changedet's ``SiamDiff.encode``), each stage a library module (``nn.Sequential``
    of torch's layers, no user code below it): one call per layer, each its own weights, not
    items; a library function's loop is (the test above), a module's call is not."""
    b = CaptureBuilder()
    encode = STEP + [("python", "encode", "model.py", 160)]
    stage = [("python", "nn.Module: Sequential", None, None),
             ("python", "_call_impl", "torch/nn/modules/module.py", 1783),
             ("python", "forward", "torch/nn/modules/container.py", 240)]
    for _ in range(REQUESTS):
        with b.enclosing(STEP), b.enclosing(encode):
            for _ in range(ITEMS):
                with b.enclosing(encode + stage[:1]):
                    b.kernel(encode + stage + [("torch_op", "aten::conv2d")], "conv",
                             gpu_us=0.01)
                    b.kernel(encode + stage + [("torch_op", "aten::relu")], "relu",
                             gpu_us=0.01)
            b.scalar_readback(STEP)
    analysis, findings = run(b)
    assert analysis.relations.item_calls().table.height == 0 and findings == []


# -- what is not a loop over items ---------------------------------------------------------

MODULE = [("python", "nn.Module: Model", None, None),
          ("python", "_call_impl", "torch/nn/modules/module.py", 1783)]
BLOCK = [("python", "nn.Module: Block", None, None),
         ("python", "_call_impl", "torch/nn/modules/module.py", 1783),
         ("python", "forward", "model.py", 30)]


def test_a_models_layers_are_not_items():
    """``for block in self.blocks: x = block(x)`` inside the model's forward: each call is
    another layer (its own weights), run on the last one's output."""
    b = CaptureBuilder()
    model = STEP + MODULE + [("python", "forward", "model.py", 50)]
    for _ in range(REQUESTS):
        with b.enclosing(STEP), b.enclosing(model):
            for _ in range(ITEMS):
                one_call(b, model + BLOCK)
            b.scalar_readback(STEP)
    analysis, findings = run(b)
    assert analysis.relations.item_calls().table.height == 0 and findings == []


def test_a_models_layers_are_not_items_with_qualified_names():
    """The same from eBPF stacks (Python 3.11+): no ``nn.Module`` spans, and frames named by
    their code objects' qualified names (``Module._call_impl``, ``Block.forward``): the four
    residual blocks of ecgtriage's rhythm net were once taken for items (a finding of 0.95 ms
    a step on the twelfth blind round's zym capture). Each block launches from two of its
    lines, so that its line going back tells one block's call from the next; the model
    itself, called once per item by the step, still is an item function."""
    impl = ("python", "Module._call_impl", "torch/nn/modules/module.py", 1783)

    def requests(layers: bool) -> CaptureBuilder:
        b = CaptureBuilder()
        for _ in range(REQUESTS):
            with b.enclosing(STEP):
                b.copy(at(21, False), "HtoD", nbytes=4096, host_mem="pinned", sync=False)
                for _ in range(1 if layers else ITEMS):
                    for _ in range(ITEMS if layers else 1):
                        for line in (30, 32):
                            frames = [*at(23, False), impl, ("python", "Model.forward",
                                                             "model.py", 52)]
                            if layers:
                                frames += [impl, ("python", "Block.forward", "model.py", line)]
                            else:
                                frames[-1] = ("python", "Model.forward", "model.py", line)
                            b.kernel(frames + [("torch_op", "aten::linear")], "gemm",
                                     gpu_us=0.01)
                b.kernel(at(24, False) + [("torch_op", "aten::cat")], "cat")
                b.scalar_readback(at(25, False))
        return b

    analysis, findings = run(requests(layers=True), spans=False)
    assert analysis.relations.item_calls().table.height == 0 and findings == []
    analysis, [f] = run(requests(layers=False), spans=False)
    assert f.evidence["calls_per_step"] == ITEMS


def generation(b: CaptureBuilder, read: str, upload: bool = False) -> None:
    """A loop calling ``embed`` ITEMS times a request; between two calls it reads back
    (``read``): ``item`` a scalar (a stop check), ``tokens`` a device-to-host copy of 512
    bytes (a step's tokens); ``upload``: and uploads the next call's input."""
    model = STEP + [EMBED]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            for _ in range(ITEMS):
                if upload:
                    b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
                one_call(b, model)
                if read == "item":
                    b.scalar_readback(STEP)
                else:
                    b.copy(STEP, "DtoH", nbytes=512)


def test_a_loop_that_reads_a_scalar_between_its_calls_is_not_items():
    b = CaptureBuilder()
    generation(b, "item")
    analysis, findings = run(b)
    assert analysis.relations.item_calls().table.height == 0 and findings == []


def test_a_loop_that_reads_back_and_uploads_nothing_is_not_items():
    b = CaptureBuilder()
    generation(b, "tokens")
    assert run(b)[1] == []


def test_a_loop_that_uploads_each_input_and_reads_each_result_is_items():
    """Each item's input uploaded and its result read back (an alert's copies scored, its
    scores read): the reads are results, the next call's input comes from the host."""
    b = CaptureBuilder()
    generation(b, "tokens", upload=True)
    [f] = run(b)[1]
    assert f.evidence["calls_per_step"] == ITEMS


# -- services measured on an H100 (bench/whatif): the calls counted from the raw spans ----

RESULTS = Path(__file__).resolve().parents[1].parent / "bench/whatif/results"
# (trace, step function, item function (file, def line), its caller, items per request as
# the workload's code makes them: clips, people x 2, alerts, frames, photos)
SERVICES = [
    ("h100-blind8/kineto/kwspot.parquet", "handle", ("kwspot.py", 203), "handle"),
    ("h100-blind8/kineto/kwspot.parquet", "handle", ("kwspot.py", 264), "handle"),
    ("h100-blind7/kineto/posekpt.parquet", "handle", ("posekpt.py", 275), "heatmaps"),
    ("h100-blind7/kineto/posekpt.parquet", "handle", ("posekpt.py", 321), "heatmaps"),
    ("h100-blind7/kineto/fraudscore.parquet", "handle", ("fraudscore.py", 237), "explain"),
    ("h100-blind6/kineto/cliptag.parquet", "handle", ("cliptag.py", 107), "embed_frames"),
    ("h100-blind5/kineto/shelfscan.parquet", "handle", ("shelfscan.py", 114), "handle"),
    ("h100-blind5/kineto/shelfscan.parquet", "handle", ("shelfscan.py", 182), "handle"),
]


def raw_calls_per_step(path: Path, step_fn: str, item: tuple[str, int], caller: str
                       ) -> list[int]:
    """Per call of ``step_fn`` (its spans, in time order), the spans of ``item`` (a function's
    frame: file, line) made from a call of ``caller`` inside it: from the file's raw rows
    (spans, stacks, frames), not through the analysis."""
    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "parent_id",
                                         "name", "file", "line", "ts_ns", "dur_ns"])
    frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name", "file", "line")
    stacks = (raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id", "parent_id")
              .join(frames, on="frame_id"))
    parent = dict(zip(stacks["stack_id"].to_list(), stacks["parent_id"].to_list()))
    name = dict(zip(stacks["stack_id"].to_list(), stacks["name"].to_list()))
    spans = raw.filter(pl.col("record") == "span").select("stack_id", "ts_ns", "dur_ns").join(
        stacks, on="stack_id")
    steps = spans.filter(pl.col("name") == step_fn).sort("ts_ns")
    items = spans.filter((pl.col("file") == item[0]) & (pl.col("line") == item[1]))

    def from_caller(node: int) -> bool:
        for _ in range(4):           # forward <- _call_impl <- nn.Module: X <- the caller
            node = parent.get(node)
            if node is None:
                return False
            if name[node] == caller:
                return True
        return False

    ts = np.array([t for t, s in zip(items["ts_ns"], items["stack_id"]) if from_caller(s)])
    return [int(((ts >= a) & (ts < a + d)).sum())
            for a, d in zip(steps["ts_ns"], steps["dur_ns"])]


@pytest.mark.parametrize("trace,step_fn,item,caller", SERVICES,
                         ids=[s[0].split("/")[-1].split(".")[0] for s in SERVICES])
def test_each_steps_calls_are_the_raw_spans(trace, step_fn, item, caller):
    from zym.analysis import analyze

    path = RESULTS / trace
    analysis = analyze(path, None, "steady")
    table = analysis.relations.item_calls().table
    where = table["item_function"].str.split(" ").list.get(0)
    # every function the analysis finds in the trace is one listed for it
    assert set(where) == {f"{s[2][0]}:{s[2][1]}" for s in SERVICES if s[0] == trace}
    got = table.filter(where == f"{item[0]}:{item[1]}").sort("step")["item_calls"].to_list()
    raw = raw_calls_per_step(path, step_fn, item, caller)
    # the window's steps are consecutive calls of the step function
    assert len(got) == analysis.steps_in_window().count and any(
        raw[i:i + len(got)] == got for i in range(len(raw) - len(got) + 1)), (got, raw)
    assert min(got) >= 4


def test_the_bundled_decode_loop_is_not_items():
    """sample_traces/gpt_decode_server.py: ``generate`` calls the model once per new token
    on the tokens so far, and reads ``(next_ids == EOS).all().item()`` after each call: a
    generation loop, not items."""
    from zym.analysis import analyze

    root = Path(__file__).resolve().parents[2] / "sample_traces"
    for capture in ("gpt_decode_server.parquet", "gpt_decode_server.trace.json.gz"):
        analysis = analyze(root / capture, None, "steady")
        assert analysis.relations.item_calls().table.height == 0


def test_each_step_finds_its_own_level():
    """One request calls ``embed`` on its items itself; the next two through a helper called
    once (``embed_all``): the first's items are found at the step function's callee, the
    others' one level below (a step whose outer function is called once is looked into)."""
    b = CaptureBuilder()
    helper = STEP + [("python", "embed_all", "app.py", 40)]
    for request in range(REQUESTS):
        caller = STEP if request == 0 else helper
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            with b.enclosing(helper) if request else contextlib.nullcontext():
                for _ in range(ITEMS):
                    one_call(b, caller + [EMBED])
            b.scalar_readback(STEP)
    analysis, _ = run(b)
    table = analysis.relations.item_calls().table
    assert table["item_calls"].to_list() == [ITEMS] * REQUESTS
    assert table["step"].to_list() == list(range(REQUESTS))


def test_a_batchs_kernels_fill_the_gpu_its_items_left_idle():
    """GPU-bound items whose kernels have 33 thread blocks each on a GPU of 132
    multiprocessors (a quarter of it, one block an SM): on the batch, the later items'
    kernels run in a quarter of their time. Each request: ITEMS x K kernels of 200 us back to
    back; after the fix, the first item's K at 200 us and the others' at 50 us."""
    from zym.analysis.throughput import sm_count, wave_fill

    # the trace's own count, else the datasheet's for a GPU named (gpus.yaml), else none
    assert [sm_count(g) for g in ({"numSms": 100, "name": "NVIDIA H100 80GB HBM3"},
                                  {"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 PCIe"},
                                  {"name": "Some GPU"}, None)] == [100, 132, 114, None, None]
    assert wave_fill(np.array([33, 132, 133, 264, 0]), 132).tolist() == [
        0.25, 1.0, 133 / 264, 1.0, 1.0]
    b = CaptureBuilder(gpus=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}])
    model = STEP + [EMBED]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            for _ in range(ITEMS):
                one_call(b, model, gpu_us=200, grid=33)
            b.scalar_readback(STEP)   # waits for the request's kernels
    [f] = run(b)[1]
    assert f.saving_ns == pytest.approx(REQUESTS * (ITEMS - 1) * K * 150 * US, rel=0.01)
    assert "132 multiprocessors" in f.saving_how


def test_a_gemm_on_the_batch_runs_at_the_rate_measured_for_its_size():
    """analysis/gemm_rates.yaml's H200 fp32 points: 0.537 GFLOP at 9.7 TFLOP/s (55 us) and
    2.147 GFLOP (4x it) at 24.9: one of 4 items' GEMMs, on the batch, takes 9.7 / 24.9 of
    its time; one item alone, or a GEMM past the measured sizes (the rate flat), its own."""
    import yaml
    from zym.analysis.throughput import batched_gemm_durations

    rows = yaml.safe_load((Path(__file__).resolve().parents[2] / "analysis"
                           / "gemm_rates.yaml").read_text())["gpus"]
    points = dict(map(tuple, next(r for r in rows if r["match"] == "H200")["fp32"]))
    small, big = 0.537, 137.439
    t_small = small / points[small] * 1e6          # GFLOP / (TFLOP/s) = ms; -> ns
    t_big = big / points[big] * 1e6
    got = batched_gemm_durations(np.array([t_small, t_small, t_big]),
                                 np.array(["fp32", "fp32", "fp32"]), np.array([4, 1, 4]),
                                 "NVIDIA H200")
    assert got[0] == pytest.approx(t_small * points[small] / points[2.147], rel=1e-3)
    assert got[1] == pytest.approx(t_small, rel=1e-6) and got[2] == pytest.approx(t_big, rel=1e-6)


def test_a_function_called_once_that_reads_a_value_back_is_looked_into():
    """Each request calls ``process`` once, which embeds ITEMS items (one call of ``embed``
    each) and reads the result back in its own code (``.item()``): one call is no loop, so
    its reading back says nothing of the items below it."""
    b = CaptureBuilder()
    process = STEP + [("python", "process", "app.py", 40)]
    for _ in range(REQUESTS):
        with b.enclosing(STEP):
            b.copy(STEP, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            with b.enclosing(process):
                for _ in range(ITEMS):
                    one_call(b, process + [EMBED])
                b.scalar_readback(process)
            b.scalar_readback(STEP)
    analysis, [_finding] = run(b)
    assert analysis.steps_in_window().function == "app.py handle"
    assert analysis.relations.item_calls().table["item_calls"].to_list() == [ITEMS] * REQUESTS


def test_the_items_calls_are_the_same_through_the_as_of_join(monkeypatch):
    """Where the spans' threads, frames and times do not fit one int64 key, each call's span
    is found by an as-of join instead (``_span_starts``): the same calls of the function (on
    kwspot's H100 trace: its 64 forwards and 64 decodes a request), not an error."""
    from zym.analysis import analyze, instances

    path = RESULTS / "h100-blind8/kineto/kwspot.parquet"
    fast = analyze(path, None, "steady").relations.item_calls()
    monkeypatch.setattr(instances, "enclosing_span_starts", lambda *a, **k: None)
    joined = analyze(path, None, "steady").relations.item_calls()
    # per request: its 64 forwards, and its 64 decodes (decode_clip, once per clip)
    assert joined.table.equals(fast.table) and fast.table["item_calls"].to_list() == [64] * 10
    assert np.array_equal(joined.instance, fast.instance)
