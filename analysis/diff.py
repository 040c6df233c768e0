"""Two captures compared: what changed, where, and whether it is more than noise.

A capture is first reduced to its **profile** (:func:`zym.analysis.profile.profile_of`): per
code site and per GPU operation, each measure summed over the analysis window and over each
unit of it (a step where the capture repeats one, else a slice of the window). Both captures
are put on the same footing: per step when both have steps (two runs of different lengths
compare per request or per decoding step), else per second.

:func:`compare` then matches the code sites of the two profiles (:func:`match_sites`), robust
to lines moved by unrelated edits, and reports each measure's change per unit with its
**noise threshold** (:func:`noise_threshold`): the spread of the measure from one unit to the
next within each capture says how much the mean per unit could move by chance; a change is
*above noise* only when it exceeds ``NOISE_Z`` standard errors of the difference of the two
means and the floors :data:`REL_FLOOR` and the absolute floor of the measure, and for the
CPU-side times a floor for the host's run-to-run variation, or a repeat of the baseline
(:class:`Noise`; ``docs/diff.md`` says why).

Findings (rule results, given as plain dicts) are compared by rule id and matched site: those
that appeared, disappeared, and those whose saving changed. The comparison is plain data
(:meth:`Diff.to_dict`): text, markdown, JSON and HTML render it (:mod:`zym.analysis.export.diff`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from .profile import (
    KERNEL_MEASURES,
    KEY_COLUMNS,
    SITE_MEASURES,
    SLICES,
    TOTAL_MEASURES,
    Profile,
    profile_of,
)

__all__ = ["Diff", "Noise", "Profile", "compare", "match_sites", "noise_threshold", "profile_of"]

NOISE_Z = 3.0  # standard errors of the difference of the two means per unit
REL_FLOOR = 0.02  # a change under 2% of the larger mean is never "above noise"
ABS_FLOOR = {"ns": 2_000, "count": 0.5, "bytes": 64}  # smallest change that counts, per unit
# CPU-side times move with the host's speed from one process to the next (bench/diff: two runs
# of the same code on the H200 host differ by 53% in CPU blocked time a step, while GPU time
# differs by 0.02% and every count by 0): without a repeat of the baseline, a change of them
# under this share of the larger mean is noise.
HOST_MEASURES = frozenset({"wall_ns", "cpu_blocked_ns"})
HOST_FLOOR = 0.6
REPEAT_K = 3.0  # with a repeat: 3x the difference of two runs of the same code
# Site identity for matching: tried in this order on the sites still unmatched; ties within a
# key are paired in line order (see match_sites).
MATCH_LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("source", ("file", "function", "module", "op_chain", "py_api", "source", "callers")),
    ("exact", ("file", "line", "function", "module", "op_chain", "py_api")),
    ("moved", ("file", "function", "module", "op_chain", "py_api", "callers")),
    ("function", ("file", "function", "module", "op_chain", "py_api")),
    # the same line of the same function now runs other torch ops (the edit was there):
    ("edited", ("file", "line", "function", "module")),
)


# -- matching ----------------------------------------------------------------------------------

def match_sites(before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    """Pairs of code sites, ``code_site_before, code_site_after, match``: by each level of
    :data:`MATCH_LEVELS` in turn over the sites still unmatched. Within one key, sites pair in
    line order (the k-th line of a function before with its k-th line after), which holds when
    an edit moves a block of lines: their order does not change."""
    b = before.select("code_site", *KEY_COLUMNS)
    a = after.select("code_site", *KEY_COLUMNS)
    pairs = []
    for level, cols in MATCH_LEVELS:
        if b.height == 0 or a.height == 0:
            break
        need = pl.all_horizontal(pl.col("source").is_not_null()) if "source" in cols \
            else pl.lit(True)
        kb, ka = _keyed(b.filter(need), cols), _keyed(a.filter(need), cols)
        hit = kb.join(ka, on=["_key", "_rank"], suffix="_after").select(
            pl.col("code_site").alias("code_site_before"), "code_site_after",
            pl.lit(level).alias("match"))
        if hit.height:
            pairs.append(hit)
            b = b.filter(~pl.col("code_site").is_in(hit["code_site_before"].implode()))
            a = a.filter(~pl.col("code_site").is_in(hit["code_site_after"].implode()))
    schema = {"code_site_before": pl.Int64, "code_site_after": pl.Int64, "match": pl.String}
    return pl.concat(pairs) if pairs else pl.DataFrame(schema=schema)


def _keyed(df: pl.DataFrame, cols: tuple[str, ...]) -> pl.DataFrame:
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in cols],
                        separator="\x1f")
    return (df.with_columns(key.alias("_key"))
            .sort("_key", "line", "code_site", nulls_last=True)
            .with_columns(pl.int_range(pl.len()).over("_key").alias("_rank"))
            .select("code_site", "_key", "_rank"))


# -- noise -------------------------------------------------------------------------------------

def noise_threshold(mean_b: float, ss_b: float, n_b: int, mean_a: float, ss_a: float,
                    n_a: int, unit: str = "ns") -> float:
    """The smallest change of a mean per unit that is above noise (see the module doc):
    ``max(NOISE_Z * SE, REL_FLOOR * max(|means|), ABS_FLOOR[unit])``, where SE is the standard
    error of the difference of the two means, from each capture's variance across its units
    (``ss``: the sum of squares of the per-unit values)."""
    se2 = _var(mean_b, ss_b, n_b) / max(n_b, 1) + _var(mean_a, ss_a, n_a) / max(n_a, 1)
    return max(NOISE_Z * math.sqrt(se2), REL_FLOOR * max(abs(mean_b), abs(mean_a)),
               ABS_FLOOR[unit])


def _var(mean: float, ss: float, n: int) -> float:
    if n < 2:
        return 0.0
    return max(ss / n - mean * mean, 0.0) * n / (n - 1)


# -- the comparison ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Noise:
    """What counts as noise (see the module doc and :func:`noise_threshold`).

    ``host_floor``: CPU-side times (:data:`HOST_MEASURES`: wall time, CPU blocked) change from
    one process to the next with the host's speed, which the spread within one capture cannot
    show; a change of them under this share of the larger mean is noise. ``repeat``: a second
    capture of the baseline's code; then the floor of every measure is :data:`REPEAT_K` times
    its observed run-to-run difference instead (and ``host_floor`` is not used)."""

    host_floor: float = HOST_FLOOR
    repeat: Profile | None = None


@dataclass
class Diff:
    """The comparison of two profiles (see :meth:`to_dict`)."""

    before: Profile
    after: Profile
    per: str  # "step" or "second"
    totals: list[dict]
    sites: list[dict]
    kernels: list[dict]
    findings: dict
    matched: dict
    noise: Noise = field(default_factory=Noise)

    def total(self, measure: str) -> dict:
        return next(t for t in self.totals if t["measure"] == measure)

    def regression_pct(self, measure: str) -> float | None:
        """How much worse ``measure`` (per unit) got, in percent of before (negative: better);
        None where it cannot be compared (wall time per second)."""
        t = self.total(measure)
        if not t["before"] or t.get("per") == "window":
            return None
        return 100.0 * t["delta"] / t["before"]

    def to_dict(self, top: int | None = None) -> dict:
        sites = self.sites if top is None else self.sites[:top]
        kernels = self.kernels if top is None else self.kernels[:top]
        better = sorted((s for s in self.sites if s["above_noise"] and s["score"] < 0),
                        key=lambda s: s["score"])
        worse = sorted((s for s in self.sites if s["above_noise"] and s["score"] > 0),
                       key=lambda s: -s["score"])
        return {
            "before": self.before.describe(), "after": self.after.describe(),
            "repeat": None if self.noise.repeat is None else self.noise.repeat.describe(),
            "per": self.per,
            "noise": {"z": NOISE_Z, "rel_floor": REL_FLOOR, "abs_floor": ABS_FLOOR,
                      "host_floor": None if self.noise.repeat else self.noise.host_floor,
                      "repeat_k": REPEAT_K if self.noise.repeat else None,
                      "how": noise_note(self)},
            "totals": self.totals,
            "regression_pct": {m: self.regression_pct(m) for m in ("gpu_ns", "wall_ns")},
            "top_improvements": better[: top or None], "top_regressions": worse[: top or None],
            "sites": sites, "kernels": kernels, "findings": self.findings,
            "matched": self.matched,
        }


def noise_note(d: Diff) -> str:
    units = {"step": "steps", "slice": f"{SLICES} equal slices of the window"}
    base = (f"a change is above noise when it exceeds {NOISE_Z:g} standard errors of the "
            f"difference of the two means per {d.per} (from the spread across "
            f"{units[d.before.unit]} before and {units[d.after.unit]} after) and "
            f"{100 * REL_FLOOR:g}% of the larger mean")
    if d.noise.repeat is not None:
        return base + (f", and {REPEAT_K:g}x its difference between two runs of the baseline "
                       f"({d.noise.repeat.source})")
    return base + (f"; wall time and CPU blocked time also {100 * d.noise.host_floor:g}% (they "
                   "move with the host's speed from one process to the next; --repeat measures "
                   "that instead)")


def compare(before: Profile, after: Profile, noise: Noise | None = None) -> Diff:
    """Compare two profiles: totals, sites, kernels and findings, per step when both have
    steps, else per second; above noise as ``noise`` says."""
    noise = noise or Noise()
    floors = _Floors.of(before, noise)
    per = "step" if before.unit == "step" and after.unit == "step" else "second"
    scale_b, scale_a = _scale(before, per), _scale(after, per)
    totals = _totals(before, after, scale_b, scale_a, floors)
    pairs = match_sites(before.sites, after.sites)
    sites = _site_rows(before, after, pairs, scale_b, scale_a, floors)
    kernels = _kernel_rows(before, after, scale_b, scale_a, floors)
    site_pair = {int(r[0]): int(r[1]) for r in pairs.select(
        "code_site_before", "code_site_after").iter_rows()}
    wall = next(t for t in totals if t["measure"] == "wall_ns")
    findings = _finding_rows(before, after, site_pair, scale_b, scale_a, wall)
    matched = dict(pairs.group_by("match").len().iter_rows()) if pairs.height else {}
    matched |= {"appeared": sum(1 for s in sites if s["status"] == "appeared"),
                "disappeared": sum(1 for s in sites if s["status"] == "disappeared")}
    return Diff(before, after, per, totals, sites, kernels, findings, matched, noise)


@dataclass
class _Floors:
    """Per measure, the smallest change that is not run-to-run noise (per unit): from a repeat
    of the baseline (``REPEAT_K`` x the repeat's difference), else ``host_floor`` of the larger
    mean for the CPU-side times."""

    host_floor: float
    totals: dict[str, float] = field(default_factory=dict)
    sites: dict[int, dict[str, float]] = field(default_factory=dict)
    kernels: dict[tuple, dict[str, float]] = field(default_factory=dict)
    repeat: bool = False

    @classmethod
    def of(cls, before: Profile, noise: Noise) -> _Floors:
        if noise.repeat is None:
            return cls(noise.host_floor)
        r = compare(before, noise.repeat, Noise(host_floor=0.0))
        return cls(0.0, repeat=True,
                   totals={t["measure"]: REPEAT_K * abs(t["delta"]) for t in r.totals},
                   sites={s["code_site_before"]: {m: REPEAT_K * abs(v["delta"])
                                                  for m, v in s["measures"].items()}
                          for s in r.sites if s["code_site_before"] is not None},
                   kernels={(k["name"], k["kind"]): {m: REPEAT_K * abs(v["delta"])
                                                     for m, v in k["measures"].items()}
                            for k in r.kernels if k["status"] != "appeared"})

    def floor(self, m: str, repeat_floor: float | None, mb: float, ma: float) -> float:
        if self.repeat:
            return repeat_floor or 0.0
        return self.host_floor * max(abs(mb), abs(ma)) if m in HOST_MEASURES else 0.0


def _scale(p: Profile, per: str) -> tuple[float, int]:
    """``(factor, n)``: totals times factor give the value per step or per second; n units."""
    if per == "step":
        return 1.0 / p.unit_count, p.unit_count
    return 1e9 / max(p.window_ns, 1), p.unit_count


def _measure(m: str, unit: str, tot_b: float, ss_b: float, tot_a: float, ss_a: float,
             scale_b: tuple[float, int], scale_a: tuple[float, int], floors: _Floors,
             repeat_floor: float | None = None) -> dict:
    """One measure before and after, per step or second, with its noise threshold."""
    (fb, nb), (fa, na) = scale_b, scale_a
    # Per-unit values: a unit's value times (units per window) times the factor.
    kb, ka = fb * nb, fa * na
    mb, ma = tot_b * fb, tot_a * fa
    thr = max(noise_threshold(mb, ss_b * kb * kb, nb, ma, ss_a * ka * ka, na, unit),
              floors.floor(m, repeat_floor, mb, ma))
    delta = ma - mb
    return {"measure": m, "unit": unit, "before": mb, "after": ma, "delta": delta,
            "delta_pct": (100.0 * delta / mb) if mb else None, "threshold": thr,
            "above_noise": abs(delta) > thr}


def _totals(before: Profile, after: Profile, sb, sa, floors: _Floors) -> list[dict]:
    out = []
    for m, unit in TOTAL_MEASURES.items():
        if m == "wall_ns" and (before.unit == "slice" or after.unit == "slice"):
            # Per second, wall time is the second itself: the windows' lengths are shown, not
            # compared.
            row = _measure(m, unit, float(before.window_ns), 0.0, float(after.window_ns), 0.0,
                           (1.0, 1), (1.0, 1), floors)
            out.append(row | {"per": "window", "above_noise": False})
            continue
        out.append(_measure(m, unit, *_sum_and_squares(before.units[m]),
                            *_sum_and_squares(after.units[m]), sb, sa, floors,
                            floors.totals.get(m)))
    return out


def _sum_and_squares(values: pl.Series) -> tuple[float, float]:
    """A measure's total over the units and its sum of squares. The measures are integers:
    summed exactly (128-bit) and rounded once. Float sums depended on how the column happened
    to be split in chunks, which varied from run to run (a diff's thresholds in their last
    digits)."""
    if not values.dtype.is_integer():
        values = values.cast(pl.Float64).rechunk()
        return float(values.sum()), float((values * values).sum())
    v = values.cast(pl.Int128)
    return float(v.sum()), float((v * v).sum())


def _site_rows(before: Profile, after: Profile, pairs: pl.DataFrame, sb, sa,
               floors: _Floors) -> list[dict]:
    """Every site of either capture with its measures before and after; ``status``: matched,
    appeared or disappeared; ``score``: the sum over its measures above noise of the change in
    units of its threshold (negative: better), which ranks them."""
    b = before.sites.rename(lambda c: c if c == "code_site" else f"{c}__b")
    a = after.sites.rename(lambda c: c if c == "code_site" else f"{c}__a")
    joined = (pairs.join(b, left_on="code_site_before", right_on="code_site", how="full",
                         coalesce=False)
              .drop("code_site_before").rename({"code_site": "code_site_before"})
              .join(a, left_on="code_site_after", right_on="code_site", how="full",
                    coalesce=False)
              .drop("code_site_after").rename({"code_site": "code_site_after"}))
    rows = []
    for r in joined.iter_rows(named=True):  # one row per site: hundreds, not events
        status = ("matched" if r["code_site_before"] is not None
                  and r["code_site_after"] is not None
                  else "disappeared" if r["code_site_before"] is not None else "appeared")
        rf = floors.sites.get(r["code_site_before"], {})
        measures = {m: _measure(m, u, r[f"{m}__b"] or 0.0, r[f"{m}__ss__b"] or 0.0,
                                r[f"{m}__a"] or 0.0, r[f"{m}__ss__a"] or 0.0, sb, sa, floors,
                                rf.get(m))
                    for m, u in SITE_MEASURES.items()}
        cost = {k: measures["gpu_ns"][k] + measures["cpu_blocked_ns"][k]
                for k in ("before", "after", "delta")}
        changed = [m for m, v in measures.items() if v["above_noise"]]
        side = "a" if r["code_site_after"] is not None else "b"
        rows.append({
            "site": r[f"site__{side}"], "site_before": r["site__b"], "site_after": r["site__a"],
            "torch_op": r[f"torch_op__{side}"], "mechanism": r[f"mechanism__{side}"],
            "code_site_before": r["code_site_before"], "code_site_after": r["code_site_after"],
            "status": status, "match": r["match"],
            "cost_before_ns": cost["before"], "cost_after_ns": cost["after"],
            "cost_delta_ns": cost["delta"], "above_noise": bool(changed),
            "score": sum(measures[m]["delta"] / measures[m]["threshold"] for m in changed),
            "changed": changed, "measures": measures})
    rows.sort(key=lambda s: (not s["above_noise"], -abs(s["score"]), s["cost_delta_ns"],
                             -max(s["cost_before_ns"], s["cost_after_ns"]), str(s["site"]),
                             _or(s["code_site_before"]), _or(s["code_site_after"])))
    return rows


def _or(v: int | None) -> int:
    return -2 if v is None else v


def _kernel_rows(before: Profile, after: Profile, sb, sa, floors: _Floors) -> list[dict]:
    j = before.kernels.join(after.kernels, on=["name", "kind"], how="full", coalesce=True,
                            suffix="__a")
    rows = []
    for r in j.iter_rows(named=True):
        rf = floors.kernels.get((r["name"], r["kind"]), {})
        measures = {m: _measure(m, u, r[m] or 0.0, r[f"{m}__ss"] or 0.0, r[f"{m}__a"] or 0.0,
                                r[f"{m}__ss__a"] or 0.0, sb, sa, floors, rf.get(m))
                    for m, u in KERNEL_MEASURES.items()}
        rows.append({"name": r["name"], "kind": r["kind"],
                     "status": "matched" if r["gpu_ns"] is not None and r["gpu_ns__a"]
                     is not None else "appeared" if r["gpu_ns"] is None else "disappeared",
                     "gpu_delta_ns": measures["gpu_ns"]["delta"],
                     "above_noise": any(v["above_noise"] for v in measures.values()),
                     "measures": measures})
    rows.sort(key=lambda k: (not k["above_noise"], -abs(k["gpu_delta_ns"]), k["name"]))
    return rows


FINDING_FIELDS = ("rule_id", "severity", "title", "site", "saving_ns", "cost_ns", "fix")


def _finding_rows(before: Profile, after: Profile, site_pair: dict[int, int], sb, sa,
                  wall: dict) -> dict:
    """Findings keyed by rule id and site (the site of a finding before is mapped to its
    match after; window-wide findings key by their description): appeared, disappeared and
    changed (saving per unit moved by more than the wall-time noise threshold). A finding that
    appeared or disappeared is ``above_noise`` when its saving is: fixes save wall time."""
    def key(f: dict, mapped: bool) -> tuple:
        cs = f.get("code_site")
        if cs is None:
            return (f["rule_id"], "window", f.get("site"))
        return (f["rule_id"], "site", site_pair.get(cs, ("unmatched", cs)) if mapped else cs)

    def per(f: dict, scale) -> float | None:
        return None if f.get("saving_ns") is None else f["saving_ns"] * scale[0]

    def slim(f: dict, scale) -> dict:
        saving = per(f, scale)
        return {k: f.get(k) for k in FINDING_FIELDS} | {
            "saving_per_unit_ns": saving,
            "above_noise": saving is not None and saving > wall["threshold"]}

    after_by: dict[tuple, list[dict]] = {}
    for f in after.findings:
        after_by.setdefault(key(f, False), []).append(f)
    # Second chance: the same rule at the same line (a rule that groups by line reports one
    # of the line's stacks, which can differ between the two captures).
    label_after = dict(zip(after.sites["code_site"].to_list(), after.sites["site"].to_list()))
    by_label: dict[tuple, list[dict]] = {}
    for f in after.findings:
        by_label.setdefault((f["rule_id"], f.get("site")), []).append(f)

    def take(f: dict) -> dict | None:
        for match in (after_by.get(key(f, True)), by_label.get(
                (f["rule_id"], label_after.get(site_pair.get(f.get("code_site")),
                                               f.get("site"))))):
            while match:
                g = match.pop(0)
                if not g.get("_taken"):
                    g["_taken"] = True
                    return g
        return None

    out: dict = {"appeared": [], "disappeared": [], "changed": [], "unchanged": []}
    for f in before.findings:
        g = take(f)
        if g is None:
            out["disappeared"].append(slim(f, sb))
            continue
        sav_b, sav_a = per(f, sb), per(g, sa)
        delta = None if sav_b is None or sav_a is None else sav_a - sav_b
        moved = delta is not None and abs(delta) > max(wall["threshold"],
                                                       REL_FLOOR * max(sav_b, sav_a))
        row = {"rule_id": f["rule_id"], "site_before": f.get("site"), "site": g.get("site"),
               "title": g.get("title"), "severity": g.get("severity"),
               "saving_before_ns": sav_b, "saving_after_ns": sav_a, "saving_delta_ns": delta,
               "above_noise": moved}
        out["changed" if moved else "unchanged"].append(row)
    out["appeared"] = [slim(f, sa) for f in after.findings if not f.pop("_taken", False)]
    out["disappeared"].sort(key=lambda f: -(f["saving_per_unit_ns"] or 0))
    out["appeared"].sort(key=lambda f: -(f["saving_per_unit_ns"] or 0))
    out["changed"].sort(key=lambda f: f["saving_delta_ns"])
    return out
