"""`zym capture` as users call it, without needing eBPF: --print-bpf, failures with exit
code 2, and the CLI not importing BCC."""
from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner
from zym.cli.main import app

runner = CliRunner()


def test_print_bpf_shows_the_program_with_its_flags():
    result = runner.invoke(app, ["capture", "--print-bpf"])
    assert result.exit_code == 0
    out = result.stdout
    assert "#define ZYM_RINGBUF_PAGES 4096" in out and "#define ZYM_RETURNS 0" in out
    assert "int zym_walk(struct pt_regs *ctx)" in out
    assert "BPF_ARRAY(config, u64, ZYM_NCONFIG)" in out   # sampling is set at run time


def test_max_overhead_must_be_a_percentage():
    for bad in ("lots", "0%", "150%"):
        result = runner.invoke(app, ["capture", "--max-overhead", bad, "--", "true"])
        assert result.exit_code == 2, bad
        assert "--max-overhead" in result.stderr and "percentage" in result.stderr


def test_not_root_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    result = runner.invoke(app, ["capture", "--pid", "1"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("zym: error: zym capture needs root (eBPF uprobes): "
                                     "run it with sudo")


def test_needs_a_target():
    result = runner.invoke(app, ["capture", "-o", "x.parquet"])
    assert result.exit_code == 2
    assert "give either --pid PID or a command after --" in result.stderr


def test_importing_the_cli_does_not_import_bcc():
    code = "import sys, zym.cli.main; print('bcc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_finalize_a_raw_directory(tmp_path):
    from zym.capture import events
    from zym.capture.sink import RawWriter, write_raw_meta
    from zym.schemas import CaptureMeta, open_capture

    raw = tmp_path / "cap.parquet.raw"
    w = RawWriter(raw)
    w.add("frames", pid=1, hash=9, stack_key=1, depth=0, kind="python", name="main",
          file="m.py", line=3)
    w.add_call(bytes(events.Call(type=events.EV_CALL, pid=1, tid=1, ts_ns=5, stack_hash=9)))
    w.close()
    write_raw_meta(raw, CaptureMeta(producer="zym capture", python_version="3.12"))
    result = runner.invoke(app, ["capture", "--finalize", str(raw)])
    assert result.exit_code == 0, result.stderr
    cap = open_capture(tmp_path / "cap.parquet")
    assert cap.meta.python_version == "3.12"
    assert cap.load("call")["name"].to_list() == ["cuLaunchKernel"]
    missing = runner.invoke(app, ["capture", "--finalize", str(tmp_path)])
    assert missing.exit_code == 2 and "not a raw capture directory" in missing.stderr


def test_no_btf_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("zym.capture.bpf_loader.BTF_PATH", tmp_path / "no-btf")
    result = runner.invoke(app, ["capture", "--pid", "1"])
    assert result.exit_code == 2
    assert "the kernel has no BTF" in result.stderr and "CONFIG_DEBUG_INFO_BTF" in result.stderr


def test_no_kernel_headers_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("platform.release", lambda: "0.0-no-such-kernel")
    result = runner.invoke(app, ["capture", "--pid", "1"])
    assert result.exit_code == 2
    assert "no kernel headers at /lib/modules/0.0-no-such-kernel/build" in result.stderr
    assert "scripts/setup-ebpf.sh" in result.stderr


def test_no_bcc_is_a_one_line_error(monkeypatch, tmp_path):
    import builtins

    from zym.capture import bpf_loader
    from zym.schemas.errors import CaptureError

    real_import = builtins.__import__

    def no_bcc(name, *args, **kwargs):
        if name == "bcc":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bcc)
    monkeypatch.delitem(sys.modules, "bcc", raising=False)
    monkeypatch.setattr(bpf_loader, "SYSTEM_DIST_PACKAGES", tmp_path)
    with pytest.raises(CaptureError, match="python3-bpfcc"):
        bpf_loader.import_bcc()
