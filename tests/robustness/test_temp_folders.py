"""A process's temporary folders (a sample for the memory budget, a trace imported out of core
for one analysis) leave nothing in $TMPDIR: not after `zym diff`'s forked child, which leaves
with ``os._exit``, and not on SIGTERM or SIGHUP (whose default action ends a process without
its exit handlers). Both left folders on the code before (a sample of a 10 M capture at 1G:
20 MB a run)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from synthetic import decode_server
from zym.analysis import budget as B
from zym.schemas.io import open_capture

ENTRY = "import sys; sys.argv[0] = 'zym'; from zym.cli.entry import main; main()"

# A process that makes a temporary folder, says where, and waits to be signalled.
_HOLDER = textwrap.dedent("""
    import sys, time
    from zym.schemas.output import process_temp_folder
    folder = process_temp_folder("zym-test-")
    (folder / "part.parquet").write_bytes(b"x" * 1000)
    print(folder, flush=True)
    time.sleep(60)
""")


def _env(tmp: Path) -> dict:
    return {**os.environ, "TMPDIR": str(tmp)}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_that_ends_the_process_removes_its_folders_first(tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE,
                            text=True, env=_env(tmp_path))
    folder = Path(proc.stdout.readline().strip())
    assert folder.parent == tmp_path and folder.is_dir()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode == -sig   # still ended by the signal, as it would have been
    assert list(tmp_path.iterdir()) == []


def test_a_handler_already_set_is_left_alone(tmp_path):
    """A program (a capture session) that handles SIGTERM itself keeps its handler; its
    folders are removed at its normal exit."""
    code = textwrap.dedent("""
        import signal, sys
        seen = []
        signal.signal(signal.SIGTERM, lambda *a: seen.append(1))
        from zym.schemas.output import process_temp_folder
        folder = process_temp_folder("zym-test-")
        signal.raise_signal(signal.SIGTERM)
        print(folder.is_dir(), seen)
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(tmp_path), check=True)
    assert got.stdout.split() == ["True", "[1]"]
    assert list(tmp_path.iterdir()) == []


def test_a_forked_child_removes_only_its_own(tmp_path):
    code = textwrap.dedent("""
        import os
        from zym.schemas.output import process_temp_folder, remove_temp_folders
        mine = process_temp_folder("zym-parent-")
        pid = os.fork()
        if pid == 0:
            process_temp_folder("zym-child-")
            remove_temp_folders()
            os._exit(0)
        os.waitpid(pid, 0)
        print(sorted(p.name.split("-")[1] for p in mine.parent.iterdir()))
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(tmp_path), check=True)
    assert got.stdout.strip() == "['parent']"   # the child's gone, the parent's kept (then)
    assert list(tmp_path.iterdir()) == []     # and the parent's at its exit


def test_terminated_inside_an_output_write_still_raises_and_cleans(tmp_path):
    """Where a write turns SIGTERM into ``Terminated`` (its own clean-up), it does so also
    after a temporary folder was made, and gives the folders' handler back after."""
    code = textwrap.dedent("""
        import signal
        from zym.schemas.errors import Terminated
        from zym.schemas.output import process_temp_folder, terminate_as_exception
        process_temp_folder("zym-test-")
        before = signal.getsignal(signal.SIGTERM)
        try:
            with terminate_as_exception():
                signal.raise_signal(signal.SIGTERM)
        except Terminated:
            print("raised", signal.getsignal(signal.SIGTERM) is before)
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(tmp_path), check=True)
    assert got.stdout.split() == ["raised", "True"]
    assert list(tmp_path.iterdir()) == []


def test_a_folder_made_inside_an_output_write_keeps_its_removal_after_it(tmp_path):
    """`zym analyze` of a trace too large for memory imports it into a temporary capture inside
    a block that turns SIGTERM into ``Terminated``; after the block, SIGTERM still removes the
    folder before it ends the process (the block gave back the default action before)."""
    code = textwrap.dedent("""
        import signal, sys, time
        from zym.schemas.output import process_temp_folder, terminate_as_exception
        with terminate_as_exception():
            folder = process_temp_folder("zym-analyze-")
        print(folder, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=_env(tmp_path))
    assert Path(proc.stdout.readline().strip()).is_dir()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_zym_diff_in_a_budget_leaves_no_sample_behind(tmp_path):
    """`zym diff --memory-budget`: the baseline is sampled in a forked child (``os._exit``),
    the other side here; neither sample's folder is left."""
    before = decode_server(tmp_path / "a.parquet", 120)
    after = decode_server(tmp_path / "b.parquet", 140)
    cap = open_capture(before)
    budget = 2 * B.estimate_bytes({t: cap.rows(t) * 0.3 for t in B.SAMPLED_TABLES})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    got = subprocess.run([sys.executable, "-c", ENTRY, "diff", str(before), str(after),
                          "--memory-budget", str(budget), "--no-progress"],
                         capture_output=True, text=True, env=_env(tmp), check=False)
    assert got.returncode == 0, got.stderr
    assert got.stdout.count("SAMPLED to fit the memory budget") == 2
    assert list(tmp.iterdir()) == []


def test_zym_analyze_ended_by_sigterm_leaves_no_sample_behind(tmp_path):
    """SIGTERM once the sample is written (the analysis goes on for a while after it): the
    process ends as SIGTERM ends it, and its sample's folder is gone."""
    path = decode_server(tmp_path / "c.parquet", requests=3000)
    cap = open_capture(path)
    budget = B.estimate_bytes({t: cap.rows(t) * 0.3 for t in B.SAMPLED_TABLES})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, "analyze", str(path),
                             "--memory-budget", str(budget), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(tmp))
    deadline = time.monotonic() + 60
    while not any(tmp.glob("zym-sample-*/sample.parquet")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGSTOP)   # (held where it is: the sample exists now)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    # ended by the signal, or (landing in the sample's second write, which turns it into
    # ``Terminated`` to remove its unfinished file) exit code 143 with its one line
    assert proc.returncode == -signal.SIGTERM or (
        proc.returncode == 143 and err.decode().startswith("zym: terminated")), err
    assert b"Traceback" not in err
    assert list(tmp.iterdir()) == []
