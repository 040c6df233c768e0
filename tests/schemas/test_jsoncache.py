"""The JSON cache's entries (zym.schemas.jsoncache): read back only when whole and of the
key asked for; written atomically; pruned; off or unwritable: as without a cache."""
from __future__ import annotations

import datetime
import json

import pytest
from zym.schemas import jsoncache

KEY = "ab" * 32


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(jsoncache.ENV_SWITCH, raising=False)
    return tmp_path / "k"


def test_written_then_read(folder):
    value = {"b": [1, 2.5, None, True, "x\u00e9"], "a": {"z": -0.0}}
    assert jsoncache.read("k", KEY) is None
    jsoncache.write("k", KEY, jsoncache.dumps(value))
    got = jsoncache.read("k", KEY)
    assert got == value and list(got) == ["b", "a"] and type(got["b"][1]) is float
    assert [p.name for p in folder.iterdir()] == [f"{KEY}.json"]  # no temporary file left


@pytest.mark.parametrize("damage", ["truncated", "one byte", "other key", "no head", "empty",
                                    "binary", "other format"])
def test_damaged_reads_as_absent(folder, damage):
    jsoncache.write("k", KEY, jsoncache.dumps({"a": [1, 2, 3]}))
    entry = folder / f"{KEY}.json"
    data = entry.read_bytes()
    head, body = data.split(b"\n", 1)
    data = {"truncated": data[:-3], "one byte": data.replace(b"2", b"7"),
            "other key": head.replace(KEY.encode(), b"cd" * 32) + b"\n" + body,
            "no head": body, "empty": b"", "binary": b"\xff" * 50,
            "other format": head.replace(b"cache 1", b"cache 2") + b"\n" + body}[damage]
    entry.write_bytes(data)
    assert jsoncache.read("k", KEY) is None


def test_another_keys_entry_under_this_name_reads_as_absent(folder):
    jsoncache.write("k", "cd" * 32, "[1]")
    (folder / f"{'cd' * 32}.json").rename(folder / f"{KEY}.json")
    assert jsoncache.read("k", KEY) is None


def test_off_and_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path / "c"))
    monkeypatch.setenv(jsoncache.ENV_SWITCH, "0")
    jsoncache.write("k", KEY, "[1]")
    assert jsoncache.read("k", KEY) is None and not (tmp_path / "c").exists()
    monkeypatch.delenv(jsoncache.ENV_SWITCH)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path / "file"))
    jsoncache.write("k", KEY, "[1]")  # no error
    assert jsoncache.read("k", KEY) is None


def test_default_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(jsoncache.ENV_DIR, raising=False)
    monkeypatch.delenv(jsoncache.ENV_SWITCH, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert jsoncache.cache_dir("k") == tmp_path / "zym" / "k"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jsoncache.cache_dir("k") == tmp_path / "home" / ".cache" / "zym" / "k"
    monkeypatch.setattr(jsoncache.os.path, "expanduser", lambda p: p)  # no home known
    assert jsoncache.cache_dir("k") is None  # not a "~" folder under the working directory
    jsoncache.write("k", KEY, "[1]")
    assert jsoncache.read("k", KEY) is None


def test_pruned_to_the_newest(folder, monkeypatch):
    monkeypatch.setattr(jsoncache, "KEEP", 3)
    for i in range(6):
        jsoncache.write("k", f"{i:064x}", f"[{i}]")
    assert len(list(folder.glob("*.json"))) == 3


@pytest.mark.parametrize(("value", "ok"), [
    ({"a": [1, 2.0, "s", None, False]}, True), ({1: "int key"}, False), ((1, 2), False),
    ({"d": datetime.date(2026, 1, 1)}, False), (float("nan"), False), (b"x", False),
    ({"s": {1, 2}}, False)])
def test_plain(value, ok):
    assert jsoncache.plain(value) is ok
    if ok:
        assert json.loads(jsoncache.dumps(value)) == value


def test_remembered_makes_once_and_reads_after(folder, monkeypatch):
    made = []

    def make():
        made.append(1)
        return {"n": len(made)}

    assert jsoncache.remembered("k", KEY, make) == {"n": 1}
    assert jsoncache.remembered("k", KEY, make) == {"n": 1} and made == [1]  # from the entry

    def refuse(doc):
        raise ValueError("not mine")

    assert jsoncache.remembered("k", KEY, make, load=refuse) == {"n": 2}  # made again...
    assert jsoncache.read("k", KEY) == {"n": 2}  # ...and the entry replaced
    assert jsoncache.remembered("k", "cd" * 32, make, dump=lambda v: None) == {"n": 3}
    assert jsoncache.read("k", "cd" * 32) is None  # dump said: not kept
    assert jsoncache.remembered("k", "ef" * 32, lambda: datetime.date(2026, 1, 1)) \
        == datetime.date(2026, 1, 1)
    assert jsoncache.read("k", "ef" * 32) is None  # not plain JSON: not kept

    def fails():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        jsoncache.remembered("k", "01" * 32, fails)
    assert jsoncache.read("k", "01" * 32) is None
    monkeypatch.setenv(jsoncache.ENV_SWITCH, "0")
    assert jsoncache.remembered("k", KEY, make) == {"n": 4}  # off: made every time
