"""Nothing lost: every writer goes through schemas.output (issue 14, 'data loss on write
errors'). Each case was reproduced on the code before it: FIFOs and symlinks replaced, old
files destroyed on a full disk, temporary files left by killed runs, two writers both saying
'wrote', finalize overwriting without --force, tracebacks on unusable output paths."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from hostile import SAMPLE_JSON, SAMPLE_PARQUET, assert_clean_error, zym
from zym.schemas.errors import OutputError
from zym.schemas.output import atomic_output, temp_name

# Every command that writes a file, as (args before the output path, output name).
WRITERS = {
    "import": (["import", SAMPLE_JSON, "--no-progress", "-o"], "t.parquet"),
    # out of core (the smallest budget): spilled beside the output, written window by window
    "import-out-of-core": (["import", SAMPLE_JSON, "--no-progress", "--memory-budget", "1",
                            "-o"], "t.parquet"),
    "export-perfetto": (["export", SAMPLE_PARQUET, "--no-progress", "-o"], "t.pftrace"),
    "export-folded": (["export", SAMPLE_PARQUET, "-f", "folded", "--no-progress", "-o"], "t.folded"),
    "export-speedscope": (["export", SAMPLE_PARQUET, "-f", "speedscope", "--no-progress", "-o"],
                          "t.json"),
    "report": (["report", SAMPLE_PARQUET, "--no-progress", "-o"], "t.html"),
    "rules-new": (["rules", "new", "mine", "-o"], "mine.yaml"),
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("node", ["fifo", "symlink", "dir"])
def test_non_regular_targets_are_refused_even_with_force(tmp_path, writer, node):
    args, name = WRITERS[writer]
    target = tmp_path / name
    victim = tmp_path / "victim"
    victim.write_text("keep")
    {"fifo": lambda: os.mkfifo(target), "symlink": lambda: target.symlink_to(victim),
     "dir": lambda: target.mkdir()}[node]()
    err = assert_clean_error(zym(*args, target, "--force", timeout=60))
    assert "zym writes only regular files" in err
    assert victim.read_text() == "keep" and (target.is_symlink() or target.exists())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".zym-tmp")]


@pytest.mark.parametrize("writer", WRITERS)
def test_existing_file_needs_force_and_bad_paths_are_one_line(tmp_path, writer):
    args, name = WRITERS[writer]
    out = tmp_path / name
    out.write_text("old")
    assert "--force" in assert_clean_error(zym(*args, out))
    assert out.read_text() == "old"
    (tmp_path / "plain").write_text("x")
    assert "is a file" in assert_clean_error(zym(*args, tmp_path / "plain" / name))
    assert "longer than 255 bytes" in assert_clean_error(zym(*args, tmp_path / ("a" * 300)))
    done = zym(*args, out, "--force")
    assert done.returncode == 0, done.stderr[-500:]
    assert out.read_text(errors="replace") != "old"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".zym-tmp")]


@pytest.fixture
def tiny_fs(tmp_path):
    """A 200 kB tmpfs: too small for any report or export of the sample (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (a full disk)")
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("writer", [w for w in WRITERS if w != "rules-new"])
def test_full_disk_keeps_the_old_file_and_leaves_no_partial_one(tiny_fs, writer):
    args, name = WRITERS[writer]
    out = tiny_fs / name
    out.write_text("old")
    (tiny_fs / "filler").write_bytes(b"\0" * 192_000)
    err = assert_clean_error(zym(*args, out, "--force"))
    assert "no space left" in err
    assert out.read_text() == "old"
    assert sorted(p.name for p in tiny_fs.iterdir()) == sorted(["filler", name])


def test_read_only_folder_is_one_line(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only tmpfs")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)], check=True)
    try:
        for args, name in WRITERS.values():
            assert "read-only" in assert_clean_error(zym(*args, mnt / name))
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_stale_temp_of_a_killed_run_is_swept(tmp_path):
    out = tmp_path / "t.parquet"
    stale = tmp_path / f"{temp_name(out).rsplit('.', 1)[0]}.999999"  # nobody holds its lock
    stale.write_bytes(b"half")
    legacy = tmp_path / ".t.parquet.999999.tmp"  # what zym 0.1 left after SIGKILL
    legacy.write_bytes(b"half")
    assert zym(*WRITERS["import"][0], out).returncode == 0
    assert not stale.exists() and not legacy.exists()


def test_concurrent_writer_is_detected(tmp_path):
    out = tmp_path / "t.folded"
    with atomic_output(out) as tmp:  # a live writer holds its temporary file
        tmp.write_text("first")
        err = assert_clean_error(zym(*WRITERS["export-folded"][0], out))
        assert "another zym" in err and "is writing this file" in err
    assert out.read_text() == "first"


def test_output_that_appears_meanwhile_is_not_replaced_without_force(tmp_path):
    out = tmp_path / "t.txt"
    with pytest.raises(OutputError, match="appeared while zym was writing"), \
            atomic_output(out) as tmp:
        tmp.write_text("new")
        out.write_text("someone else's")
    assert out.read_text() == "someone else's"
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_import_leaves_nothing(tmp_path, sig):
    out = tmp_path / "t.parquet"
    out.write_text("old")
    proc = subprocess.Popen([sys.executable, "-m", "zym.cli.main", "import", str(SAMPLE_JSON),
                             "-o", str(out), "--force", "--no-progress"],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not any(p.name.startswith(".zym-tmp") for p in tmp_path.iterdir()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err
    # 130/143 as zym exits on them; under load it was seen, once in ~10 runs, to die of the
    # SIGINT itself after saying "interrupted" (-2: a shell reports 130 for both); the file
    # checks below are what matters: the old file intact, no temporary left
    assert proc.returncode in (130, 143, -signal.SIGINT), err
    assert b"interrupted" in err or b"terminated" in err.lower(), err
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_finalize_refuses_an_existing_output_without_force(tmp_path):
    from zym.capture.sink import RawWriter

    raw = tmp_path / "c.parquet.raw"
    w = RawWriter(raw)
    w.close()
    out = tmp_path / "c.parquet"
    out.write_text("old")
    assert "--force" in assert_clean_error(zym("capture", "--finalize", raw, "-o", out))
    assert out.read_text() == "old"
    assert zym("capture", "--finalize", raw, "-o", out, "--force").returncode == 0


def test_undecodable_output_name_is_written_and_shown_escaped(tmp_path):
    name = os.fsdecode(b"r\xff\x1b[2J.html")
    done = zym("report", SAMPLE_PARQUET, "--no-progress", "-o", tmp_path / name)
    assert done.returncode == 0, done.stderr[-500:]
    assert b"\x1b" not in done.stdout and b"\\xff" in done.stdout
    assert (tmp_path / name).stat().st_size > 10_000
