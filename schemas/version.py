"""Capture-file schema version and its changelog.

A reader accepts exactly the versions in ``READABLE_VERSIONS``; anything else is a
``SchemaError`` that names the version found and the versions this zym reads.

Changelog
---------
1 (zym 0.1): tagged-union Parquet file with records frame, stack, span, call, gpu.
2: ``frame.source``, the text of the frame's line (stripped, at most 200 characters; null where
   the producer could not read it). A v1 file reads with ``source`` all null.
"""
SCHEMA_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})
# Columns a file of an older version may lack: they read as nulls.
ADDED_IN: dict[str, int] = {"source": 2}
