"""The GPU side of `zym capture --rotate` (capture/cupti/rolling.py): CUPTI's records shared out
among interval files, each given once and with its call, spool segments read as they come and
removed once read, kernel names read from the running target."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from itertools import pairwise
from pathlib import Path

import polars as pl
from cupti_world import make_world
from zym.capture.cupti import target_env
from zym.capture.cupti.decode import CuptiTables
from zym.capture.cupti.rolling import GpuPool, read_c_strings


def _pool_of(world, tmp_path: Path) -> GpuPool:
    pool = GpuPool(tmp_path)   # no spool files: the records are put in directly
    pool._parts = [CuptiTables(api=world.api, gpu=world.gpu)]
    pool._headers = {100: {"pid": 100}}
    return pool


def test_each_gpu_record_goes_once_to_the_interval_of_its_call(tmp_path):
    kinds = ["launch", "copy", "launch", "memset", "sync", "launch", "graph", "nogpu"] * 6
    world = make_world({11: kinds, 12: kinds[::-1]}, seed=3)
    # make_world appends a call and its record together: row i of the calls made row i of truth
    calls = world.calls.with_row_index("call")
    owner = world.truth.with_row_index("call").select("call", "pid", "correlation_id")
    records = (world.api.join(owner, on=["pid", "correlation_id"])
               .join(calls.select("call", pl.col("ts_ns").alias("entry")), on="call"))
    # boundaries 300 ns before a driver call's entry, inside its runtime record: the record
    # starts in one interval, its call in the next
    inside = records.filter(pl.col("ts_ns") < pl.col("entry") - 300).sort("entry")
    cuts = [int(e) - 300 for e in inside["entry"].gather_every(inside.height // 4 + 1)[1:]]
    assert len(cuts) >= 3
    pool = _pool_of(world, tmp_path)
    bounds = [int(calls["ts_ns"].min()), *cuts, None]
    got = []
    for start, end in pairwise(bounds):
        mine = calls.filter(pl.col("ts_ns") >= start)
        mine = mine if end is None else mine.filter(pl.col("ts_ns") < end)
        taken, headers, _ = pool.take(mine.drop("call"), end, final=end is None)
        assert headers == [{"pid": 100}]
        got.append((set(mine["call"].to_list()), taken))
    # every GPU and API record once, none lost
    ids = ["pid", "correlation_id", "ts_ns"]
    given = pl.concat([t.gpu.select(ids) for _, t in got]).sort(ids)
    assert given.equals(world.gpu.select(ids).sort(ids))
    assert pl.concat([t.api.select(ids) for _, t in got]).sort(ids).equals(
        world.api.select(ids).sort(ids))
    # each record is in the interval holding the call that caused it
    for mine, taken in got:
        assert set(taken.gpu.join(owner, on=["pid", "correlation_id"])["call"].to_list()) <= mine
        assert set(taken.api.join(owner, on=["pid", "correlation_id"])["call"].to_list()) == mine


def test_records_without_an_api_record_go_by_start_time(tmp_path):
    world = make_world({11: ["launch"] * 20}, seed=1)
    orphan = world.gpu.head(3).with_columns(pl.lit(None, pl.Int64).alias("correlation_id"))
    pool = _pool_of(world, tmp_path)
    pool._parts[0].gpu = pl.concat([world.gpu, orphan])
    cut = int(orphan["ts_ns"].max()) + 1
    taken, _, counts = pool.take(world.calls.filter(pl.col("ts_ns") < cut), cut)
    assert counts["gpu_ops_by_time"] == 3
    rest, _, _ = pool.take(world.calls.filter(pl.col("ts_ns") >= cut), None, final=True)
    assert taken.gpu.height + rest.gpu.height == world.gpu.height + 3
    assert rest.gpu["correlation_id"].null_count() == 0


TARGET = textwrap.dedent("""
    import ctypes, os, sys, time
    lib = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
    end = time.monotonic() + float(sys.argv[1])
    n = 0
    while time.monotonic() < end:
        lib.fake_launch(10); n += 10
        time.sleep(0.01)
    print(n, flush=True)
