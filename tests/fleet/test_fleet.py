"""The fleet store on chDB: fleet sums equal the per-capture analyses summed (expected values
from the capture files and from `analyze` per capture, never from the store), ingest is keyed
by content hash, filters select the right captures, and diff finds a planted regression and
nothing in noise."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pytest

REPO = Path(__file__).resolve().parents[2]
ZYM_CAPTURE = REPO / "sample_traces" / "gpt_decode_server.parquet"
EBPF_CAPTURE = REPO / "sample_traces" / "gpt_decode_server.ebpf.parquet"

try:
    import chdb  # noqa: F401
except ImportError:  # a system part: fails under ZYM_REQUIRE_SYSTEM=1 (tests/conftest.py)
    pytest.skip("chdb not installed (pip install chdb)", allow_module_level=True)


def variant(src: Path, out: Path, host: str, labels: dict, start: datetime, seed: int,
            scale_kernel: str | None = None, factor: float = 1.0) -> Path:
    """A copy of ``src`` as another host's capture: new labels and start time, every GPU
    duration times its own noise (sd 3%), ``scale_kernel``'s times ``factor``."""
    from zym.schemas import open_capture, write_capture

    cap = open_capture(src)
    tables = {t: cap.load(t) for t in ("frame", "stack", "span", "call", "gpu")}
    rng = np.random.default_rng(seed)
    g = tables["gpu"]
    f = rng.normal(1.0, 0.03, g.height).clip(0.8, 1.2)
    if scale_kernel is not None:
        f = np.where((g["name"] == scale_kernel).to_numpy(), f * factor, f)
    tables["gpu"] = g.with_columns((pl.col("dur_ns") * pl.Series(f)).round().cast(pl.Int64))
    t0 = int(start.timestamp() * 1e9)
    meta = replace(cap.meta, host=host, extra=dict(cap.meta.extra) | {
        "labels": labels, "interval": {"start_unix_ns": t0, "end_unix_ns": t0 + 60 * 10**9}})
    return write_capture(out, tables, meta)


def raw(path: Path, record: str) -> pl.DataFrame:
    """A capture's rows of one kind, read with polars alone (no zym code)."""
    return pl.read_parquet(path).filter(pl.col("record") == record)


@pytest.fixture(scope="module", params=["analysed", "staged"])
def fleet(request, tmp_path_factory, sample_capture):
    """Four captures in a store: analysed by the ingest, or staged first (`zym fleet stage`:
    sidecars beside copies of the files) so the ingest only loads them."""
    import shutil

    from zym.fleet import ingest, open_store
    from zym.fleet.sidecar import stage

    d = tmp_path_factory.mktemp("fleet")
    day = datetime(2026, 11, 30, tzinfo=timezone.utc)
    files = [
        variant(ZYM_CAPTURE, d / "a.parquet", "host-a", {"service": "zym", "version": "1"},
                day.replace(hour=1), 1),
        variant(ZYM_CAPTURE, d / "b.parquet", "host-b", {"service": "zym", "version": "2"},
                day.replace(hour=2), 2),
        variant(sample_capture, d / "k.parquet", "host-k", {"service": "kineto",
                                                            "version": "1"},
                day.replace(hour=3), 3),
        EBPF_CAPTURE,
    ]
    if request.param == "staged":
        files[-1] = Path(shutil.copy(EBPF_CAPTURE, d / EBPF_CAPTURE.name))
        assert [what for _, what in stage(files)] == ["staged"] * 4
    store = open_store(d / "store")
    result = ingest(store, files, labels={"fleet": "test"})
    assert result.staged == (4 if request.param == "staged" else 0)
    yield store, files, result
    store.close()


