"""Where the fleet lives: chDB (ClickHouse in-process) at a local path, or a ClickHouse server.

    store = open_store("~/.zym/fleet")                       # chDB, embedded
    store = open_store("clickhouse://host:8123/zym")         # a server (clickhouse-connect)

Both run the same SQL (``schema.py``, ``queries.py``). A store offers six operations:
``command`` (DDL, INSERT ... SELECT), ``query`` (rows as a ``pyarrow.Table``), ``rows`` (rows as
dicts; chDB gives them without importing pyarrow), ``load_parquet``
(a Parquet file into a table: chDB reads the file itself; a server receives it over HTTP in
Parquet format, so neither goes through Python rows), ``load_native`` (staged sidecars,
``sidecar.py``: ClickHouse Native files with the table's own types) and ``close``.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from zym.schemas.errors import InputError, ZymError

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_STORE = "~/.zym/fleet"


class StoreError(ZymError):
    """The fleet store cannot be opened or a query failed (bad SQL, server unreachable)."""


def sql_string(value: str) -> str:
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _blocks(rows: int | None) -> str:
    """Insert blocks (one part each) of half the statement's rows, between ClickHouse's
    default (~1 M rows) and 4 M: each of chDB's 2 insert threads writes one large part, so a
    load of 1,000 captures writes 2-3 parts of gpu_ops and calls instead of 3-10 and fewer
    merges of them compete with the load (docs/benchmarks.md: ~25 % less CPU)."""
    size = min(max((rows or 0) // 2 + 1, 1_048_449), 4_194_304)
    return (f"min_insert_block_size_rows = {size}, max_insert_block_size = {size}, "
            "min_insert_block_size_bytes = 1073741824")


class ChdbStore:
    """chDB at a local folder: one session per process (chDB allows one)."""

    kind = "chdb"

    def __init__(self, path: Path) -> None:
        # chDB's engine without its Python wrappers: ``chdb.session`` imports pyarrow (and
        # ArrowTable results import pandas), ~0.3-1 s that a `zym fleet top` would pay to
        # print 20 rows. ``query`` reads Arrow IPC with pyarrow itself, imported on first use.
        try:
            from chdb import _chdb
            connect = _chdb.connect
        except (ImportError, AttributeError):  # a chDB without that module: its public API
            try:
                import chdb
                connect = chdb.connect
            except (ImportError, AttributeError) as e:
                raise StoreError(f"the embedded fleet store needs chDB ({e}); pip install "
                                 "chdb, or use --store clickhouse://HOST:PORT/DB") from None
        self.path = path
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"{path}: cannot create the fleet store ({e.strerror})") from None
        self.database = "zym"
        self._c = None
        try:
            # JSON rows (``rows``) give 64-bit integers as numbers, not quoted strings
            self._c = connect(f"{path}?output_format_json_quote_64bit_integers=0")
        except Exception as e:  # noqa: BLE001 (chDB raises its own types)
            why = _line(e)
            if "Cannot lock file" in why or "already running" in why:
                why = "another process has it open (chDB: one process at a time)"
            raise StoreError(f"{path}: cannot open the fleet store ({why})") from None
        from .schema import ensure

        ensure(self)  # a new store answers queries (with no rows)

    def command(self, sql: str) -> None:
        self._run(sql, "TSV")

    def query(self, sql: str) -> pa.Table:
        import pyarrow as pa

        data = self._run(sql, "Arrow").bytes()
        return pa.ipc.open_file(data).read_all() if data else pa.table({})

    def rows(self, sql: str) -> list[dict]:
        """The rows as dicts of JSON values (strings, numbers, lists, objects): no pyarrow."""
        return [json.loads(line) for line in self._run(sql, "JSONEachRow").bytes().splitlines()]

    def _run(self, sql: str, fmt: str):
        if self._c is None:  # chDB's engine crashes on a closed connection
            raise StoreError(f"{self.path}: the fleet store was closed (another was opened)")
        try:
            return self._c.query(sql, fmt)
        except Exception as e:  # noqa: BLE001
            raise StoreError(f"query failed: {_line(e)}") from None

    def load_parquet(self, table: str, path: Path, select: str = "*", where: str = "") -> None:
        """``INSERT INTO table (its columns) SELECT select FROM file(path) [WHERE where]``:
        chDB reads the Parquet file itself (column and row-group pruning)."""
        clause = f" WHERE {where}" if where else ""
        self.command(f"INSERT INTO {self.database}.{table} ({_into(table)}) SELECT {select} "
                     f"FROM file({sql_string(str(Path(path).resolve()))}, Parquet){clause} "
                     "SETTINGS use_structure_from_insertion_table_in_table_functions = 0")

    def load_native(self, table: str, folders: list[Path],
                    replace: dict[str, str] | None = None, rows: int | None = None) -> None:
        """``INSERT INTO table SELECT * FROM file(..., Native)`` of ``<table>.native.lz4`` in
        each of ``folders`` (sidecars, ``sidecar.py``: the table's own column types, sorted,
        LZ4-framed; folder names without glob characters): the folders of one directory in
        one statement (a ``{a,b,...}`` glob); ``replace``: columns set to a constant; ``rows``:
        how many rows they hold (sizes the insert blocks)."""
        from .sidecar import EXT

        by_dir: dict[Path, list[str]] = {}
        for f in folders:
            by_dir.setdefault(Path(f).parent, []).append(Path(f).name)
        for parent, names in by_dir.items():
            for at in range(0, len(names), 1024):
                part = names[at:at + 1024]
                glob = part[0] if len(part) == 1 else "{" + ",".join(part) + "}"
                self.command(
                    f"INSERT INTO {self.database}.{table} ({_into(table)}) "
                    f"SELECT *{_replace(replace)} FROM "
                    f"file({sql_string(f'{parent}/{glob}/{table}.{EXT}')}, Native, "
                    f"{sql_string(_structure(table))}, 'lz4') SETTINGS {_blocks(rows)}")

    def close(self) -> None:
        _OPEN.pop(str(self.path), None)
        if self._c is not None:
            self._c.close()
            self._c = None


class ServerStore:
    """A ClickHouse server over HTTP (clickhouse-connect)."""

    kind = "clickhouse"

    def __init__(self, url: str) -> None:
        try:
            import clickhouse_connect
        except ImportError as e:
            raise StoreError(f"--store clickhouse://... needs clickhouse-connect ({e}); "
                             "pip install clickhouse-connect") from None
        u = urlparse(url)
        self.database = (u.path or "/zym").strip("/") or "zym"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.database):
            raise InputError(f"--store {url}: database name {self.database!r} is not a plain "
                             "identifier")
        try:
            self._c = clickhouse_connect.get_client(
                host=u.hostname or "localhost", port=u.port or 8123,
                username=u.username or "default", password=u.password or "")
        except Exception as e:  # noqa: BLE001
            raise StoreError(f"cannot reach ClickHouse at {u.hostname}:{u.port or 8123} "
                             f"({_line(e)})") from None
        self.path = url
        self.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")

    def command(self, sql: str) -> None:
        try:
            self._c.command(sql)
        except Exception as e:  # noqa: BLE001
            raise StoreError(f"query failed: {_line(e)}") from None

    def query(self, sql: str) -> pa.Table:
        try:
            return self._c.query_arrow(sql, use_strings=True)
        except Exception as e:  # noqa: BLE001
            raise StoreError(f"query failed: {_line(e)}") from None

    def rows(self, sql: str) -> list[dict]:
        return self.query(sql).to_pylist()

    def load_parquet(self, table: str, path: Path, select: str = "*", where: str = "") -> None:
        """The file travels to the server as Parquet; the server reads it through the
        ``input()`` table function, so the same ``select``/``where`` apply as with chDB."""
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        structure = ", ".join(f"`{f.name}` {_ch_type(f.type)}" for f in schema)
        clause = f" WHERE {where}" if where else ""
        sql = (f"INSERT INTO {self.database}.{table} ({_into(table)}) SELECT {select} "
               f"FROM input({sql_string(structure)}){clause} FORMAT Parquet")
        try:
            self._c.command(sql, data=Path(path).read_bytes())
        except Exception as e:  # noqa: BLE001
            raise StoreError(f"loading {Path(path).name} failed: {_line(e)}") from None

    def load_native(self, table: str, folders: list[Path],
                    replace: dict[str, str] | None = None, rows: int | None = None) -> None:
        """Each sidecar's file travels to the server as it is (Native, LZ4-framed: HTTP
        ``Content-Encoding: lz4``)."""
        from .sidecar import EXT

        for folder in folders:
            f = Path(folder) / f"{table}.{EXT}"
            sql = (f"INSERT INTO {self.database}.{table} ({_into(table)}) SELECT *"
                   f"{_replace(replace)} FROM input({sql_string(_structure(table))}) "
                   "FORMAT Native")
            try:
                self._c.command(sql, data=f.read_bytes(),
                                transport_settings={"Content-Encoding": "lz4"})
            except Exception as e:  # noqa: BLE001
                raise StoreError(f"loading {f} failed: {_line(e)}") from None

    def close(self) -> None:
        self._c.close()


class ChdbMemory:
    """chDB in memory, for converting files (``sidecar.write``) where no store is open."""

    kind = "chdb"

    def __init__(self) -> None:
        try:
            from chdb import _chdb
            self._c = _chdb.connect(":memory:")
        except (ImportError, AttributeError):
            try:
                import chdb
                self._c = chdb.connect(":memory:")
            except (ImportError, AttributeError) as e:
                raise StoreError(f"staging fleet rows needs chDB ({e}); pip install chdb"
                                 ) from None

    def command(self, sql: str) -> None:
        try:
            self._c.query(sql, "TSV")
        except Exception as e:  # noqa: BLE001
            raise StoreError(f"query failed: {_line(e)}") from None


def _structure(table: str) -> str:
    from .schema import TABLES

    return " ".join(TABLES[table].split()).strip().rstrip(",")


def _replace(replace: dict[str, str] | None) -> str:
    if not replace:
        return ""
    return " REPLACE (" + ", ".join(f"{sql_string(v)} AS {k}" for k, v in replace.items()) + ")"


def _into(table: str) -> str:
    from .schema import columns

    return ", ".join(columns(table))


def _ch_type(t) -> str:
    import pyarrow as pa

    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "Nullable(String)"
    if pa.types.is_boolean(t):
        return "Nullable(Bool)"
    if pa.types.is_integer(t):
        return f"Nullable({'U' if pa.types.is_unsigned_integer(t) else ''}Int{t.bit_width})"
    if pa.types.is_timestamp(t):
        return "Nullable(DateTime64(3, 'UTC'))"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"Array({_ch_type(t.value_type).removeprefix('Nullable(').removesuffix(')')})"
    if pa.types.is_floating(t):
        return "Nullable(Float64)"
    raise StoreError(f"no ClickHouse type for Arrow {t}")


def _line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__


_OPEN: dict[str, ChdbStore] = {}


def open_store(spec: str | os.PathLike | None = None):
    """``spec``: a folder (chDB, created when missing) or ``clickhouse://host[:port]/db``.

    chDB runs one store per process: opening the folder already open returns that store;
    opening another folder closes it first."""
    text = str(spec) if spec is not None else DEFAULT_STORE
    if text.startswith(("clickhouse://", "http://", "https://")):
        return ServerStore(text)
    if "://" in text:
        raise InputError(f"--store {text}: give a folder (chDB) or clickhouse://HOST:PORT/DB")
    path = Path(text).expanduser().resolve()
    if str(path) in _OPEN:
        return _OPEN[str(path)]
    for other in list(_OPEN.values()):
        other.close()
    store = ChdbStore(path)
    _OPEN[str(path)] = store
    return store
