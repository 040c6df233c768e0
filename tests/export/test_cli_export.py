"""zym export / view / report as users run them: outputs, refusals, one-line errors."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner
from zym.cli.main import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [*args, "--no-progress"], catch_exceptions=False)


@pytest.mark.parametrize("fmt,suffix,magic", [("perfetto", ".pftrace", b"\x0a"),
                                              ("folded", ".folded", b"<module>"),
                                              ("speedscope", ".speedscope.json", b"{")])
def test_export_formats(sample_capture, tmp_path, fmt, suffix, magic):
    out = tmp_path / "deep" / "er" / f"t{suffix}"  # missing folders are created
    result = run("export", str(sample_capture), "-f", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(magic) and str(out) in result.stdout


def test_export_default_name_and_no_overwrite_without_force(sample_capture, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run("export", str(sample_capture), "-f", "folded").exit_code == 0
    out = tmp_path / "sample.folded"
    before = out.read_bytes()
    again = run("export", str(sample_capture), "-f", "folded")
    assert again.exit_code == 2 and "--force" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1 and out.read_bytes() == before
    assert run("export", str(sample_capture), "-f", "folded", "--weight", "stall",
               "--force").exit_code == 0
    assert out.read_bytes() != before


def test_report_refuses_to_overwrite(sample_capture, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("keep me")
    result = run("report", str(sample_capture), "-o", str(out))
    assert result.exit_code == 2 and out.read_text() == "keep me"
    dir_out = run("report", str(sample_capture), "-o", str(tmp_path))
    assert dir_out.exit_code == 2 and "directory" in dir_out.stderr


def _bad_inputs(tmp_path, sample_trace):
    import gzip

    return {
        "empty.json": b"",
        "png.pftrace": b"\x89PNG\r\n\x1a\n" + b"\0" * 64,
        # cut short before its first whole event (cut later, it is read up to its last one:
        # tests/importer/test_cut_short.py)
        "cut-before-events.json.gz": gzip.compress(
            (text := gzip.decompress(sample_trace.read_bytes()))[
                :text.index(b'"traceEvents"') + 40]),
        "notjson.json": b"{ this is not json",
        "foreign.json": b'{"hello": [1, 2, 3]}',
        "corrupt.parquet": b"PAR1" + os.urandom(200) + b"PAR1",
        "gz-garbage.json.gz": gzip.compress(b"\x00\x01garbage"),
    }


@pytest.mark.parametrize("command", ["export", "report", "view"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, sample_trace, command):
    for name, data in _bad_inputs(tmp_path, sample_trace).items():
        bad = tmp_path / name
        bad.write_bytes(data)
        args = [command, str(bad)]
        if command != "view":
            args += ["-o", str(tmp_path / f"out-{command}-{name}")]
        else:
            args += ["--no-browser", "--port", "0"]
        if command == "view" and name == "png.pftrace":
            continue  # view serves .pftrace files as they are; the UI reports bad ones
        result = run(*args)
        assert result.exit_code == 2, (name, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zym: error:"), (name, result.stderr)
    missing = run(command, str(tmp_path / "nope.json"), *(["--no-browser"] if command == "view"
                                                         else ["-o", str(tmp_path / "x")]))
    assert missing.exit_code == 2 and "no such file" in missing.stderr


def test_view_serves_the_trace_on_loopback_and_stops_on_ctrl_c(sample_capture, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "zym.cli.main", "view", str(sample_capture), "--no-browser",
         "--port", "0", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        serving = proc.stdout.readline()
        ui = proc.stdout.readline()
        assert "127.0.0.1" in serving and "loopback only" in serving, serving
        url = serving.split(" on ", 1)[1].split()[0]
        assert ui.strip().endswith(f"https://ui.perfetto.dev/#!/?url={url}&referrer=zym")
        req = urllib.request.Request(url, headers={"Origin": "https://ui.perfetto.dev"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
            assert r.headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
        from zym.analysis.export.check import check_trace

        assert check_trace(body).flows > 9000
        pre = urllib.request.Request(url, method="OPTIONS", headers={
            "Origin": "https://ui.perfetto.dev", "Access-Control-Request-Private-Network": "true"})
        with urllib.request.urlopen(pre, timeout=10) as r:
            assert r.headers["Access-Control-Allow-Private-Network"] == "true"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(url.rsplit("/", 1)[0] + "/etc/passwd", timeout=10)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in err and "Traceback" not in err


def test_server_binds_loopback_only(sample_pftrace):
    from zym.analysis.export.serve import TraceServer

    with TraceServer(sample_pftrace, port=0) as server:
        assert server.httpd.server_address[0] == "127.0.0.1"
        server.start()
        with urllib.request.urlopen(server.trace_url, timeout=10) as r:
            assert r.read() == sample_pftrace.read_bytes()
        assert server.fetches == 1
        server.close()


def test_busy_port_is_a_clear_error(sample_pftrace):
    from zym.analysis.export.serve import TraceServer
    from zym.schemas.errors import InputError

    with TraceServer(sample_pftrace, port=0) as first, \
            pytest.raises(InputError, match="cannot listen on 127.0.0.1"):
        TraceServer(sample_pftrace, port=first.port)


def test_a_timeline_too_large_for_memory_is_one_line_not_a_killed_process(sample_capture,
                                                                          tmp_path,
                                                                          monkeypatch):
    """Where a zym capture's whole timeline would take more memory than is available (its
    rows at TIMELINE_ROW_BYTES each, here with less memory made available than the sample
    needs), export and view refuse with one line that says how to export a part; a part
    exports."""
    from zym.analysis.export import perfetto
    from zym.schemas import memory
    from zym.schemas.io import open_capture

    cap = open_capture(sample_capture)
    rows = sum(cap.rows(t) for t in ("call", "gpu", "span", "range"))
    assert cap.rows("span")  # (a capture with spans: their rows' cost)
    need = perfetto.TIMELINE_FIXED_BYTES + perfetto.TIMELINE_ROW_BYTES * rows
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    out = tmp_path / "t.pftrace"
    got = run("export", str(sample_capture), "-o", str(out))
    assert got.exit_code == 2 and not out.exists()
    line = got.stderr.strip()
    assert "\n" not in line and f"({rows:,} calls, GPU operations, spans and ranges)" in line
    assert "--window FROM:TO" in line and "it lasts" in line
    viewed = run("view", str(sample_capture), "--no-browser")
    assert viewed.exit_code == 2 and "zym export FILE --window FROM:TO" in viewed.stderr
    part = run("export", str(sample_capture), "--window", "100ms:200ms", "-o", str(out))
    assert part.exit_code == 0 and out.exists()
    monkeypatch.setattr(memory, "available_bytes", lambda: need)  # it fits: exported whole
    assert run("export", str(sample_capture), "-o", str(out), "--force").exit_code == 0


def test_a_capture_without_spans_is_estimated_at_its_rebuilt_spans_cost(tmp_path, monkeypatch):
    """A capture that records no spans (eBPF) costs more a row in a timeline (its spans are
    rebuilt from the calls' stacks): refused where the cost of a capture with spans would
    have let it through."""
    from zym.analysis.export import perfetto
    from zym.schemas import memory
    from zym.schemas.io import open_capture

    ebpf = Path(__file__).resolve().parents[2] / "sample_traces" / "gpt_decode_server.ebpf.parquet"
    cap = open_capture(ebpf)
    rows = sum(cap.rows(t) for t in ("call", "gpu", "span", "range"))
    assert cap.rows("span") == 0 and rows
    as_with_spans = perfetto.TIMELINE_FIXED_BYTES + perfetto.TIMELINE_ROW_BYTES * rows
    monkeypatch.setattr(memory, "available_bytes", lambda: as_with_spans + 1)
    out = tmp_path / "t.pftrace"
    got = run("export", str(ebpf), "-o", str(out))
    assert got.exit_code == 2 and not out.exists()
    need = perfetto.TIMELINE_FIXED_BYTES + perfetto.TIMELINE_ROW_BYTES_NO_SPANS * rows
    assert f"~{need / 1e9:.1f} GB" in got.stderr
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    assert run("export", str(ebpf), "-o", str(out)).exit_code == 0


def test_a_trace_too_large_for_the_browser_ui_says_how_to_open_it(sample_capture, tmp_path,
                                                                  monkeypatch):
    """Past what the Perfetto UI opens in a browser, export and view say how to open the trace
    (trace_processor --httpd) or export a part, instead of pointing at a UI that fails."""
    from zym.analysis.export import perfetto, serve

    out = tmp_path / "t.pftrace"
    small = run("export", str(sample_capture), "-o", str(out))
    assert small.exit_code == 0 and "open it with: zym view" in small.stdout
    assert out.stat().st_size < perfetto.UI_TRACE_BYTES
    monkeypatch.setattr(perfetto, "UI_TRACE_BYTES", out.stat().st_size - 1)
    large = run("export", str(sample_capture), "-o", str(out), "--force")
    assert large.exit_code == 0 and "zym view" not in large.stdout
    assert f"trace_processor --httpd {out}" in large.stdout
    assert "--window FROM:TO" in large.stdout

    def interrupted(self):
        raise KeyboardInterrupt
    monkeypatch.setattr(serve.TraceServer, "serve_forever", interrupted)
    viewed = run("view", str(out), "--no-browser")
    assert viewed.exit_code == 0 and "trace_processor --httpd" in viewed.stderr
    assert "temporary export" not in viewed.stderr
    from_capture = run("view", str(sample_capture), "--no-browser")
    assert "trace_processor --httpd" in from_capture.stderr
    assert "temporary export: zym export FILE -o trace.pftrace keeps it" in from_capture.stderr
    monkeypatch.setattr(perfetto, "UI_TRACE_BYTES", out.stat().st_size)
    assert "trace_processor" not in run("view", str(out), "--no-browser").stderr
