"""The fleet store: many captures in ClickHouse (chDB embedded, or a server), and the questions
asked across them. Library functions return plain data, so the CLI (`zym fleet`) and an agent
interface call the same code.

    from zym.fleet import open_store, ingest, top, findings, diff, sql, Filters
    store = open_store("~/.zym/fleet")                  # or "clickhouse://host:8123/zym"
    ingest(store, ["a.parquet", "b.parquet"], labels={"version": "1.3"})
    top(store, by="site", metric="gpu", filters=Filters(labels={"service": "decode"}))
    diff(store, {"version": "1.2"}, {"version": "1.3"})

Names are imported on first use: a query does not load the analysis that ingest needs.
"""
from __future__ import annotations

import importlib

_WHERE = {"IngestResult": "loader", "ingest": "loader", "Filters": "queries", "Noise": "queries",
          "diff": "queries", "findings": "queries", "parse_time": "queries", "sql": "queries",
          "top": "queries", "DEFAULT_STORE": "store", "StoreError": "store",
          "open_store": "store"}
__all__ = ["DEFAULT_STORE", "Filters", "IngestResult", "Noise", "StoreError", "diff", "findings",
           "ingest", "open_store", "parse_time", "sql", "top"]


def mcp_tools() -> list:
    """The fleet queries as tools for `zym mcp` (``fleet/mcp.py``)."""
    from .mcp import TOOLS

    return list(TOOLS)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'zym.fleet' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
