"""`zym capture`'s GPU side: merging into an eBPF capture file, and the CUPTI-only fallback."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cupti_builder as b
import polars as pl
import pytest
from cupti_world import make_world
from zym.analysis import analyze
from zym.capture.cupti import integrate
from zym.schemas import CaptureError, CaptureMeta, open_capture, write_capture

OFFSET = 1_795_941_770_251_820_603  # CUPTI counts from the epoch, as on the H200


def _ebpf_capture(path: Path, world) -> None:
    """What the eBPF session writes: frames, stacks, calls (stacks 7000.. -> one frame each)."""
    stack_ids = sorted(world.calls["stack_id"].unique().to_list())
    frames = pl.DataFrame({"frame_id": list(range(len(stack_ids))), "kind": ["python"] * len(stack_ids),
                           "name": [f"f{s}" for s in stack_ids], "file": ["serve.py"] * len(stack_ids),
                           "line": [s % 1000 + 10 for s in stack_ids]})
    stacks = pl.DataFrame({"stack_id": stack_ids, "parent_id": [None] * len(stack_ids),
                           "frame_id": list(range(len(stack_ids))), "depth": [0] * len(stack_ids)})
    write_capture(path, {"frame": frames, "stack": stacks, "call": world.calls},
                  CaptureMeta(producer="zym capture", clock_domain="CLOCK_MONOTONIC"))


def _spool(spool_dir: Path, world) -> None:
    """The CUPTI side of the same world, in CUPTI's clock."""
    cbid = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaStreamSynchronize": 131,
            "cudaMemsetAsync": 51, "cudaGraphLaunch": 311}
    recs = []
    for r in world.api.iter_rows(named=True):
        recs.append(b.api(r["ts_ns"] + OFFSET, r["ts_ns"] + r["dur_ns"] + OFFSET, r["tid"],
                          r["correlation_id"], cbid[r["name"]], pid=r["pid"]))
    for g in world.gpu.iter_rows(named=True):
        s, e, c = g["ts_ns"] + OFFSET, g["ts_ns"] + g["dur_ns"] + OFFSET, g["correlation_id"]
        kind = g["kind"]
        if kind == "kernel":
            recs.append(b.kernel(s, e, c, name_ptr=0x10))
        elif kind == "copy":
            recs.append(b.memcpy(s, e, c, 4096))
        elif kind == "memset":
            recs.append(b.memset(s, e, c, 64))
        else:
            recs.append(b.sync(s, e, c))
    t0 = int(world.api["ts_ns"].min())
    calib = [[t0 + i * 10**9, t0 + i * 10**9 + OFFSET, 500] for i in range(-2, 3)]
    spool_dir.mkdir(parents=True, exist_ok=True)
    b.write_spool(spool_dir / "cupti-100.spool", [b"".join(recs)], calib,
                  names={0x10: "_ZN2at6native6kernelEv"})


def test_add_gpu_joins_an_ebpf_capture_in_place(tmp_path):
    w = make_world({7: ["launch", "copy", "sync", "memset", "launch"] * 8, 8: ["launch"] * 10})
    out = tmp_path / "trace.parquet"
    _ebpf_capture(out, w)
    _spool(tmp_path / "trace.parquet.cupti", w)
    logs = []
    meta = integrate.add_gpu(out, tmp_path / "trace.parquet.cupti", logs.append)
    cap = open_capture(out)
    calls, gpu = cap.load("call"), cap.load("gpu")
    assert calls.height == w.calls.height and calls["correlation_id"].null_count() == 0
    assert gpu.height == w.gpu.height
    assert gpu.filter(pl.col("kind") == "kernel")["name"].unique().to_list() == ["at::native::kernel()"]
    assert meta.extra["cupti"]["stack_coverage"]["gpu_time_with_stack_pct"] == 100.0
    assert cap.meta.clock_domain == "CLOCK_MONOTONIC" and cap.load("frame").height > 0
    assert "100.0% of GPU time with its Python stack" in logs[0] and "zym analyze" in logs[0]
    result = analyze(out, window="all")
    assert result.call_paths.paths.filter(pl.col("path_id") == -1).height == 0


def test_add_gpu_without_spools_keeps_the_capture(tmp_path):
    w = make_world({7: ["launch"] * 3})
    out = tmp_path / "trace.parquet"
    _ebpf_capture(out, w)
    (tmp_path / "empty").mkdir()
    logs = []
    integrate.add_gpu(out, tmp_path / "empty", logs.append)
    assert "no CUPTI spool" in logs[0]
    assert open_capture(out).load("gpu").height == 0


@pytest.fixture
def fake_env(monkeypatch, fake_lib):
    """The stand-in libcupti (tests/cupti/conftest.py), collecting from the target's start."""
    monkeypatch.setenv("ZYM_CUPTI_LIB", str(fake_lib))
    monkeypatch.setenv("ZYM_CUPTI_EAGER", "1")
    return fake_lib


