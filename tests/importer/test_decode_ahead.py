"""Decoding ahead (capture/kineto_prefetch.py): a forked process decodes a small trace while
the `zym` command imports numpy and polars. What it hands over gives the columns that
``json.load`` of the same text gives; anything it cannot take the usual reader's path on
(a refusal, an error, a changed file, a dead child) leaves the file to the usual reader; the
command's output is the same with and without it; no child outlives the command."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_streaming import expected_groups, layouts, random_events, resolved, trace_of
from zym.capture import kineto_json, kineto_prefetch
from zym.capture.process import children
from zym.schemas import InputError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
pytestmark = pytest.mark.skipif(
    kineto_json._kineto_scan is None or not hasattr(os, "memfd_create"),
    reason="decoding ahead needs the compiled decoder and Linux")




def ahead(path: Path):
    """``read_events``' groups of ``path`` from a child started now, or None."""
    assert kineto_prefetch.start(path)
    return kineto_json._decoded_ahead(path)


@pytest.fixture(params=[False, True], ids=["batches", "tiny-batches"])
def batch_sizes(request, monkeypatch):
    """The child's default batches, or pieces of 97 bytes and batches of ~1 kB (cuts at
    most events: the forked child inherits these values)."""
    if request.param:
        monkeypatch.setattr(kineto_prefetch, "_PIECE", 97)
        monkeypatch.setattr(kineto_prefetch, "_BATCH", 1024)


@pytest.mark.parametrize("seed", [4, 5])
def test_every_layout_decoded_ahead_gives_the_columns_json_load_gives(tmp_path, seed,
                                                                      batch_sizes):
    events = random_events(seed, tricky=False)
    expected = expected_groups(json.loads(json.dumps(events)))
    assert all(expected.values())
    for name, text in layouts(trace_of(events)).items():
        for gz in (False, True):
            path = tmp_path / f"{name}.json{'.gz' if gz else ''}"
            path.write_bytes(gzip.compress(text) if gz else text)
            got = ahead(path)
            assert got is not None, (name, gz)
            assert resolved(got[0]) == expected, (name, gz)
            usual = kineto_json._read_streaming(path, parallel=False)
            assert got[1] == usual[1], (name, gz)  # the keys around the events
            for group, frame in usual[0].items():
                assert got[0][group].equals(frame), (name, gz, group)


def test_tricky_text_is_decoded_ahead_or_left_to_the_usual_reader(tmp_path, batch_sizes):
    """Names holding the text between two events: a batch cut inside one is refused by the
    decoder, and the whole file goes to the usual reader; either way the columns are
    json.load's."""
    events = random_events(6)
    expected = expected_groups(json.loads(json.dumps(events)))
    for name, text in layouts(trace_of(events)).items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        kineto_prefetch.start(path)
        assert resolved(kineto_json.read_events(path)[0]) == expected, name


def test_the_bundled_trace_decoded_ahead_gives_the_usual_groups():
    got = ahead(SAMPLE)
    assert got is not None
    usual = kineto_json._read_streaming(SAMPLE, parallel=True)
    assert got[1] == usual[1]
    for group, frame in usual[0].items():
        assert got[0][group].equals(frame), group


def test_older_kineto_names_go_to_the_usual_reader(tmp_path):
    events = random_events(7, tricky=False)
    for e in events:
        if e.get("cat") == "cpu_op":
            e["cat"] = "Operator"  # torch <= 1.12
    path = tmp_path / "old.json"
    path.write_bytes(json.dumps(trace_of(events)).encode())
    assert ahead(path) is None
    groups = kineto_json.read_events(path)[0]
    assert groups["op"].height == sum(e.get("cat") in ("Operator", "user_annotation")
                                      and e["ph"] == "X" for e in events)


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "not-json", "empty-events"])
def test_bad_files_are_left_to_the_usual_reader_which_names_the_problem(tmp_path, damage):
    text = json.dumps(trace_of(random_events(8, tricky=False))).encode()
    data = gzip.compress(text)
    path = tmp_path / "bad.json.gz"
    if damage == "truncated":  # before its first whole event (later: read up to there)
        path.write_bytes(gzip.compress(text[:text.index(b"[", text.index(b"traceEvents")) + 20]))
        message = "cut short before its first whole event"
    elif damage == "corrupt":
        path.write_bytes(data[:100] + bytes(200) + data[300:])
        message = "gzip"
    elif damage == "not-json":
        path.write_bytes(gzip.compress(b"{" + text))
        message = "not valid JSON"
    else:
        path.write_bytes(gzip.compress(json.dumps(trace_of([])).encode()))
        message = "no torch.profiler events"
    assert ahead(path) is None
    with pytest.raises(InputError, match=message):
        kineto_json.read_events(path)