""")


def test_segments_are_read_as_they_come_and_removed(tmp_path, fake_lib):
    spool = tmp_path / "spool"
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(fake_lib), "ZYM_CUPTI_FLUSH_MS": "100",
                               "ZYM_CUPTI_EAGER": "1", "ZYM_CUPTI_ROLL_S": "0.3"}
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    proc = subprocess.Popen([sys.executable, str(script), "2.5"], env=env,
                            stdout=subprocess.PIPE, text=True)
    pool = GpuPool(spool)
    most, reads, named_while_running = 0, 0, set()
    while proc.poll() is None:
        time.sleep(0.25)
        most = max(most, len(list(spool.glob("cupti-*.spool"))))
        pool.read()
        reads += 1
        for part in pool._parts:
            if part.gpu.height:
                named_while_running |= set(part.gpu["name"].to_list())
    launched = int(proc.stdout.read().split()[0])
    taken, headers, _ = pool.take(None, None, final=True)
    assert reads >= 5
    # a segment every 0.3 s over 2.5 s: the reader removed the closed ones as it went
    assert 1 <= most <= 3, most
    assert not list(spool.glob("cupti-*.spool"))
    assert headers and headers[0]["roll_s"] == 0.3
    # every launch, once, named: while the target ran, the names came from its memory
    assert taken.gpu.height == launched
    assert taken.gpu["correlation_id"].n_unique() == launched
    assert taken.api.height == launched
    assert named_while_running == {"fake_kernel(float*, int)"}
    assert set(taken.gpu["name"].to_list()) == {"fake_kernel(float*, int)"}


def test_c_strings_are_read_from_a_process_and_unreadable_ones_left_out():
    import ctypes
    import mmap

    pages = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
    name = b"void at::native::vectorized_elementwise_kernel<4>" * 8
    at = mmap.PAGESIZE - 100                  # the name runs over into the next page
    pages[at:at + len(name) + 1] = name + b"\0"
    pages[0:5] = b"mul\0x"
    got = read_c_strings(os.getpid(), [base + at, base, 8])
    assert got == {base + at: name.decode(), base: "mul"}   # address 8: not mapped, left out
    assert read_c_strings(2**22 + 12345, [base]) == {}       # no such process


def test_kernels_read_unnamed_take_names_that_arrive_later(tmp_path):
    """Records decoded while the target was exiting (its memory unreadable) stay pending as
    kernel@<pointer>; the names the agent writes at its stop name them when they are taken."""
    world = make_world({11: ["launch"] * 6}, seed=4)
    pool = _pool_of(world, tmp_path)
    gpu = pool._parts[0].gpu
    kernels = gpu.filter(pl.col("kind") == "kernel")
    ptrs = {name: 1000 + i for i, name in enumerate(sorted(set(kernels["name"].to_list())))}
    pool._parts[0].gpu = gpu.with_columns(
        pl.col("name").replace({n: f"kernel@{p}" for n, p in ptrs.items()}))
    pool._names = {int(kernels["pid"][0]): {p: n for n, p in ptrs.items()}}   # arrived later
    taken, _, _ = pool.take(world.calls, None, final=True)
    assert not taken.gpu["name"].str.starts_with("kernel@").any()
    assert taken.gpu.sort("ts_ns")["name"].to_list() == gpu.sort("ts_ns")["name"].to_list()


def test_the_interval_meta_says_how_gpu_records_were_shared(tmp_path):
    world = make_world({11: ["launch"] * 4}, seed=2)
    pool = _pool_of(world, tmp_path)
    _, _, counts = pool.take(world.calls, None, final=True)
    assert json.loads(json.dumps(counts)) == {"gpu_ops": world.gpu.height, "kernels_unnamed": 0}


NVTX_TARGET = textwrap.dedent("""
    import ctypes, os, sys, time
    lib = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    ctypes.CDLL(libc.getenv(b"NVTX_INJECTION64_PATH").decode()).InitializeInjectionNvtx2(None)
    lib.fake_nvtx_push.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.fake_launch(1)
    time.sleep(0.4)                      # recorded before the range: it must not reach back here
    pushed = time.monotonic_ns()
    lib.fake_nvtx_push(b"outer", None)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:        # several reads of the spool while the range is open
        lib.fake_launch(5)
        time.sleep(0.01)
    lib.fake_nvtx_pop()
    popped = time.monotonic_ns()
    print(pushed, popped, flush=True)
""")


def _nvtx_run(tmp_path: Path, fake_lib: Path, take_every: int | None):
    """NVTX_TARGET under a pool reading every 0.2 s, and (``take_every``) taking an interval
    every that many reads; returns the ranges of each take and the target's push/pop times."""
    spool = tmp_path / "spool"
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(fake_lib), "ZYM_CUPTI_FLUSH_MS": "100",
                               "ZYM_CUPTI_EAGER": "1", "ZYM_CUPTI_ROLL_S": "0.3",
                               "ZYM_NVTX": "1"}
    env.pop("NVTX_INJECTION64_PATH", None)
    script = tmp_path / "target.py"
    script.write_text(NVTX_TARGET)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            text=True)
    pool, reads, shares, start = GpuPool(spool), 0, [], time.monotonic_ns()
    while proc.poll() is None:
        time.sleep(0.2)
        pool.read()
        reads += 1
        if take_every and reads % take_every == 0:
            end = time.monotonic_ns() - 50_000_000
            taken, _, _ = pool.take(None, end, start_ns=start)
            shares.append(taken.ranges)
            start = end
    taken, _, _ = pool.take(None, None, final=True, start_ns=start)
    shares.append(taken.ranges)
    pushed, popped = map(int, proc.stdout.read().split())
    assert reads >= 5
    return shares, pushed, popped


