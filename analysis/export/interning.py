"""Interned strings, frames and callstacks of one Perfetto packet sequence.

Perfetto interns repeated data per packet sequence: a packet's ``interned_data`` defines an
``iid -> value`` entry once, and later packets refer to the iid. zym's export knows every value
before it writes the first event, so all entries go into the sequence's first packet, which is
what makes "every interned id is defined before use" hold by construction.
"""
from __future__ import annotations

import polars as pl

# InternedData field per kind; the value type of each (see interned_data.proto).
_NAMED = {"event_names": "name", "event_categories": "name", "debug_annotation_names": "name"}
_STRINGS = ("debug_annotation_string_values", "function_names", "source_paths")


class Interner:
    """iid tables, filled column-wise; ``fill(interned_data)`` writes them into a packet."""

    def __init__(self) -> None:
        self.tables: dict[str, dict] = {k: {} for k in (*_NAMED, *_STRINGS)}
        self.frames: dict[tuple[int, int, int], int] = {}  # (function iid, path iid, line) -> iid
        self.callstacks: dict[tuple[int, ...], int] = {}  # frame iids, outermost first -> iid

    def iid(self, kind: str, value) -> int:
        table = self.tables[kind]
        if value not in table:
            table[value] = len(table) + 1  # iids start at 1: 0 means unset
        return table[value]

    def column(self, kind: str, values: pl.Series) -> pl.Series:
        """The iids of ``values`` (nulls stay null), interning new values in sorted order."""
        table = self.tables[kind]
        for v in sorted(values.drop_nulls().unique().to_list()):
            self.iid(kind, v)
        if not table:
            return pl.Series(values.name, [None] * len(values), pl.UInt64)
        lookup = pl.DataFrame({"v": list(table), "iid": list(table.values())},
                              schema={"v": values.dtype, "iid": pl.UInt64})
        return (values.to_frame("v").join(lookup, on="v", how="left", maintain_order="left")
                ["iid"].alias(values.name))

    def frame(self, function: str, path: str | None, line: int | None) -> int:
        key = (self.iid("function_names", function),
               self.iid("source_paths", path) if path else 0, int(line or 0))
        if key not in self.frames:
            self.frames[key] = len(self.frames) + 1
        return self.frames[key]

    def callstack(self, frame_iids: tuple[int, ...]) -> int:
        if frame_iids not in self.callstacks:
            self.callstacks[frame_iids] = len(self.callstacks) + 1
        return self.callstacks[frame_iids]

    def fill(self, d) -> None:
        """Write every entry into ``d`` (a generated ``InternedData`` message)."""
        for kind, field in _NAMED.items():
            repeated = getattr(d, kind)
            for value, iid in self.tables[kind].items():
                e = repeated.add()
                e.iid = iid
                setattr(e, field, value)
        for kind in _STRINGS:
            repeated = getattr(d, kind)
            for value, iid in self.tables[kind].items():
                e = repeated.add()
                e.iid = iid
                e.str = value.encode()
        for (fn, path, line), iid in self.frames.items():
            f = d.frames.add()
            f.iid, f.function_name_id = iid, fn
            if path:
                f.source_path_iid = path
            if line:
                f.line_number = line
        for frame_ids, iid in self.callstacks.items():
            c = d.callstacks.add()
            c.iid = iid
            c.frame_ids.extend(frame_ids)
