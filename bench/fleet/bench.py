"""The fleet benchmark: ingest rate, `zym fleet top` latency over >= 100 M GPU-op rows,
`zym fleet diff` precision and recall on the planted regressions, bytes per row.

    python bench/fleet/gen.py /tmp/fleet --captures 1000          # the captures + truth.json
    python bench/fleet/bench.py /tmp/fleet --store /tmp/fleet-store [--replicas 12]

Steps (each figure says what it includes):

1. ingest: ``zym fleet ingest -j 2`` on every capture, as users run it (whole process: the
   per-capture analysis and rules, staging, loading), with its own split of the time;
2. load only: the rows of the first ``--load-captures`` captures (analysed once, staged as
   Parquet) loaded into a fresh store, ``--reps`` times, to time the store's load apart from
   the analysis;
3. diff: ``fleet diff`` by site and by kernel (GPU time) and by site (blocked time), version
   1.0 against 1.1, scored against ``truth.json``: a key the generator changed by at least
   twice ``--min-change`` must be reported, a key it did not touch must not be; keys changed by
   less are neither (below the noise criterion by design);
4. bytes: compressed bytes per row per table (``system.parts``), for this fleet and for the
   bundled real captures alone;
5. replicate: the GPU-op table copied in ClickHouse (``INSERT ... SELECT`` with a new capture
   id and the capture time moved by whole days) until it holds >= ``--rows`` rows, with
   ``gpu_sums``, ``call_sums`` and ``captures`` rows to match (labels kept), so filters see a
   fleet of that size;
6. top: ``zym fleet top`` as users run it (the console script, a new process each time:
   Python start, chDB open, the query, printing), each run interleaved with three floors:
   ``zym fleet sql "SELECT 1"`` (the same process without the query), ``python -c "import
   chdb"`` (chDB's import and engine start) and ``python -c pass``; and the same queries in
   process, each interleaved with a scan of one column of every row (``SELECT sum(dur_ns)
   FROM zym.gpu_ops``); medians of ``--pairs`` rounds with their spread. Also the kernel
   ranking from ``gpu_ops`` itself (every row read, not ``gpu_sums``), 3 runs.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ZYM = [sys.executable, "-m", "zym.cli.main"]
# What users run: the console script (cli/entry.py answers `fleet top|findings|sql` itself).
ZYM_SCRIPT = [str(Path(sys.executable).parent / "zym")]


def sh(args: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args[:6])}...: exit {r.returncode}: {r.stderr[-2000:]}")
    return dt, r.stdout


def spread(xs: list[float]) -> dict:
    return {"median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3),
            "max_s": round(max(xs), 3), "n": len(xs)}


def ingest_cli(store: Path, files: list[Path]) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    wall, out = sh([*ZYM, "fleet", "ingest", "--store", str(store), "-j", "2", "-f", "json",
                    *map(str, files)])
    d = json.loads(out)
    d["wall_s"] = round(wall, 2)
    d["gpu_op_rows_per_s_wall"] = round(d["rows"]["gpu_ops"] / wall)
    return d


def load_only(files: list[Path], work: Path, reps: int) -> dict:
    """Analyse once (staged Parquet kept), then time loading into a fresh store."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from zym.fleet import open_store
    from zym.fleet.loader import BATCH, IngestResult, _load, ensure_schema
    from zym.fleet.prepare import prepare_chunk

    stage_root = work / "stage"
    shutil.rmtree(stage_root, ignore_errors=True)
    batches = []
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        for at in range(0, len(files), BATCH):
            batch = files[at:at + BATCH]
            stage = stage_root / f"b{at}"
            chunks = [batch[i::2] for i in range(2) if batch[i::2]]
            parts = pool.map(prepare_chunk, chunks, [stage / f"part{i}" for i in range(len(chunks))],
                             [{}] * len(chunks))
            batches.append((stage, [p for part in parts for p in part]))
    times, rows = [], {}
    for _ in range(reps):
        store_dir = work / "load-store"
        shutil.rmtree(store_dir, ignore_errors=True)
        store = open_store(store_dir)
        ensure_schema(store)
        result = IngestResult()
        t = time.perf_counter()
        for stage, prepared in batches:
            shutil.rmtree(stage / "links", ignore_errors=True)
            _load(store, prepared, stage, result)
        times.append(time.perf_counter() - t)
        rows = result.rows
        store.close()
    gpu = rows["gpu_ops"]
    total = sum(rows.values())
    return {"rows": rows, **spread(times),
            "gpu_op_rows_per_s": round(gpu / statistics.median(times)),
            "all_rows_per_s": round(total / statistics.median(times))}


