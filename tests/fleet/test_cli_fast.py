"""`zym fleet top|findings|sql` through the console script (cli/fleet_fast.py): the same output
as the typer commands, without importing typer, polars or pandas; every line it does not parse
exactly goes to typer, which says what is wrong."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from console import console as run_console
from console import imported, typer_app

REPO = Path(__file__).resolve().parents[2]

try:
    import chdb  # noqa: F401
except ImportError:  # a system part: fails under ZYM_REQUIRE_SYSTEM=1 (tests/conftest.py)
    pytest.skip("chdb not installed (pip install chdb)", allow_module_level=True)

HEAVY = ("typer", "click", "polars", "pandas", "pyarrow", "zym.analysis.report")


def console(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_console(HEAVY, *args, env=env)


@pytest.fixture(scope="module")
def store(tmp_path_factory, sample_capture) -> str:
    from zym.fleet import ingest, open_store

    path = tmp_path_factory.mktemp("fleet") / "store"
    s = open_store(path)
    ingest(s, [REPO / "sample_traces" / "gpt_decode_server.parquet", sample_capture],
           labels={"version": "1"})
    s.close()  # chDB: one process at a time; the commands below open it
    return str(path)


QUERIES = (
    ("top",),
    ("top", "--by", "kernel", "-n", "5"),
    ("top", "--by=label:version", "--metric", "blocked", "-f", "json"),
    ("top", "-m", "saving", "--label", "version=1", "--since", "2000-01-01", "--limit", "3"),
    ("top", "--by", "host", "--host", "nohost"),
    ("top", "--since", "-36500d", "--until=-1m", "-l", "version=1", "-l", "version=1"),
    ("findings",),
    ("findings", "-f", "json", "-n", "2"),
    ("sql", ("SELECT name, count() AS n FROM zym.gpu_ops GROUP BY name ORDER BY n DESC, name "
            "LIMIT 4")),
    ("sql", "-f", "json", ("SELECT api, sum(dur_ns) AS d FROM zym.calls GROUP BY api "
                          "ORDER BY d DESC LIMIT 3")),
)


@pytest.mark.parametrize("args", QUERIES, ids=[" ".join(q)[:40] for q in QUERIES])
def test_console_prints_what_the_typer_command_prints(store, args):
    fast = console("fleet", args[0], "--store", store, *args[1:])
    slow = typer_app("fleet", args[0], "--store", store, *args[1:])
    assert fast.returncode == 0 and slow.returncode == 0, (fast.stderr, slow.stderr)
    assert fast.stdout == slow.stdout
    assert fast.stdout.strip() and "(no rows)" not in fast.stdout or args[-1] == "nohost"
    if "json" in args:
        json.loads(fast.stdout)
    heavy = imported(fast)
    assert heavy <= ({"pyarrow"} if args[0] == "sql" else set()), heavy


def test_store_from_the_environment(store):
    import os

    env = dict(os.environ, ZYM_FLEET_STORE=store)
    fast = console("fleet", "top", "--by", "kernel", "-f", "json", env=env)
    slow = console("fleet", "top", "--by", "kernel", "-f", "json", "--store", store)
    assert fast.returncode == 0, fast.stderr
    assert json.loads(fast.stdout) == json.loads(slow.stdout) != []


@pytest.mark.parametrize("args, needle, via_typer", (
    (("top", "--by", "nope"), "zym: error: --by 'nope'", False),
    (("sql", "SELEC 1"), "zym: error: query failed", False),
    (("top", "--since", "yesterday"), "ISO 8601", False),
    (("top", "--bogus"), "No such option", True),
    (("top", "--limit", "0"), "--limit", True),
    (("top", "-n", "many"), "--limit", True),
    (("top", "-f", "xml"), "--format", True),
    (("sql",), "Missing argument", True),
    (("top", "--by"), "requires an argument", True),
))
def test_bad_lines_exit_2_with_one_line(store, args, needle, via_typer):
    r = console("fleet", args[0], "--store", store, *args[1:])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert ("typer" in imported(r)) == via_typer


def test_help_is_typers(store):
    r = console("fleet", "top", "--store", store, "--help")
    assert r.returncode == 0 and "Usage: zym fleet top [OPTIONS]" in r.stdout
    assert "typer" in imported(r)
