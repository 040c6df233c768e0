"""Validated rule packs kept between runs (``zym.schemas.jsoncache``): `zym analyze` does not
parse and check the same pack again (PyYAML's import, the parse, the schema and name checks,
every pattern compiled by Python and by polars: ~0.03 s of a sample-sized analysis).

Only a pack that validated is kept, as JSON, under the key of everything the validated pack
depends on: the pack's text, the name it was loaded under (rules carry it, and messages name
it), the bytes of the loader's code (every module of ``zym.rules``, the relations' columns
and measures in ``analysis/relations.py``, ``schemas/rule.schema.json`` and the cache's own
module), polars' version (its regex engine checks the patterns), PyYAML's files and the
Python version. A changed pack, or another zym, polars or PyYAML, looks up another key: a
stale entry is never found. An entry that is not whole, or whose JSON is not a pack of this
shape, is ignored: the pack is parsed and validated as without a cache. A pack is kept only
where JSON gives back exactly the objects validation built (YAML values JSON cannot carry,
such as dates, are never kept).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zym.schemas import jsoncache

KIND = "packs"
_TUPLES = ("group_by", "supersedes")  # Rule fields that are tuples of strings


@functools.cache
def code_fingerprint() -> bytes:
    """What validation depends on besides the pack: the loader's code and the libraries'."""
    import polars as pl

    here = Path(__file__).resolve().parent
    zym_root = here.parent
    files = sorted(here.glob("*.py")) + [zym_root / "analysis" / "relations.py",
                                         zym_root / "schemas" / "rule.schema.json",
                                         zym_root / "schemas" / "jsoncache.py"]
    return jsoncache.fingerprint(files, KIND, f"polars {pl.__version__}",
                                 jsoncache.yaml_identity())


def key_of(text: str, source: str) -> str:
    """The entry's key for a pack's ``text`` loaded under ``source``."""
    h = hashlib.sha256(code_fingerprint())
    h.update(source.encode("utf-8", "surrogatepass") + b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


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
            elif not jsoncache.plain(value):
                return None
            row[f.name] = value
        rules.append(row)
    head = {"name": pack.name, "source": pack.source, "doc": pack.doc}
    if not jsoncache.plain(head):
        return None
    return jsoncache.dumps(head | {"rules": rules})


def _decode(doc: Any):
    """The pack an entry's JSON holds; ValueError (or TypeError) when it is not a pack's."""
    from .model import Pack, Rule

    names = [f.name for f in dataclasses.fields(Rule)]
    if type(doc) is not dict or list(doc) != ["name", "source", "doc", "rules"] \
            or type(doc["rules"]) is not list \
            or not all(type(doc[k]) is str for k in ("name", "source", "doc")):
        raise ValueError("not a pack")
    rules = []
    for row in doc["rules"]:
        if type(row) is not dict or list(row) != names:
            raise ValueError("not a rule")
        rules.append(Rule(**{k: tuple(v) if k in _TUPLES else v for k, v in row.items()}))
    return Pack(doc["name"], tuple(rules), doc["source"], doc["doc"])


def cached(text: str, source: str, parse: Callable[[str, str], Any]):
    """``parse(text, source)`` (a validated pack), from the cache where an entry is there."""
    return jsoncache.remembered(KIND, key_of(text, source), lambda: parse(text, source),
                                load=_decode, dump=_checked_encode)


def _checked_encode(pack) -> str | None:
    """The JSON of ``pack`` where decoding it gives the same pack back, else None."""
    import json

    body = _encode(pack)
    if body is None:
        return None
    try:
        return body if _decode(json.loads(body)) == pack else None
    except (ValueError, TypeError):
        return None
