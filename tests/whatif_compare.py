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


def workload_constant(workload: str, name: str) -> int:
    """A module constant of a what-if workload (its full-size value: ``A if SMALL else B`` ->
    B), read from its source (bench/whatif/workloads/)."""
    import ast

    source = (ROOT / "bench" / "whatif" / "workloads" / f"{workload}.py").read_text()
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        for t, v in zip(targets, values):
            if isinstance(t, ast.Name) and t.id == name:
                v = v.orelse if isinstance(v, ast.IfExp) else v
                return int(ast.literal_eval(v))
    raise KeyError(name)


def check_steps_are_requests(results: Path, steps: dict[str, int]) -> None:
    """Each workload's requests a pass (its REQUESTS) are zym's steps in its kept trace
    (``results``/kineto/W.parquet): one call each of its ``handle``."""
    from zym.analysis import analyze

    for w, n in steps.items():
        assert workload_constant(w, "REQUESTS") == n, w
        found = analyze(results / "kineto" / f"{w}.parquet").steps_in_window()
        assert (found.function, found.count) == (f"{w}.py handle", n), w


def raw_spans(path: Path):
    """A capture file's spans with their frames' names, read from its raw rows (not through
    the analysis)."""
    import polars as pl

    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "name", "ts_ns",
                                         "dur_ns"])
    frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name")
    stacks = raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id")
    return (raw.filter(pl.col("record") == "span").select("stack_id", "ts_ns", "dur_ns")
            .join(stacks, on="stack_id").join(frames, on="frame_id"))


def steps_found(path: Path) -> int:
    """The steps zym finds in a capture or trace, the warm-up's among them (the report's
    ``phases.steps.found``)."""
    from zym.analysis import analyze
    from zym.analysis.export.summary import build_report

    return build_report(analyze(path), None, None)["phases"]["steps"]["found"]
