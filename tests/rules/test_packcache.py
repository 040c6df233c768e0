"""The validated rule-pack cache (zym.rules.packcache): a pack that validated once is taken
from its entry, equal to what parsing gives; a missing, corrupt, stale or foreign entry is
ignored and the pack is parsed again; a pack that does not validate is never kept."""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_rule_errors import GOOD  # the same valid pack
from zym.rules import RuleError, builtin_pack_paths, load_pack, load_packs, model, packcache
from zym.rules.model import Pack, parse_pack
from zym.schemas import jsoncache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(jsoncache.ENV_SWITCH, raising=False)
    return tmp_path / "cache" / "packs"


@pytest.fixture()
def parses(monkeypatch) -> list[str]:
    """The sources parse_pack was called for (load_pack's parse)."""
    calls: list[str] = []
    real = model.parse_pack

    def counting(text: str, source: str = "<string>"):
        calls.append(source)
        return real(text, source)

    monkeypatch.setattr(model, "parse_pack", counting)
    return calls


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.exists() else []


def test_second_load_is_not_parsed_and_equals_the_parse(cache, parses):
    for path in builtin_pack_paths():
        first = load_pack(path)
        again = load_pack(path)
        fresh = parse_pack(path.read_text("utf-8"), str(path))
        assert first == fresh and again == fresh
        for a, b in zip(again.rules, fresh.rules):  # the same types, not just equal values
            for f in dataclasses.fields(a):
                assert type(getattr(a, f.name)) is type(getattr(b, f.name)), f.name
                assert json.dumps(getattr(a, f.name)) == json.dumps(getattr(b, f.name))
    assert parses == [str(p) for p in builtin_pack_paths()]  # each parsed once only
    assert len(entries(cache)) == len(builtin_pack_paths())
    assert not list(cache.glob(".*"))  # no temporary file left


def test_a_changed_pack_or_name_is_parsed_again(cache, parses, tmp_path):
    pack = tmp_path / "mine.yaml"
    pack.write_text(GOOD)
    assert load_pack(pack).rules[0].title == "Slow kernels"
    pack.write_text(GOOD.replace("Slow kernels", "Slower kernels"))
    assert load_pack(pack).rules[0].title == "Slower kernels"
    other = tmp_path / "other.yaml"
    other.write_text(GOOD.replace("Slow kernels", "Slower kernels"))
    assert load_pack(other).source == str(other)  # the name is part of the key
    assert parses == [str(pack), str(pack), str(other)]


@pytest.mark.parametrize("damage", ["truncate", "flip", "other key", "bad shape", "empty",
                                    "not text"])
def test_a_damaged_entry_is_ignored_and_written_again(cache, parses, tmp_path, damage):
    pack = tmp_path / "mine.yaml"
    pack.write_text(GOOD)
    good = load_pack(pack)
    (entry,) = entries(cache)
    data = entry.read_bytes()
    head, body = data.split(b"\n", 1)
    key = entry.stem
    if damage == "truncate":
        data = data[:-10]
    elif damage == "flip":  # still JSON, another title: the digest tells
        data = data.replace(b"Slow kernels", b"Slow kernelz")
    elif damage == "other key":  # another pack's entry copied under this name
        data = head.replace(key.encode(), b"0" * 64) + b"\n" + body
    elif damage == "bad shape":  # a consistent entry whose JSON is not a pack
        import hashlib

        body = b'{"name": 1}'
        data = (f"{jsoncache.FORMAT} {key} {hashlib.sha256(body).hexdigest()}\n").encode() + body
    elif damage == "empty":
        data = b""
    else:
        data = b"\xff\xfe" * 100
    entry.write_bytes(data)
    assert load_pack(pack) == good
    assert parses == [str(pack), str(pack)]  # parsed again, not read from the damaged entry
    assert entry.read_bytes() != data  # and the entry is whole again
    assert load_pack(pack) == good and len(parses) == 2


def test_a_pack_that_does_not_validate_is_never_kept(cache, tmp_path):
    pack = tmp_path / "mine.yaml"
    pack.write_text(GOOD.replace("relation: gpu", "relation: nowhere"))
    for _ in range(2):
        with pytest.raises(RuleError):
            load_pack(pack)
    assert entries(cache) == []


