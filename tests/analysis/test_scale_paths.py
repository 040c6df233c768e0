"""The fast paths for large captures give the findings the plain ones do.

* The replay's epoch loop runs compiled (numba) from ``JIT_MIN_EPOCHS`` epochs and
  interpreted below: every finding, saving and what-if total is the same either way, on the
  bundled trace and on a synthetic capture with thousands of syncs (bench/make_synthetic.py).
* ``call_instance`` (runs of a thread's calls through the same caller line and function) is
  computed by one pass per stack depth: it matches a walk over each thread's calls, one by
  one, from the stack trie's parent links.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from synthetic import make_synthetic
from zym.analysis import analyze, replay
from zym.analysis.export.summary import build_report
from zym.rules import evaluate, load_packs
from zym.schemas.apis import MEMORY_PATTERN

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
EBPF_SAMPLE = REPO / "sample_traces" / "gpt_decode_server.parquet"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return make_synthetic(12_000, tmp_path_factory.mktemp("synthetic") / "s.parquet")


def _report(path: Path, jit_from: int, monkeypatch) -> dict:
    monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", jit_from)
    analysis = analyze(path, lambda _stage: None, "steady")
    findings = evaluate(analysis, load_packs(()), ())
    return build_report(analysis, findings, None, 5, None)


@pytest.mark.parametrize("which", ["sample", "synthetic"])
def test_findings_are_the_same_with_the_loop_compiled_or_interpreted(which, synthetic,
                                                                     monkeypatch):
    if replay._compiled_epochs() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    path = SAMPLE if which == "sample" else synthetic
    interpreted = _report(path, 1 << 62, monkeypatch)
    compiled = _report(path, 0, monkeypatch)
    assert interpreted["findings"], "nothing to compare: no findings"
    assert any(f["saving_ns"] for f in interpreted["findings"])
    assert compiled == interpreted


def _walked_instances(analysis) -> pl.DataFrame:
    """Per call with a user frame: (thread, first call of its run), walking each thread's calls
    in time order and comparing neighbours' frames at the user frame's depth."""
    nodes = analysis.facts.nodes
    parent = dict(zip(nodes["stack_id"].to_list(), nodes["parent_id"].to_list()))
    depth = dict(zip(nodes["stack_id"].to_list(), nodes["depth"].to_list()))
    key = {s: (f or "", n or "") for s, f, n in zip(nodes["stack_id"].to_list(),
                                                   nodes["file"].to_list(),
                                                   nodes["name"].to_list())}

    def ancestor(stack, d):
        while stack is not None and depth.get(stack, -1) > d:
            stack = parent.get(stack)
        return stack if stack is not None and depth.get(stack) == d else None

    def frame_at(stack, d):  # (caller node, function) of the stack's frame at depth d
        a = ancestor(stack, d)
        return None if a is None else (ancestor(stack, d - 1) if d else None, key[a])

    rel = analysis.relations
    calls = rel.calls_table()
    user = rel.site_of(calls["stack_id"], ("user_node",))[0].to_list()
    steps = rel.call_steps().to_list()
    rows = sorted(zip(calls["_thread"].to_list(), calls["call_idx"].to_list(),
                      calls["stack_id"].to_list(), user, steps))
    out = []
    for i, (thread, idx, stack, u, step) in enumerate(rows):
        if u is None or u not in depth:
            continue
        d = depth[u]
        mine = frame_at(stack, d)
        j = i
        while j > 0 and rows[j - 1][0] == thread and rows[j - 1][4] == step \
                and frame_at(rows[j - 1][2], d) == mine:
            j -= 1
        out.append({"call_idx": idx, "walked": f"{thread}:{rows[j][1]}:{d}"})
    return pl.DataFrame(out)


@pytest.mark.parametrize("runs", ["numpy", "compiled"])
@pytest.mark.parametrize("which", ["ebpf sample", "synthetic"])
def test_call_instances_match_a_walk_over_each_threads_calls(which, runs, synthetic,
                                                             monkeypatch):
    from zym.analysis import instances

    if runs == "compiled" and instances._compiled_pass() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    monkeypatch.setattr(instances, "JIT_MIN_CALLS", 0 if runs == "compiled" else 1 << 62)
    analysis = analyze(EBPF_SAMPLE if which == "ebpf sample" else synthetic,
                       lambda _stage: None, "steady")
    assert analysis.relations.instance_source == "stacks"
    got = analysis.relations.materialize("calls", {"call_instance"}).select(
        "call_idx", "call_instance")
    walked = _walked_instances(analysis)
    both = walked.join(got, on="call_idx", how="left")
    assert both.height > 1000 and both["call_instance"].min() >= 0
    # The same partition of the calls: each walked run is one instance, and back.
    assert both.group_by("walked").agg(pl.col("call_instance").n_unique())["call_instance"] \
        .max() == 1
    assert both.group_by("call_instance").agg(pl.col("walked").n_unique())["walked"].max() == 1
    assert both["walked"].n_unique() < both.height  # some runs hold several calls
    no_user = got.join(walked, on="call_idx", how="anti")
    assert (no_user["call_instance"] == -1).all()



@pytest.mark.parametrize("which", ["ebpf sample", "synthetic"])
def test_call_instances_one_pass_gives_the_per_depth_ids(which, synthetic, monkeypatch):
    """The compiled pass over the calls (every depth at once) gives the very ids of the numpy
    passes (one per depth): for every call and for a subset asked in any order, with repeats."""
    from zym.analysis import instances

    if instances._compiled_pass() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    analysis = analyze(EBPF_SAMPLE if which == "ebpf sample" else synthetic,
                       lambda _stage: None, "steady")
    rel = analysis.relations
    calls = rel.calls_table()
    user = rel.site_of(calls["stack_id"], ("user_node",))[0]
    anc = instances.Ancestors(analysis.facts.nodes)
    steps = rel.call_steps()
    rng = np.random.default_rng(3)
    for wanted in (np.arange(calls.height), rng.integers(0, calls.height, 500)):
        monkeypatch.setattr(instances, "JIT_MIN_CALLS", 1 << 62)
        per_depth = instances.call_instances(calls, user, wanted, anc, steps)
        monkeypatch.setattr(instances, "JIT_MIN_CALLS", 0)
        one_pass = instances.call_instances(calls, user, wanted, anc, steps)
        assert (per_depth >= 0).sum() > len(wanted) // 2
        assert np.array_equal(one_pass, per_depth)
        # without steps, too (no boundary but the threads')
        monkeypatch.setattr(instances, "JIT_MIN_CALLS", 1 << 62)
        per_depth = instances.call_instances(calls, user, wanted, anc, None)
        monkeypatch.setattr(instances, "JIT_MIN_CALLS", 0)
        assert np.array_equal(instances.call_instances(calls, user, wanted, anc, None),
                              per_depth)


@pytest.mark.parametrize("shape", ["runs", "random", "extremes", "one", "distinct", "empty"])
def test_first_of_each_id_matches_a_set_walk(shape, monkeypatch):
    """Whether each id is the first of its value, compiled (from ``JIT_MIN_IDS`` ids) or by
    polars: what a walk with a set of the ids seen gives. No ids: each path too (here from 0
    ids; counted: at 1000 neither call of this empty case reached the compiled pass)."""
    from zym.analysis import instances

    compiled = instances._compiled_firsts()
    if compiled is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    passes = []

    def counting(*a):
        passes.append(1)
        return compiled(*a)

    monkeypatch.setattr(instances, "_compiled_firsts", lambda: counting)
    rng = np.random.default_rng(len(shape))
    n = instances.JIT_MIN_CALLS + 1234
    ids = {"runs": (rng.integers(2, 5, n) << 40) | np.cumsum(rng.random(n) < 0.2),
           "random": rng.integers(-50_000, 50_000, n),
           "extremes": rng.choice(np.array([np.iinfo(np.int64).min, -1, 0, 1 << 62,
                                            np.iinfo(np.int64).max]), n),
           "one": np.full(n, 7), "distinct": rng.permutation(n) * 2**33,
           "empty": np.zeros(0, np.int64)}[shape]
    seen: set[int] = set()
    expected = np.array([not (v in seen or seen.add(v)) for v in ids.tolist()], bool)
    monkeypatch.setattr(instances, "JIT_MIN_IDS", 1000 if len(ids) else 0)
    assert np.array_equal(instances.first_of_each(ids), expected)  # compiled
    assert passes == [1]
    monkeypatch.setattr(instances, "JIT_MIN_IDS", 1000)
    assert np.array_equal(instances.first_of_each(ids[:999]), expected[:999])  # polars
    assert passes == [1]


def test_first_of_each_gives_its_loop_one_type_whoever_made_the_ids(monkeypatch):
    """Writable ids (a copy), read-only ones (polars' own buffer): the compiled pass is called
    with one type (numba compiles once per set of argument types, ~0.35 s on a first run)."""
    from numba import typeof
    from zym.analysis import instances
    from zym.analysis.compiled import reading_read_only

    compiled = instances._compiled_firsts()
    if compiled is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    seen = set()

    def call(*args):  # what the compiled code is given
        seen.add(tuple(typeof(a) for a in args))
        return compiled.dispatcher(*args)

    monkeypatch.setattr(instances, "_compiled_firsts",
                        lambda: reading_read_only(instances._firsts, call))
    monkeypatch.setattr(instances, "JIT_MIN_IDS", 0)
    ids = np.arange(100, dtype=np.int64) % 7
    from_polars = pl.Series(ids).to_numpy()
    assert not from_polars.flags.writeable and ids.flags.writeable
    for a in (ids, from_polars):
        assert instances.first_of_each(a).tolist() == [True] * 7 + [False] * 93
    assert len(seen) == 1


def test_ancestors_rows_by_lookup_equal_the_dictionary():
    """Stack rows read through the id lookup equal a dictionary's (built here from the nodes'
    rows), null and unknown ids (negative, past the last, in a gap) included; ids too sparse
    for a lookup are searched, with the same rows; the ancestor table against each node's
    parents walked in Python."""
    from zym.analysis.instances import Ancestors

    nodes = pl.DataFrame({"stack_id": [5, 2, 9, 3], "parent_id": [None, 5, 2, 5],
                          "depth": [0, 1, 2, 1], "file": ["a", "b", None, "d"],
                          "name": ["f", "g", "h", None]})
    index = {5: 0, 2: 1, 9: 2, 3: 3}   # each id's row in ``nodes``
    anc = Ancestors(nodes)
    assert anc._lookup is not None
    asked = pl.Series([9, None, 2, -4, 7, 10**6, 5, 3, 0], dtype=pl.Int64)
    want = [index.get(v, -1) if v is not None else -1 for v in asked.to_list()]
    assert anc.rows(asked).tolist() == want
    assert [anc._lookup[v] if 0 <= v < len(anc._lookup) else -1
            for v in asked.fill_null(-1).to_list()] == want
    sparse = Ancestors(nodes.with_columns(pl.col("stack_id") * 10**6,
                                          pl.col("parent_id") * 10**6))
    assert sparse._lookup is None
    assert sparse.rows(asked * 10**6).tolist() == want
    parent = dict(zip(nodes["stack_id"].to_list(), nodes["parent_id"].to_list()))
    for sid, row in index.items():
        chain = [sid]
        while parent[chain[-1]] is not None:
            chain.append(parent[chain[-1]])
        assert anc.table[row, :len(chain)].tolist() == [index[c] for c in reversed(chain)]
        assert (anc.table[row, len(chain):] == -1).all()


# -- the incremental replay ---------------------------------------------------------------------

def _random_fix(tl, rng: np.random.Generator) -> replay.Fix:
    """A fix of one to three kinds, each over a handful of calls or operations or over a share
    of them (up to all), as the rules' fixes and their combinations are."""
    n, m = tl.n_calls, len(tl.pos_of_gpu)
    waiting = np.nonzero(tl.waits)[0]
    fix = replay.Fix()

    def pick(pool: np.ndarray) -> np.ndarray:
        if not len(pool):
            return np.zeros(0, np.int64)
        k = int(rng.integers(1, 4)) if rng.random() < 0.4 else \
            max(1, int(len(pool) * rng.choice([0.01, 0.1, 0.5, 1.0])))
        return np.sort(rng.choice(pool, size=min(k, len(pool)), replace=False)).astype(np.int64)

    for kind in rng.choice(["remove", "unblock", "cost", "gap", "gpu"],
                           size=int(rng.integers(1, 4)), replace=False):
        if kind == "remove":
            fix.remove_calls = pick(waiting if rng.random() < 0.5 else np.arange(n))
        elif kind == "unblock":
            fix.unblock_calls = pick(waiting)
        elif kind == "cost":
            fix.cost_calls = pick(np.arange(n))
            fix.cost_ns = (tl.intrinsic[fix.cost_calls] * rng.random(len(fix.cost_calls))
                           ).astype(np.int64)
        elif kind == "gap":
            fix.gap_calls = pick(np.arange(n))
            fix.gap_ns = (tl.gap[fix.gap_calls] * rng.random(len(fix.gap_calls))).astype(np.int64)
        else:
            fix.gpu_ops = pick(np.arange(m))
            fix.gpu_dur_ns = rng.integers(0, 50_000, len(fix.gpu_ops))
    return fix


