"""Two captures of one trace compared by content: ids resolved to what they name.

Frame ids become the frame (kind, name, file, line) and stack ids the path of frames from the
root, so captures whose ids were numbered differently (an import window by window against one
of the whole trace) compare equal when they say the same thing; rows are compared as sorted
multisets (their order in the file is not part of a capture's meaning)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from zym.schemas.io import open_capture


def _paths(frames: pl.DataFrame, stacks: pl.DataFrame) -> dict[int, str]:
    """Each stack id's root-to-leaf path, as one text (frames joined by newlines), built by
    walking parent links in Python: independent of the vectorised interning it checks."""
    frame = {r[0]: "|".join(map(str, r[1:])) for r in
             frames.select("frame_id", "kind", "name", "file", "line").iter_rows()}
    parent, own = {}, {}
    for sid, pid, fid in stacks.select("stack_id", "parent_id", "frame_id").iter_rows():
        parent[sid], own[sid] = pid, frame[fid]
    out: dict[int, str] = {}
    for sid in parent:
        chain, s = [], sid
        while s is not None:
            chain.append(own[s])
            s = parent[s]
        out[sid] = "\n".join(reversed(chain))
    return out


def content(path: Path) -> dict[str, pl.DataFrame]:
    """The capture's span, call and gpu tables with stack ids as paths, sorted; frames and
    stack paths as sorted sets."""
    cap = open_capture(path)
    frames, stacks = cap.load("frame"), cap.load("stack")
    paths = _paths(frames, stacks)
    lut = pl.DataFrame({"stack_id": list(paths), "path": list(paths.values())},
                       schema={"stack_id": pl.Int64, "path": pl.String})
    out = {}
    for table in ("span", "call", "gpu"):
        df = cap.load(table)
        if "stack_id" in df.columns:
            df = (df.join(lut, on="stack_id", how="left", maintain_order="left")
                  .drop("stack_id"))
        out[table] = df.sort(df.columns, nulls_last=True)
    out["paths"] = pl.DataFrame({"path": sorted(set(paths.values()))})
    out["frames"] = frames.drop("frame_id").unique().sort(["kind", "name", "file", "line"],
                                                          nulls_last=True)
    return out


def differences(a: Path, b: Path) -> list[str]:
    """What differs between the two captures' content (empty: the same)."""
    ca, cb = content(a), content(b)
    found = []
    for table in ca:
        x, y = ca[table], cb[table]
        if x.shape != y.shape:
            found.append(f"{table}: {x.shape} vs {y.shape}")
        elif not x.equals(y):
            cols = {c: int((x[c].ne_missing(y[c])).sum()) for c in x.columns
                    if not x[c].equals(y[c])}
            found.append(f"{table}: rows differ in (column: rows) {cols}")
    return found
