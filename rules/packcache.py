"""Validated rule packs kept between runs: `zym analyze` does not parse and check the same
YAML again (PyYAML's import, the parse, the schema and name checks and every pattern compiled
by Python and by polars: ~0.03-0.04 s of a sample-sized analysis; docs/benchmarks.md,
"Thirteenth round").

Only a pack that validated is kept, as JSON (never pickle: reading a cache entry runs no
code), in ``CACHE_DIR/packs/KEY.json``. KEY is a sha256 over everything the validated pack
depends on: this format, the pack's text, the name it was loaded under (rules carry it, and
messages name it), the bytes of the loader's code (every module of ``zym.rules``, the
relations' columns and measures in ``analysis/relations.py``, ``schemas/rule.schema.json``),
the Python version, polars' version (its regex engine checks the patterns) and PyYAML's
module files (path, size, mtime). A changed pack, or another zym, polars or PyYAML, looks up
another key: a stale entry is never found.

An entry is used only when its first line names this format, its key and the sha256 of the
rest of the file, and the rest is a pack of the expected shape; anything else (missing,
truncated, corrupt, another key, unreadable) is ignored and the pack is parsed and validated
as without a cache, then the entry is written again. Entries are written to a temporary file
in the same folder and renamed into place (whole or absent, also with two zyms at once); the
oldest are removed past ``KEEP`` entries. A pack is kept only where JSON gives back exactly
the objects validation built (YAML values that JSON cannot carry, such as dates, are never
cached). The folder is ``$ZYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/zym``, else
``~/.cache/zym``; ``ZYM_PACK_CACHE=0`` turns the cache off. A folder that cannot be made or
written leaves zym as without a cache.

The entries are as trusted as the user's own files (whoever can write them can also edit the
packs zym loads); the checks above are against accidents, not against that user.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = "zym-rule-pack-cache 1"
KEEP = 64  # entries kept; older ones are removed when one is written
ENV_DIR = "ZYM_CACHE_DIR"
ENV_SWITCH = "ZYM_PACK_CACHE"


def cache_dir() -> Path | None:
    """The folder entries live in, or None when the cache is off."""
    if os.environ.get(ENV_SWITCH, "") == "0":
        return None
    root = os.environ.get(ENV_DIR)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "zym") if xdg and os.path.isabs(xdg) else \
            os.path.join(os.path.expanduser("~"), ".cache", "zym")
    return Path(root) / "packs"


@functools.cache
def code_fingerprint() -> bytes:
    """What validation depends on besides the pack: the loader's code and the libraries'."""
    here = Path(__file__).resolve().parent
    zym_root = here.parent
    files = sorted(here.glob("*.py")) + [zym_root / "analysis" / "relations.py",
                                         zym_root / "schemas" / "rule.schema.json"]
    h = hashlib.sha256(f"{FORMAT}\0{sys.version}\0".encode())
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    import polars as pl

    h.update(f"polars {pl.__version__}\0".encode())
    from importlib.util import find_spec

    spec = find_spec("yaml")  # its __init__ and its folder (a file added or replaced)
    places = [spec.origin, *(spec.submodule_search_locations or ())] if spec else []
    for place in places:
        if place:
            st = os.stat(place)
            h.update(f"yaml {place} {st.st_size} {st.st_mtime_ns}\0".encode())
    return h.digest()


def key_of(text: str, source: str) -> str:
    """The entry's key for a pack's ``text`` loaded under ``source``."""
    h = hashlib.sha256(code_fingerprint())
    h.update(source.encode("utf-8", "surrogatepass") + b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# A pack as JSON, and back

_TUPLES = ("group_by", "supersedes")  # Rule fields that are tuples of strings


def _plain(value: Any) -> bool:
    """Whether JSON gives ``value`` back as the same objects (types included)."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(_plain(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def _encode(pack) -> str | None:
    """The JSON of ``pack``, or None when JSON cannot carry it exactly."""
    from .model import Rule

    rules = []
    for rule in pack.rules:
        if type(rule) is not Rule:
            return None
        row = {}
        for f in dataclasses.fields(Rule):
            value = getattr(rule, f.name)
            if f.name in _TUPLES:
                if type(value) is not tuple or not all(type(v) is str for v in value):
                    return None
                value = list(value)
            elif not _plain(value):
                return None
            row[f.name] = value
        rules.append(row)
    head = {"name": pack.name, "source": pack.source, "doc": pack.doc}
    if not _plain(head):
        return None
    return json.dumps(head | {"rules": rules}, ensure_ascii=True, separators=(",", ":"))


def _decode(text: str):
    """The pack a cache entry's JSON holds; ValueError (or TypeError, KeyError) when its shape
    is not a pack's."""
    from .model import Pack, Rule

    doc = json.loads(text)
    names = [f.name for f in dataclasses.fields(Rule)]
    if type(doc) is not dict or set(doc) != {"name", "source", "doc", "rules"} \
            or type(doc["rules"]) is not list:
        raise ValueError("not a pack")
    rules = []
    for row in doc["rules"]:
        if type(row) is not dict or list(row) != names:
            raise ValueError("not a rule")
        rules.append(Rule(**{k: tuple(v) if k in _TUPLES else v for k, v in row.items()}))
    pack = Pack(doc["name"], tuple(rules), doc["source"], doc["doc"])
    if not all(type(x) is str for x in (pack.name, pack.source, pack.doc)):
        raise ValueError("not a pack")
    return pack


# ---------------------------------------------------------------------------------------------
# Entries

def _read(path: Path, key: str):
    """The pack of the entry at ``path`` when it is whole and ``key``'s; else None."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 22)
        head, sep, body = data.partition(b"\n")
        if not sep or head != f"{FORMAT} {key} {hashlib.sha256(body).hexdigest()}".encode():
            return None
        return _decode(body.decode("ascii"))
    except (OSError, ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        return None


def _write(folder: Path, key: str, body: str) -> None:
    """Write the entry atomically (temporary file, then rename); keep the newest ``KEEP``."""
    data = body.encode("ascii")
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{key}.json"
        tmp = folder / f".{key}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        with open(tmp, "wb") as f:
            f.write(f"{FORMAT} {key} {hashlib.sha256(data).hexdigest()}\n".encode() + data)
        os.replace(tmp, final)
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
                entries.append((p.stat().st_mtime_ns, p))
            except OSError:
                continue
    entries.sort(reverse=True)
    for _, p in entries[KEEP:]:
        try:
            p.unlink()
        except OSError:
            pass


def cached(text: str, source: str, parse: Callable[[str, str], Any]):
    """``parse(text, source)`` (a validated pack), from the cache where an entry is there."""
    folder = cache_dir()
    if folder is None:
        return parse(text, source)
    key = key_of(text, source)
    pack = _read(folder / f"{key}.json", key)
    if pack is not None:
        return pack
    pack = parse(text, source)  # raises for a pack that does not validate: nothing is kept
    body = _encode(pack)
    if body is not None:
        try:
            same = _decode(body) == pack
        except (ValueError, TypeError, KeyError):
            same = False
        if same:
            _write(folder, key, body)
    return pack