def test_ingest_counts_and_is_a_no_op_the_second_time(fleet, tmp_path):
    from zym.fleet import ingest, sql

    store, files, result = fleet
    assert result.ingested == 4 and result.skipped == 0
    expected_gpu = sum(raw(f, "gpu").height for f in files)
    expected_frames = sum(raw(f, "frame").height for f in files)
    counts = sql(store, "SELECT (SELECT count() FROM zym.gpu_ops) AS g, "
                        "(SELECT count() FROM zym.frames) AS f, "
                        "(SELECT count() FROM zym.calls) AS c, "
                        "(SELECT count() FROM zym.captures FINAL) AS n")[0]
    assert counts["g"] == expected_gpu and counts["f"] == expected_frames
    assert counts["c"] == sum(raw(f, "call").height for f in files)
    assert counts["n"] == 4
    copy = tmp_path / "same-bytes.parquet"
    copy.write_bytes(files[0].read_bytes())
    again = ingest(store, [*files, copy])
    assert again.ingested == 0 and again.skipped == 5
    assert sql(store, "SELECT count() AS g FROM zym.gpu_ops")[0]["g"] == expected_gpu


def test_fleet_sums_equal_the_per_capture_analyses_summed(fleet):
    from zym.analysis import analyze
    from zym.fleet import top
    from zym.rules import evaluate

    store, files, _ = fleet
    kernel, host, kernel_captures = Counter(), Counter(), Counter()
    site_gpu, site_blocked, saving = Counter(), Counter(), Counter()
    finding_captures = Counter()
    for f in files:
        g = raw(f, "gpu").filter(pl.col("kind") != "sync")
        for name, ns in g.group_by("name").agg(pl.col("dur_ns").sum()).iter_rows():
            kernel[name] += ns
            kernel_captures[name] += 1
        meta = json.loads(pl.read_parquet_metadata(f)["zym.meta"])
        host[meta["host"]] += int(g["dur_ns"].sum())
        a = analyze(f, window="all")
        d = a.to_dict()
        for p in d["paths_by_gpu_time"]:
            site_gpu[p["site"]] += p["gpu_ns"]
        for p in d["paths_by_cpu_blocked"]:
            site_blocked[p["site"]] += p["cpu_blocked_ns"]
        fired = evaluate(a)
        for fd in fired:
            saving[fd.site] += fd.saving_ns or 0
        for key in {(fd.rule_id, fd.site) for fd in fired}:
            finding_captures[key] += 1  # captures in which the rule fired at the site

    def got(by, metric):
        return {r["key"]: r["value_ns"] for r in top(store, by=by, metric=metric, limit=10**6)}

    assert got("kernel", "gpu") == {k: v for k, v in kernel.items() if v}
    rows = top(store, by="kernel", limit=10**6)
    assert {r["key"]: r["captures"] for r in rows} == {k: kernel_captures[k] for k in kernel
                                                       if kernel[k]}
    assert got("host", "gpu") == {k: v for k, v in host.items() if v}
    assert got("site", "gpu") == {k: v for k, v in site_gpu.items() if v}
    assert got("site", "blocked") == {k: v for k, v in site_blocked.items() if v}
    assert got("site", "saving") == {k: v for k, v in saving.items() if v}
    assert got("label:fleet", "gpu") == {"test": sum(kernel.values())}
    from zym.fleet import findings

    rows = findings(store, limit=10**6)
    assert {(r["rule_id"], r["site"]): r["captures"] for r in rows} == dict(finding_captures)


def test_filters_select_captures_by_label_host_and_time(fleet):
    from zym.fleet import Filters, parse_time, top

    store, files, _ = fleet
    total = {k: raw(f, "gpu").filter(pl.col("kind") != "sync")["dur_ns"].sum()
             for k, f in zip("abk", files)}

    def one(**kw):
        rows = top(store, by="label:fleet", filters=Filters(**kw))
        return rows[0]["value_ns"] if rows else 0

    assert one(labels={"version": "1"}) == total["a"] + total["k"]
    assert one(labels={"version": "1", "service": "zym"}) == total["a"]
    assert one(hosts=["host-b"]) == total["b"]
    assert one(since=parse_time("2026-11-30T01:30"), until=parse_time("2026-11-30T02:30")) \
        == total["b"]
    assert one(labels={"version": "9"}) == 0


