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
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
