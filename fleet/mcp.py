"""The fleet queries as MCP tools: `zym mcp` offers them beside analyze, findings and diff
(``zym.analysis.export.agent`` imports ``zym.fleet.mcp_tools()``). Each is the library query
(``queries.py``) with the CLI's words for its filters; rows come back as ``{"rows": [...]}``.
``store``: a folder (chDB) or ``clickhouse://HOST:PORT/DB``; default ``$ZYM_FLEET_STORE``, else
``~/.zym/fleet``."""
from __future__ import annotations

import json
import os
from typing import Any

from . import queries
from .store import open_store


def _store(store: str | None):
    return open_store(store or os.environ.get("ZYM_FLEET_STORE") or None)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def fleet_top(by: str = "site", metric: str = "gpu", store: str | None = None,
              since: str | None = None, until: str | None = None,
              labels: list[str] | None = None, hosts: list[str] | None = None,
              limit: int = 20) -> dict[str, Any]:
    """The fleet's costliest call sites, kernels, hosts, services or label values (by: site,
    kernel, host, service, label:KEY) by metric: gpu (GPU time), blocked (CPU time blocked on
    the GPU) or saving (the rules' estimated saving). since/until: ISO 8601 or -7d; labels:
    KEY=VALUE. Rows: key, value_ns, share_pct, captures."""
    rows = queries.top(_store(store), by=by, metric=metric,
                       filters=queries.filters_from(since, until, labels, hosts), limit=limit)
    return {"rows": _plain(rows)}


def fleet_findings(store: str | None = None, rule: str | None = None, since: str | None = None,
                   until: str | None = None, labels: list[str] | None = None,
                   hosts: list[str] | None = None, limit: int = 20) -> dict[str, Any]:
    """Findings across the fleet, one row per (rule, site): in how many captures it fired, its
    summed cost and estimated saving, most saving first."""
    rows = queries.findings(_store(store), filters=queries.filters_from(since, until, labels, hosts),
                            rule=rule, limit=limit)
    return {"rows": _plain(rows)}


def fleet_diff(baseline: list[str], candidate: list[str], by: str = "site", metric: str = "gpu",
               store: str | None = None, since: str | None = None, until: str | None = None,
               labels: list[str] | None = None, hosts: list[str] | None = None
               ) -> dict[str, Any]:
    """Regressions and improvements between two sets of captures across the fleet, e.g.
    baseline ["version=1.2"], candidate ["version=1.3"], per service and site (or kernel):
    each capture's time per second of capture, averaged per version; a change counts when it
    beats the noise between captures."""
    from .queries import parse_labels

    result = queries.diff(_store(store), parse_labels(baseline), parse_labels(candidate), by=by,
                          metric=metric, filters=queries.filters_from(since, until, labels, hosts))
    return _plain(result)


def fleet_sql(query: str, store: str | None = None) -> dict[str, Any]:
    """Any SQL against the fleet store (tables zym.captures, zym.gpu_ops, zym.calls,
    zym.gpu_sums, zym.call_sums, zym.paths, zym.findings, zym.frames, zym.stacks)."""
    return {"rows": _plain(queries.sql(_store(store), query))}


TOOLS = (fleet_top, fleet_findings, fleet_diff, fleet_sql)