def _cuts(text: bytes, gz: bool) -> dict[str, bytes]:
    """The trace ``text`` cut short where a killed writer or a stopped copy leaves it: inside
    its events (early, late), in the keys after them, and (gzip) its stream cut."""
    data = gzip.compress(text) if gz else text
    cuts = {f"at{int(f * 100)}": data[:int(len(data) * f)] for f in (0.31, 0.77, 0.97)}
    after = text.rfind(b'"after"')
    if not gz and after > text.find(b'"traceEvents"') >= 0:  # keys written after the events
        cuts["in-keys"] = text[:text.index(b"{", after)]
    return cuts


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_cut_trace_decoded_ahead_gives_what_the_usual_reader_gives(tmp_path, gz,
                                                                     batch_sizes):
    """A trace cut short: the child hands over its batches and the text after them, and the
    end is decoded here as the usual reader decodes it (the same groups, frontier and
    ``cut_short``), so the file is not read a second time."""
    events = random_events(12, tricky=False)
    taken = 0
    for name, text in layouts(trace_of(events)).items():
        for cut, data in _cuts(text, gz).items():
            path = tmp_path / f"{name}-{cut}.json{'.gz' if gz else ''}"
            path.write_bytes(data)
            got = ahead(path)
            try:
                usual = kineto_json._read_streaming(path, parallel=False)
            except InputError:  # cut before its first whole event: left to the usual reader
                assert got is None, (name, cut)
                continue
            assert (got is None) == (usual is None), (name, cut)
            if usual is None:  # no events in the text (whole-text reader names it)
                continue
            taken += 1
            assert got[1] == usual[1], (name, cut)
            # (a bare array whose text ends between two events is whole: its "]" may be left out)
            assert got[1].cut_short is not None or name == "bare", (name, cut)
            for group, frame in usual[0].items():
                assert got[0][group].equals(frame), (name, cut, group)
    assert taken >= 12


