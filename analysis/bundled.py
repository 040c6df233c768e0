"""The data files shipped beside the analysis (``*.yaml`` in this folder), read once."""
from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

KIND = "bundled"


@functools.cache
def bundled_yaml(name: str) -> Any:
    """The YAML document ``name`` of this package, parsed by libyaml where PyYAML has it
    (CSafeLoader: the same resolver and constructors as ``yaml.safe_load``, so the same
    document, ~5x faster: ~30 ms less of every analysis), else by ``yaml.safe_load``.
    The parsed document is kept between runs as JSON (``zym.schemas.jsoncache``, keyed by the
    text, this module's code and PyYAML's files), so a later run imports no PyYAML (~15 ms).
    Callers must not change it: it is shared."""
    from zym.schemas import jsoncache

    text = resources.files("zym.analysis").joinpath(name).read_text("utf-8")
    h = hashlib.sha256(jsoncache.fingerprint(
        [Path(__file__).resolve(), Path(jsoncache.__file__).resolve()], KIND, name,
        jsoncache.yaml_identity()))
    h.update(text.encode("utf-8", "surrogatepass"))

    def parse() -> Any:
        import yaml

        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    return jsoncache.remembered(KIND, h.hexdigest(), parse)
