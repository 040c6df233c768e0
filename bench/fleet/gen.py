"""Generate a fleet of captures from the bundled ones, with regressions planted where the
generator knows them.

    python bench/fleet/gen.py OUT_DIR [--captures 1000] [--hosts 50] [--seed 7]

Bases: ``sample_traces/gpt_decode_server.parquet`` (a zym capture: eBPF + CUPTI) and the
Kineto sample imported (``zym import``). Each host runs one base as its service (``gpt-zym``
or ``gpt-kineto``), and writes one capture a minute: half of its captures with label
``version=1.0``, the later half with ``version=1.1``. Every capture is the base with

* its clock moved (a per-host offset, as hosts' monotonic clocks differ),
* its start time (``meta.extra.interval``) set to its minute,
* noise: every GPU duration scaled by a per-capture factor (sd 2%) and its own factor (sd 5%),
  every call's duration by its own factor (sd 5%),
* in version 1.1 only, the planted regressions (``PLANTS``): one call site's GPU work slower
  (``gpt-zym``), one kernel slower everywhere (``gpt-kineto``), one sync site blocking longer
  (``gpt-zym``).

``OUT_DIR/truth.json`` says what was planted and, per service and key (site or kernel), the
change each plant makes, computed here from the base's raw rows: the planted durations over
the key's total (the key of an operation: its kernel name, or its call site as the base's
analysis names it).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
BASE_ZYM = ROOT / "sample_traces" / "gpt_decode_server.parquet"
BASE_KINETO_JSON = ROOT / "sample_traces" / "gpt_decode_server.trace.json.gz"
T0 = datetime(2026, 11, 30, tzinfo=timezone.utc)
# (service, what, factor): what is "site" (the GPU work launched from one stack), "kernel"
# (every run of one kernel) or "blocked" (the CPU time of one stack's sync calls).
PLANTS = (("gpt-zym", "site", 1.30), ("gpt-kineto", "kernel", 1.25),
          ("gpt-zym", "blocked", 2.0))


def base_paths(work: Path) -> dict[str, Path]:
    kineto = work / "bases" / "kineto.parquet"
    kineto.parent.mkdir(parents=True, exist_ok=True)
    if not kineto.exists():
        subprocess.run([sys.executable, "-m", "zym.cli.main", "import", str(BASE_KINETO_JSON),
                        "-o", str(kineto)], check=True)
    return {"gpt-zym": BASE_ZYM, "gpt-kineto": kineto}


def load(path: Path):
    from zym.schemas import open_capture

    cap = open_capture(path)
    return {t: cap.load(t) for t in ("frame", "stack", "span", "call", "gpu")}, cap.meta


def op_stacks(tables) -> pl.DataFrame:
    """Each GPU row's launching call's stack, by (pid, correlation id): the raw join."""
    calls = tables["call"].select("pid", "correlation_id", "stack_id").filter(
        pl.col("correlation_id").is_not_null()).unique(["pid", "correlation_id"], keep="first")
    return tables["gpu"].with_row_index("row").join(
        calls, on=["pid", "correlation_id"], how="left").sort("row")


def choose(tables, what: str) -> dict:
    """The plant's target in a base: a stack or kernel holding 3-20% of the GPU time (the
    largest such), or the stack with the most sync time."""
    if what == "blocked":
        s = (tables["call"].filter(pl.col("kind") == "sync").group_by("stack_id")
             .agg(pl.col("dur_ns").sum()).sort("dur_ns", "stack_id", descending=[True, False]))
        return {"stack_id": int(s["stack_id"][0])}
    g = op_stacks(tables).filter(pl.col("kind") != "sync")
    col = "stack_id" if what == "site" else "name"
    total = g["dur_ns"].sum()
    s = (g.group_by(col).agg(pl.col("dur_ns").sum()).filter(
        (pl.col("dur_ns") >= 0.03 * total) & (pl.col("dur_ns") <= 0.20 * total))
        .sort("dur_ns", col, descending=[True, False]))
    return {col: s[col][0] if col == "name" else int(s[col][0])}


def planted_masks(tables, plant: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(GPU rows, call rows) a plant scales."""
    what = plant["what"]
    if what == "kernel":
        return (tables["gpu"]["name"] == plant["name"]).to_numpy(), None
    if what == "site":
        st = op_stacks(tables)["stack_id"]
        return (st == plant["stack_id"]).fill_null(False).to_numpy(), None
    calls = tables["call"]
    return None, ((calls["stack_id"] == plant["stack_id"]) & (calls["kind"] == "sync")
                  ).fill_null(False).to_numpy()


