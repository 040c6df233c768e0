"""What fixing a finding saves (rules/savings.py), on synthetic captures worked out by hand.

CaptureBuilder times (rules/testing.py): a call lasts its ``cpu_us`` and the next starts 1 us
after it; GPU work starts 1 us after its call, or when the stream is free; a sync returns 1 us
after the GPU is done; ``scalar_readback`` is a 4 us copy into pinned memory (1 us on the GPU)
and a 2 us sync.
"""
from __future__ import annotations

import numpy as np
import pytest
from zym import rules
from zym.analysis.throughput import speedup_durations
from zym.rules.testing import CaptureBuilder

US = 1_000
MAIN = ("python", "main", "app.py", 1)
SERVE = [MAIN, ("python", "serve", "app.py", 10)]

HANDLE = {"kineto": SERVE + [("python", "handle", "app.py", 20)],  # a frame: its first line
          "ebpf": SERVE + [("python", "handle", "app.py", 21)]}  # the executing line
LOOP = {"kineto": HANDLE["kineto"], "ebpf": SERVE + [("python", "handle", "app.py", 25)]}
FP32_GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_x"


def rerank(requests: int = 3, style: str = "kineto"):
    """Per request: an encoder of 20 kernels (5 ms of GPU), then 24 scores read one by one.
    ``kineto``: frames named by their first line, with a span per call (torch.profiler);
    ``ebpf``: the executing line of each frame, no spans (zym capture)."""
    b = CaptureBuilder()
    encode = HANDLE[style] + [("python", "forward", "encoder.py", 5)]
    for _ in range(requests):
        with b.enclosing(HANDLE["kineto"]):
            for _ in range(20):
                b.kernel(encode, FP32_GEMM, gpu_us=250, cpu_us=5)
            for _ in range(24):
                b.scalar_readback(LOOP[style])
    return b.analysis(spans=style == "kineto")


@pytest.mark.parametrize("style", ["kineto", "ebpf"])
def test_a_per_item_readback_loop_is_charged_its_round_trips_not_the_forward(style):
    """The first .item() of a request waits ~4.9 ms for the encoder; each of the other 23 is
    a 4 us copy, 1 us, a 2 us sync, 1 us: 8 us. Reading the scores once keeps the first wait
    and removes 23 x 8 us per request: 3 x 184 us, not the 14.6 ms the syncs blocked."""
    a = rerank(style=style)
    [f] = [f for f in rules.evaluate(a) if f.rule_id == "syncs.scalar-readback"]
    assert f.evidence["per_call"] == 24.0
    assert f.saving_ns == 3 * 23 * 8 * US
    assert f.cost_ns > 14 * 1000 * US  # what the syncs blocked: mostly the encoder's time
    assert "first wait of each of 3" in f.saving_how


def h200_curve(math: str) -> list[tuple[float, float]]:
    """The measured (GFLOP, TFLOP/s) points of analysis/gemm_rates.yaml, read here."""
    from importlib import resources

    import yaml

    doc = yaml.safe_load(resources.files("zym.analysis").joinpath("gemm_rates.yaml").read_text())
    return [tuple(p) for p in next(g for g in doc["gpus"] if g["match"] == "H200")[math]]


def rate_at(points: list[tuple[float, float]], gflop: float) -> float:
    """Log-log interpolation between the measured points, flat past the ends."""
    import itertools
    import math

    if gflop <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if gflop <= x1:
            t = (math.log(gflop) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))
    return points[-1][1]


def tf32_ratio(fp32_ns: float) -> float:
    """tf32/fp32 rate at the GEMM size whose fp32 time is ``fp32_ns`` (g / rate(g) = time,
    solved by bisection)."""
    fp32, tf32 = h200_curve("fp32"), h200_curve("tf32")
    lo, hi = 1e-4, 1e4
    for _ in range(200):
        g = (lo * hi) ** 0.5
        if g / rate_at(fp32, g) * 1e6 > fp32_ns:
            hi = g
        else:
            lo = g
    return rate_at(tf32, g) / rate_at(fp32, g)


def test_fp32_kernels_to_tf32_save_what_the_measured_rates_say():
    """The encoder's 60 fp32 GEMMs of 250 us make the run GPU-bound: each request's first
    .item() waits for them. In tf32 each runs tf32_ratio(250 us) times faster (the H200's
    measured rates at that GEMM size), and the whole difference is saved."""
    a = rerank()
    a.data.meta.gpus = [{"name": "NVIDIA H200"}]
    [f] = [f for f in rules.evaluate(a) if f.rule_id == "compute.fp32-matmul-no-tf32"]
    per_kernel = 250 * US - 250 * US / tf32_ratio(250 * US)
    assert f.saving_ns == pytest.approx(60 * per_kernel, rel=0.01)