def test_no_ebpf_falls_back_to_a_cupti_only_capture(tmp_path, monkeypatch, fake_env):
    from zym.capture import bpf_loader
    from zym.capture.session import CaptureConfig

    def no_root():
        raise CaptureError("zym capture needs root (eBPF uprobes): run it with sudo")

    monkeypatch.setattr(bpf_loader, "check_environment", no_root)
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""
        import ctypes
        ctypes.CDLL({str(fake_env)!r}).fake_launch(25)
    """))
    out = tmp_path / "trace.parquet"
    logs = []
    summary = integrate.capture_with_gpu(
        CaptureConfig(output=out, command=[sys.executable, str(script)]), logs.append)
    assert summary is None
    assert "recording the GPU side only" in logs[0]
    cap = open_capture(out)
    assert cap.load("gpu").height == 25 and cap.load("call")["stack_id"].null_count() == 25
    assert cap.meta.producer == "zym capture (CUPTI only)"
    assert not (tmp_path / "trace.parquet.cupti").exists()



def test_rotate_without_ebpf_is_refused_before_anything_runs(tmp_path, monkeypatch):
    from zym.capture import bpf_loader
    from zym.capture.session import CaptureConfig

    def no_root():
        raise CaptureError("zym capture needs root (eBPF uprobes): run it with sudo")

    monkeypatch.setattr(bpf_loader, "check_environment", no_root)
    marker = tmp_path / "ran"
    cfg = CaptureConfig(output=tmp_path / "t.parquet", rotate_s=60.0,
                        command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    with pytest.raises(CaptureError, match="--rotate needs the eBPF side: zym capture needs root"):
        integrate.capture_with_gpu(cfg, print)
    assert not marker.exists() and not list(tmp_path.iterdir())

def test_attach_gives_the_cpu_side_only_and_says_so(tmp_path, monkeypatch):
    from zym.capture import session
    from zym.capture.session import CaptureConfig

    monkeypatch.setattr(session, "run_capture", lambda cfg: "ebpf-only")
    logs = []
    got = integrate.capture_with_gpu(CaptureConfig(output=tmp_path / "t.parquet", pid=1234),
                                     logs.append)
    assert got == "ebpf-only" and "CPU side only" in logs[0]


def test_nvtx_asked_on_an_attach_says_where_it_applies(tmp_path, monkeypatch):
    from zym.capture import session
    from zym.capture.session import CaptureConfig

    monkeypatch.setattr(session, "run_capture", lambda cfg: "ebpf-only")
    logs = []
    integrate.capture_with_gpu(CaptureConfig(output=tmp_path / "t.parquet", pid=1234, nvtx=True),
                               logs.append)
    assert "zym run --nvtx" in logs[0] and "CPU side only" in logs[1]


def test_environment_is_restored(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/app")
    with integrate._environment({"PYTHONPATH": "/boot:/app", "ZYM_CUPTI_DIR": "/s"}):
        assert os.environ["PYTHONPATH"] == "/boot:/app"
    assert os.environ["PYTHONPATH"] == "/app" and "ZYM_CUPTI_DIR" not in os.environ


def test_failed_session_keeps_spools_only_beside_a_kept_raw_capture(tmp_path, monkeypatch):
    from zym.capture import bpf_loader, session
    from zym.capture.session import CaptureConfig

    monkeypatch.setattr(bpf_loader, "check_environment", lambda: None)
    out = tmp_path / "t.parquet"

    def lean_host(cfg):
        (tmp_path / "t.parquet.raw").mkdir()
        raise CaptureError("cannot finalize here (no polars); the raw capture is kept")

    monkeypatch.setattr(session, "run_capture", lean_host)
    with pytest.raises(CaptureError):
        integrate.capture_with_gpu(CaptureConfig(output=out, command=["true"]), print)
    assert (tmp_path / "t.parquet.cupti").is_dir()

    def no_cuda(cfg):
        raise CaptureError("no CUDA library was mapped")

    monkeypatch.setattr(session, "run_capture", no_cuda)
    other = tmp_path / "u.parquet"
    with pytest.raises(CaptureError):
        integrate.capture_with_gpu(CaptureConfig(output=other, command=["true"]), print)
    assert not (tmp_path / "u.parquet.cupti").exists()


def test_attach_to_an_agent_that_does_not_answer_keeps_the_cpu_side(tmp_path, monkeypatch):
    """A stale agent folder (or a hung agent): the capture goes on without the GPU side."""
    import json

    from zym.capture import session
    from zym.capture.cupti import remote
    from zym.capture.session import CaptureConfig

    svc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        agents = tmp_path / "agents"
        (agents / str(svc.pid)).mkdir(parents=True)
        (agents / str(svc.pid) / "state").write_text(json.dumps({"pid": svc.pid, "seq": 0,
                                                                "state": "dormant"}))
        monkeypatch.setenv("ZYM_AGENT_DIR", str(agents))
        monkeypatch.setattr(remote, "ANSWER_S", 0.3)
        monkeypatch.setattr(remote.AgentHandle.switch, "__defaults__", (None, 0.3))
        seen = []

        def fake_run(cfg):
            cfg.on_attached()
            cfg.on_detach()
            seen.append(cfg.pid)
            return "ebpf"

        monkeypatch.setattr(session, "run_capture", fake_run)
        logs = []
        got = integrate.capture_with_gpu(CaptureConfig(output=tmp_path / "t.parquet",
                                                       pid=svc.pid), logs.append)
    finally:
        svc.kill()
        svc.wait()
    assert got == "ebpf" and seen == [svc.pid]
    assert any("did not answer 'on'" in m and "CPU side only" in m for m in logs), logs
    assert not (tmp_path / "t.parquet.cupti").exists()


@pytest.mark.parametrize("args, expected", [
    (["--", "python3", "serve.py"], True),            # a program zym starts: NVTX recorded
    (["--no-nvtx", "--", "python3", "serve.py"], False),
    (["--nvtx", "--", "python3", "serve.py"], True),
    (["--pid", "1234"], False),                        # attaching: only when asked
    (["--pid", "1234", "--nvtx"], True),
])
def test_zym_capture_records_nvtx_for_a_program_it_starts(tmp_path, monkeypatch, args, expected):
    from typer.testing import CliRunner
    from zym.cli.main import app

    seen = []
    monkeypatch.setattr(integrate, "capture_with_gpu", lambda cfg: seen.append(cfg))
    res = CliRunner().invoke(app, ["capture", "-o", str(tmp_path / "t.parquet"), *args])
    assert res.exit_code == 0, res.output
    assert [cfg.nvtx for cfg in seen] == [expected]


def test_the_agent_is_told_whether_to_record_nvtx(tmp_path, monkeypatch, fake_env):
    """The target's environment says it either way (``ZYM_NVTX`` 1 or 0), so a value left in
    the user's environment does not decide it."""
    from zym.capture import bpf_loader, session
    from zym.capture.session import CaptureConfig

    monkeypatch.setenv("ZYM_NVTX", "1")
    seen = []
    monkeypatch.setattr(session, "run_capture", lambda cfg: seen.append(os.environ["ZYM_NVTX"]))
    monkeypatch.setattr(bpf_loader, "check_environment", lambda: None)
    monkeypatch.setattr(integrate, "add_gpu", lambda *a: None)
    for nvtx in (True, False):
        integrate.capture_with_gpu(CaptureConfig(output=tmp_path / "t.parquet",
                                                 command=["true"], nvtx=nvtx), lambda _m: None)
    assert seen == ["1", "0"]