SLACK = 2_000_000   # the clock fit's error, and the time between the target's reads of its clock


def test_an_nvtx_range_open_across_reads_is_paired_whole(tmp_path, fake_lib):
    (ranges,), pushed, popped = _nvtx_run(tmp_path, fake_lib, None)
    outer = ranges.filter(pl.col("kind") == "nvtx")
    assert outer.select("name", "clipped").rows() == [("outer", None)]
    assert abs(outer["ts_ns"][0] - pushed) < SLACK
    assert abs(outer["ts_ns"][0] + outer["dur_ns"][0] - popped) < SLACK


def test_an_nvtx_range_across_intervals_is_cut_at_their_bounds(tmp_path, fake_lib):
    shares, pushed, popped = _nvtx_run(tmp_path, fake_lib, 3)
    pieces = pl.concat([r.filter(pl.col("kind") == "nvtx") for r in shares])
    assert pieces.height >= 3, shares                   # the range spans several intervals
    assert set(pieces["name"].to_list()) == {"outer"}   # each piece named
    clipped = pieces["clipped"].to_list()
    assert clipped[0] == "end" and clipped[-1] == "start" and set(clipped[1:-1]) <= {"both"}
    # back to back: one piece ends where the next begins (an interval's bound)
    ends = (pieces["ts_ns"] + pieces["dur_ns"]).to_list()
    assert ends[:-1] == pieces["ts_ns"].to_list()[1:]
    assert abs(pieces["ts_ns"][0] - pushed) < SLACK and abs(ends[-1] - popped) < SLACK


def test_a_segment_that_cannot_be_opened_leaves_the_spool_writing_where_it_was(tmp_path):
    """zym removed the spool folder (it ended while the target runs on): rolling fails with
    OSError, which the agent's flush thread catches, and the writer keeps its file."""
    import shutil

    from zym.capture.cupti.agent import SpoolWriter, read_chunks

    folder = tmp_path / "spool"
    folder.mkdir()
    w = SpoolWriter(str(folder / "cupti-1-000000.spool"), "framed")
    w.write("header", b"{}")
    w.roll(str(folder / "cupti-1-000001.spool"), [("header", b"{}")])
    w.write("activity", b"a")
    kept = folder / "cupti-1-000001.spool"
    assert [k for k, _, _ in read_chunks(str(kept))] == ["header", "activity"]
    shutil.rmtree(folder)
    try:
        w.roll(str(folder / "cupti-1-000002.spool"), [("header", b"{}")])
    except OSError:
        pass
    else:
        raise AssertionError("a roll into a removed folder must fail")
    w.write("activity", b"b")   # still open, still writing (to the unlinked file)
    assert w.path == str(kept) and not w._f.closed
    w.close()


def test_dropped_records_are_counted_once_in_the_interval_that_read_them(tmp_path, fake_lib):
    from zym.capture.cupti.agent import read_chunks

    spool = tmp_path / "spool"
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(fake_lib), "ZYM_CUPTI_FLUSH_MS": "100",
                               "ZYM_CUPTI_EAGER": "1", "ZYM_CUPTI_ROLL_S": "0.3",
                               "FAKE_CUPTI_DROPS": "2"}
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    proc = subprocess.Popen([sys.executable, str(script), "1.5"], env=env,
                            stdout=subprocess.DEVNULL)
    pool, shares = GpuPool(spool, keep_raw=True), []   # segments kept: the truth is read after
    while proc.poll() is None:
        time.sleep(0.3)
        taken, _, _ = pool.take(None, time.monotonic_ns() - 10**8)
        shares.append(sum(st["dropped"] for st in taken.stats["spools"]))
    taken, _, _ = pool.take(None, None, final=True)
    shares.append(sum(st["dropped"] for st in taken.stats["spools"]))
    chunks = [c for p in sorted(spool.glob("cupti-*.spool")) for c in read_chunks(str(p))]
    said = sum(int(p) for k, _, p in chunks if k == "dropped")
    (footer,) = [json.loads(p) for k, _, p in chunks if k == "footer"]
    assert said > 0 and footer["dropped"] == said == sum(shares)
    assert sum(1 for s in shares if s) >= 2       # spread over the intervals that read them


