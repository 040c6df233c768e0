"""The in-target agent, end to end without a GPU: a stand-in libcupti (fakecupti.c, built here)
plays CUPTI, a Python target started with zym's bootstrap environment plays the application."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
from zym.capture.cupti import target_env
from zym.capture.cupti.decode import decode_spool, read_spool
from zym.capture.cupti.finalize import finalize_capture
from zym.schemas import open_capture

HERE = Path(__file__).parent

TARGET = textwrap.dedent("""
    import ctypes, json, os, signal, sys, threading, time
    lib = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
    facts = {"main_tid": threading.get_native_id(), "agent": "_zym_cupti_agent" in sys.modules}
    lib.fake_launch(100)
    lib.fake_get_device(50)
    def worker():
        facts["worker_tid"] = threading.get_native_id()
        lib.fake_launch(30)
    t = threading.Thread(target=worker); t.start(); t.join()
    if sys.argv[1] == "pause":
        c = sys.modules["_zym_cupti_agent"]._collector
        c.pause(); lib.fake_launch(1000); c.resume(); lib.fake_launch(7)
    print(json.dumps(facts), flush=True)
    if sys.argv[1] == "crash":
        time.sleep(0.5)              # two flush periods: the records reach the spool
        os.kill(os.getpid(), signal.SIGKILL)
