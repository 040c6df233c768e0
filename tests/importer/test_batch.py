"""`zym import` of several traces (a folder of per-rank traces, or a list): one capture each."""
from __future__ import annotations

from pathlib import Path

from kineto_builder import KinetoBuilder
from typer.testing import CliRunner
from zym.cli.main import app
from zym.schemas import open_capture

runner = CliRunner()


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def rank_trace(folder: Path, rank: int, launches: int) -> Path:
    """A trace of ``launches`` kernel launches on rank ``rank``'s process."""
    b = KinetoBuilder(pid=100 + rank, tid=100 + rank)
    with b.py("train.py(1): main"):
        for _ in range(launches):
            with b.op("aten::mm"):
                b.launch("cudaLaunchKernel", kernel=f"gemm_rank{rank}", gpu_us=2.0)
    return b.write(folder / f"rank{rank}.pt.trace.json.gz")


def test_a_folder_of_ranks_gives_one_capture_per_rank(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank, launches in ((0, 3), (1, 5), (2, 7)):
        rank_trace(traces, rank, launches)
    (traces / "notes.txt").write_text("not a trace")
    result = run("import", traces, "-o", tmp_path / "caps", "--no-progress")
    assert result.exit_code == 0, result.output
    assert "wrote 3 captures" in result.stdout
    for rank, launches in ((0, 3), (1, 5), (2, 7)):
        cap = open_capture(tmp_path / "caps" / f"rank{rank}.pt.trace.parquet")
        calls, gpu = cap.load("call"), cap.load("gpu")
        assert calls.height == gpu.height == launches
        assert set(calls["pid"]) == {100 + rank}
        assert set(gpu["name"]) == {f"gemm_rank{rank}"}


def test_files_listed_and_a_bad_one_named(tmp_path):
    good = rank_trace(tmp_path, 0, 2)
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [')
    out = tmp_path / "caps"
    result = run("import", good, bad, "-o", out, "--no-progress")
    assert result.exit_code == 2
    assert "rank1.json" in result.output and "Traceback" not in result.output
    assert open_capture(out / "rank0.pt.trace.parquet").load("call").height == 2  # kept


def test_existing_captures_are_refused_before_any_work(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    rank_trace(traces, 0, 1)
    rank_trace(traces, 1, 1)
    out = tmp_path / "caps"
    out.mkdir()
    (out / "rank1.pt.trace.parquet").write_text("an older capture")
    result = run("import", traces, "-o", out, "--no-progress")
    assert result.exit_code == 2 and "--force" in result.output
    assert not (out / "rank0.pt.trace.parquet").exists()  # nothing written first
    assert run("import", traces, "-o", out, "--force", "--no-progress").exit_code == 0
    assert open_capture(out / "rank1.pt.trace.parquet").load("call").height == 1


def test_an_empty_folder_and_an_output_file_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("import", empty, "-o", tmp_path / "caps", "--no-progress")
    assert result.exit_code == 2 and "no .json or .json.gz trace" in result.output
    a, b = rank_trace(tmp_path, 0, 1), rank_trace(tmp_path, 1, 1)
    (tmp_path / "file.parquet").write_text("x")
    result = run("import", a, b, "-o", tmp_path / "file.parquet", "--no-progress")
    assert result.exit_code == 2 and "output folder" in result.output
