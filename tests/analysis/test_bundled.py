"""The analysis's data files read through libyaml (analysis/bundled.py) are the documents
``yaml.safe_load`` (pure Python) makes of them."""
from __future__ import annotations

from importlib import resources

import pytest
import yaml
from zym.analysis.bundled import bundled_yaml

NAMES = sorted(p.name for p in resources.files("zym.analysis").iterdir()
               if p.name.endswith(".yaml"))


def test_every_data_file_is_listed():
    assert {"kernel_classes.yaml", "gpus.yaml", "gemm_rates.yaml",
            "capture_costs.yaml"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_same_document_as_safe_load(name):
    text = resources.files("zym.analysis").joinpath(name).read_text("utf-8")
    assert bundled_yaml(name) == yaml.safe_load(text)



@pytest.fixture()
def cache(tmp_path, monkeypatch):
    from zym.schemas import jsoncache

    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(jsoncache.ENV_SWITCH, raising=False)
    bundled_yaml.cache_clear()
    yield tmp_path / "bundled"
    bundled_yaml.cache_clear()


@pytest.mark.parametrize("name", NAMES)
def test_kept_between_runs_the_same_document_without_parsing(cache, monkeypatch, name):
    """A later run (here: the in-process cache cleared) reads the entry, parses nothing, and
    gets the document safe_load makes, with the same types and key order."""
    text = resources.files("zym.analysis").joinpath(name).read_text("utf-8")
    expected = yaml.safe_load(text)
    assert bundled_yaml(name) == expected
    assert len(list(cache.glob("*.json"))) == 1
    bundled_yaml.cache_clear()

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(yaml, "load", no_parse)
    again = bundled_yaml(name)
    assert again == expected and repr(again) == repr(expected)


def test_a_damaged_entry_is_parsed_again(cache):
    name = "gemm_rates.yaml"
    good = bundled_yaml(name)
    (entry,) = cache.glob("*.json")
    entry.write_bytes(entry.read_bytes().replace(b":", b";", 3))  # the digest no longer fits
    bundled_yaml.cache_clear()
    parsed = []
    real = yaml.load

    def counting(*a, **k):
        parsed.append(1)
        return real(*a, **k)

    yaml.load, saved = counting, yaml.load
    try:
        assert bundled_yaml(name) == good
    finally:
        yaml.load = saved
    assert parsed == [1]
