"""The fleet store: many captures in ClickHouse (chDB embedded, or a server), and the questions
asked across them. Library functions return plain data, so the CLI (`zym fleet`) and an agent
interface call the same code.

    from zym.fleet import open_store, ingest, top, findings, diff, sql, Filters
    store = open_store("~/.zym/fleet")                  # or "clickhouse://host:8123/zym"
    ingest(store, ["a.parquet", "b.parquet"], labels={"version": "1.3"})
    top(store, by="site", metric="gpu", filters=Filters(labels={"service": "decode"}))
    diff(store, {"version": "1.2"}, {"version": "1.3"})
"""
from __future__ import annotations

from .ingest import IngestResult, ingest
from .queries import Filters, Noise, diff, findings, parse_time, sql, top
from .store import DEFAULT_STORE, StoreError, open_store

__all__ = ["DEFAULT_STORE", "Filters", "IngestResult", "Noise", "StoreError", "diff", "findings",
           "ingest", "open_store", "parse_time", "sql", "top"]