def test_records_pooled_early_are_timed_by_the_fit_of_the_take_that_gives_them(tmp_path):
    """The first calibration point of a spool can be microseconds off (the target descheduled
    inside its sandwich: a wide one); records read while it was the only point and held for a
    later interval are timed by the fit of that later take, made of every point read by then,
    not by the point known when they were read (those were 10 us late: each call joined its
    neighbour's record on a loaded machine)."""
    from cupti_builder import CBID, api, kernel
    from zym.capture.cupti.agent import SpoolWriter

    cupti0, mono0 = 1_800_000_000_000_000_000, 40_000_000_000
    truth = mono0 - cupti0                     # mono = cupti + truth, exactly
    starts = [cupti0 + 1_000_000 + k * 50_000 for k in range(4)]
    w = SpoolWriter(str(tmp_path / "cupti-100.spool"), "framed")
    w.write("header", json.dumps({"pid": 100, "cupti_api_version": 130001,
                                  "api_names": {"runtime": {"211": "cudaLaunchKernel_v7000"}}
                                  }).encode())
    w.write("calib", json.dumps([mono0 + 10_000, cupti0, 20_000]).encode())   # 10 us off
    w.write("activity", b"".join(
        api(s, s + 20_000, 11, 1 + k, CBID["launch"]) + kernel(s + 21_000, s + 29_000, 1 + k)
        for k, s in enumerate(starts)))
    w.write("names", json.dumps({str(0x1000): "k"}).encode())
    pool = GpuPool(tmp_path)
    taken, _, _ = pool.take(None, mono0 + 500_000)          # before the records: all held
    assert taken.api.height == 0 and pool._parts[0].api.height == 4
    for i in range(10):                                    # narrow sandwiches, on the line
        w.write("calib", json.dumps([mono0 + 2_000_000 + i * 1_000_000,
                                     cupti0 + 2_000_000 + i * 1_000_000, 200]).encode())
    w.write("footer", json.dumps({"dropped": 0}).encode())
    w.close()
    taken, _, _ = pool.take(None, None, final=True)
    want = sorted(s + truth for s in starts)
    assert taken.api.height == 4
    assert max(abs(a - b) for a, b in zip(sorted(taken.api["ts_ns"]), want, strict=True)) <= 2
    kernels = sorted(taken.gpu["ts_ns"])
    assert max(abs(a - b - 21_000) for a, b in zip(kernels, want, strict=True)) <= 2


def test_nvtx_markers_pooled_early_are_timed_by_the_fit_of_the_take_that_gives_them(tmp_path):
    """As the API and GPU records above: NVTX markers read while the spool's only calibration
    point was 10 us off, and held (their range is open at the first take's end), are timed by
    the fit of the take that pairs them."""
    from cupti_builder import record
    from zym.capture.cupti.agent import SpoolWriter
    from zym.capture.cupti.layouts import (
        KIND_MARKER,
        MARKER_END,
        MARKER_INSTANT,
        MARKER_START,
        OBJECT_THREAD,
    )

    cupti0, mono0 = 1_800_000_000_000_000_000, 40_000_000_000
    truth = mono0 - cupti0                     # mono = cupti + truth, exactly
    push, mark, pop = cupti0 + 1_000_000, cupti0 + 1_500_000, cupti0 + 3_000_000

    def marker(ts: int, flags: int, ident: int, name: int = 0) -> bytes:
        return record(KIND_MARKER, timestamp=ts, flags=flags, id=ident,
                      object_kind=OBJECT_THREAD, process_id=100, thread_id=11, name=name)

    w = SpoolWriter(str(tmp_path / "cupti-100.spool"), "framed")
    w.write("header", json.dumps({"pid": 100, "cupti_api_version": 130001, "nvtx": "on",
                                  "api_names": {}}).encode())
    w.write("calib", json.dumps([mono0 + 10_000, cupti0, 20_000]).encode())   # 10 us off
    w.write("activity", marker(push, MARKER_START, 1, 0x2000)
            + marker(mark, MARKER_INSTANT, 2, 0x2010))
    w.write("marker_names", json.dumps({"buffer": 0, "names": {str(0x2000): "outer",
                                                                 str(0x2010): "tick"}}).encode())
    pool = GpuPool(tmp_path)
    # taken while the range is open: its start is held, the instant's is past the end
    taken, _, _ = pool.take(None, mono0 + 500_000)
    assert taken.ranges.height == 0
    for i in range(10):                                    # narrow sandwiches, on the line
        w.write("calib", json.dumps([mono0 + 2_000_000 + i * 1_000_000,
                                     cupti0 + 2_000_000 + i * 1_000_000, 200]).encode())
    w.write("activity", marker(pop, MARKER_END, 1))
    w.write("footer", json.dumps({"dropped": 0}).encode())
    w.close()
    taken, _, _ = pool.take(None, None, final=True)
    got = {r["name"]: r for r in taken.ranges.iter_rows(named=True)}
    assert set(got) == {"outer", "tick"}
    assert abs(got["outer"]["ts_ns"] - (push + truth)) <= 2
    assert abs(got["outer"]["ts_ns"] + got["outer"]["dur_ns"] - (pop + truth)) <= 2
    assert abs(got["tick"]["ts_ns"] - (mark + truth)) <= 2