def test_speedup_sizes_small_gemms_as_memory_bound():
    """A decode-sized fp32 GEMM (0.13 GFLOP, where the measured tf32 rate is no higher) gains
    nothing; a 8.6 GFLOP one gains what the two measured rates say."""
    fp32, tf32 = h200_curve("fp32"), h200_curve("tf32")
    small_ns = 0.134 / rate_at(fp32, 0.134) * 1e6
    new, how = speedup_durations(np.array([int(small_ns)]), "fp32", "tf32", "NVIDIA H200")
    assert new[0] >= int(small_ns) * 0.99 and "measured on the H200" in how
    big_ns = 8.59 / rate_at(fp32, 8.59) * 1e6
    new, _ = speedup_durations(np.array([int(big_ns)]), "fp32", "tf32", "NVIDIA H200")
    assert new[0] == pytest.approx(big_ns * rate_at(fp32, 8.59) / rate_at(tf32, 8.59), rel=0.01)


def test_speedup_of_memory_bound_kernels_is_their_bytes():
    """Element-wise and norm kernels move bytes: float32 to bfloat16 halves their time (not
    the datasheet's compute ratio, ~15x on an H200); fp16 to fp8 halves it again; a kernel
    already at the floor keeps its time."""
    dur = np.array([80_000, 40_000, 2_000])
    for op_class in ("elementwise", "norm", "softmax", "reduction"):
        new, how = speedup_durations(dur, "fp32", "bf16", "NVIDIA H200", op_class=op_class)
        assert new.tolist() == [40_000, 20_000, 2_000] and "fewer bytes" in how
    new, _ = speedup_durations(dur, "fp16", "fp8", "NVIDIA H200", op_class="elementwise")
    assert new.tolist() == [40_000, 20_000, 2_000]
    new, how = speedup_durations(dur, "fp32", "bf16", "NVIDIA H200", op_class="attention")
    assert new[0] < 20_000 and "datasheet" in how  # compute-bound: the peaks' ratio


def test_speedup_sizes_each_kernel_by_its_shapes_else_by_its_time():
    """Kernels of known FLOPs and of unknown mixed: each gets what it gets alone (by its
    shapes, or sized from its time), whichever others are beside it."""
    rng = np.random.default_rng(3)
    dur = rng.integers(2_000, 3_000_000, 40)
    flops = np.where(rng.random(40) < 0.5, rng.uniform(1e6, 5e10, 40), np.nan)
    flops[3] = 0.0  # no FLOPs: sized from its time
    mixed, how = speedup_durations(dur, "fp32", "tf32", "NVIDIA H200", flops)
    alone = [speedup_durations(dur[i:i + 1], "fp32", "tf32", "NVIDIA H200",
                               flops[i:i + 1])[0][0] for i in range(40)]
    by_time, _ = speedup_durations(dur, "fp32", "tf32", "NVIDIA H200")
    known = np.isfinite(flops) & (flops > 0)
    assert mixed.tolist() == alone
    assert np.array_equal(mixed[~known], by_time[~known])
    assert f"{int(known.sum())} of 40 sized from their recorded shapes" in how


def _steps(b: CaptureBuilder, grids: list[int]) -> None:
    for g in grids:
        with b.enclosing(SERVE + [("python", "step", "app.py", 30)]):
            for _ in range(40):
                b.kernel(SERVE + [("python", "step", "app.py", 31)], "tiny", gpu_us=2, cpu_us=8,
                         grid=g)
            b.scalar_readback(SERVE + [("python", "step", "app.py", 32)])


def test_cuda_graphs_replay_only_steps_that_repeat():
    """Steps launching the same kernels with the same grids can be graphed (all but the
    first occurrence of each shape); when every step's grids differ, there is no estimate."""
    b = CaptureBuilder()
    _steps(b, [64] * 6)
    [f] = [f for f in rules.evaluate(b.analysis()) if f.rule_id == "compute.launch-bound-step"]
    # per step: 40 launches cost 359 us of CPU for 80 us of GPU; as graphs, the GPU bounds it
    assert 5 * 250 * US < f.saving_ns < 6 * 300 * US
    b = CaptureBuilder()
    _steps(b, [64, 65, 66, 67, 68, 69])
    [f] = [f for f in rules.evaluate(b.analysis()) if f.rule_id == "compute.launch-bound-step"]
    assert f.saving_ns is None and "shapes change" in f.saving_how


