"""``bench/whatif/compare.py`` (predicted vs measured savings) as a module, loaded once, for the
tests that check its tables against docs/benchmarks.md."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    name = "whatif_compare_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "whatif" / "compare.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # (dataclasses look their module up)
        spec.loader.exec_module(module)
    return sys.modules[name]


compare = _load()


def docs_table(marker: str) -> str:
    """The table docs/benchmarks.md holds between ``<!-- MARKER -->`` and ``<!-- /MARKER -->``
    (what ``compare.py --markdown`` printed when the doc was written)."""
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    return doc.split(f"<!-- {marker} -->\n", 1)[1].split(f"<!-- /{marker} -->", 1)[0]


def check_docs_table(marker: str, rows: list, results: Path | None = None,
                     requests: dict[str, int] | None = None) -> None:
    """The table under ``marker`` in docs/benchmarks.md is ``rows``' (``compare.py``'s rows of
    ``results``, per ``requests``; the defaults: compare.py's own); else the command that
    prints it again."""
    command = "python bench/whatif/compare.py"
    if results is not None:
        command += f" {results.relative_to(ROOT)}"
    if requests:
        command += " --requests " + ",".join(f"{w}={n}" for w, n in requests.items())
    assert docs_table(marker) == compare.markdown(rows), (
        f"docs/benchmarks.md is stale: {command} --markdown")
