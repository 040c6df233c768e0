"""The fleet store on a ClickHouse server (``--store clickhouse://...``): the same ingest and
queries give the same answers as chDB.

Where a server comes from: ``ZYM_CLICKHOUSE_URL`` (a running server), else a ``clickhouse``
or ``clickhouse-server`` binary on PATH, started here on free ports in a temporary folder.
None of the package registries this project installs from ships a usable one (PyPI has
clients only and chDB, which cannot serve; Debian bookworm's ``clickhouse-server`` is 18.16
from 2018, which clickhouse-connect cannot talk to), so here the test skips and says why.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ZYM_CAPTURE = REPO / "sample_traces" / "gpt_decode_server.parquet"
MIN_VERSION = (24, 8)  # Map, window functions, input(), DELETE on tables with projections


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _version(url: str) -> tuple[int, ...] | None:
    try:
        with urllib.request.urlopen(f"{url}/?query=SELECT%20version()", timeout=2) as r:
            return tuple(int(x) for x in r.read().decode().strip().split(".")[:2])
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    url = os.environ.get("ZYM_CLICKHOUSE_URL")
    if url:
        yield url
        return
    binary = shutil.which("clickhouse") or shutil.which("clickhouse-server")
    if binary is None:
        pytest.skip("no ClickHouse server: none installable from the package registries "
                    "(set ZYM_CLICKHOUSE_URL=clickhouse://host:8123/db to test one)")
    d = tmp_path_factory.mktemp("clickhouse")
    http, tcp = _free_port(), _free_port()
    cmd = ([binary, "server"] if binary.endswith("/clickhouse") else [binary])
    cmd += ["--", f"--path={d}/", f"--http_port={http}", f"--tcp_port={tcp}",
            f"--logger.log={d}/log", f"--logger.errorlog={d}/err",
            f"--interserver_http_port={_free_port()}"]
    if Path("/etc/clickhouse-server/config.xml").exists():
        cmd[len(cmd) - 7:len(cmd) - 7] = ["--config-file=/etc/clickhouse-server/config.xml"]
    proc = subprocess.Popen(cmd, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{http}"
        version = None
        for _ in range(100):
            version = _version(base)
            if version is not None or proc.poll() is not None:
                break
            time.sleep(0.2)
        if version is None:
            pytest.skip(f"{binary} did not start a server")
        if version < MIN_VERSION:
            pytest.skip(f"{binary} is ClickHouse {'.'.join(map(str, version))}: the fleet store "
                        f"needs {'.'.join(map(str, MIN_VERSION))} or later (Debian bookworm "
                        "ships 18.16)")
        yield f"clickhouse://127.0.0.1:{http}/zym_test"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_server_store_matches_chdb(server_url, tmp_path):
    from zym.fleet import diff, findings, ingest, open_store, top

    server = open_store(server_url)
    server.command(f"DROP DATABASE IF EXISTS {server.database}")
    server.command(f"CREATE DATABASE {server.database}")
    assert ingest(server, [ZYM_CAPTURE], labels={"version": "1"}).ingested == 1
    assert ingest(server, [ZYM_CAPTURE]).ingested == 0
    local = open_store(tmp_path / "store")
    try:
        ingest(local, [ZYM_CAPTURE], labels={"version": "1"})
        for by, metric in (("site", "gpu"), ("kernel", "gpu"), ("site", "blocked"),
                           ("host", "saving"), ("label:version", "gpu")):
            assert top(server, by=by, metric=metric) == top(local, by=by, metric=metric)
        assert findings(server) == findings(local)
        with pytest.raises(Exception, match="no captures match"):
            diff(server, {"version": "1"}, {"version": "2"})
    finally:
        local.close()
