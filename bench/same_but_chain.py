"""Two `zym analyze --format json` reports of one input, before and after the chain of
incremental replays was cut at ``CHAIN`` fixes (rules/findings.py): the same in every key but
those the cut changes, which are checked against each other.

* each finding the same, except ``saving_incremental_ns`` of the fixes ranked past the chain
  (null after);
* ``fixes_together`` the same, with ``rest`` (how many those are) and ``rest_saving_ns`` (what
  they add: the total less the chain's increments, which are those before) added.

    python bench/same_but_chain.py BEFORE.json AFTER.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def need(ok: bool, what: str) -> None:
    """One line and exit 1 where the reports differ otherwise than the cut explains."""
    if not ok:
        sys.exit(f"same_but_chain.py: the reports differ: {what}")


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: python bench/same_but_chain.py BEFORE.json AFTER.json")
    try:
        a, b = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    except (OSError, ValueError) as e:
        sys.exit(f"same_but_chain.py: {e}")
    need(a.keys() == b.keys(), "top-level keys")
    for key in a:
        if key not in ("findings", "fixes_together"):
            need(a[key] == b[key], key)
    fa, fb = a["findings"], b["findings"]
    need(len(fa) == len(fb), "number of findings")
    cut = [i for i, (x, y) in enumerate(zip(fa, fb))
           if x["saving_incremental_ns"] != y["saving_incremental_ns"]]
    for i, (x, y) in enumerate(zip(fa, fb)):
        drop = "saving_incremental_ns"
        need({k: v for k, v in x.items() if k != drop} == {k: v for k, v in y.items()
                                                           if k != drop}, f"finding {i + 1}")
    ta, tb = dict(a["fixes_together"]), dict(b["fixes_together"])
    rest, rest_ns = tb.pop("rest", 0), tb.pop("rest_saving_ns", None)
    need(ta == tb, f"fixes_together: {ta} against {tb}")
    kept = [f for f in fb if f.get("saving_incremental_ns") is not None]
    if rest:
        need(all(fb[i].get("saving_incremental_ns") is None for i in cut),
             "an increment above the cut")
        need(len(kept) == ta["findings"] - rest, "the findings with an increment")
        need(sum(f["saving_incremental_ns"] for f in kept) + rest_ns == tb["saving_ns"],
             "the increments and rest_saving_ns against the total")
    else:
        need(not cut and rest_ns is None, "increments without a cut")
    print(f"same but the cut: {len(fa):,} findings, {ta['findings']:,} fixes, {rest:,} past "
          f"the chain adding {rest_ns} ns together; every other key the same")


if __name__ == "__main__":
    main()