def test_a_cut_trace_decoded_ahead_is_not_read_again(tmp_path, monkeypatch):
    text = json.dumps(trace_of(random_events(13, tricky=False))).encode()
    path = tmp_path / "cut.json.gz"
    whole = gzip.compress(text)
    path.write_bytes(whole[:len(whole) * 4 // 5])
    assert kineto_prefetch.start(path)

    def second_read(*args, **kwargs):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(kineto_json, "_read_streaming", second_read)
    groups, top = kineto_json.read_events(path)
    assert top.cut_short["gzip_cut"] and top.cut_short["lost"] == "an event"
    assert groups["gpu"].height > 0


def test_a_file_changed_after_the_child_read_it_is_read_again(tmp_path):
    first = trace_of(random_events(9, tricky=False))
    second = trace_of(random_events(10, tricky=False))
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(first).encode())
    assert kineto_prefetch.start(path)
    child = kineto_prefetch._children[kineto_prefetch._key(path)]
    os.waitpid(child.pid, 0)  # it has read and decoded the first text
    path.write_bytes(json.dumps(second).encode() + b" " * 7)  # another size and time
    assert kineto_json._decoded_ahead(path) is None
    got = kineto_json.read_events(path)[0]
    assert resolved(got) == expected_groups(json.loads(json.dumps(second["traceEvents"])))


def test_an_error_in_the_child_or_its_death_leaves_the_file_to_this_process(tmp_path,
                                                                             monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(trace_of(random_events(11, tricky=False))).encode())

    def boom(_path):
        raise MemoryError("the child's own trouble")

    monkeypatch.setattr(kineto_prefetch, "decode", boom)  # inherited by the fork
    assert ahead(path) is None
    monkeypatch.undo()
    monkeypatch.setattr(kineto_prefetch, "decode", lambda _path: time.sleep(60))
    assert kineto_prefetch.start(path)
    child = kineto_prefetch._children[kineto_prefetch._key(path)]
    os.kill(child.pid, signal.SIGKILL)
    started = time.monotonic()
    assert kineto_json._decoded_ahead(path) is None  # no hang: the pipe closed
    assert time.monotonic() - started < 10
    assert kineto_json.read_events(path)[0]["python"].height > 0


def test_children_not_taken_are_ended_and_reaped(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(trace_of(random_events(12, tricky=False))).encode())
    monkeypatch.setattr(kineto_prefetch, "decode", lambda _path: time.sleep(60))
    assert kineto_prefetch.start(path)
    pid = kineto_prefetch._children[kineto_prefetch._key(path)].pid
    kineto_prefetch.cancel_all()
    assert not kineto_prefetch._children
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped already


def test_only_small_traces_on_a_free_core(tmp_path, monkeypatch):
    assert kineto_prefetch.SCAN_CATS == kineto_json._SCAN_CATS
    small = tmp_path / "t.json"
    small.write_bytes(b'{"traceEvents": []}')
    assert kineto_prefetch.worth_it(small)
    parquet = tmp_path / "c.parquet"
    parquet.write_bytes(b"PAR1" + bytes(100))
    assert not kineto_prefetch.worth_it(parquet)
    monkeypatch.setattr(kineto_prefetch, "GZ_LIMIT", 10)
    big = tmp_path / "t.json.gz"
    big.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert not kineto_prefetch.worth_it(big)
    assert not kineto_prefetch.worth_it(tmp_path / "missing.json")
    assert not kineto_prefetch.worth_it(tmp_path)

    def loadavg(*running: int):
        real, looks = open, iter(running)

        def fake(name, *a, **k):
            if name == "/proc/loadavg":
                from io import StringIO
                return StringIO(f"0.5 0.5 0.5 {next(looks)}/300 1234\n")
            return real(name, *a, **k)
        return fake

    monkeypatch.setattr(kineto_prefetch.os, "cpu_count", lambda: 2)
    monkeypatch.setattr("builtins.open", loadavg(2, 3, 2))  # busy at every look
    assert not kineto_prefetch.core_free()
    monkeypatch.setattr("builtins.open", loadavg(2, 1))  # another task woke for a moment
    assert kineto_prefetch.core_free()
    monkeypatch.setattr("builtins.open", loadavg(1))
    assert kineto_prefetch.core_free()


# -- the command -------------------------------------------------------------------------------

ENTRY = "import sys; sys.argv[0] = 'zym'; from zym.cli.entry import main; main()"
ZYM = [sys.executable, "-c", ENTRY]


# The command with each read logged: "1" where the child's columns were offered, "0" where
# none were, "r" where the file was then read as usual (``_read_streaming``, wrapped once
# kineto_json is imported: from the first offer on). Forked processes append to the same file.
LOGGED_ENTRY = """import os, sys
sys.argv[0] = 'zym'
from zym.capture import kineto_prefetch
def log(what):
    with open(os.environ['ZYM_TEST_TAKES'], 'a') as f:
        f.write(what)
real_take = kineto_prefetch.take
def take(path):
    reader = sys.modules['zym.capture.kineto_json']
    if not hasattr(reader._read_streaming, 'logged'):
        real_read = reader._read_streaming
        def read(*args, **kwargs):
            log('r')
            return real_read(*args, **kwargs)
        read.logged = True
        reader._read_streaming = read
    got = real_take(path)
    log('0' if got is None else '1')
    return got
kineto_prefetch.take = take
from zym.cli.entry import main
main()
"""


def zym(*args: str, ahead_mode: str, takes: Path | None = None, **kw
        ) -> subprocess.CompletedProcess:
    env = {**os.environ, "ZYM_DECODE_AHEAD": ahead_mode}
    command = ZYM
    if takes is not None:
        env["ZYM_TEST_TAKES"] = str(takes)
        command = [sys.executable, "-c", LOGGED_ENTRY]
    return subprocess.run([*command, *args], capture_output=True, env=env, check=False, **kw)


def test_the_command_prints_the_same_with_and_without_decoding_ahead(tmp_path):
    slower = tmp_path / "slower.trace.json"
    trace = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    for e in trace["traceEvents"]:  # some kernels twice as long: a diff with changes
        if e.get("cat") == "kernel" and "gemm" in e.get("name", ""):
            e["dur"] = e["dur"] * 2
    slower.write_text(json.dumps(trace))
    runs = {
        "analyze": ["analyze", str(SAMPLE), "--format", "json", "--no-progress"],
        "diff": ["diff", str(SAMPLE), str(slower), "--format", "json", "--no-progress"],
        "diff -j 1": ["diff", str(SAMPLE), str(slower), "--format", "json", "--no-progress",
                      "-j", "1"],
        "diff of one file with itself": ["diff", str(SAMPLE), str(SAMPLE), "--format", "json",
                                         "--no-progress"],
    }
    # Reads, and those that take the child's columns: each file once (a diff's baseline in its
    # forked process); a file diffed with itself has one child, so one side reads it as usual.
    reads = {"analyze": 1, "diff": 2, "diff -j 1": 2, "diff of one file with itself": 2}
    taken = {"analyze": 1, "diff": 2, "diff -j 1": 2, "diff of one file with itself": 1}
    outputs = {}
    for i, (name, args) in enumerate(runs.items()):
        logs = tmp_path / f"on{i}", tmp_path / f"off{i}"
        on = zym(*args, ahead_mode="1", takes=logs[0])
        off = zym(*args, ahead_mode="0", takes=logs[1])
        assert on.returncode == off.returncode == 0, (name, on.stderr[-2000:])
        assert on.stdout == off.stdout, name
        assert on.stderr == off.stderr, name
        # the two runs differ where they should (before: not checked, so a child whose
        # columns were never taken would have passed as "the same output")
        on_log, off_log = logs[0].read_text(), logs[1].read_text()
        assert (on_log.count("1"), on_log.count("r")) == (taken[name],
                                                          reads[name] - taken[name]), on_log
        assert (off_log.count("1"), off_log.count("r")) == (0, reads[name]), off_log
        outputs[name] = on.stdout
    assert outputs["diff"] == outputs["diff -j 1"]
    assert json.loads(outputs["diff"])["kernels"]  # the slowed kernels were compared


def test_a_bad_trace_gives_the_one_line_error_and_exit_2(tmp_path):
    text = gzip.decompress(SAMPLE.read_bytes())
    bad = tmp_path / "cut.trace.json.gz"  # cut short before its first whole event
    bad.write_bytes(gzip.compress(text[:text.index(b"[", text.index(b'"traceEvents"')) + 20]))
    for args in (["analyze", str(bad)], ["diff", str(SAMPLE), str(bad)],
                 ["diff", str(bad), str(SAMPLE)]):
        run = zym(*args, "--format", "json", "--no-progress", ahead_mode="1", timeout=120)
        err = run.stderr.decode()
        assert run.returncode == 2, (args, err)
        assert err.count("\n") == 1 and "cut short before its first whole event" in err, err
        assert "Traceback" not in err
        assert run.stdout == b""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("how", ["ctrl-c", "sigint-parent", "sigkill-parent"])
def test_no_child_outlives_the_command(tmp_path, how):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it), SIGINT to the
    command alone, and SIGKILL of the command, while its children decode: none is left."""
    args = ["diff", str(SAMPLE), str(SAMPLE), "--format", "json", "--no-progress"]
    env = {**os.environ, "ZYM_DECODE_AHEAD": "1"}
    proc = subprocess.Popen([*ZYM, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    # Once its children are decoding (it forks them before its imports of numpy and polars):
    # a Ctrl-C during the interpreter's own start-up is Python's to report, not the command's.
    deadline = time.monotonic() + 30
    while not children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)  # the children are decoding, the command importing
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    elif how == "sigint-parent":
        os.kill(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if how != "sigkill-parent":
        assert "Traceback" not in err, err
        assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(proc.pid), "a process of the command is still running"


def test_threads_for_a_small_trace_only_where_a_core_is_free(tmp_path, monkeypatch):
    small = tmp_path / "t.json"
    small.write_bytes(json.dumps(trace_of(random_events(13, tricky=False))).encode())
    monkeypatch.setattr(kineto_prefetch, "_threads", None)
    pools = []
    real = kineto_json._Threads.__init__

    def counting(self, *a):
        pools.append(1)
        real(self, *a)

    monkeypatch.setattr(kineto_json._Threads, "__init__", counting)
    for free, big, want in ((True, False, 1), (False, False, 0), (False, True, 1)):
        monkeypatch.setattr(kineto_prefetch, "core_free", lambda free=free: free)
        monkeypatch.setattr(kineto_prefetch, "TEXT_LIMIT", 10 if big else 128 << 20)
        pools.clear()
        got = kineto_json._read_streaming(small, parallel=True)
        assert len(pools) == want, (free, big)
        assert resolved(got[0]) == expected_groups(json.loads(json.dumps(
            random_events(13, tricky=False))))
    kineto_prefetch.set_decode_threads(False)  # a diff's processes: never, even with a core free
    monkeypatch.setattr(kineto_prefetch, "core_free", lambda: True)
    monkeypatch.setattr(kineto_prefetch, "TEXT_LIMIT", 128 << 20)
    pools.clear()
    kineto_json._read_streaming(small, parallel=True)
    assert pools == []


def test_a_diff_decodes_without_threads_only_while_its_child_runs():
    """The library's diff (jobs=2) leaves the decoding threads' setting as it found it; while
    its child runs, this process decodes without a pool. In a fresh interpreter: the diff
    forks only before polars' thread pool has started."""
    code = f"""
import json
from zym.capture import kineto_prefetch
from zym.analysis.export.diff import diff_captures
seen = []
real = kineto_prefetch.threads_wanted
def recording(path):
    seen.append(kineto_prefetch._threads)
    return real(path)
kineto_prefetch.threads_wanted = recording
diff_captures({str(SAMPLE)!r}, {str(SAMPLE)!r}, jobs=2, rules=False)
print(json.dumps({{"seen": seen, "after": kineto_prefetch._threads}}))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["seen"] == [False]  # this process's one read, while the child ran
    assert got["after"] is None
