"""`zym fleet top|findings|sql` without typer: the console script (cli/entry.py) answers these
query commands here, importing the standard library, chDB and the fleet's query code only (no
typer, click, polars or analysis). A query over 100 M rows takes ~0.1-0.6 s; typer's and
polars' imports and chDB's pandas results had cost more than that (docs/benchmarks.md).

The options are those of cli/fleet_cmd.py, which declares them for `--help` and serves any
command line this parser does not take exactly (`--help`, a misspelt or malformed option, a
bad value, shell completion): there the typer app runs and says what is wrong, as before.
Both print through :func:`emit`; tests/cli/test_fleet_fast.py checks the two paths print the
same.
"""
from __future__ import annotations

import json
import os
import sys

from .fast import Opt, parse_line

_FORMAT = Opt("fmt", "choice", ("text", "json"))
_LIMIT = Opt("limit", "int", low=1)
_COMMON = {"--store": Opt("store", "str"), "--format": _FORMAT, "-f": _FORMAT}
_FILTERS = {"--since": Opt("since", "str", dash_ok=True), "--until": Opt("until", "str",
                                                                         dash_ok=True),
            "--label": Opt("label", "multi-str"), "-l": Opt("label", "multi-str"),
            "--host": Opt("host", "multi-str"), "--limit": _LIMIT, "-n": _LIMIT}
OPTIONS: dict[str, dict[str, Opt]] = {  # command -> option -> what it sets
    "top": _COMMON | _FILTERS | {"--by": Opt("by", "str"), "--metric": Opt("metric", "str"),
                                 "-m": Opt("metric", "str")},
    "findings": _COMMON | _FILTERS | {"--rule": Opt("rule", "str")},
    "sql": dict(_COMMON),
}
POSITIONAL = {"top": 0, "findings": 0, "sql": 1}  # arguments each takes
DEFAULTS = {"fmt": "text", "limit": 20, "by": "site", "metric": "gpu"}
STORE_ENV = "ZYM_FLEET_STORE"


def parse(command: str, args: list[str]) -> dict | None:
    """The command's parameters, or None when the line is not one this parser takes exactly
    (the typer app then answers it): cli/fast.py's parser, with these commands' options."""
    got = parse_line(OPTIONS[command], args)
    if got is None or len(got[1]) != POSITIONAL[command]:
        return None
    out, positional = got
    out = DEFAULTS | out
    out["store"] = out.get("store") or os.environ.get(STORE_ENV) or None
    if positional:
        out["query"] = positional[0]
    return out


def run(command: str, args: list[str]) -> int | None:
    """Answer ``zym fleet COMMAND ARGS``; the exit code, or None to leave it to typer."""
    if command not in OPTIONS:
        return None
    opts = parse(command, args)
    if opts is None:
        return None
    from zym.schemas.errors import ZymError

    from .errors import exit_code

    try:
        rows, columns = _query(command, opts)
    except (ZymError, KeyboardInterrupt) as e:
        return exit_code(e)
    emit(rows, opts["fmt"], columns)
    return 0


def _query(command: str, o: dict) -> tuple[list[dict], list[tuple[str, str]] | None]:
    from zym.fleet import queries
    from zym.fleet.store import open_store

    if command == "sql":
        return queries.sql(open_store(o["store"]), o["query"]), None
    filters = queries.filters_from(o.get("since"), o.get("until"), o.get("label"),
                                   o.get("host"))
    if command == "top":
        rows = queries.top(open_store(o["store"]), by=o["by"], metric=o["metric"],
                           filters=filters, limit=o["limit"])
        return rows, top_columns(o["metric"], o["by"])
    rows = queries.findings(open_store(o["store"]), filters=filters, rule=o.get("rule"),
                            limit=o["limit"])
    return rows, FINDINGS_COLUMNS


def top_columns(metric: str, by: str) -> list[tuple[str, str]]:
    return [("value_ns", metric), ("share_pct", "%"), ("captures", "captures"), ("key", by)]


FINDINGS_COLUMNS = [("saving_ns", "saving"), ("cost_ns", "cost"), ("captures", "captures"),
                    ("rule_id", "rule"), ("site", "site")]


def emit(rows, fmt: str, columns: list[tuple[str, str]] | None = None) -> None:
    """``rows`` as JSON, or as a text table of ``columns`` ((key, heading) pairs; all when
    None). ``fmt``: "text" or "json"."""
    if fmt == "json":
        json.dump(rows, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    elif not rows:
        print("(no rows)")
    else:
        cols = columns or [(c, c) for c in rows[0]]
        cells = [[cell(r.get(c), c) for c, _ in cols] for r in rows]
        widths = [max(len(h), *(len(row[i]) for row in cells)) for i, (_, h) in enumerate(cols)]
        print("  ".join(h.ljust(w) for (_, h), w in zip(cols, widths)).rstrip())
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    sys.stdout.flush()  # before any typer.echo of the caller (click may write elsewhere)


def cell(v, col: str) -> str:
    if v is None:
        return "-"
    if col.endswith("_ns") and isinstance(v, (int, float)):
        from zym.analysis.units import fmt_ns

        return fmt_ns(int(v))
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