def score_diff(store_dir: Path, truth: dict, min_change: float) -> dict:
    from zym.fleet import Noise, diff, open_store

    store = open_store(store_dir)
    out = {}
    for by, metric in (("site", "gpu"), ("kernel", "gpu"), ("site", "blocked")):
        d = diff(store, {"version": "1.0"}, {"version": "1.1"}, by=by, metric=metric,
                 noise=Noise(min_change=min_change))
        changed = {(e["service"], e["key"]): e["change_pct"] for e in truth["expected"]
                   if e["by"] == by and e["metric"] == metric}
        must = {k for k, c in changed.items() if c is not None and c >= 2 * 100 * min_change}
        found = {(r["service"], r["key"]) for r in d["regressions"]}
        false = {k for k in found if k not in changed}
        false |= {(r["service"], r["key"]) for r in d["improvements"]}
        hit = must & found
        out[f"{by}/{metric}"] = {
            "planted_must_find": len(must), "found_of_those": len(hit),
            "reported": len(found) + len(d["improvements"]), "false": len(false),
            "recall": round(len(hit) / len(must), 3) if must else None,
            "precision": round((len(found) - len(false & found)) / len(found), 3)
            if found else None,
            "missed": sorted(map(list, must - found)), "false_keys": sorted(map(list, false)),
            "captures": d["captures"]}
    store.close()
    return out


def part_bytes(store_dir: Path) -> dict:
    from zym.fleet import open_store, sql

    store = open_store(store_dir)
    rows = sql(store, "SELECT table, sum(rows) AS rows, sum(data_compressed_bytes) AS bytes, "
                      "sum(data_uncompressed_bytes) AS raw_bytes FROM system.parts "
                      "WHERE active AND database = 'zym' GROUP BY table ORDER BY table")
    store.close()
    return {r["table"]: {"rows": r["rows"], "bytes": r["bytes"],
                         "bytes_per_row": round(r["bytes"] / r["rows"], 2) if r["rows"] else None,
                         "ratio": round(r["raw_bytes"] / r["bytes"], 1) if r["bytes"] else None}
            for r in rows}


