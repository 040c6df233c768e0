"""Rewrite a capture through today's writer: one written before content hashes (zym 0.1) then
carries one, and any is written with today's encoding (round 47: times as deltas).

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
    # a file written before a column existed has none of it: written as nulls
    tables = {t: frame.filter(pl.col("record") == t).select(
        [c for c in cols if c != "record" and c in frame.columns]) for t, cols in TABLES.items()}
    write_capture(path, tables, meta, force=True)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        try:
            reseal(p)
        except Exception as e:  # noqa: BLE001 - any failure: one line, exit 2, the file as it was
            print(f"reseal_capture: {p}: {type(e).__name__}: {str(e).splitlines()[0]}",
                  file=sys.stderr)
            sys.exit(2)
        print(f"resealed {p}")
