"""Capture metadata: the facts about a capture, kept in the Parquet file's key-value metadata.

Two keys: ``zym.schema_version`` (checked before anything else is read) and ``zym.meta``
(this dataclass as JSON). Both are plain strings, so ``pyarrow.parquet.read_metadata``,
``polars.read_parquet_metadata`` and DuckDB's ``parquet_kv_metadata`` show them.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

VERSION_KEY = "zym.schema_version"
META_KEY = "zym.meta"


@dataclass
class CaptureMeta:
    producer: str  # "zym import (kineto)", "zym capture", ...
    producer_version: str = ""
    created_at: str = ""  # ISO 8601, UTC
    source: str = ""  # the file or command the capture came from
    host: str = ""
    clock_domain: str = ""  # "CLOCK_MONOTONIC", "kineto" (torch.profiler's clock), ...
    gpus: list[dict] = field(default_factory=list)  # [{"id": 0, "name": "NVIDIA H200", ...}]
    driver_version: str = ""
    runtime_version: str = ""
    cupti_version: str = ""
    python_version: str = ""
    torch_version: str = ""
    # Events the producer knows it lost, by where they were lost ("ebpf_ringbuf", "cupti", ...).
    dropped: dict[str, int] = field(default_factory=dict)
    # Anything else the producer wants to keep (clock fit, sampling rate, ...).
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaptureMeta:
        """Parse and type-check; ``ValueError`` (or ``TypeError``) names the bad field."""
        if len(text) > MAX_META_CHARS:
            raise ValueError(f"metadata larger than {MAX_META_CHARS} characters")
        try:
            data = json.loads(text)
        except RecursionError:
            raise ValueError("metadata nested too deeply") from None
        return meta_from_dict(data)


MAX_META_CHARS = 16 << 20
_STR_FIELDS = ("producer", "producer_version", "created_at", "source", "host", "clock_domain",
               "driver_version", "runtime_version", "cupti_version", "python_version",
               "torch_version")


def meta_from_dict(data: object) -> CaptureMeta:
    """``CaptureMeta`` from decoded JSON, every field of the type the dataclass declares:
    ``TypeError`` naming the field otherwise. Unknown keys are ignored (newer writers)."""
    if not isinstance(data, dict):
        raise TypeError(f"metadata is a JSON {type(data).__name__}, not an object")
    known = {f.name for f in fields(CaptureMeta)}
    data = {k: v for k, v in data.items() if k in known}
    for name in _STR_FIELDS:
        if name in data and not isinstance(data[name], str):
            raise TypeError(f"metadata field {name} is not a string")
    if "producer" not in data:
        raise TypeError("metadata has no producer")
    if not isinstance(data.get("gpus", []), list) or not all(
            isinstance(g, dict) for g in data.get("gpus", [])):
        raise TypeError("metadata field gpus is not a list of objects")
    dropped = data.get("dropped", {})
    if not isinstance(dropped, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in dropped.values()):
        raise TypeError("metadata field dropped is not a map of counts")
    if not isinstance(data.get("extra", {}), dict):
        raise TypeError("metadata field extra is not an object")
    return CaptureMeta(**data)