def test_sums_tables_equal_the_rows_they_sum(fleet):
    """gpu_sums and call_sums (written by prepare) against the capture files read with polars,
    and against the store's own gpu_ops and calls summed by ClickHouse."""
    from zym.fleet import sql
    from zym.fleet.prepare import capture_id

    store, files, _ = fleet
    for f in files:
        cid = capture_id(f)
        g = raw(f, "gpu")
        got = {r["name"]: (r["d"], r["n"]) for r in sql(
            store, f"SELECT name, sum(dur_ns) AS d, sum(ops) AS n FROM zym.gpu_sums "
                   f"WHERE capture_id = '{cid}' GROUP BY name")}
        want = {n: (d, c) for n, d, c in g.group_by("name").agg(
            pl.col("dur_ns").sum(), pl.len()).iter_rows()}
        assert got == want
        c = raw(f, "call")
        got = {r["api"]: (r["d"], r["n"]) for r in sql(
            store, f"SELECT api, sum(dur_ns) AS d, sum(calls) AS n FROM zym.call_sums "
                   f"WHERE capture_id = '{cid}' GROUP BY api")}
        want = {a: (d, n) for a, d, n in c.group_by("name").agg(  # a call's name: its API
            pl.col("dur_ns").sum(), pl.len()).iter_rows()}
        assert got == want
    for sums, rows, keys, count in (("gpu_sums", "gpu_ops", "work, name, site", "ops"),
                                    ("call_sums", "calls", "blocking, api, site", "calls")):
        diff = sql(store, f"SELECT count() AS n FROM (SELECT capture_id, {keys}, sum(dur_ns) AS d,"
                          f" count() AS c FROM zym.{rows} GROUP BY capture_id, {keys}) AS a "
                          f"FULL OUTER JOIN (SELECT capture_id, {keys}, dur_ns AS d, {count} AS c"
                          f" FROM zym.{sums}) AS b USING (capture_id, {keys}) "
                          f"WHERE a.d != b.d OR a.c != b.c")
        assert diff[0]["n"] == 0, sums


def test_frames_and_stacks_are_the_captures_own(fleet):
    from zym.fleet import sql
    from zym.fleet.prepare import capture_id

    store, files, _ = fleet
    for f in files:
        cid = capture_id(f)
        for table, record, cols in (("frames", "frame", ["frame_id", "kind", "name", "file",
                                                          "line"]),
                                    ("stacks", "stack", ["stack_id", "parent_id", "frame_id",
                                                         "depth"])):
            got = sorted(tuple(r[c] for c in cols) for r in sql(
                store, f"SELECT {', '.join(cols)} FROM zym.{table} WHERE capture_id = '{cid}'"))
            want = sorted(raw(f, record).select(cols).iter_rows())
            assert got == want, (f.name, table)


def test_diff_finds_a_planted_kernel_and_nothing_in_noise(tmp_path):
    from zym.fleet import diff, ingest, open_store

    g = raw(ZYM_CAPTURE, "gpu").filter(pl.col("kind") == "kernel")
    by_name = g.group_by("name").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)
    share = by_name["dur_ns"] / g["dur_ns"].sum()
    planted = by_name.filter((share > 0.03) & (share < 0.3))["name"][0]
    day = datetime(2026, 11, 30, tzinfo=timezone.utc)
    files = []
    for i in range(12):
        version = ("old", "new", "same")[i % 3]
        files.append(variant(ZYM_CAPTURE, tmp_path / f"c{i}.parquet", f"h{i}",
                             {"service": "zym", "version": version},
                             day.replace(minute=i), 100 + i,
                             scale_kernel=planted if version == "new" else None, factor=1.4))
    store = open_store(tmp_path / "store")
    try:
        ingest(store, files)
        d = diff(store, {"version": "old"}, {"version": "new"}, by="kernel")
        assert [r["key"] for r in d["regressions"]] == [planted]
        assert 30 < d["regressions"][0]["change_pct"] < 50
        assert d["improvements"] == []
        for by in ("site", "kernel"):
            quiet = diff(store, {"version": "old"}, {"version": "same"}, by=by)
            assert quiet["regressions"] == [] and quiet["improvements"] == []
    finally:
        store.close()


