"""The fleet store's tables (ClickHouse SQL, the same for chDB and a server).

Every table is keyed by ``capture_id``: the capture's content hash (``zym.content_hash``, see
:mod:`zym.schemas.integrity`), so the same file ingested twice is one capture. Event tables
carry the capture's time (``capture_time``: its start, wall clock), host and service beside
each row; they are constant within a capture, so they cost almost nothing compressed and let a
query filter and group without a join. Tables are partitioned by day (``capture_time``), the
unit of retention (``docs/fleet.md``), and sorted by ``capture_id`` first.

* ``captures``: one row per capture: where and when, its labels, totals;
* ``gpu_ops``: every GPU operation of the capture's analysis (``Facts.gpu``) with the call
  path and call site the analysis attributed it to; ``work`` is 0 for sync records;
* ``calls``: every CUDA API call (``Facts.calls``) with its path, site and ``blocking``;
* ``paths``: the analysis' call paths (``CallPaths.paths``), one row per capture and path;
* ``findings``: the rules' findings (``zym.rules.evaluate``) with cost and estimated saving;
* ``frames``, ``stacks``: the capture's own frame and stack tables;
* ``gpu_sums``, ``call_sums``: ``gpu_ops`` and ``calls`` summed per capture and (``work``,
  kernel, site) or (``blocking``, API, site): duration and count, ~100-200 rows a capture.

The sums are computed where the capture is analysed (``prepare.py``, from the same rows as
``gpu_ops`` and ``calls``), so queries that sum durations per capture and key (``fleet top``,
``fleet diff --by kernel``) read a few hundred rows a capture instead of every operation, and
the store's load does not aggregate (an aggregate projection on ``gpu_ops`` and ``calls`` did
this before, at ~40 % of the load's time: ``docs/benchmarks.md``). They are the per-capture
aggregate tier of ``docs/fleet.md``: kept when operations are sampled or dropped.

``capture_id`` is ``LowCardinality(String)`` in the per-capture tables: a few hundred to a
few thousand captures a part, so each row stores a dictionary index, not 64 hex digits.
"""
from __future__ import annotations

_EVENT_KEYS = """
    capture_id LowCardinality(String),
    capture_time DateTime64(3, 'UTC'),
    host LowCardinality(String),
    service LowCardinality(String),"""

# A partial load is deleted (lightweight DELETE).
_MERGE_TREE = "ENGINE = MergeTree PARTITION BY toYYYYMMDD(capture_time) ORDER BY ({order})"

TABLES: dict[str, str] = {
    "captures": """
    capture_id String,
    capture_time DateTime64(3, 'UTC'),
    end_time DateTime64(3, 'UTC'),
    host LowCardinality(String),
    service LowCardinality(String),
    labels Map(LowCardinality(String), String),
    file String,
    producer LowCardinality(String),
    window_ns Int64,
    gpu_ns Int64,
    cpu_blocked_ns Int64,
    calls Int64,
    gpu_ops Int64,
    steps Int64,
    findings Int64,
    saving_ns Int64,
    ingested_at DateTime DEFAULT now()
""",
    "gpu_ops": _EVENT_KEYS + """
    ts_ns Int64,
    dur_ns Int64,
    device_id Int32,
    stream_id Nullable(Int64),
    name LowCardinality(String),
    kind LowCardinality(String),
    op_class LowCardinality(Nullable(String)),
    work UInt8,
    size_bytes Nullable(Int64),
    graph_id Nullable(Int64),
    correlation_id Nullable(Int64),
    path_id Int64,
    site LowCardinality(String)
""",
    "calls": _EVENT_KEYS + """
    pid Int64,
    tid Int64,
    ts_ns Int64,
    dur_ns Int64,
    api LowCardinality(String),
    kind LowCardinality(String),
    blocking UInt8,
    bytes Nullable(Int64),
    copy_kind LowCardinality(Nullable(String)),
    correlation_id Nullable(Int64),
    path_id Int64,
    site LowCardinality(String)
""",
    "gpu_sums": _EVENT_KEYS + """
    work UInt8,
    name LowCardinality(String),
    site LowCardinality(String),
    dur_ns Int64,
    ops Int64
""",
    "call_sums": _EVENT_KEYS + """
    blocking UInt8,
    api LowCardinality(String),
    site LowCardinality(String),
    dur_ns Int64,
    calls Int64
""",
    "paths": _EVENT_KEYS + """
    path_id Int64,
    site LowCardinality(String),
    api LowCardinality(String),
    torch_op Nullable(String),
    mechanism Nullable(String),
    user_file Nullable(String),
    user_line Nullable(Int32),
    user_function Nullable(String),
    gpu_ns Int64,
    cpu_blocked_ns Int64,
    cpu_call_ns Int64,
    calls Int64,
    launches Int64,
    syncs Int64,
    kernels Int64,
    copies Int64,
    memsets Int64,
    bytes_htod Int64,
    bytes_dtoh Int64,
    bytes_dtod Int64
""",
    "findings": _EVENT_KEYS + """
    rank Int32,
    rule_id LowCardinality(String),
    severity LowCardinality(String),
    title String,
    site String,
    site_id Nullable(Int64),
    cost_ns Int64,
    saving_ns Nullable(Int64),
    occurrences Int64,
    message String,
    fix String
""",
    "frames": _EVENT_KEYS + """
    frame_id Int64,
    kind LowCardinality(String),
    name String,
    file Nullable(String),
    line Nullable(Int32)
""",
    "stacks": _EVENT_KEYS + """
    stack_id Int64,
    parent_id Nullable(Int64),
    frame_id Int64,
    depth Int32
""",
}

