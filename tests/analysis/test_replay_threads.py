"""The what-if replay of several CPU threads launching onto one GPU stream.

Each thread's calls between two of its own waits used to be folded into the stream as one unit
before that unit's wait: where another thread waited in between, that wait counted this
thread's later launches as awaited, and the other thread waited for work not yet launched (on
the H200 thread-pool service, bench/whatif/workloads/pooled.py, the unfixed replay was +22% off
the recording and removing the workers' ``.item()`` syncs made the replay longer).

The outcomes are checked against hand-worked timelines and against a second method: a
fixed-point simulation of the same model, call by call and operation by operation (below),
on random captures of two and three threads.
"""
from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from zym.analysis import replay
from zym.analysis.replay import Fix
from zym.rules.testing import CaptureBuilder

STEP = [("python", "main", "app.py", 1), ("python", "work", "app.py", 20)]
SYNC = "cudaStreamSynchronize"
T0 = 1_000_000_000
NEG = -(1 << 62)
SEEDS = 40


@pytest.fixture(autouse=True, params=["interpreted", "compiled"])
def engine(request, monkeypatch):
    """Every expectation holds for the loops interpreted and compiled (numba)."""
    if request.param == "compiled" and replay._compiled_epochs() is None:
        pytest.skip("numba not installed (a zym dependency: pip install -e .)")
    monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", 0 if request.param == "compiled" else 1 << 62)
    return request.param


def at(b: CaptureBuilder, tid: int, us: float) -> CaptureBuilder:
    b.tid, b.now = tid, T0 + int(us * 1000)
    return b


def straddling() -> CaptureBuilder:
    """Thread 2 launches k1 at 0 and k3 at 2000 us and never waits; thread 1 launches k2 at
    100 us (GPU 101-201), syncs at 106 (returns at 202), works 50 us, launches k4 (GPU 10
    us). Recorded: thread 1's last call ends at 264 us, k3 runs 2001-2011: the window ends
    at 2011 us. Thread 2's only epoch holds k1 and k3; folded before thread 1's sync, k3
    (launched 1,894 us after it) counted as awaited."""
    b = CaptureBuilder()
    at(b, 2, 0).kernel(STEP, "k1", gpu_us=10)
    at(b, 1, 100).kernel(STEP, "k2", gpu_us=100)
    b.call(STEP, SYNC, "sync", 2.0)
    b.tick(50)
    b.kernel(STEP, "k4", gpu_us=10)
    at(b, 2, 2000).kernel(STEP, "k3", gpu_us=10)
    return b


def test_a_wait_does_not_wait_for_another_threads_later_launches():
    a = straddling().analysis()
    tl = a.timeline
    assert tl.threads == 2
    assert tl.baseline.end_ns == T0 + 2_011_000  # the recording (by hand, above)
    assert tl.baseline.cpu_end_ns == T0 + 2_005_000  # k3's launch call returns at 2005 us
    assert tl.fidelity["error_pct"] == 0.0


def test_a_thread_that_bounds_nothing_saves_nothing():
    """Thread 1's sync holds back only thread 1, which ends ~1.7 ms before the window does:
    removing it saves nothing (the old fold made thread 1 wait for k3, and the fix 'saved'
    that wait)."""
    a = straddling().analysis()
    sync = a.facts.calls.filter(pl.col("api").cast(pl.String) == SYNC)["call_idx"].to_numpy()
    assert a.timeline.saving(Fix(remove_calls=sync)) == 0


def test_waits_removed_on_every_thread_save_each_threads_wait():
    """Two threads, each: launch (GPU 200 us), sync, 20 us of work, launch (GPU 200 us),
    sync, 6-10 us apart. Recorded (us): kernels 1-201 and 201-401; the four syncs return at
    402; the second kernels launch at 422 and 428 and run 423-623 and 623-823; the last
    syncs return at 824. Without the first two syncs (their gaps before them stay), the
    second launches come at 40 and 56 us and queue behind the first kernels: 401-601,
    601-801, and the last syncs return at 802 (their 1 us of own cost after the GPU)."""
    b = CaptureBuilder()
    at(b, 1, 0).kernel(STEP, "a", gpu_us=200)
    at(b, 2, 10).kernel(STEP, "a", gpu_us=200)
    at(b, 1, 20).call(STEP, SYNC, "sync", 2.0)
    at(b, 2, 30).call(STEP, SYNC, "sync", 2.0)
    at(b, 1, 422).kernel(STEP, "b", gpu_us=200)
    at(b, 2, 428).kernel(STEP, "b", gpu_us=200)
    at(b, 1, 434).call(STEP, SYNC, "sync", 2.0)
    at(b, 2, 440).call(STEP, SYNC, "sync", 2.0)
    assert [c["ts_ns"] + c["dur_ns"] - T0 for c in b.calls[2:4]] == [402_000, 402_000]
    a = b.analysis()
    tl = a.timeline
    assert tl.baseline.end_ns == T0 + 824_000
    first_syncs = a.facts.calls.filter(pl.col("api").cast(pl.String) == SYNC)["call_idx"][:2]
    fixed = tl.replay(Fix(remove_calls=first_syncs.to_numpy()))
    assert fixed.end_ns == T0 + 802_000
    assert tl.saving(Fix(remove_calls=first_syncs.to_numpy())) == 22_000