def test_partial_load_is_cleared_and_loaded_again(tmp_path, monkeypatch):
    from zym.fleet import ingest, loader, open_store, sql
    from zym.fleet.prepare import capture_id

    monkeypatch.setattr(loader, "ID_CHUNK", 1)  # ids go in several IN lists
    store = open_store(tmp_path / "store")
    try:
        loader.ensure_schema(store)
        files = [ZYM_CAPTURE, EBPF_CAPTURE]
        for f in files:  # rows of a load that was cut short: frames in, no captures row
            store.command(f"INSERT INTO zym.frames (capture_id, capture_time, host, service, "
                          f"frame_id, kind, name) VALUES ('{capture_id(f)}', now(), 'x', '', "
                          f"1, 'python', 'f')")
        assert ingest(store, files).ingested == 2
        for f in files:
            n = sql(store, f"SELECT count() AS n FROM zym.frames "
                           f"WHERE capture_id = '{capture_id(f)}'")
            assert n[0]["n"] == raw(f, "frame").height
    finally:
        store.close()


def _zym(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zym.cli.main", *args], check=False,
                          capture_output=True,
                          text=True, timeout=300)


def test_cli_ingest_top_and_bad_input(tmp_path):
    store = str(tmp_path / "store")
    r = _zym("fleet", "ingest", "--store", store, str(ZYM_CAPTURE), "--label", "version=1")
    assert r.returncode == 0, r.stderr
    r = _zym("fleet", "top", "--store", store, "--by", "kernel", "-f", "json", "-n", "3")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    g = raw(ZYM_CAPTURE, "gpu").filter(pl.col("kind") != "sync")
    top3 = g.group_by("name").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True).head(3)
    assert [r["value_ns"] for r in rows] == top3["dur_ns"].to_list()
    for args, needle in (
            (("fleet", "ingest", "--store", store, str(REPO / "README.md")), "README.md"),
            (("fleet", "ingest", "--store", store, "--label", "no-equals", str(ZYM_CAPTURE)),
             "KEY=VALUE"),
            (("fleet", "top", "--store", store, "--by", "nope"), "--by"),
            (("fleet", "top", "--store", store, "--by", "kernel", "-m", "blocked"), "kernel"),
            (("fleet", "sql", "--store", store, "SELEC 1"), "query failed"),
            (("fleet", "top", "--store", store, "--since", "yesterday"), "ISO 8601"),
            (("fleet", "diff", "--store", store, "-b", "version=1", "-c", "version=2"),
             "no captures match"),
            (("fleet", "top", "--store", "ftp://x/y"), "clickhouse://")):
        r = _zym(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and needle in r.stderr, (args, r.stderr)


def test_a_store_without_the_sums_tables_gets_them_from_its_rows(tmp_path):
    """A store written before gpu_sums and call_sums: opening it computes them, once."""
    from zym.fleet import ingest, open_store, sql, top

    path = tmp_path / "store"
    store = open_store(path)
    ingest(store, [ZYM_CAPTURE, EBPF_CAPTURE])
    before = {(by, m): top(store, by=by, metric=m, limit=10**6)
              for by, m in (("kernel", "gpu"), ("site", "gpu"), ("site", "blocked"))}
    store.command("DROP TABLE zym.gpu_sums")
    store.command("DROP TABLE zym.call_sums")
    store.close()
    store = open_store(path)
    try:
        for (by, m), rows in before.items():
            assert top(store, by=by, metric=m, limit=10**6) == rows, (by, m)
        n = sql(store, "SELECT count() AS n FROM zym.gpu_sums")[0]["n"]
        store.close()
        store = open_store(path)  # has them now: nothing computed again
        assert sql(store, "SELECT count() AS n FROM zym.gpu_sums")[0]["n"] == n
    finally:
        store.close()


def _contents(store) -> dict[str, list]:
    """Every row of every table (``captures`` without the time it was ingested), sorted."""
    from zym.fleet import sql
    from zym.fleet.schema import TABLES

    return {t: sql(store, f"SELECT * EXCEPT ingested_at FROM zym.{t} FINAL ORDER BY ALL"
                   if t == "captures" else f"SELECT * FROM zym.{t} ORDER BY ALL")
            for t in TABLES}


def test_staged_captures_load_the_rows_the_analysis_would(tmp_path):
    """A store loaded from sidecars holds exactly the rows of one that analysed the same
    captures, also when the ingest's --label sets another service than the capture's."""
    import shutil

    from zym.fleet import ingest, open_store
    from zym.fleet.sidecar import stage

    files = [Path(shutil.copy(f, tmp_path / f.name)) for f in (ZYM_CAPTURE, EBPF_CAPTURE)]
    day = datetime(2026, 11, 30, tzinfo=timezone.utc)
    files.append(variant(ZYM_CAPTURE, tmp_path / "v.parquet", "host-v",
                         {"service": "own", "version": "1"}, day, 5))
    got = {}
    for how in ("analysed", "staged"):
        if how == "staged":
            stage(files)
        for labels in ({"fleet": "x"}, {"service": "other"}):
            store = open_store(tmp_path / f"store-{how}-{len(got)}")
            try:
                r = ingest(store, files, labels=labels)
                assert r.ingested == 3 and r.staged == (3 if how == "staged" else 0)
                got[how, tuple(labels)] = _contents(store)
            finally:
                store.close()
    for labels in (("fleet",), ("service",)):
        a, s = got["analysed", labels], got["staged", labels]
        for table in a:
            assert a[table] and s[table] == a[table], (labels, table)
    assert {r["service"] for r in got["staged", ("service",)]["gpu_ops"]} == {"other"}


def test_stale_sidecars_are_not_used(tmp_path):
    """A sidecar is used only for the bytes it was staged from, by the same code: another
    capture's sidecar, one with another fingerprint, or one missing a table is analysed
    again; a capture whose bytes no longer match its own hash is refused."""
    import json as _json
    import shutil

    from zym.fleet import ingest, open_store, sql
    from zym.fleet.sidecar import path_of, stage
    from zym.schemas.integrity import CorruptCaptureError

    a = Path(shutil.copy(ZYM_CAPTURE, tmp_path / "a.parquet"))
    b = Path(shutil.copy(EBPF_CAPTURE, tmp_path / "b.parquet"))
    c = Path(shutil.copy(ZYM_CAPTURE, tmp_path / "c.parquet"))
    stage([a, b, c])
    assert [w for _, w in stage([a, b, c])] == ["current"] * 3
    shutil.rmtree(path_of(b))
    shutil.copytree(path_of(a), path_of(b))  # a's rows beside b: another content hash
    manifest = path_of(c) / "manifest.json"
    m = _json.loads(manifest.read_text())
    manifest.write_text(_json.dumps(m | {"fingerprint": "0" * 64}))  # staged by another zym
    store = open_store(tmp_path / "store")
    try:
        r = ingest(store, [a, b])
        assert (r.ingested, r.staged, r.stale) == (2, 1, 1)
        n = sql(store, "SELECT count() AS n FROM zym.gpu_ops")[0]["n"]
        assert n == raw(ZYM_CAPTURE, "gpu").height + raw(EBPF_CAPTURE, "gpu").height
    finally:
        store.close()
    assert [w for _, w in stage([c])] == ["staged"]  # not current: staged again
    (path_of(c) / "calls.native.lz4").unlink()
    store = open_store(tmp_path / "store2")
    try:
        r = ingest(store, [c])
        assert (r.ingested, r.staged, r.stale) == (1, 0, 1)
        e = Path(shutil.copy(EBPF_CAPTURE, tmp_path / "e.parquet"))  # not in this store
        assert [w for _, w in stage([e])] == ["staged"]
        data = bytearray(e.read_bytes())
        data[100] ^= 0xFF  # its footer still names the hash of the bytes it was staged from
        e.write_bytes(bytes(data))
        with pytest.raises(CorruptCaptureError):
            ingest(store, [e])
    finally:
        store.close()


def test_cli_stage_then_ingest(tmp_path):
    import shutil

    f = Path(shutil.copy(ZYM_CAPTURE, tmp_path / "a.parquet"))
    r = _zym("fleet", "stage", str(f))
    assert r.returncode == 0 and "1 captures staged" in r.stderr, r.stderr
    r = _zym("fleet", "ingest", "--store", str(tmp_path / "store"), str(f), "-f", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["staged"] == 1 and out["rows"]["gpu_ops"] == raw(f, "gpu").height
    r = _zym("fleet", "ingest", "--store", str(tmp_path / "s2"), str(f), "--no-staged",
             "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["staged"] == 0, r.stderr
    for args in (("fleet", "stage", str(REPO / "README.md")),
                 ("fleet", "stage", str(tmp_path / "missing.parquet"))):
        r = _zym(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