def real_bytes(work: Path) -> dict:
    from zym.fleet import ingest, open_store

    store_dir = work / "real-store"
    shutil.rmtree(store_dir, ignore_errors=True)
    kineto = work / "real-kineto.parquet"
    if not kineto.exists():
        sh([*ZYM, "import", str(REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"),
            "-o", str(kineto)])
    files = [REPO / "sample_traces" / "gpt_decode_server.parquet", kineto,
             REPO / "sample_traces" / "gpt_decode_server.ebpf.parquet"]
    store = open_store(store_dir)
    ingest(store, files)
    store.close()
    return {"captures": [str(f.name) for f in files],
            "capture_file_bytes": sum(f.stat().st_size for f in files),
            "tables": part_bytes(store_dir)}


def replicate(store_dir: Path, min_rows: int) -> dict:
    from zym.fleet import open_store, sql

    store = open_store(store_dir)
    base = sql(store, "SELECT count() AS n FROM zym.gpu_ops")[0]["n"]
    reps = -(-min_rows // base) - 1
    cols = ("capture_id, capture_time, end_time, host, service, labels, file, producer, "
            "window_ns, gpu_ns, cpu_blocked_ns, calls, gpu_ops, steps, findings, saving_ns")
    # chDB inserts nothing when a large INSERT ... SELECT reads its own target table, so the
    # originals are copied to a snapshot table first and every copy is made from it.
    t = time.perf_counter()
    for table in ("gpu_ops", "gpu_sums", "call_sums", "captures"):
        store.command(f"DROP TABLE IF EXISTS zym.{table}_base")
        store.command(f"CREATE TABLE zym.{table}_base AS zym.{table}")
        store.command(f"INSERT INTO zym.{table}_base SELECT * FROM zym.{table}")
    for r in range(1, reps + 1):
        for table in ("gpu_ops", "gpu_sums", "call_sums"):
            store.command(
                f"INSERT INTO zym.{table} SELECT * REPLACE (concat(capture_id, '-r{r}') AS "
                f"capture_id, capture_time + toIntervalDay({r}) AS capture_time) "
                f"FROM zym.{table}_base SETTINGS max_insert_threads = 2")
        store.command(
            f"INSERT INTO zym.captures ({cols}) SELECT * EXCEPT (ingested_at) REPLACE ("
            f"concat(capture_id, '-r{r}') AS capture_id, capture_time + toIntervalDay({r}) AS "
            f"capture_time, end_time + toIntervalDay({r}) AS end_time) "
            f"FROM zym.captures_base")
    for table in ("gpu_ops", "gpu_sums", "call_sums", "captures"):
        store.command(f"DROP TABLE zym.{table}_base")
    seconds = time.perf_counter() - t
    store.command("OPTIMIZE TABLE zym.captures FINAL")
    n = sql(store, "SELECT count() AS n, uniqExact(capture_id) AS c FROM zym.gpu_ops")[0]
    store.close()
    return {"base_rows": base, "copies": reps, "rows": n["n"], "captures": n["c"],
            "seconds": round(seconds, 1)}


TOP_QUERIES = {
    "kernel": ["--by", "kernel"],
    "site": ["--by", "site"],
    "host": ["--by", "host"],
    "label:version": ["--by", "label:version"],
    "site, one service, 3 days": ["--by", "site", "--label", "service=gpt-zym", "--since",
                                  "2026-12-02", "--until", "2026-12-05"],
}
CLI_FLOOR_SQL = "SELECT 1 AS one"  # the process: Python, zym's imports, chDB, the store
SCAN_SQL = "SELECT sum(dur_ns) AS s FROM zym.gpu_ops"  # one column of every row
RAW_KERNEL_SQL = ("SELECT name, sum(v), count() FROM (SELECT capture_id, name, sum(dur_ns) AS v "
                  "FROM zym.gpu_ops WHERE work = 1 GROUP BY capture_id, name) GROUP BY name")
FLOORS = {"zym fleet sql SELECT 1": None, "python -c 'import chdb'": [sys.executable, "-c",
                                                                     "import chdb"],
          "python -c pass": [sys.executable, "-c", "pass"]}


def top_latency(store_dir: Path, pairs: int) -> dict:
    out = {}
    floors = dict(FLOORS, **{"zym fleet sql SELECT 1": [*ZYM_SCRIPT, "fleet", "sql", "--store",
                                                        str(store_dir), CLI_FLOOR_SQL]})
    for name, args in TOP_QUERIES.items():
        q, f = [], {k: [] for k in floors}
        for _ in range(pairs):
            q.append(sh([*ZYM_SCRIPT, "fleet", "top", "--store", str(store_dir), *args])[0])
            for k, cmd in floors.items():
                f[k].append(sh(cmd)[0])
        out[f"cli: {name}"] = {"top": spread(q), **{k: spread(v) for k, v in f.items()}}
    from zym.fleet import Filters, open_store, parse_time, sql, top

    store = open_store(store_dir)
    inproc = {
        "kernel": lambda: top(store, by="kernel"),
        "site": lambda: top(store, by="site"),
        "host": lambda: top(store, by="host"),
        "label:version": lambda: top(store, by="label:version"),
        "site, one service, 3 days": lambda: top(store, by="site", filters=Filters(
            labels={"service": "gpt-zym"}, since=parse_time("2026-12-02"),
            until=parse_time("2026-12-05"))),
    }
    for name, fn in inproc.items():
        q, f = [], []
        for _ in range(pairs):
            t = time.perf_counter()
            fn()
            q.append(time.perf_counter() - t)
            t = time.perf_counter()
            sql(store, SCAN_SQL)
            f.append(time.perf_counter() - t)
        out[f"in process: {name}"] = {"top": spread(q), "scan": spread(f)}
    q = []
    for _ in range(3):
        t = time.perf_counter()
        sql(store, RAW_KERNEL_SQL)
        q.append(time.perf_counter() - t)
    out["in process: kernel from gpu_ops (every row)"] = {"top": spread(q)}
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fleet", type=Path, help="folder written by gen.py")
    ap.add_argument("--store", type=Path, default=Path("/tmp/zym-fleet-bench"))
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--load-captures", type=int, default=256,
                    help="captures analysed again for the load-only step")
    ap.add_argument("--min-change", type=float, default=0.05)
    ap.add_argument("--steps", default="ingest,load,diff,bytes,replicate,top")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    steps = set(args.steps.split(","))
    files = sorted(args.fleet.glob("host*.parquet"))
    truth = json.loads((args.fleet / "truth.json").read_text())
    work = args.store.parent / (args.store.name + "-work")
    work.mkdir(parents=True, exist_ok=True)
    out_path = args.out or work / "results.json"
    res = json.loads(out_path.read_text()) if out_path.exists() else {}
    res["captures"] = len(files)

    def step(name, fn):
        if name in steps:
            print(f"== {name}", file=sys.stderr, flush=True)
            res[name] = fn()
            out_path.write_text(json.dumps(res, indent=1))
            print(json.dumps(res[name], indent=1), flush=True)

    step("ingest", lambda: ingest_cli(args.store, files))
    step("load", lambda: load_only(files[:args.load_captures], work, args.reps))
    step("diff", lambda: score_diff(args.store, truth, args.min_change))
    step("bytes", lambda: {"fleet": part_bytes(args.store), "real": real_bytes(work)})
    step("replicate", lambda: replicate(args.store, args.rows))
    step("top", lambda: top_latency(args.store, args.pairs))


if __name__ == "__main__":
    main()