def test_cuda_graphs_of_runs_that_repeat_where_no_step_does():
    """Steps whose shapes differ (a first run of 12 launches with another grid in each step)
    but with a second run of 10, after a wait, that every step launches the same (a per-item
    update of fixed shapes): no step repeats another, and the estimate replays the repeated runs
    alone as graphs (one captured per set of shapes), the differing ones as they are."""
    at = SERVE + [("python", "step", "app.py", 30)]

    def steps(b: CaptureBuilder, same_second: bool) -> None:
        for i, g in enumerate([64, 65, 66, 67, 68, 69]):
            with b.enclosing(at):
                for _ in range(12):
                    b.kernel(SERVE + [("python", "step", "app.py", 31)], "tiny", gpu_us=2,
                             cpu_us=8, grid=g)
                b.scalar_readback(SERVE + [("python", "step", "app.py", 32)])
                for _ in range(10):
                    b.kernel(SERVE + [("python", "step", "app.py", 33)], "update", gpu_us=2,
                             cpu_us=8, grid=128 if same_second else 128 + i)
                b.scalar_readback(SERVE + [("python", "step", "app.py", 34)])

    b = CaptureBuilder()
    steps(b, same_second=True)
    a = b.analysis()
    [f] = [f for f in rules.evaluate(a) if f.rule_id == "compute.launch-bound-step"]
    n = a.steps_in_window().count
    assert f"replayed with {10 * n} launches in {n} runs" in f.saving_how
    assert "repeat another run's" in f.saving_how
    # at most each step's second run's CPU (10 launches of 8 us, 1 us apart) saved
    assert 0 < f.saving_ns < n * 10 * 9 * US
    b = CaptureBuilder()
    steps(b, same_second=False)
    [f] = [f for f in rules.evaluate(b.analysis()) if f.rule_id == "compute.launch-bound-step"]
    assert f.saving_ns is None and "shapes change" in f.saving_how


def test_no_estimate_without_a_gpu_side():
    """An eBPF-only capture (no CUPTI): waiting and working cannot be told apart."""
    b = CaptureBuilder()
    for _ in range(3):
        with b.enclosing(SERVE + [("python", "handle", "app.py", 20)]):
            for _ in range(8):
                b.scalar_readback(LOOP["ebpf"])
    found = rules.evaluate(b.analysis(drop="gpu"))
    assert found and all(f.saving_ns is None for f in found)
    assert "no GPU side" in found[0].saving_how and found.total_ns is None


def test_fixes_together_are_one_replay_and_increments_add_up():
    a = rerank()
    found = rules.evaluate(a)
    estimated = [f for f in found if f.saving_ns is not None]
    assert len(estimated) >= 2
    assert sum(f.saving_incremental_ns for f in estimated) == found.total_ns
    assert found.total_ns <= sum(f.saving_ns for f in estimated)


def test_fixes_past_the_chain_are_replayed_together_once():
    """Past ``chain`` findings, the lower-ranked fixes get no increment of their own; what
    they add together is the total (one replay of every fix, made again here) less the
    chain's."""
    from zym.analysis.replay import Fix
    from zym.rules.findings import Findings

    a = rerank()
    full = rules.evaluate(a)
    fixed = [f for f in full if f.edit is not None]
    assert len(fixed) >= 2 and full.rest == 0 and full.rest_ns is None
    whole = [f.saving_incremental_ns for f in fixed]
    short = Findings(list(full), a, chain=1)
    assert fixed[0].saving_incremental_ns == whole[0]
    assert all(f.saving_incremental_ns is None for f in fixed[1:])
    total = a.timeline.saving(Fix.combine([f.edit for f in fixed]), alone=True)
    assert short.total_ns == full.total_ns == total
    assert short.rest == len(fixed) - 1 and short.rest_ns == total - whole[0] == sum(whole[1:])
    together = short.what_if(a.facts.window_ns, 0)
    assert (together["rest"], together["rest_saving_ns"]) == (short.rest, short.rest_ns)