ORDER: dict[str, str] = {
    "captures": "capture_id",
    "gpu_ops": "capture_id, ts_ns",
    "calls": "capture_id, ts_ns",
    "gpu_sums": "capture_id, work, name, site",
    "call_sums": "capture_id, blocking, api, site",
    "paths": "capture_id, path_id",
    "findings": "capture_id, rank",
    "frames": "capture_id, frame_id",
    "stacks": "capture_id, stack_id",
}

# Loaded in this order; ``captures`` last: a capture is in the store once its row is.
LOAD_ORDER = ("frames", "stacks", "gpu_ops", "calls", "gpu_sums", "call_sums", "paths", "findings",
              "captures")


def ddl(database: str) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` for every table."""
    return list(_ddl(database).values())


def _ddl(database: str) -> dict[str, str]:
    out = {}
    for name, cols in TABLES.items():
        engine = (_MERGE_TREE.format(order=ORDER[name]) if name != "captures" else
                  "ENGINE = ReplacingMergeTree ORDER BY capture_id")
        out[name] = f"CREATE TABLE IF NOT EXISTS {database}.{name} ({cols}) {engine}"
    return out


# sums table -> (the table it sums, its keys after the capture's, what it sums)
SUMS = {"gpu_sums": ("gpu_ops", "work, name, site", "sum(dur_ns), count()"),
        "call_sums": ("calls", "blocking, api, site", "sum(dur_ns), count()")}
_CAPTURE_KEYS = "capture_id, capture_time, host, service"


def ensure(store) -> None:
    """Create the tables ``store`` lacks (one query when it has them all). A store written
    before the sums tables existed gets them computed from its rows, once."""
    from .store import sql_string

    db = store.database
    have = {r["name"] for r in store.rows(
        f"SELECT name FROM system.tables WHERE database = {sql_string(db)}")}
    if set(TABLES) <= have:
        return
    store.command(f"CREATE DATABASE IF NOT EXISTS {db}")
    for name, statement in _ddl(db).items():
        if name not in have:
            store.command(statement)
    for name, (source, keys, values) in SUMS.items():
        if name not in have and source in have:
            store.command(f"INSERT INTO {db}.{name} ({', '.join(columns(name))}) "
                          f"SELECT {_CAPTURE_KEYS}, {keys}, {values} FROM {db}.{source} "
                          f"GROUP BY {_CAPTURE_KEYS}, {keys}")


def columns(name: str) -> list[str]:
    """Column names of a table, in order (without ``ingested_at``, filled by the store)."""
    names = []
    for line in TABLES[name].strip().splitlines():
        col = line.strip().split(" ", 1)[0]
        if col and col != "ingested_at":
            names.append(col)
    return names