def test_values_json_cannot_carry_are_not_kept(cache):
    date = datetime.date(2026, 12, 2)
    pack = parse_pack(GOOD, "mine.yaml")
    odd = dataclasses.replace(pack, rules=(dataclasses.replace(
        pack.rules[0], where={"ts_ns": {"eq": date}}),))
    for _ in range(2):
        assert packcache.cached(GOOD, "mine.yaml", lambda t, s: odd) is odd
    assert entries(cache) == []


def test_off_or_unwritable_works_as_without(tmp_path, monkeypatch, parses):
    pack = tmp_path / "mine.yaml"
    pack.write_text(GOOD)
    monkeypatch.setenv(jsoncache.ENV_SWITCH, "0")
    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path / "off"))
    load_pack(pack)
    load_pack(pack)
    assert not (tmp_path / "off").exists() and len(parses) == 2
    monkeypatch.delenv(jsoncache.ENV_SWITCH)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(jsoncache.ENV_DIR, str(blocker))  # its packs/ cannot be made
    assert load_pack(pack) == parse_pack(GOOD, str(pack)) and len(parses) == 3


def test_the_key_follows_the_libraries(monkeypatch):
    import polars as pl

    before = packcache.key_of(GOOD, "mine.yaml")
    packcache.code_fingerprint.cache_clear()
    monkeypatch.setattr(pl, "__version__", "0.0.0-other")
    try:
        assert packcache.key_of(GOOD, "mine.yaml") != before
    finally:
        packcache.code_fingerprint.cache_clear()
    assert packcache.key_of(GOOD, "mine.yaml") != packcache.key_of(GOOD, "other.yaml")


def test_old_entries_are_pruned(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(jsoncache, "KEEP", 3)
    for i in range(5):
        pack = tmp_path / f"p{i}.yaml"
        pack.write_text(GOOD)
        load_pack(pack)
    assert len(entries(cache)) == 3


def test_analyze_prints_the_same_with_the_cache(tmp_path):
    """`zym analyze` of the bundled capture: cache off, cache written, cache read."""
    trace = ROOT / "sample_traces" / "gpt_decode_server.parquet"
    outs = []
    for switch in ("0", "1", "1"):
        env = os.environ | {jsoncache.ENV_DIR: str(tmp_path / "c"),
                            jsoncache.ENV_SWITCH: switch}
        run = subprocess.run([str(Path(sys.executable).parent / "zym"), "analyze", str(trace),
                              "--format", "json", "--no-progress"], env=env,
                             capture_output=True, timeout=300, check=False)
        assert run.returncode == 0, run.stderr.decode()
        outs.append(run.stdout)
    assert outs[0] == outs[1] == outs[2]
    assert len(entries(tmp_path / "c" / "packs")) == len(builtin_pack_paths())


def test_load_packs_from_the_cache_equals_without(cache, monkeypatch):
    warm = load_packs()
    cached = load_packs()
    monkeypatch.setenv(jsoncache.ENV_SWITCH, "0")
    assert cached == warm == load_packs()
    assert all(isinstance(p, Pack) for p in cached)


def test_a_warm_analysis_imports_neither_yaml_nor_html(tmp_path):
    """With the cache written, `zym analyze` (its body, in a fresh interpreter) imports no
    PyYAML (packs and data files from their entries) and not the html package."""
    trace = ROOT / "sample_traces" / "gpt_decode_server.parquet"
    code = ("import io, sys, contextlib\n"
            "from zym.cli import fast, bodies\n"
            "fast._import_libraries()\n"
            f"params = fast.parse('analyze', [{str(trace)!r}, '--format', 'json'])\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert bodies.analyze(**params) == 0\n"
            "print(sorted(m for m in ('yaml', 'html') if m in sys.modules))\n")
    env = os.environ | {jsoncache.ENV_DIR: str(tmp_path / "c")}
    env.pop(jsoncache.ENV_SWITCH, None)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300, check=False) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.strip() == "['yaml']"  # the first run parses, and writes the cache
    assert runs[1].stdout.strip() == "[]"
