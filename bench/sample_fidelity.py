"""Does a sample say what the whole says? `zym analyze --format json` of each capture whole and
sampled at each fraction (a `--memory-budget` whose estimate fits that share of its rows:
`zym.analysis.budget.estimate_bytes`), compared as shares of their windows
(`bench/compare_findings.py`), with the lines that sync or copy outside each sample.

    python bench/sample_fidelity.py CAPTURE.parquet... [--fractions 0.3,0.1] [--zym zym]
        [--out DIR]   (the reports and the comparisons are written there)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import fail  # bench/: the script's folder

HERE = Path(__file__).resolve().parent


def budget_for(path: Path, fraction: float) -> int:
    from zym.analysis import budget as B
    from zym.schemas.io import open_capture

    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    return B.estimate_bytes({t: n * fraction for t, n in rows.items()})


def report(zym: str, path: Path, out: Path, *args: str) -> Path:
    got = subprocess.run([zym, "analyze", str(path), "--format", "json", "--no-progress", *args],
                         capture_output=True, text=True, check=False)
    if got.returncode != 0:
        fail(f"{path}: zym analyze {' '.join(args)} failed: {got.stderr.strip()}")
    out.write_text(got.stdout)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("captures", type=Path, nargs="+")
    p.add_argument("--fractions", default="0.3,0.1")
    p.add_argument("--zym", default="zym")
    p.add_argument("--out", type=Path, default=Path("bench/out/sample_fidelity"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for path in a.captures:
        whole = report(a.zym, path, a.out / f"{path.stem}.whole.json")
        for fraction in (float(f) for f in a.fractions.split(",")):
            sampled = report(a.zym, path, a.out / f"{path.stem}.s{fraction:g}.json",
                             "--memory-budget", str(budget_for(path, fraction)))
            compared = subprocess.run(
                [sys.executable, str(HERE / "compare_findings.py"), str(whole), str(sampled)],
                capture_output=True, text=True, check=True).stdout
            lines = (json.loads(sampled.read_text()).get("sample") or {}).get(
                "sync_copy_lines") or {}
            outside = ", ".join(f"{x['site']} (syncs {x['syncs']}, copies {x['copies']})"
                                for x in lines.get("outside", [])) or "none"
            text = (f"=== {path.name}, sampled at {fraction:g} of its rows\n{compared}"
                    f"lines that sync or copy: {lines.get('capture')} in the capture, "
                    f"{lines.get('sample')} in the sample; outside it: {outside}\n")
            (a.out / f"{path.stem}.s{fraction:g}.txt").write_text(text)
            print(text)


if __name__ == "__main__":
    main()
