"""Per trace or capture kept in bench/whatif/results/ (and the bundled sample's two forms): the
steps' stretches of CPU work by place (the stretches relation: rows, how many are their step's
longest, share of the steps' time, median and largest share of a step) and the
``utilization.cpu-bound-step`` findings zym gives (place, share, stretches, saving).

    python bench/whatif/stretch_survey.py [--min-share 0.05]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl
from zym.analysis import analyze
from zym.analysis.relations import COLUMNS
from zym.rules import evaluate

ROOT = Path(__file__).resolve().parents[2]


def inputs() -> list[Path]:
    results = ROOT / "bench" / "whatif" / "results"
    return (sorted(results.glob("*/kineto/*")) + sorted(results.glob("*/captures/*.parquet"))
            + [ROOT / "sample_traces" / "gpt_decode_server.parquet",
               ROOT / "sample_traces" / "gpt_decode_server.trace.json.gz"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-share", type=float, default=0.05,
                   help="places below this share of the steps' time are not listed")
    args = p.parse_args()
    paths = inputs()
    for path in paths:
        result = analyze(path)
        rows = result.relations.materialize("stretches", set(COLUMNS["stretches"]))
        found = [f for f in evaluate(result) if f.rule_id == "utilization.cpu-bound-step"]
        name = "/".join(path.parts[-3:])
        if rows.height:
            places = (rows.with_columns(frac=pl.col("dur_ns") / pl.col("step_ns"))
                      .group_by("quiet_where").agg(
                          pl.len().alias("stretches"), pl.col("longest").sum().alias("longest"),
                          (pl.col("quiet_py_ns").sum() / pl.col("steps_ns").first()).round(3)
                          .alias("share"), pl.col("frac").median().round(3).alias("median_frac"),
                          pl.col("frac").max().round(3).alias("max_frac"))
                      .filter(pl.col("share") >= args.min_share)
                      .sort("share", descending=True))
            if places.height or found:
                busy = rows["steps_busy_ns"][0] / rows["steps_ns"][0]
                print(f"{name}: {rows['steps'][0]} steps, GPU busy {busy:.1%}")
                for place in places.iter_rows(named=True):
                    print("   ", place)
        for f in found:
            print(f"  finding: {f.evidence.get('where')}: {f.evidence['work_share']:.1%} of the "
                  f"steps, {f.evidence['count']} stretches, saves {f.saving_ns / 1e6:.3g} ms")
    print(f"{len(paths)} traces and captures")


if __name__ == "__main__":
    main()
