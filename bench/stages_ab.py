"""Two zym installs, A and B, stage by stage in process: interleaved fresh processes.

Each run imports numpy and polars as the CLI does, then times zym's modules, the rule packs
(``load_packs``), the analysis, the rules and the report + its JSON, one after the other, on
INPUT (decoding ahead off: ``ZYM_DECODE_AHEAD=0``, as on a machine without a free core), and
says whether PyYAML was imported. Reported: each stage's median (min-max) for A and B.

    python bench/stages_ab.py --a VENV_A/bin/python --b VENV_B/bin/python INPUT [--pairs 9]
        [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from zym.cli import fast
fast._import_libraries()
t1 = time.perf_counter()
from pathlib import Path
from zym.analysis import analyze
from zym.rules import evaluate, load_packs
t2 = time.perf_counter()
packs = load_packs(())
t3 = time.perf_counter()
result = analyze(Path(sys.argv[1]), lambda *a: None, "steady")
t4 = time.perf_counter()
findings = evaluate(result, packs, ())
t5 = time.perf_counter()
from zym.analysis.export.summary import build_report
json.dumps(build_report(result, findings, None, 5, None), indent=1)
t6 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "zym_modules": t2 - t1, "packs": t3 - t2,
                  "analysis": t4 - t3, "rules": t5 - t4, "report_json": t6 - t5,
                  "yaml_imported": "yaml" in sys.modules}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("--a", required=True, help="python of install A (before)")
    parser.add_argument("--b", required=True, help="python of install B (after)")
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--json", type=Path, help="write the raw runs here")
    args = parser.parse_args()
    env = os.environ | {"ZYM_DECODE_AHEAD": "0"}
    rows: dict[str, list[dict]] = {"a": [], "b": []}
    for i in range(args.pairs):
        for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
            out = subprocess.run([getattr(args, side), "-c", CHILD, str(args.input.resolve())],
                                 capture_output=True, text=True, check=True, env=env).stdout
            rows[side].append(json.loads(out.strip().splitlines()[-1]))
    stages = {}
    for key in rows["a"][0]:
        if key == "yaml_imported":
            continue
        stages[key] = {}
        line = f"{key:12s}"
        for side in ("a", "b"):
            v = [r[key] for r in rows[side]]
            stages[key][side] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
            line += (f"  {side.upper()} {statistics.median(v) * 1000:6.1f} ms "
                     f"({min(v) * 1000:.1f}-{max(v) * 1000:.1f})")
        print(line)
    for side in ("a", "b"):
        print(f"{side.upper()} imported PyYAML in {sum(r['yaml_imported'] for r in rows[side])}"
              f" of {len(rows[side])} runs")
    if args.json:
        args.json.write_text(json.dumps({"input": str(args.input), "pairs": args.pairs,
                                         "stages": stages, "raw": rows}, indent=1))


if __name__ == "__main__":
    main()
