"""`zym fleet ingest|top|findings|diff|sql`: many captures in ClickHouse. Library: zym.fleet.

`top`, `findings` and `sql` are answered by cli/fleet_fast.py without typer when the console
script is run with options it parses; the typer commands here declare them (for `--help`) and
serve every other command line."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error
from .fleet_fast import FINDINGS_COLUMNS, emit, top_columns

fleet_app = typer.Typer(
    name="fleet", no_args_is_help=True,
    help="Many captures in one ClickHouse store (chDB embedded by default, or a server): "
         "ingest them, then ask which sites, kernels and hosts cost most, which findings "
         "recur, and what got worse between two versions.\n\n"
         "Example: zym fleet ingest captures/*.parquet --label version=1.3; "
         "zym fleet top --by site --since -1d",
)


class Fmt(str, Enum):
    text = "text"
    json = "json"


Store = Annotated[str | None, typer.Option(
    "--store", envvar="ZYM_FLEET_STORE", help="Store: a folder (chDB, default ~/.zym/fleet) or "
    "clickhouse://HOST:PORT/DB (a ClickHouse server, HTTP port).")]
Since = Annotated[str | None, typer.Option(
    "--since", help="Captures starting at or after this time: ISO 8601 (UTC) or -2h, -7d.")]
Until = Annotated[str | None, typer.Option("--until", help="Captures starting before this time.")]
Labels = Annotated[list[str] | None, typer.Option(
    "--label", "-l", help="Only captures with this label, KEY=VALUE (host= and service= match "
                          "those columns); repeatable.")]
Host = Annotated[list[str] | None, typer.Option("--host", help="Only this host; repeatable.")]
Format = Annotated[Fmt, typer.Option("--format", "-f", help="Output format.")]
Limit = Annotated[int, typer.Option("--limit", "-n", min=1, help="Rows to show.")]


def _filters(since, until, labels, hosts):
    from zym.fleet.queries import filters_from

    return filters_from(since, until, labels, hosts)


def _emit(rows, fmt: Fmt, columns: list[tuple[str, str]] | None = None) -> None:
    emit(rows, fmt.value, columns)


@fleet_app.command("ingest")
def ingest_cmd(
    captures: Annotated[list[Path], typer.Argument(help="Capture files (zym Parquet).",
                                                   show_default=False)],
    store: Store = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", "-l", help="Add this label to every capture, KEY=VALUE (e.g. version=1.3, "
                              "service=decode); repeatable.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1,
                                      help="Captures analysed at once (processes).")] = 1,
    no_staged: Annotated[bool, typer.Option(
        "--no-staged", help="Analyse every capture, even one staged by `zym fleet stage`.")
    ] = False,
    fmt: Format = Fmt.text,
) -> None:
    """Analyse captures and load them into the store; a capture already there is skipped.

    A capture staged by `zym fleet stage` (a CAPTURE.zymfleet folder beside it, staged from
    the same bytes by the same zym) is not analysed again: the store only loads its rows.

    Example: zym fleet ingest /var/zym/*.parquet --label version=1.3 -j 4
    """
    with exit_on_error():
        from zym.fleet import ingest, open_store
        from zym.fleet.queries import parse_labels

        extra = parse_labels(label or [])
        s = open_store(store)
        result = ingest(s, captures, labels=extra, jobs=jobs, staged=not no_staged,
                        progress=lambda m: typer.echo(f"zym: {m}", err=True))
    d = result.to_dict()
    if fmt is Fmt.json:
        _emit(d, fmt)
        return
    stale = f", {d['stale']} stale" if d["stale"] else ""
    typer.echo(f"zym: {d['ingested']} captures ingested ({d['staged']} staged{stale}), "
               f"{d['skipped']} already in the store; "
               f"{d['rows'].get('gpu_ops', 0):,} GPU operations, {d['rows'].get('calls', 0):,} "
               f"calls (analysis {d['analysis_s']} s, checks {d['check_s']} s, load "
               f"{d['load_s']} s) -> {s.path}", err=True)


@fleet_app.command("stage")
def stage_cmd(
    captures: Annotated[list[Path], typer.Argument(help="Capture files (zym Parquet).",
                                                   show_default=False)],
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1,
                                      help="Captures analysed at once (processes).")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Stage again even when current.")
                     ] = False,
) -> None:
    """Analyse captures where they are made and stage their fleet rows beside them
    (CAPTURE.zymfleet), so that `zym fleet ingest` only loads them.

    Run it on each GPU host (e.g. after each `zym capture --rotate` file); a capture whose
    sidecar is current (same content hash, same zym) is skipped. Ingest re-hashes the capture
    and ignores a sidecar staged from other bytes or by another zym version.

    Example: zym fleet stage /var/zym/decode-*.parquet -j 2
    """
    with exit_on_error():
        from zym.fleet.sidecar import stage_many

        done = stage_many(captures, jobs=jobs, force=force)
    staged = sum(1 for _, what in done if what == "staged")
    typer.echo(f"zym: {staged} captures staged, {len(done) - staged} already current",
               err=True)


@fleet_app.command("top")
def top_cmd(
    by: Annotated[str, typer.Option("--by", help="site, kernel, host, service or label:KEY.")
                  ] = "site",
    metric: Annotated[str, typer.Option(
        "--metric", "-m", help="gpu (GPU time), blocked (CPU time blocked on the GPU) or saving "
                               "(the rules' estimated saving).")] = "gpu",
    store: Store = None, since: Since = None, until: Until = None, label: Labels = None,
    host: Host = None, limit: Limit = 20, fmt: Format = Fmt.text,
) -> None:
    """The costliest sites, kernels, hosts or label values across the fleet.

    Example: zym fleet top --by kernel --since -7d --label service=decode
    """
    with exit_on_error():
        from zym.fleet import open_store, top

        rows = top(open_store(store), by=by, metric=metric,
                   filters=_filters(since, until, label, host), limit=limit)
    _emit(rows, fmt, top_columns(metric, by))


@fleet_app.command("findings")
def findings_cmd(
    rule: Annotated[str | None, typer.Option("--rule", help="Only this rule id.")] = None,
    store: Store = None, since: Since = None, until: Until = None, label: Labels = None,
    host: Host = None, limit: Limit = 20, fmt: Format = Fmt.text,
) -> None:
    """Findings across the fleet, per rule and site: captures, summed cost and saving.

    Example: zym fleet findings --since -1d
    """
    with exit_on_error():
        from zym.fleet import findings, open_store

        rows = findings(open_store(store), filters=_filters(since, until, label, host),
                        rule=rule, limit=limit)
    _emit(rows, fmt, FINDINGS_COLUMNS)


@fleet_app.command("diff")
def diff_cmd(
    baseline: Annotated[list[str], typer.Option(
        "--baseline", "-b", help="Baseline captures: KEY=VALUE (repeatable, all must hold).")],
    candidate: Annotated[list[str], typer.Option(
        "--candidate", "-c", help="Candidate captures: KEY=VALUE (repeatable).")],
    by: Annotated[str, typer.Option("--by", help="site or kernel.")] = "site",
    metric: Annotated[str, typer.Option("--metric", "-m", help="gpu or blocked.")] = "gpu",
    z: Annotated[float, typer.Option("--z", help="Noise: standard errors a change must exceed."
                                     )] = 5.0,
    min_change: Annotated[float, typer.Option(
        "--min-change", help="Noise: smallest change counted, % of the baseline.")] = 5.0,
    min_share: Annotated[float, typer.Option(
        "--min-share", help="Noise: smallest share of the service's time, %.")] = 0.2,
    fail_on_regression: Annotated[bool, typer.Option(
        "--fail-on-regression", help="Exit 1 when any regression is found.")] = False,
    store: Store = None, since: Since = None, until: Until = None, label: Labels = None,
    host: Host = None, fmt: Format = Fmt.text,
) -> None:
    """Regressions between two versions across the fleet, per service and site (or kernel).

    Each capture's time per second of capture, averaged over each version's captures; a
    change counts when it beats the noise between captures (Welch z), the relative and the
    share thresholds.

    Example: zym fleet diff --baseline version=1.2 --candidate version=1.3 --by kernel
    """
    with exit_on_error():
        from zym.fleet import Noise, diff, open_store
        from zym.fleet.queries import parse_labels

        result = diff(open_store(store), parse_labels(baseline), parse_labels(candidate),
                      by=by, metric=metric, filters=_filters(since, until, label, host),
                      noise=Noise(z=z, min_change=min_change / 100, min_share=min_share / 100))
    if fmt is Fmt.json:
        _emit(result, fmt)
    else:
        n = result["captures"]
        typer.echo(f"{n['baseline']} baseline vs {n['candidate']} candidate captures; "
                   f"{metric} time per second of capture (ms/s), by {by}")
        cols = [("change_pct", "change %"), ("baseline_ms_per_s", "before"),
                ("candidate_ms_per_s", "after"), ("z", "z"), ("service", "service"),
                ("key", by)]
        for name in ("regressions", "improvements"):
            typer.echo(f"\n{name}: {len(result[name])}")
            if result[name]:
                _emit(result[name], fmt, cols)
    if fail_on_regression and result["regressions"]:
        raise typer.Exit(1)


@fleet_app.command("sql")
def sql_cmd(
    query: Annotated[str, typer.Argument(help="SQL; tables zym.captures, zym.gpu_ops, "
                                              "zym.calls, zym.gpu_sums, zym.call_sums, "
                                              "zym.paths, zym.findings, zym.frames, "
                                              "zym.stacks.", show_default=False)],
    store: Store = None, fmt: Format = Fmt.text,
) -> None:
    """Any SQL against the fleet store.

    Example: zym fleet sql "SELECT host, sum(dur_ns) FROM zym.gpu_ops GROUP BY host"
    """
    with exit_on_error():
        from zym.fleet import open_store, sql

        rows = sql(open_store(store), query)
    _emit(rows, fmt)


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app)