def expected_changes(path: Path, tables, plant: dict, gmask, cmask) -> list[dict]:
    """Per key the plant touches: (factor - 1) x the planted time / the key's time."""
    from zym.analysis import analyze

    a = analyze(path, window="all")
    site_of = dict(zip(a.call_paths.paths["path_id"].to_list(),
                       a.call_paths.paths["site"].to_list()))
    f = plant["factor"] - 1
    out = []
    if gmask is not None:
        g = op_stacks(tables).with_columns(pl.Series("hit", gmask)).filter(
            pl.col("kind") != "sync")
        g = g.with_columns(pl.col("stack_id").fill_null(-1).replace_strict(
            site_of, default="(unknown stack)", return_dtype=pl.String).alias("site"))
        for key_col, by in (("name", "kernel"), ("site", "site")):
            t = g.group_by(key_col).agg(pl.col("dur_ns").sum().alias("total"),
                                        pl.col("dur_ns").filter("hit").sum().alias("hit"))
            for r in t.filter(pl.col("hit") > 0).iter_rows(named=True):
                out.append({"by": by, "metric": "gpu", "key": r[key_col],
                            "change_pct": round(100 * f * r["hit"] / r["total"], 2)})
    if cmask is not None:
        c = tables["call"].with_columns(pl.Series("hit", cmask))
        site = site_of.get(plant["stack_id"], "(no user frame)")
        hit = int(c.filter("hit")["dur_ns"].sum())
        total = int(a.call_paths.paths.filter(pl.col("site") == site)["cpu_blocked_ns"].sum())
        out.append({"by": "site", "metric": "blocked", "key": site,
                    "change_pct": round(100 * f * hit / total, 2) if total else None})
    return out


def generate(out: Path, n: int, hosts: int, seed: int) -> dict:
    from zym.schemas import write_capture

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    bases = base_paths(out)
    loaded = {svc: load(p) for svc, p in bases.items()}
    truth = {"plants": [], "expected": []}
    masks = {svc: (np.zeros(loaded[svc][0]["gpu"].height, bool),
                   np.zeros(loaded[svc][0]["call"].height, bool),
                   np.ones(loaded[svc][0]["gpu"].height), np.ones(loaded[svc][0]["call"].height))
             for svc in bases}
    for svc, what, factor in PLANTS:
        tables = loaded[svc][0]
        plant = {"service": svc, "what": what, "factor": factor} | choose(tables, what)
        gmask, cmask = planted_masks(tables, plant)
        _, _, gf, cf = masks[svc]
        if gmask is not None:
            gf[gmask] *= factor
        if cmask is not None:
            cf[cmask] *= factor
        truth["plants"].append(plant | {"gpu_rows": int(gmask.sum()) if gmask is not None
                                        else 0, "call_rows": int(cmask.sum())
                                        if cmask is not None else 0})
        truth["expected"] += [e | {"service": svc}
                              for e in expected_changes(bases[svc], tables, plant, gmask, cmask)]
    per_host = max(n // hosts, 2)
    written = 0
    for h in range(hosts):
        svc = list(bases)[h % len(bases)]
        tables, meta = loaded[svc]
        offset = int(rng.integers(1, 10**6)) * 1_000_000_000   # this host's clock
        for k in range(per_host):
            if written >= n:
                break
            version = "1.0" if k < per_host // 2 else "1.1"
            start = T0 + timedelta(minutes=k, seconds=h)
            path = out / f"host{h:03d}-{k:04d}.parquet"
            write_capture(path, vary(tables, rng, masks[svc], version == "1.1", offset),
                          stamp(meta, f"host{h:03d}", svc, version, start))
            written += 1
    truth["captures"] = written
    truth["hosts"] = hosts
    (out / "truth.json").write_text(json.dumps(truth, indent=1, default=str))
    return truth


def vary(tables, rng, masks, planted: bool, offset: int) -> dict:
    _, _, gf, cf = masks
    gpu, calls = tables["gpu"], tables["call"]
    noise = rng.normal(1.0, 0.02) * rng.normal(1.0, 0.05, gpu.height).clip(0.5, 1.5)
    gscale = noise * (gf if planted else 1.0)
    out = dict(tables)
    out["gpu"] = gpu.with_columns(
        (pl.col("dur_ns") * pl.Series(gscale)).round().cast(pl.Int64).alias("dur_ns"),
        pl.col("ts_ns") + offset)
    cscale = rng.normal(1.0, 0.05, calls.height).clip(0.5, 1.5) * (cf if planted else 1.0)
    out["call"] = calls.with_columns(
        (pl.col("dur_ns") * pl.Series(cscale)).round().cast(pl.Int64).alias("dur_ns"),
        pl.col("ts_ns") + offset)
    if tables["span"].height:
        out["span"] = tables["span"].with_columns(pl.col("ts_ns") + offset)
    return out


def stamp(meta, host: str, service: str, version: str, start: datetime):
    end = start + timedelta(seconds=60)
    extra = dict(meta.extra or {}) | {
        "labels": {"service": service, "version": version},
        "interval": {"start_unix_ns": int(start.timestamp() * 1e9),
                     "end_unix_ns": int(end.timestamp() * 1e9)}}
    return replace(meta, host=host, extra=extra, created_at=end.isoformat(timespec="seconds"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--captures", type=int, default=1000)
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    truth = generate(args.out, args.captures, args.hosts, args.seed)
    print(json.dumps({"captures": truth["captures"], "plants": truth["plants"]}, default=str))


if __name__ == "__main__":
    main()
