"""Parsed YAML kept between runs as JSON: the rule packs once validated (``zym.rules.packcache``)
and the analysis's own data files (``zym.analysis.bundled``), so that a `zym analyze` neither
imports PyYAML nor parses and checks the same text again (~0.03-0.05 s of a sample-sized
analysis: docs/benchmarks.md, "Thirteenth round").

An entry is ``CACHE_DIR/KIND/KEY.json``: a first line naming this format, the key and the
sha256 of the rest, then the JSON. The caller's KEY is a sha256 over everything the parsed
value depends on (the text, the code that parses it, the libraries'); :func:`yaml_identity`
and :func:`fingerprint` help build it. An entry is read only when its first line is exactly
what this key and the rest of the file give: anything else (missing, truncated, corrupt,
another key, unreadable) reads as absent, and the caller parses as without a cache and writes
the entry again. Entries are written to a temporary file in the same folder and renamed into
place (whole or absent, also with two zyms at once); the oldest are removed past ``KEEP``
entries of a kind. Only values that JSON gives back as the same objects (``plain``) are kept.
The JSON is parsed by the standard library: reading an entry runs no code.

The folder is ``$ZYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/zym``, else ``~/.cache/zym``;
``ZYM_CACHE=0`` turns the cache off. A folder that cannot be made or written leaves zym as
without a cache. Entries are as trusted as the user's own files (whoever can write them can
also edit the packs zym loads): the checks are against accidents, not against that user.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = "zym-json-cache 1"
KEEP = 64  # entries kept per kind; older ones are removed when one is written
ENV_DIR = "ZYM_CACHE_DIR"
ENV_SWITCH = "ZYM_CACHE"
MAX_ENTRY_BYTES = 1 << 22


def cache_dir(kind: str) -> Path | None:
    """The folder of ``kind``'s entries, or None when the cache is off."""
    if os.environ.get(ENV_SWITCH, "") == "0":
        return None
    root = os.environ.get(ENV_DIR)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home = os.path.expanduser("~")
        if not (xdg and os.path.isabs(xdg)) and not os.path.isabs(home):
            return None  # no home folder known: no cache, rather than one under the cwd
        root = os.path.join(xdg, "zym") if xdg and os.path.isabs(xdg) else \
            os.path.join(home, ".cache", "zym")
    return Path(root) / kind


@functools.cache
def yaml_identity() -> str:
    """Which PyYAML would parse: its package's ``__init__`` and folder (path, size, mtime), so
    that another PyYAML never reads this one's entries; and the Python version."""
    from importlib.util import find_spec

    spec = find_spec("yaml")
    out = [FORMAT, sys.version]
    places = [spec.origin, *(spec.submodule_search_locations or ())] if spec else []
    for place in places:
        if place:
            st = os.stat(place)
            out.append(f"{place} {st.st_size} {st.st_mtime_ns}")
    return "\0".join(out)


def fingerprint(files: list[Path], *extra: str) -> bytes:
    """sha256 over ``files``' names and bytes and the ``extra`` strings."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    for e in extra:
        h.update(e.encode() + b"\0")
    return h.digest()


def plain(value: Any) -> bool:
    """Whether JSON gives ``value`` back as the same objects (types and key order included)."""
    if value is None or type(value) in (str, int, float, bool):
        return type(value) is not float or not math.isnan(value)  # NaN != NaN: not kept
    if type(value) is list:
        return all(plain(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and plain(v) for k, v in value.items())
    return False


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def _head(key: str, body: bytes) -> bytes:
    return f"{FORMAT} {key} {hashlib.sha256(body).hexdigest()}".encode()


def read(kind: str, key: str) -> Any | None:
    """The JSON value of ``kind``'s entry ``key`` when it is whole and ``key``'s; else None
    (also when the cache is off)."""
    folder = cache_dir(kind)
    if folder is None:
        return None
    try:
        with open(folder / f"{key}.json", "rb") as f:
            data = f.read(MAX_ENTRY_BYTES + 1)
        head, sep, body = data.partition(b"\n")
        if not sep or head != _head(key, body):
            return None
        return json.loads(body.decode("ascii"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def remembered(kind: str, key: str, make: Callable[[], Any],
               load: Callable[[Any], Any] | None = None,
               dump: Callable[[Any], str | None] | None = None) -> Any:
    """``make()``, kept between runs as ``kind``'s entry ``key``. An entry there is used
    through ``load`` (default: as it is), which raises ValueError or TypeError for one it
    cannot use; otherwise ``make()`` runs (what it raises, it raises: nothing is kept) and its
    value is written as ``dump`` gives it (default: the JSON of a ``plain`` value; None: not
    kept). With the cache off, ``make()`` alone."""
    if cache_dir(kind) is None:
        return make()
    doc = read(kind, key)
    if doc is not None:
        try:
            return doc if load is None else load(doc)
        except (ValueError, TypeError):
            pass  # not a value of this kind: made again below, and the entry replaced
    value = make()
    body = (dumps(value) if plain(value) else None) if dump is None else dump(value)
    if body is not None:
        write(kind, key, body)
    return value


def write(kind: str, key: str, body: str) -> None:
    """Write ``body`` (JSON text) as ``kind``'s entry ``key``, atomically; keep the newest
    ``KEEP`` entries of ``kind``. Nothing where the cache is off or cannot be written."""
    folder = cache_dir(kind)
    if folder is None:
        return
    data = body.encode("ascii")
    if len(data) > MAX_ENTRY_BYTES:
        return
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        with open(tmp, "wb") as f:
            f.write(_head(key, data) + b"\n" + data)
        os.replace(tmp, folder / f"{key}.json")
        tmp = None
        _prune(folder)
    except OSError:
        pass  # a read-only or full disk: zym works as without a cache
    finally:
        if tmp is not None:
            try:
                tmp.unlink()
            except OSError:
                pass


def _prune(folder: Path) -> None:
    entries = []
    for p in folder.iterdir():
        if p.suffix == ".json" and not p.name.startswith("."):
            try:
                entries.append((p.stat().st_mtime_ns, p.name, p))
            except OSError:
                continue
    entries.sort(reverse=True)
    for *_, p in entries[KEEP:]:
        try:
            p.unlink()
        except OSError:
            pass