def test_the_window_ends_with_its_steps_thread():
    """Thread 1 runs the steps: k1 (GPU 1-101), a sync at 6 us (returns at 102), 50 us of
    work, k2 at 153 (GPU 154-164), a sync returning at 165. A background thread launches at
    20 (GPU 101-106) and at 1025 us (GPU 1026-1031). The window of the steps ends with
    thread 1 at 165 us; without its first sync, k2 launches at 57 and runs 101-111 right
    after k1 (the background's kernels are left out of a replay of the steps: that thread
    runs at its own pace beside them), and the last sync returns at 112: 53 us sooner.
    Ended by every thread, the window ends with the background's last kernel either way."""
    b = CaptureBuilder()
    at(b, 1, 0).kernel(STEP, "k1", gpu_us=100)
    at(b, 1, 6).call(STEP, SYNC, "sync", 2.0)
    at(b, 2, 20).kernel(STEP, "bg", gpu_us=5)
    at(b, 1, 153).kernel(STEP, "k2", gpu_us=10)
    b.call(STEP, SYNC, "sync", 2.0)
    at(b, 2, 1025).kernel(STEP, "bg", gpu_us=5)
    a = b.analysis()
    key = int(a.facts.calls.filter(pl.col("tid") == 1)["_thread"][0])
    first_sync = a.facts.calls.filter(pl.col("api").cast(pl.String) == SYNC)["call_idx"][:1]
    fix = Fix(remove_calls=first_sync.to_numpy())
    steps = replay.Timeline(a.facts, 0, step_threads=[key])
    assert steps.baseline.end_ns == T0 + 165_000
    assert steps.saving(fix) == 53_000
    every = replay.Timeline(a.facts, 0)
    assert every.baseline.end_ns == T0 + 1_031_000
    assert every.saving(fix) == 0


# -- a second method -----------------------------------------------------------------------------

def reference(tl, fix: Fix) -> tuple[int, int, int]:
    """The replay model simulated directly: every call's start from its thread's previous
    end and gap (a waiting call starts its own cost once what it waits for has ended), every
    operation's start from its launch and the one before it on its stream, iterated until no
    time moves (each pass settles at least one more wait in time order)."""
    gap, cost, waits, op_dur, op_lat, op_gap, op_call, gone = tl._edit(fix, True)
    n, n_ops = tl.n_calls, len(op_dur)
    order, first = tl.order, tl.first_of_thread
    threads = np.split(order, np.flatnonzero(first)[1:]) if n else []
    at, own_pos = tl._awaited_positions(np.arange(n))
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    op_end = np.full(n_ops, NEG, np.int64)
    for _ in range(n + 3):
        for th in threads:
            prev = 0
            for c in th:
                s = prev + gap[c]
                e = s
                if waits[c]:
                    if own_pos[c] >= 0:
                        g = op_end[own_pos[c]]
                    else:
                        g = max([op_end[p] for p in at[c] if p >= 0], default=NEG)
                    e = max(s, g)
                start[c], end[c] = s, e + cost[c]
                prev = end[c]
        new = np.full(n_ops, NEG, np.int64)
        for j in range(n_ops):
            head = j == 0 or tl.op_sid[j] != tl.op_sid[j - 1]
            before = NEG if head else new[j - 1]
            if gone[j]:
                new[j] = before
                continue
            # (the other threads' operations, beside the window's: at their recorded launch)
            ready = (start[op_call[j]] + op_lat[j] if op_call[j] >= 0 and not tl.op_exo[j]
                     else tl.op_anchor[j] - tl.w0)
            new[j] = max(ready, before + op_gap[j]) + op_dur[j]
        if np.array_equal(new, op_end):
            break
        op_end = new
    # Ended by one thread (the steps'): its last call, and the streams whose last operation
    # it launched.
    mine = (lambda t: True) if tl.end_threads is None else (lambda t: tl.end_threads[t])
    thread_of = {int(c): t for t, th in enumerate(threads) for c in th}
    cpu = max((int(end[th[-1]]) for t, th in enumerate(threads) if mine(t)), default=NEG)
    gpu = max([int(op_end[j]) for j in range(n_ops)
               if (j == n_ops - 1 or tl.op_sid[j] != tl.op_sid[j + 1])
               and (tl.end_threads is None or (op_call[j] >= 0
                                              and mine(thread_of[int(op_call[j])])))],
              default=NEG)
    return tl.w0 + max(cpu, gpu), tl.w0 + cpu, tl.w0 + gpu