@pytest.mark.parametrize(("args", "code", "shapes"), [
    (["--", "python3", "serve.py"], 0, [False]),
    (["--shapes", "--", "python3", "serve.py"], 0, [True]),
    (["--shapes", "--pid", "1234"], 2, []),            # a running process: too late to wrap torch
    (["--shapes", "--rotate", "60s", "--", "python3", "serve.py"], 2, []),
])
def test_zym_capture_shapes_only_for_a_program_it_starts(tmp_path, monkeypatch, args, code, shapes):
    from typer.testing import CliRunner
    from zym.cli.main import app

    seen = []
    monkeypatch.setattr(integrate, "capture_with_gpu", lambda cfg: seen.append(cfg))
    res = CliRunner().invoke(app, ["capture", "-o", str(tmp_path / "t.parquet"), *args])
    assert res.exit_code == code, res.output
    assert [cfg.shapes for cfg in seen] == shapes
    if code:
        assert "--shapes records a program zym starts" in res.output


def test_the_agent_is_told_whether_to_record_shapes(tmp_path, monkeypatch, fake_env):
    from zym.capture import bpf_loader, session
    from zym.capture.session import CaptureConfig

    monkeypatch.setenv("ZYM_SHAPES", "1")     # left in the user's environment
    seen = []
    monkeypatch.setattr(session, "run_capture",
                        lambda cfg: seen.append((os.environ["ZYM_SHAPES"],
                                                 os.environ.get("ZYM_SHAPES_OPS"))))
    monkeypatch.setattr(bpf_loader, "check_environment", lambda: None)
    monkeypatch.setattr(integrate, "add_gpu", lambda *a: None)
    for shapes in (True, False):
        integrate.capture_with_gpu(CaptureConfig(output=tmp_path / "t.parquet",
                                                 command=["true"], shapes=shapes), lambda _m: None)
    from zym.analysis.matmul import MATMUL_OPS

    assert seen == [("1", ",".join(MATMUL_OPS)), ("0", None)]


@pytest.mark.parametrize("command", [["capture", "--shapes", "-o", "{out}", "--", "true"],
                                     ["run", "--shapes", "--", "true"]])
def test_an_unknown_shapes_scope_is_a_one_line_error_and_nothing_is_made(tmp_path, monkeypatch,
                                                                          command):
    from typer.testing import CliRunner
    from zym.capture import bpf_loader
    from zym.cli.main import app

    monkeypatch.setenv("ZYM_SHAPES_SCOPE", "everything")
    monkeypatch.setattr(bpf_loader, "check_environment", lambda: None)
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, [a.format(out=out) for a in command])
    assert res.exit_code == 2, res.output
    assert "ZYM_SHAPES_SCOPE='everything': give entry" in res.output
    assert "Traceback" not in res.output and list(tmp_path.iterdir()) == []
