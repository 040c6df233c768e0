"""Capture-file schema version and its changelog.

A reader accepts exactly the versions in ``READABLE_VERSIONS``; anything else is a
``SchemaError`` that names the version found and the versions this zym reads.

Changelog
---------
1 (zym 0.1): tagged-union Parquet file with records frame, stack, span, call, gpu.
2: ``frame.source``, the text of the frame's line (stripped, at most 200 characters; null where
   the producer could not read it). A v1 file reads with ``source`` all null.
3: the ``range`` record (NVTX ranges and marks: ``pid, tid, ts_ns, dur_ns, name, kind, domain,
   clipped, stack_id, depth``) with the new columns ``domain`` and ``clipped``, and the frame
   kind ``nvtx`` (a range as a layer of a call's stack). A v1 or v2 file reads with no range
   rows and ``domain``/``clipped`` all null.
4: ``span.op_seq``, autograd's sequence number of a torch op's span (Kineto's ``Sequence
   number``: the op ran with autograd recording it). A v1-v3 file reads with ``op_seq`` all
   null.
"""
SCHEMA_VERSION = 4
READABLE_VERSIONS = frozenset({1, 2, 3, 4})
# Columns a file of an older version may lack: they read as nulls.
ADDED_IN: dict[str, int] = {"source": 2, "domain": 3, "clipped": 3, "op_seq": 4}