def _kept_by_loop(group, idx, waits, keep):
    """The per-instance loop the vectorised version replaced (second method)."""
    import numpy as np

    mask = np.zeros(len(idx), bool)
    order = np.lexsort((idx, group))
    g, w = group[order], waits[order]
    starts = np.nonzero(np.r_[True, g[1:] != g[:-1]])[0]
    ends = np.r_[starts[1:], len(g)]
    for a, b in zip(starts.tolist(), ends.tolist()):
        blocking = np.nonzero(w[a:b])[0]
        if not len(blocking):
            continue
        k = blocking[0] if keep == "first" else blocking[-1]
        prev = blocking[blocking < k]
        lo = (prev[-1] + 1) if len(prev) else 0
        mask[order[a + lo:a + k + 1]] = True
    return mask, len(starts)


@pytest.mark.parametrize("keep", ["first", "last"])
def test_kept_per_instance_equals_the_per_instance_loop(keep):
    import numpy as np
    from zym.rules.savings import kept_per_instance

    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 60))   # (no calls: the loop counted one instance, this none)
        idx = rng.permutation(1000)[:n]
        group = rng.integers(0, max(1, n // 4 + 1), n)
        waits = rng.random(n) < [0.0, 0.1, 0.5, 1.0][trial % 4]
        got = kept_per_instance(group, idx, waits, keep)
        want = _kept_by_loop(group, idx, waits, keep)
        assert got[1] == want[1] and (got[0] == want[0]).all(), (trial, n)


@pytest.mark.parametrize("name", ["gpt_decode_server.parquet",  # instances from the stacks
                                  "gpt_decode_server.trace.json.gz"])  # from Kineto's spans
def test_batching_reads_the_calls_relations_instances(name):
    """The batching fix reads every call's instance by call_idx, built without the calls
    relation's other columns: it is that relation's ``call_instance``, call by call."""
    from pathlib import Path

    from zym.analysis import analyze

    sample = Path(__file__).resolve().parents[2] / "sample_traces" / name
    rel = analyze(sample, lambda _stage: None, "steady").relations
    every = rel.every_call_instance()
    column = rel.materialize("calls", {"call_instance"}).sort("call_idx")
    assert column["call_idx"].to_list() == list(range(len(every)))
    assert column["call_instance"].to_list() == every.tolist()
    assert 1 < len(np.unique(every)) < len(every)  # instances of several calls


def test_opens_instance_marks_each_instances_first_call():
    """Whether each asked call is the first (lowest ``call_idx``) of its instance, as the
    first index of each value in ``np.unique`` says."""
    from zym.rules.savings import _opens_instance

    class Rel:
        def __init__(self):
            self.cache = {}

        def shared(self, name, build):
            return self.cache.setdefault(name, build())

    rng = np.random.default_rng(5)
    by_row = rng.integers(0, 40, 3000) * (1 << 40) + rng.integers(0, 3, 3000)
    idx = np.sort(rng.choice(3000, 700, replace=False))
    values, first = np.unique(by_row, return_index=True)
    want = first[np.searchsorted(values, by_row[idx])] == idx
    got = _opens_instance(Rel(), by_row, idx)
    assert got.dtype == bool and want.any() and not want.all()
    assert got.tolist() == want.tolist()


def test_graph_runs_end_where_the_thread_changes():
    """A run of graphable calls is one thread's: two threads' launches of one step, three
    each, are two runs (each under ``MIN_GRAPH_RUN``: none), not one of six; a blocking call
    ends a run too."""
    import polars as pl
    from zym.rules.savings import MIN_GRAPH_RUN, _graph_runs

    def calls(threads: list[int], kinds: list[str], blocking: list[bool]) -> pl.DataFrame:
        n = len(threads)
        return pl.DataFrame({"_thread": threads, "ts_ns": list(range(n)), "call_idx": list(range(n)),
                             "step": [0] * n, "kind": kinds, "blocking": blocking})

    assert MIN_GRAPH_RUN == 4
    two = calls([1, 1, 1, 2, 2, 2], ["launch"] * 6, [False] * 6)
    runs, members = _graph_runs(two, {0})
    assert runs.height == 0 and members.height == 0
    one = calls([1] * 9, ["launch"] * 4 + ["sync"] + ["launch"] * 4, [False] * 4 + [True]
                + [False] * 4)
    runs, members = _graph_runs(one, {0})
    assert runs.select("first", "last", "n").rows() == [(0, 3, 4), (5, 8, 4)]
    assert sorted(members["call_idx"].to_list()) == [0, 1, 2, 3, 5, 6, 7, 8]