@pytest.fixture(params=["numpy", "compiled"])
def shifts(request, monkeypatch) -> str:
    """The incremental replay's moves computed in numpy, or by the compiled kernel (numba:
    from ``JIT_MIN_EPOCHS`` epochs, here from the first)."""
    if request.param == "compiled":
        if replay._compiled_shifts() is None:
            pytest.skip("numba not installed (a zym dependency: pip install -e .)")
        monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", 0)
    else:
        monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", 1 << 62)
    return request.param


@pytest.mark.parametrize("which", ["sample", "ebpf_sample", "synthetic", "synthetic_anchored"])
def test_the_incremental_replay_is_the_whole_replay(which, synthetic, shifts):
    """A fix replayed from the unfixed replay's state (what it moves only) ends exactly when
    the whole replay of every call and operation does: 60 random fixes (removed calls and
    syncs, unblocked copies, cheaper calls, shorter gaps, faster kernels, alone and together),
    on one-thread captures and on the synthetic one (several threads and streams), and with
    operations no call launched (held at their recorded start)."""
    path = {"sample": SAMPLE, "ebpf_sample": EBPF_SAMPLE}.get(which, synthetic)
    tl = analyze(path, lambda _stage: None, "steady").timeline
    rng = np.random.default_rng(11)
    if which == "synthetic_anchored":  # some operations launched by no call
        tl.op_call = tl.op_call.copy()
        tl.op_call[rng.choice(len(tl.op_call), size=len(tl.op_call) // 20, replace=False)] = -1
        tl.op_call[:5] = -1
    assert tl.n_streams >= (2 if which.startswith("synthetic") else 1)
    compared = 0
    for _ in range(60):
        fix = _random_fix(tl, rng)
        assert tl.replay(fix) == tl.replay(fix, incremental=False), fix
        compared += 1
    assert compared == 60 and tl.replay(replay.Fix()) == tl.replay(replay.Fix(),
                                                                    incremental=False)


def test_findings_are_the_same_with_whole_replays(synthetic, monkeypatch):
    """Every finding's saving, its share together with those above it, and the what-if total:
    the same report when every replay is a whole one."""
    fast = _report(synthetic, 1 << 62, monkeypatch)
    whole = replay.Timeline.replay
    monkeypatch.setattr(replay.Timeline, "replay",
                        lambda self, fix, deflate=True, incremental=True, **_:
                        whole(self, fix, deflate, incremental=False))
    assert _report(synthetic, 1 << 62, monkeypatch) == fast


def _messy(fix: replay.Fix, rng: np.random.Generator) -> replay.Fix:
    """``fix`` with each edit array shuffled and some of its entries repeated with other
    values, as fixes built from several parts are (``Timeline._edit``: the last one holds)."""
    for keys, values in (("remove_calls", None), ("unblock_calls", None),
                         ("cost_calls", "cost_ns"), ("gap_calls", "gap_ns"),
                         ("gpu_ops", "gpu_dur_ns")):
        k = getattr(fix, keys)
        if not len(k):
            continue
        again = rng.choice(len(k), size=max(1, len(k) // 3))
        order = rng.permutation(len(k) + len(again))
        setattr(fix, keys, np.concatenate([k, k[again]])[order])
        if values is not None:
            v = getattr(fix, values)
            setattr(fix, values, np.concatenate([v, rng.permutation(v)[:len(again)]])[order])
    return fix


@pytest.mark.parametrize("which", ["ebpf_sample", "synthetic"])
def test_the_incremental_replay_takes_edits_in_any_order(which, synthetic, shifts):
    """Edits at calls and operations named out of order, and named twice with two values:
    the incremental replay (which edits only what the fix names) applies them as the whole
    replay's fancy assignments do."""
    tl = analyze(EBPF_SAMPLE if which == "ebpf_sample" else synthetic, lambda _stage: None,
                 "steady").timeline
    rng = np.random.default_rng(5)
    for _ in range(30):
        fix = _messy(_random_fix(tl, rng), rng)
        assert tl.replay(fix) == tl.replay(fix, incremental=False), fix


def test_combine_keeps_the_smallest_edit_of_each_call():
    """``Fix.combine`` against a dictionary built edit by edit."""
    rng = np.random.default_rng(3)
    parts = [replay.Fix(cost_calls=rng.integers(0, 500, 300), cost_ns=rng.integers(0, 10**6, 300),
                        remove_calls=rng.integers(0, 500, 50)) for _ in range(4)]
    both = replay.Fix.combine(parts)
    want: dict[int, int] = {}
    for f in parts:
        for k, v in zip(f.cost_calls.tolist(), f.cost_ns.tolist()):
            want[k] = min(v, want.get(k, v))
    assert both.cost_calls.tolist() == sorted(want)
    assert both.cost_ns.tolist() == [want[k] for k in sorted(want)]
    assert both.remove_calls.tolist() == sorted({k for f in parts for k in f.remove_calls.tolist()})
    assert replay.sorted_unique(np.array([5, 1, 5, 3]), np.array([1, 9])).tolist() == [1, 3, 5, 9]


def test_a_chain_reads_as_the_fixes_combined():
    """``Fix.chain``: read, each field is ``Fix.combine``'s of the parts (graphs and
    ``describe`` included), however long the chain (built link by link, not recursively), and
    once read the parts are let go."""
    rng = np.random.default_rng(8)

    def part(i: int) -> replay.Fix:
        k = int(rng.integers(1, 40))
        return replay.Fix(cost_calls=rng.integers(0, 500, k), cost_ns=rng.integers(0, 10**6, k),
                          gap_calls=rng.integers(0, 500, k), gap_ns=rng.integers(0, 10**6, k),
                          gpu_ops=rng.integers(0, 900, k), gpu_dur_ns=rng.integers(0, 10**6, k),
                          unblock_calls=rng.integers(0, 500, k % 3),
                          graph_first=np.arange(i % 2), graph_last=np.arange(i % 2) + 3,
                          graph_launch_ns=np.full(i % 2, i), graph_node_ns=(i % 2) * (100 + i),
                          describe=f"part {i}" if i % 3 else "")

    parts = [part(i) for i in range(2_500)]
    chain = replay.Fix.combine([parts[0]])
    for f in parts[1:]:
        chain = replay.Fix.chain(chain, f)
    assert not chain.is_empty()
    flat = replay.Fix.combine(parts)
    for name in ("describe", "graph_node_ns", "graph_first", "graph_last", "graph_launch_ns",
                 *replay._Chained._LAZY):
        assert np.array_equal(getattr(chain, name), getattr(flat, name)), name
    assert chain.first is None and chain.second is None
    assert replay.Fix.chain(replay.Fix(), replay.Fix()).is_empty()


def test_median_int_is_numpys():
    """The typical launch latency and queue gap: ``int(np.median(...))``, on odd and even
    lengths, negative values, huge ones and arrays mostly of one value."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 4, 11, 1000, 1001, 99_999):
        for a in (rng.integers(-5, 5, n), rng.exponential(1e6, n).astype(np.int64),
                  np.where(rng.random(n) < 0.8, 0, rng.integers(0, 1 << 40, n))):
            assert replay.median_int(a) == int(np.median(a)), (n, a[:5])
    assert replay.median_int(np.zeros(0, np.int64)) == 0


def test_blocking_apis_are_matched_per_name():
    """``api_blocks`` (once per distinct name) is ``is_blocking_api`` on every call's name."""
    from zym.analysis.facts import api_blocks
    from zym.schemas.apis import is_blocking_api

    names = ["cudaMemcpy", "cudaMemcpyAsync", "cudaDeviceSynchronize", "cudaLaunchKernel",
             "cuMemsetD32", "cudaStreamSynchronize", None, "cudaMemsetAsync"]
    api = pl.Series("api", [names[i] for i in np.random.default_rng(1).integers(0, 8, 500)],
                    dtype=pl.String)
    want = pl.select(is_blocking_api(pl.lit(api))).to_series()
    got = api_blocks(api.cast(pl.Categorical))
    assert got.to_list() == want.to_list() and want.sum() > 0 and want.null_count() > 0


def test_narrow_positions_replay_as_wide_ones(synthetic, shifts, monkeypatch):
    """Positions of calls and operations held as int32 (below ``INDEX32_MAX``) or, past it,
    as int64 (here forced by a limit of 0): the arrays take that type, and each fix replayed
    incrementally from the narrow state ends when the whole replay of the wide one does."""
    def timeline(limit: int) -> replay.Timeline:
        monkeypatch.setattr(replay, "INDEX32_MAX", limit)
        tl = analyze(synthetic, lambda _stage: None, "steady").timeline
        _ = tl._base  # built under this limit
        return tl

    narrow, wide = timeline(replay.INDEX32_MAX), timeline(0)
    for tl, want in ((narrow, np.int32), (wide, np.int64)):
        base = tl._base
        for a in (tl.order, tl.op_call, tl.pos_of_gpu, tl.own_row, base.pos, base.members,
                  base.member_start, base.member_end, base.g_lo_op, base.g_hi_call,
                  base.epoch_order, base.wait_idx, base.own_pos, base.at_0, base.g_rank,
                  base.g_stream, base.row_of_epoch, base.thread_of_epoch):
            assert a.dtype == want
    rng = np.random.default_rng(23)
    for _ in range(30):
        fix = _random_fix(narrow, rng)
        assert narrow.replay(fix) == wide.replay(fix, incremental=False), fix
        assert wide.replay(fix) == narrow.replay(fix, incremental=False), fix


def test_index_dtype_falls_back_to_int64_past_the_limit():
    """A count that int32 positions (and their +1) hold, and the first that they do not."""
    assert replay.index_dtype(0) is np.int32
    assert replay.index_dtype(2**31 - 3) is np.int32
    assert replay.index_dtype(2**31 - 2) is np.int64
    a = np.array([-1, 0, 5])
    assert replay.narrow_index(a, 6).dtype == np.int32
    assert replay.narrow_index(a, 2**40).dtype == np.int64
    assert replay.narrow_index(a, 6).tolist() == [-1, 0, 5]


def test_every_calls_instance_is_shared_not_copied(synthetic):
    """``call_instance`` asked for every call in order is the array computed once (no copy);
    asked for some calls, out of order, it is that array's values at those calls."""
    rel = analyze(synthetic, lambda _stage: None, "steady").relations
    n = rel.calls_table().height
    every = rel._instances(pl.int_range(n, dtype=pl.Int64, eager=True))
    ids = rel._objects["call_instance of every call"]
    assert np.shares_memory(every.to_numpy(), ids)
    some = np.random.default_rng(2).permutation(n)[: n // 3]
    assert rel._instances(pl.Series(some)).to_list() == ids[some].tolist()
    twice = np.r_[0, 0, np.arange(2, n)]  # as long as every call, not each call in order
    got = rel._instances(pl.Series(twice)).to_numpy()
    assert not np.shares_memory(got, ids) and got.tolist() == ids[twice].tolist()


@pytest.mark.parametrize("overhead", [0, 700])
def test_the_unfixed_replay_reads_the_timeline_without_copies(synthetic, overhead):
    """The empty fix replays the timeline's own arrays (no copies, none written): it ends when
    a fix that edits a call to its own cost (so every array is copied) does, with and without
    a recording cost taken out, and leaves the timeline as it was."""
    tl = analyze(synthetic, lambda _stage: None, "steady").timeline
    tl.overhead_ns = np.broadcast_to(np.int64(overhead), (tl.n_calls,))
    before = {k: getattr(tl, k).copy() for k in ("gap", "intrinsic", "waits", "op_dur",
                                                 "op_lat", "op_gap", "op_call")}
    same = replay.Fix(cost_calls=np.array([3]), cost_ns=tl.intrinsic[[3]])
    for deflate in (True, False):
        assert tl.replay(replay.Fix(), deflate, incremental=False) == \
            tl.replay(same, deflate, incremental=False)
    edited = tl._edit(replay.Fix(), True)
    assert (edited[1] is tl.intrinsic) and (edited[0] is tl.gap) == (overhead == 0)
    for k, v in before.items():
        assert np.array_equal(getattr(tl, k), v), k


def test_call_instance_positions_fall_back_to_int64():
    """``call_instances`` holds positions as int32 below 2^31 - 1 and as they are from it."""
    from zym.analysis.instances import _narrow

    a = np.array([-1, 0, 7], np.int64)
    assert _narrow(a, 8).dtype == np.int32 and _narrow(a, 8).tolist() == [-1, 0, 7]
    assert _narrow(a, 2**31 - 2).dtype == np.int32
    assert _narrow(a, 2**31 - 1) is a


# -- the sparse replay (a fix run only where it is in play) -------------------------------------

@pytest.fixture
def sparse(monkeypatch) -> None:
    """The sparse replay for every fix that removes no wait (numba: from the first epoch,
    however many its edits)."""
    if replay._compiled_sparse() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", 0)
    monkeypatch.setattr(replay, "SPARSE_EDITS_PER_EPOCH", 0)


def _used_sparse(tl, fix) -> bool:
    tl._base.sparse_stats = None
    tl.replay(fix)
    return tl._base.sparse_stats is not None


@pytest.mark.parametrize("which", ["sample", "ebpf_sample", "synthetic", "synthetic_anchored"])
def test_the_sparse_replay_is_the_whole_replay(which, synthetic, sparse):
    """A fix replayed only over the epochs where it is in play, jumping between them from
    checkpoints of the unfixed replay translated, ends exactly when the whole replay does:
    60 random fixes on four timelines, removed and unblocked syncs among them (a wait taken
    away waits no more: its epoch is not merged with the next)."""
    path = {"sample": SAMPLE, "ebpf_sample": EBPF_SAMPLE}.get(which, synthetic)
    tl = analyze(path, lambda _stage: None, "steady").timeline
    rng = np.random.default_rng(17)
    if which == "synthetic_anchored":
        tl.op_call = tl.op_call.copy()
        tl.op_call[rng.choice(len(tl.op_call), size=len(tl.op_call) // 20, replace=False)] = -1
        tl.op_call[:5] = -1
    used = 0
    for _ in range(60):
        fix = _random_fix(tl, rng)
        used += _used_sparse(tl, fix)
        tl._base._last = None  # from the unfixed replay
        whole = tl.replay(fix, incremental=False)
        assert tl.replay(fix) == whole, fix
        # alone (no checkpoints written for a replay to come): the same, and nothing kept
        assert tl._base.replay(tl, fix, alone=True) == whole, fix
        assert tl._base._last is None
    assert used >= 12


def _chain_timeline(which: str, synthetic, seed: int):
    """The timeline a chain test replays (``synthetic_anchored``: the synthetic capture with
    one operation in 20 launched by no call), and the test's random generator."""
    tl = analyze(EBPF_SAMPLE if which == "ebpf_sample" else synthetic, lambda _stage: None,
                 "steady").timeline
    rng = np.random.default_rng(seed)
    if which == "synthetic_anchored":
        tl.op_call = tl.op_call.copy()
        tl.op_call[rng.choice(len(tl.op_call), size=len(tl.op_call) // 20, replace=False)] = -1
    return tl, rng


@pytest.mark.parametrize("which", ["ebpf_sample", "synthetic", "synthetic_anchored"])
def test_a_chain_of_fixes_replays_from_the_one_before(which, synthetic, sparse):
    """The rules' replays of every fix ranked above a finding, and it: each differs from the
    replay before by one finding's edits, and runs from that replay's checkpoints where the
    two differ. Each ends when its whole replay does; and a fix replayed after an unrelated
    one (not a superset of it) too."""
    tl, rng = _chain_timeline(which, synthetic, 29)
    n = tl.n_calls
    from_last = 0
    for _chain in range(3):
        together = None
        for _ in range(8):
            part = replay.Fix()
            k = int(rng.integers(1, max(2, n // 200)))
            kind = rng.choice(["cost", "gap", "gpu", "unblock"], p=[0.35, 0.3, 0.3, 0.05])
            if kind == "unblock":  # a removed wait: the dense kernels, then from the unfixed
                part.unblock_calls = np.sort(rng.choice(np.nonzero(tl.waits)[0], size=1))
            else:
                _random_edit(tl, rng, part, kind, k)
            if together is not None and rng.random() < 0.5:  # some edited again, shorter
                again = replay.Fix(cost_calls=together.cost_calls[::3],
                                   cost_ns=together.cost_ns[::3] // 2,
                                   gpu_ops=together.gpu_ops[::3],
                                   gpu_dur_ns=together.gpu_dur_ns[::3] // 2)
                part = replay.Fix.combine([part, again])
            together = part if together is None else replay.Fix.combine([together, part])
            got = tl.replay(together)
            stats = getattr(tl._base, "sparse_stats", None)
            from_last += bool(stats is not None and stats[2])
            tl._base.sparse_stats = None
            assert got == tl.replay(together, incremental=False), together
    assert from_last >= 5


def test_each_compiled_replay_loop_is_called_with_one_set_of_types(synthetic, sparse,
                                                                    monkeypatch):
    """numba compiles a loop once per set of argument types (the sparse replay ~4-5 s on a
    first run), and an array's integer width and whether it may be written are part of its
    type. The whole replay and a fix's incremental one, on a timeline whose arrays are
    polars' own read-only buffers and on one whose are copies (as polars hands a column in
    several pieces, as at 10 M operations), call the epoch loop, the sparse replay and the
    fused shift kernel each with one set of types (the epoch loop had two: int64 positions
    from the whole replay, int32 from a fix's; the sparse replay a second for a writable
    ``op_call``)."""
    from numba import typeof
    from zym.analysis.compiled import reading_read_only

    seen: dict[str, set] = {"epochs": set(), "sparse": set(), "shifts": set()}

    def recording(name: str, loop):
        """``loop`` (as ``njit`` gives it) recording the types its compiled code is given."""
        fast = loop.dispatcher

        def call(*args):
            seen[name].add(tuple(typeof(a) for a in args))
            return fast(*args)
        return reading_read_only(fast.py_func, call)

    epochs, sparse_loops, shifts = (replay._compiled_epochs(), replay._compiled_sparse(),
                                    replay._compiled_shifts())
    monkeypatch.setattr(replay, "_compiled_epochs", lambda: recording("epochs", epochs))
    monkeypatch.setattr(replay, "_compiled_shifts", lambda: recording("shifts", shifts))
    monkeypatch.setattr(replay, "_compiled_sparse",
                        lambda: (recording("sparse", sparse_loops[0]), *sparse_loops[1:]))
    tl = analyze(synthetic, lambda _stage: None, "steady").timeline
    rng = np.random.default_rng(29)
    fixes = [_random_fix(tl, rng) for _ in range(30)]
    for copies in (False, True):
        if copies:
            tl.op_call, tl.op_anchor = tl.op_call.copy(), tl.op_anchor.copy()
            assert tl.op_call.flags.writeable
        for fix in fixes:
            for sparse_on in (True, False):  # (the fused shifts: the dense replay's)
                monkeypatch.setattr(replay, "SPARSE", sparse_on)
                tl._base._last = None
                assert tl.replay(fix) == tl.replay(fix, incremental=False), fix
    assert {name: len(types) for name, types in seen.items()} == {
        "epochs": 1, "sparse": 1, "shifts": 1}


def test_the_epoch_loops_arguments_take_one_type_from_either_replay():
    """``_epoch_types``: int64 positions (the whole replay's) and int32 ones (a fix's) give the
    same types, the same values, and the threads' delays and streams' maxima (written in
    place) are the very arrays given."""
    rng = np.random.default_rng(3)
    wide = tuple(rng.integers(0, 50, 40) for _ in range(5)) + (rng.integers(0, 2, 40),) + tuple(
        rng.integers(-9, 9, 40) for _ in range(5)) + (np.zeros(4, np.int64),
                                                      np.full(3, -1, np.int64))
    narrow = tuple(a.astype(np.int32) for a in wide[:5]) + (wide[5].astype(np.int8),) + wide[6:]
    a, b = replay._epoch_types(wide), replay._epoch_types(narrow)
    assert [x.dtype for x in a] == [x.dtype for x in b]
    assert [x.dtype for x in a[:6]] == [np.int32] * 5 + [np.int8]
    assert all(np.array_equal(x, y) for x, y in zip(a, wide))
    assert a[-2] is wide[-2] and a[-1] is wide[-1]


@pytest.mark.parametrize("which", ["ebpf_sample", "synthetic"])
def test_the_sparse_replay_of_late_gpu_work(which, synthetic, sparse):
    """Shorter operations among the last of each stream, which no later call waits for: the
    replay's streams end sooner while its threads do not move, so the state is not the
    reference's translated (every stream is compared, not only the threads)."""
    tl = analyze(EBPF_SAMPLE if which == "ebpf_sample" else synthetic, lambda _stage: None,
                 "steady").timeline
    rng = np.random.default_rng(3)
    gpu_of_pos = np.argsort(tl.pos_of_gpu)[-len(tl.op_dur):]  # gpu_idx by stream position
    last = np.nonzero(np.append(tl.op_sid[1:] != tl.op_sid[:-1], True))[0]
    for back in (0, 1, 2, 5, 20, 60):
        ops = np.sort(gpu_of_pos[np.maximum(last - back, 0)])
        fix = replay.Fix(gpu_ops=ops, gpu_dur_ns=(tl.op_dur[tl.pos_of_gpu[ops]]
                                                  * rng.random(len(ops))).astype(np.int64))
        assert _used_sparse(tl, fix)
        tl._base._last = None
        assert tl.replay(fix) == tl.replay(fix, incremental=False), back


def _random_edit(tl, rng: np.random.Generator, part: replay.Fix, kind: str, k: int) -> None:
    """``k`` random calls made cheaper (``cost``) or their gaps shorter (``gap``), or up to
    ``k`` operations shorter (``gpu``), set on ``part``."""
    n, m = tl.n_calls, len(tl.pos_of_gpu)
    if kind == "cost":
        part.cost_calls = np.sort(rng.choice(n, size=k, replace=False))
        part.cost_ns = (tl.intrinsic[part.cost_calls] * rng.random(k)).astype(np.int64)
    elif kind == "gap":
        part.gap_calls = np.sort(rng.choice(n, size=k, replace=False))
        part.gap_ns = (tl.gap[part.gap_calls] * rng.random(k)).astype(np.int64)
    else:
        part.gpu_ops = np.sort(rng.choice(m, size=min(k, m), replace=False))
        part.gpu_dur_ns = rng.integers(0, 50_000, len(part.gpu_ops))


def _chain_part(tl, rng: np.random.Generator, parts: list[replay.Fix]) -> replay.Fix:
    """A finding's fix as the pinned-memory model makes them (cheaper calls, shorter
    operations, shorter gaps), some of it editing again what earlier parts edited, with
    smaller and with larger values, and calls named twice; or as the unblock model makes
    them (waits taken away, some taken by an earlier part already)."""
    n = tl.n_calls
    k = int(rng.integers(1, max(2, n // 150)))
    part = replay.Fix()
    waiting = np.flatnonzero(tl.waits)
    if rng.random() < 0.25 and len(waiting):
        part.unblock_calls = np.sort(rng.choice(waiting, size=min(len(waiting), k),
                                                replace=False))
        if parts and rng.random() < 0.5:
            part.unblock_calls = np.union1d(part.unblock_calls, parts[-1].unblock_calls)
        return _messy(part, rng) if rng.random() < 0.3 else part
    for kind in rng.choice(["cost", "gap", "gpu"], size=int(rng.integers(1, 4)), replace=False):
        _random_edit(tl, rng, part, kind, k)
    if parts and rng.random() < 0.6:  # again: half smaller, half larger than before
        old = parts[int(rng.integers(len(parts)))]
        scale = np.where(rng.random(len(old.cost_calls)) < 0.5, 0.5, 3.0)
        gscale = np.where(rng.random(len(old.gpu_ops)) < 0.5, 0.5, 3.0)
        hscale = np.where(rng.random(len(old.gap_calls)) < 0.5, 0.5, 3.0)
        part = replay.Fix.combine([part, replay.Fix(
            cost_calls=old.cost_calls, cost_ns=(old.cost_ns * scale).astype(np.int64),
            gap_calls=old.gap_calls, gap_ns=(old.gap_ns * hscale).astype(np.int64),
            gpu_ops=old.gpu_ops, gpu_dur_ns=(old.gpu_dur_ns * gscale).astype(np.int64))])
    return _messy(part, rng) if rng.random() < 0.3 else part


@pytest.mark.parametrize("which", ["ebpf_sample", "synthetic", "synthetic_anchored"])
def test_a_chained_fix_merges_its_edits_into_the_last_replays(which, synthetic, sparse):
    """``Fix.chain`` (the rules' fixes so far, and one finding's more): replayed right after
    the chain before it, its edit set is that replay's with the new fix's edits merged in
    (``_Base._replay_chained``). Each link ends when its whole replay does, and the merged
    edit set (calls by thread position with their changes and running sums, operations with
    theirs) and differences are those of the same fix combined and replayed from scratch."""
    tl, rng = _chain_timeline(which, synthetic, 41)
    base = tl._base
    chained = 0
    merge = replay._Base._replay_chained

    def counted(self, tl, fix):
        nonlocal chained
        out = merge(self, tl, fix)
        chained += out is not None
        return out

    keys = ("e_pos", "d_step", "d_own", "pe", "moved", "ebase", "q", "d_span", "pq", "qbase",
            "unwait", "ck_delay", "ck_ready", "fin_delay", "fin_ready")
    run = replay._Base._run_sparse
    merged: list = []  # the differences the merge found, per chained replay

    def recorded(self, tl, mine, x_last, *more):
        merged.append(x_last)
        return run(self, tl, mine, x_last, *more)

    replay._Base._replay_chained = counted
    replay._Base._run_sparse = recorded
    try:
        for _chain in range(3):
            parts: list[replay.Fix] = []
            together = previous = None
            for _ in range(8):
                merged.clear()
                part = _chain_part(tl, rng, parts)
                parts.append(part)
                together = (replay.Fix.combine([part]) if together is None
                            else replay.Fix.chain(together, part))
                got = tl.replay(together)
                kept = base._last
                flat = replay.Fix.combine(parts)
                assert got == tl.replay(flat, incremental=False)
                # the same fix, combined flat, replayed from the same reference
                x_merged = merged[-1] if merged else None
                if kept is not None and len(parts) > 1:
                    if x_merged is not None:  # as those of the two edit sets, merged whole
                        x = base._differences(base._sparse, kept, previous)
                        for k in x:
                            assert np.array_equal(x[k], x_merged[k]), k
                    base._last = previous
                    assert tl.replay(flat) == got
                    for k in keys:
                        assert np.array_equal(base._last[k], kept[k]), k
                    base._last = kept
                previous = kept
    finally:
        replay._Base._replay_chained = merge
        replay._Base._run_sparse = run
    assert chained >= 12


@pytest.mark.parametrize("threads", ["3", "4"])
def test_findings_are_the_same_with_replays_on_several_threads(threads, synthetic, monkeypatch):
    """The compiled replays (sparse where they can, dense under their lock where not) on
    several threads, the fixes together in runs of two: the report of one thread, and of
    whole replays (each outcome computed from nothing)."""
    if replay._compiled_sparse() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    from zym.rules import findings

    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "1")
    one = _report(synthetic, 0, monkeypatch)
    assert sum(f["saving_ns"] is not None for f in one["findings"]) >= 6
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, threads)
    monkeypatch.setattr(findings, "MIN_RUN", 2)
    assert _report(synthetic, 0, monkeypatch) == one
    whole = replay.Timeline.replay
    monkeypatch.setattr(replay.Timeline, "replay",
                        lambda self, fix, deflate=True, incremental=True, **_:
                        whole(self, fix, deflate, incremental=False))
    assert _report(synthetic, 0, monkeypatch) == one


def test_dense_replays_on_several_threads_share_their_buffers_one_at_a_time(synthetic,
                                                                           monkeypatch):
    """Every replay dense (the sparse replay off): the compiled kernels write into buffers the
    state keeps, so two threads' replays take turns (a lock). On 3 threads, with the fixes
    together in runs of two, some replay waits for another's turn, and the report is the one
    thread's."""
    if replay._compiled_sparse() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    import threading
    import time

    from zym.rules import findings

    monkeypatch.setattr(replay, "SPARSE", False)
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "1")
    one = _report(synthetic, 0, monkeypatch)
    assert sum(f["saving_ns"] is not None for f in one["findings"]) >= 6
    dense = replay._Base._replay_dense
    inside, most, waited, guard = [0], [0], [0], threading.Lock()

    def counted(self, *a, **kw):   # how many dense replays run at once (1: the lock holds)
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)          # long enough for another thread to reach the lock
        try:
            return dense(self, *a, **kw)
        finally:
            with guard:
                inside[0] -= 1

    class Watched:                  # the state's lock, counting the times a thread waited
        def __init__(self):
            self._lock = threading.Lock()

        def __enter__(self):
            if not self._lock.acquire(blocking=False):
                waited[0] += 1
                self._lock.acquire()
            return self

        def __exit__(self, *exc):
            self._lock.release()

    base_init = replay._Base.__init__

    def init(self, tl):
        base_init(self, tl)
        self._dense = Watched()

    monkeypatch.setattr(replay._Base, "_replay_dense", counted)
    monkeypatch.setattr(replay._Base, "__init__", init)
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "3")
    monkeypatch.setattr(findings, "MIN_RUN", 2)
    assert _report(synthetic, 0, monkeypatch) == one
    assert most[0] == 1 and waited[0] > 0


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("ids", ["small", "one process", "packed", "extremes"])
def test_previous_call_on_each_thread_matches_a_walk(ids, compiled, monkeypatch):
    """By radix where the ids span less than 2^16 (small ones, one process's threads), else
    by a sort of the ids themselves (several processes, the int64 extremes); the previous
    calls by numpy passes and by the compiled pass (numba, used from ``JIT_MIN_CALLS``)."""
    from zym.analysis import instances
    from zym.analysis.instances import previous_on_thread, thread_order

    if compiled and instances._compiled_previous() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    monkeypatch.setattr(instances, "JIT_MIN_CALLS", 0 if compiled else 1 << 62)

    rng = np.random.default_rng(11)
    keys = np.array({"small": [3, -7, 12, 900],
                     "one process": [(4242 << 32) | 17, (4242 << 32) | 65000, (4242 << 32) | 9],
                     "packed": [(4242 << 32) | 17, (4242 << 32) | 18, (77 << 32) | 17, 5],
                     "extremes": [-(1 << 63), (1 << 63) - 1, 0]}[ids], np.int64)
    thread = keys[rng.integers(0, len(keys), 5000)]
    last: dict[int, int] = {}
    want = []
    for row, t in enumerate(thread.tolist()):
        want.append(last.get(t, -1))
        last[t] = row
    order = thread_order(thread)
    assert np.array_equal(order, np.argsort(thread, kind="stable"))
    assert previous_on_thread(thread, order).tolist() == want
    assert previous_on_thread(thread[:1], thread_order(thread[:1])).tolist() == [-1]
    counts = rng.random(len(thread)) < 0.3     # only these calls count as previous ones
    last, want = {}, []
    for row, (t, c) in enumerate(zip(thread.tolist(), counts.tolist())):
        want.append(last.get(t, -1))
        if c:
            last[t] = row
    assert previous_on_thread(thread, order, counts).tolist() == want


@pytest.mark.parametrize("which", ["ebpf sample", "kineto sample", "synthetic"])
def test_the_previous_calls_columns_match_a_walk(which, synthetic):
    """``follows_dtoh``, ``follows_copy`` and ``prev_copy_bytes`` of the calls relation, as a
    walk over the calls in time order, keeping each thread's last call that does GPU work,
    waits or manages memory, says."""
    path = {"ebpf sample": EBPF_SAMPLE, "kineto sample": SAMPLE}.get(which, synthetic)
    analysis = analyze(path, lambda _stage: None, "steady")
    calls = analysis.relations.calls_table()
    columns = ("follows_dtoh", "follows_copy", "prev_copy_bytes", "follows_dtoh_elsewhere",
               "prev_copy_site")
    got = analysis.relations.materialize("calls", set(columns)).sort("call_idx")
    label = dict(analysis.facts.sites.select("stack_id", "site").iter_rows())
    code = dict(analysis.facts.sites.select("stack_id", "code_site").iter_rows())
    last: dict[tuple, tuple] = {}
    want = []
    memory = re.compile(MEMORY_PATTERN)
    for pid, tid, kind, copy_kind, nbytes, stack, blocks, api in calls.select(
            "pid", "tid", "kind", "copy_kind", "bytes", "stack_id", "blocking",
            pl.col("api").cast(pl.String)).iter_rows():
        prev = last.get((pid, tid))
        copy = prev is not None and prev[0] == "copy"
        dtoh = copy and prev[1] == "DtoH"
        want.append((dtoh, copy, prev[2] if copy else None,
                     dtoh and code.get(stack) != prev[3], prev[4] if copy else None))
        if kind != "other" or blocks or memory.search(api or ""):
            last[(pid, tid)] = (kind, copy_kind, nbytes, code.get(stack), label.get(stack))
    assert got["call_idx"].to_list() == list(range(calls.height))
    assert list(got.select(columns).iter_rows()) == want
    assert sum(w[1] for w in want) > 100 and sum(w[0] for w in want) > 10
    if which == "kineto sample":   # torch's bookkeeping calls sit between copies and syncs
        assert (calls["kind"] == "other").sum() > 1_000
    if which == "synthetic":   # its threads interleave sites at random
        assert 0 < sum(w[3] for w in want) < sum(w[0] for w in want)


def _periodic_by_brute_force(ids, symbol, inner, min_repeats, min_period):
    """``split_periodic``'s ids by trying each period of each run, shortest first."""
    out, count, i = np.full(len(ids), -1, np.int64), 0, 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[i]:
            j += 1
        m, run = j - i + 1, symbol[i:j + 1]
        period = m
        one_inner = inner[i] >= 0 and (inner[i:j + 1] == inner[i]).all()
        if ids[i] >= 0 and not one_inner:
            for p in range(1, m // min_repeats + 1):
                if m % p == 0 and all(run[q] == run[q % p] for q in range(m)):
                    period = p if p >= min_period else m
                    break
        for q in range(m):
            if q % period == 0:
                count += 1
            if ids[i] >= 0:
                out[i + q] = count
        i = j + 1
    return out


def test_split_periodic_matches_trying_every_period():
    """Runs repeating one sequence of stacks split into their repetitions (the per-item search
    of eBPF captures): what trying every period of each run, shortest first, gives; on runs
    that repeat 1-9 times a sequence of 1-6 calls (some with a stray call at the end, some
    every call inside one frame below, some partly)."""
    from zym.analysis import instances

    rng = np.random.default_rng(7)
    ids, symbol, inner = [], [], []
    for run in range(400):
        unit = rng.integers(0, 3, rng.integers(1, 7)).tolist()
        seq = unit * int(rng.integers(1, 10)) + ([9] if rng.random() < 0.2 else [])
        ids += [run if rng.random() > 0.1 else -1] * len(seq)
        symbol += seq
        below = rng.choice([-1, 5, 6], len(seq), p=[0.6, 0.3, 0.1]).tolist()
        inner += [5] * len(seq) if rng.random() < 0.1 else below
    ids, symbol, inner = np.array(ids), np.array(symbol), np.array(inner)
    got = instances.split_periodic(ids, symbol, inner, 4)
    expected = _periodic_by_brute_force(ids, symbol, inner, 4, 2)
    assert np.array_equal(got >= 0, expected >= 0)
    # the same calls share an id (the counts themselves differ where -1 runs are skipped)
    def starts(a):
        return np.r_[True, a[1:] != a[:-1]][a >= 0]
    assert np.array_equal(starts(got), starts(expected))
    assert (got >= 0).any() and len(np.unique(got[got >= 0])) > len(np.unique(ids[ids >= 0]))