""")


def _run(tmp_path: Path, lib: Path, mode: str, **extra: str) -> tuple[dict, Path]:
    spool = tmp_path / "spool"
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(lib), "ZYM_CUPTI_FLUSH_MS": "200",
                               "ZYM_CUPTI_EAGER": "1"} | extra
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    proc = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert "not started" not in proc.stderr, proc.stderr
    facts = json.loads(proc.stdout.splitlines()[0])
    return facts, spool


def test_agent_records_launches_with_system_tids_and_kernel_names(tmp_path, fake_lib):
    facts, spool_dir = _run(tmp_path, fake_lib, "exit")
    assert facts["agent"]
    (path,) = spool_dir.glob("cupti-*.spool")
    spool = read_spool(path)
    assert spool.footer is not None and spool.footer["errors"] == []
    # only the launch/copy/memset/sync callbacks were enabled: no cudaGetDevice records
    assert set(spool.header["api_names"]["runtime"].values()) == {
        "cudaMemcpyAsync_v3020", "cudaStreamSynchronize_v3020", "cudaLaunchKernel_v7000"}
    t = decode_spool(spool)
    assert t.api["name"].unique().to_list() == ["cudaLaunchKernel"]
    per_tid = dict(t.api.group_by("tid").len().iter_rows())
    assert per_tid == {facts["main_tid"]: 100, facts["worker_tid"]: 30}
    assert t.gpu["name"].unique().to_list() == ["fake_kernel(float*, int)"]
    assert t.gpu.height == 130
    # CUPTI here counts from the epoch (as on the H200): the fit brings it to CLOCK_MONOTONIC
    fit = t.clock[int(spool.header["pid"])]
    assert fit.used >= 2 and fit.max_residual_ns < 50_000
    assert 0 < t.api["ts_ns"].min() < 10**17


def test_gpu_records_only_when_asked(tmp_path, fake_lib):
    """ZYM_CUPTI_ALL_APIS=0 (bench/whatif/device_inflation.sh's "gpu" arm): no API record, every
    GPU record."""
    _, spool_dir = _run(tmp_path, fake_lib, "exit", ZYM_CUPTI_ALL_APIS="0")
    (path,) = spool_dir.glob("cupti-*.spool")
    spool = read_spool(path)
    assert spool.header["api_names"] == {"runtime": {}, "driver": {}}
    t = decode_spool(spool)
    assert t.api.height == 0 and t.gpu.height == 130


def test_agent_spool_survives_a_crash(tmp_path, fake_lib):
    _, spool_dir = _run(tmp_path, fake_lib, "crash")
    (path,) = spool_dir.glob("cupti-*.spool")
    spool = read_spool(path)
    assert spool.footer is None  # killed: no clean stop
    t = decode_spool(spool)
    assert t.gpu.height == 130  # the periodic flush delivered everything recorded
    assert t.gpu["name"].str.starts_with("kernel@").all()  # names are read at stop only
    out, meta = finalize_capture(spool_dir, tmp_path / "crash.parquet")
    cap = open_capture(out)
    assert cap.load("gpu").height == 130
    assert meta.extra["cupti"]["spools"][0]["clean_stop"] is False


def test_cupti_only_capture_is_valid_and_analyzable(tmp_path, fake_lib):
    from zym.analysis import analyze

    _, spool_dir = _run(tmp_path, fake_lib, "exit")
    out, meta = finalize_capture(spool_dir, tmp_path / "trace.parquet")
    cap = open_capture(out)
    calls = cap.load("call")
    assert calls.height == 130 and calls["stack_id"].null_count() == 130
    assert meta.clock_domain == "CLOCK_MONOTONIC"
    assert meta.extra["cupti"]["join"]["cupti_unclaimed"] == 130
    result = analyze(out, window="all")
    paths = result.call_paths.paths
    assert paths.filter(pl.col("path_id") == -1)["kernels"].to_list() == [130]


def test_pause_and_resume(tmp_path, fake_lib):
    _, spool_dir = _run(tmp_path, fake_lib, "pause")
    (path,) = spool_dir.glob("cupti-*.spool")
    t = decode_spool(read_spool(path))
    assert t.gpu.height == 130 + 7 and t.api.height == 130 + 7


def test_collector_starts_at_the_first_cuda_framework_import(tmp_path, fake_lib):
    fake_torch = tmp_path / "mods" / "torch"
    fake_torch.mkdir(parents=True)
    (fake_torch / "__init__.py").write_text(
        "import sys\nSTARTED = sys.modules['_zym_cupti_agent']._collector is not None\n")
    env = target_env(tmp_path / "spool") | {"ZYM_CUPTI_LIB": str(fake_lib)}
    env["PYTHONPATH"] += f":{tmp_path / 'mods'}"
    code = ("import sys; a = sys.modules['_zym_cupti_agent']; before = a._collector is None; "
            "import json; import torch; print(json.dumps([before, torch.STARTED]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=False, timeout=60)
    assert json.loads(out.stdout) == [True, True], out.stderr
    # a Python process that imports no CUDA framework never loads CUPTI
    out = subprocess.run([sys.executable, "-c", "import json"], env=env, capture_output=True,
                         text=True, check=False, timeout=60)
    assert out.returncode == 0
    assert len(list((tmp_path / "spool").glob("cupti-*.spool"))) == 1


def test_module_cli_run_and_finalize(tmp_path, fake_lib, monkeypatch):
    from zym.capture.cupti.__main__ import main

    monkeypatch.setenv("ZYM_CUPTI_LIB", str(fake_lib))
    monkeypatch.setenv("ZYM_CUPTI_EAGER", "1")
    script = tmp_path / "t.py"
    script.write_text(f"import ctypes\nctypes.CDLL({str(fake_lib)!r}).fake_launch(9)\n")
    out = tmp_path / "t.parquet"
    assert main(["run", "-o", str(out), "--keep-spool", "--", sys.executable, str(script)]) == 0
    assert open_capture(out).load("gpu").height == 9
    again = tmp_path / "again.parquet"
    assert main(["finalize", str(tmp_path / "t.parquet.cupti"), "-o", str(again)]) == 0
    assert open_capture(again).load("call").height == 9
    assert main(["finalize", str(tmp_path), "-o", str(again)]) == 2  # no spool there


def test_libcupti_of_torchs_cuda_major_is_found_during_the_torch_import(tmp_path, fake_lib):
    # site-packages layout of torch's cu13 wheels: torch/version.py and nvidia/cu13/lib
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(  # as torch writes it
        "from typing import Optional\n__version__ = '2.8.0+cu128'\ncuda: Optional[str] = '12.8'\n")
    (site / "torch" / "__init__.py").write_text(
        "import sys\nc = sys.modules['_zym_cupti_agent']._collector\nLIB = c.lib_path if c else None\n")
    for major in ("12", "13"):  # both installed: the one torch was built for (12) wins
        d = site / "nvidia" / f"cu{major}" / "lib"
        d.mkdir(parents=True)
        shutil.copy(fake_lib, d / f"libcupti.so.{major}")
    env = target_env(tmp_path / "spool")
    env.pop("ZYM_CUPTI_LIB", None)
    env["PYTHONPATH"] += f":{site}"
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.LIB)"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.stdout.strip() == str(site / "nvidia" / "cu12" / "lib" / "libcupti.so.12"), out.stderr


def test_dropped_records_are_said_per_buffer_and_counted_without_a_footer(tmp_path, fake_lib):
    """CUPTI's dropped-record count goes into the spool with each buffer that had drops, so a
    process that never stopped cleanly still reports them (the footer has the same total)."""
    from zym.capture.cupti.agent import read_chunks

    for sub in ("exit", "crash"):
        (tmp_path / sub).mkdir()
    _, spool_dir = _run(tmp_path / "exit", fake_lib, "exit", FAKE_CUPTI_DROPS="3")
    (path,) = spool_dir.glob("cupti-*.spool")
    chunks = list(read_chunks(str(path)))
    said = [int(p) for k, _, p in chunks if k == "dropped"]
    footer = json.loads(next(p for k, _, p in chunks if k == "footer"))
    assert said and set(said) == {3} and footer["dropped"] == sum(said)
    assert decode_spool(read_spool(path)).stats["dropped"] == sum(said)
    _, spool_dir = _run(tmp_path / "crash", fake_lib, "crash", FAKE_CUPTI_DROPS="3")
    (path,) = spool_dir.glob("cupti-*.spool")
    spool = read_spool(path)
    assert spool.footer is None
    said = [int(p) for k, _, p in read_chunks(str(path)) if k == "dropped"]
    assert said and decode_spool(spool).stats["dropped"] == sum(said)


STOP_IN_FLUSH = textwrap.dedent("""
    import ctypes, os, sys, time
    lib = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
    lib.fake_launch(40)
    time.sleep(0.15)     # the periodic flush (every 20 ms) has taken them: handed back 400 ms on
    sys.modules["_zym_cupti_agent"]._collector.stop("test")
    time.sleep(0.6)      # the flush's buffer is handed back now, after the stop
""")


def test_a_stop_during_a_periodic_flush_keeps_the_buffer_the_flush_holds(tmp_path, fake_lib):
    """The periodic flush (its own thread) takes CUPTI's records, and its buffer comes back
    while another thread stops the agent: the stop waits for it, so the records are written
    before the footer (the previous code closed the spool first: all 40 lost)."""
    spool = tmp_path / "spool"
    script = tmp_path / "target.py"
    script.write_text(STOP_IN_FLUSH)
    env = target_env(spool) | {"ZYM_CUPTI_LIB": str(fake_lib), "ZYM_CUPTI_FLUSH_MS": "20",
                               "ZYM_CUPTI_EAGER": "1", "FAKE_CUPTI_COMPLETE_DELAY_MS": "400"}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (path,) = spool.glob("cupti-*.spool")
    from zym.capture.cupti.agent import read_chunks

    kinds = [k for k, _, _ in read_chunks(str(path))]
    assert kinds[-1] == "footer" and "activity" in kinds
    spool_read = read_spool(path)
    assert spool_read.footer["reason"] == "test"
    t = decode_spool(spool_read)
    assert t.gpu.height == 40 and t.api.height == 40
    assert not t.gpu["name"].str.starts_with("kernel@").any()   # named at stop: read before
