"""Capture-file schema version and its changelog.

A reader accepts exactly the versions in ``READABLE_VERSIONS``; anything else is a
``SchemaError`` that names the version found and the versions this zym reads.

Changelog
---------
1 (zym 0.1): tagged-union Parquet file with records frame, stack, span, call, gpu.
"""
SCHEMA_VERSION = 1
READABLE_VERSIONS = frozenset({1})