def random_capture(seed: int, threads: int, events: int | None = None) -> CaptureBuilder:
    """Threads taking turns in time order (the builder's GPU is one stream): launches,
    syncs, blocking copies and CPU work of random lengths."""
    rng = random.Random(seed)
    b = CaptureBuilder()
    clock = {t: rng.uniform(0, 30) for t in range(1, threads + 1)}
    for _ in range(events or rng.randint(8, 40)):
        tid = min(clock, key=clock.get)
        at(b, tid, clock[tid])
        what = rng.random()
        if what < 0.5:
            b.kernel(STEP, f"k{rng.randint(0, 3)}", gpu_us=rng.uniform(1, 300),
                     cpu_us=rng.uniform(2, 8))
        elif what < 0.75:
            b.call(STEP, SYNC, "sync", rng.uniform(1, 4))
        else:
            b.copy(STEP, "DtoH", 64)
        b.tick(rng.uniform(0, 120))
        clock[tid] = (b.now - T0) / 1000
    return b


def random_fix(tl, rng: random.Random) -> Fix:
    n = tl.n_calls
    if rng.random() < 0.3:  # one edit, no wait removed
        if rng.random() < 0.5:
            return Fix(gap_calls=np.array([rng.randrange(n)], np.int64),
                       gap_ns=np.array([rng.randint(0, 50_000)], np.int64))
        ops = np.flatnonzero(tl.pos_of_gpu >= 0)
        return Fix(gpu_ops=np.array([ops[rng.randrange(len(ops))]], np.int64),
                   gpu_dur_ns=np.array([rng.randint(0, 100_000)], np.int64))
    waits = np.flatnonzero(tl.waits)
    pick = (lambda a, p: np.array(sorted(x for x in a if rng.random() < p), np.int64))
    calls = np.arange(n)
    gaps = pick(calls, 0.3)
    ops = pick(np.flatnonzero(tl.pos_of_gpu >= 0), 0.3)
    keeps_waits = rng.random() < 0.4
    return Fix(remove_calls=pick(waits, 0 if keeps_waits else 0.4),
               unblock_calls=pick(waits, 0 if keeps_waits else 0.2),
               gap_calls=gaps, gap_ns=np.array([rng.randint(0, 50_000) for _ in gaps], np.int64),
               gpu_ops=ops, gpu_dur_ns=np.array([rng.randint(0, 100_000) for _ in ops], np.int64))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_replays_equal_the_direct_simulation(threads, engine):
    checked = sparse = 0
    for seed in range(SEEDS):
        a = random_capture(seed * 7 + threads, threads).analysis()
        tl = a.timeline
        if seed % 2:  # the window ended by one thread's steps (the last call's thread)
            tl = replay.Timeline(a.facts, 0, step_threads=[int(a.facts.calls["_thread"][-1])])
        if not tl.usable:
            continue
        assert tl.threads == threads or tl.n_calls < 3
        rng = random.Random(seed)
        for fix in [Fix()] + [random_fix(tl, rng) for _ in range(4)]:
            want = reference(tl, fix)
            tl._base.sparse_stats = None
            got = tl.replay(fix)
            assert (got.end_ns, got.cpu_end_ns, got.gpu_end_ns) == want, (seed, fix)
            sparse += tl._base.sparse_stats is not None
            whole = tl._replay_whole(fix)
            assert (whole.end_ns, whole.cpu_end_ns, whole.gpu_end_ns) == want, (seed, fix)
            checked += 1
    assert checked >= 100
    if engine == "compiled" and replay._compiled_sparse() is not None:
        assert sparse >= 10  # the sparse path ran, on every thread count


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_one_edit_replays_of_longer_captures_equal_the_direct_simulation(threads, engine):
    """Fixes of one edit each (a gap, an operation, a wait taken away or a waiting call
    removed), chained as the rules chain them, on captures of 300 calls: with numba, the
    sparse replay runs them from the unfixed or the last replay's state, and each edited
    call's epoch is read by its position (with several threads it is not its count of waits
    before it on its thread)."""
    sparse = unwaited = 0
    for seed in range(3):
        tl = random_capture(1000 + seed, threads, events=300).analysis().timeline
        rng = random.Random(seed)
        ops = np.flatnonzero(tl.pos_of_gpu >= 0)
        waits = np.flatnonzero(tl.waits)
        for _ in range(30):
            kind = rng.random()
            if kind < 0.35:
                fix = Fix(gap_calls=np.array([rng.randrange(tl.n_calls)], np.int64),
                          gap_ns=np.array([rng.randint(0, 50_000)], np.int64))
            elif kind < 0.7:
                fix = Fix(gpu_ops=np.array([ops[rng.randrange(len(ops))]], np.int64),
                          gpu_dur_ns=np.array([rng.randint(0, 100_000)], np.int64))
            elif kind < 0.85:
                fix = Fix(unblock_calls=np.array([waits[rng.randrange(len(waits))]], np.int64))
            else:
                fix = Fix(remove_calls=np.array([waits[rng.randrange(len(waits))]], np.int64))
            tl._base.sparse_stats = None
            got = tl.replay(fix)
            assert (got.end_ns, got.cpu_end_ns, got.gpu_end_ns) == reference(tl, fix), seed
            ran_sparse = tl._base.sparse_stats is not None
            sparse += ran_sparse
            unwaited += ran_sparse and kind >= 0.7
    if engine == "compiled" and replay._compiled_sparse() is not None:
        assert sparse >= 50 and unwaited >= 15
