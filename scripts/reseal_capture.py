"""Rewrite a capture written before content hashes (zym 0.1) so that it carries one.

Reads every table of the file as it is (no hash check: it has none), writes the same tables
and metadata through ``write_capture``. Use it only on files you trust.

    python3 scripts/reseal_capture.py sample_traces/gpt_decode_server.parquet
"""
from __future__ import annotations

import sys

import polars as pl
from zym.schemas.io import write_capture
from zym.schemas.meta import META_KEY, CaptureMeta
from zym.schemas.tables import TABLES


def reseal(path: str) -> None:
    kv = pl.read_parquet_metadata(path)
    meta = CaptureMeta.from_json(kv[META_KEY])
    frame = pl.read_parquet(path)
    tables = {t: frame.filter(pl.col("record") == t).select([c for c in cols if c != "record"])
              for t, cols in TABLES.items()}
    write_capture(path, tables, meta, force=True)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        reseal(p)
        print(f"resealed {p}")
