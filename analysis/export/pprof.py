"""`zym export --format pprof`: the call-path graph as a gzipped pprof profile (profile.proto),
for Pyroscope, Parca, Grafana and ``go tool pprof``.

Two sample types, both in nanoseconds: ``gpu_time`` (the default: GPU work, weighted by its
duration) and ``cpu_blocked`` (CPU time blocked in CUDA calls, as :mod:`zym.analysis.facts`
defines blocking). A GPU sample's stack is, leaf first, the GPU operation (kernel, copy or
memset), the CUDA call that launched it, the torch ops and the Python frames above it, each
Python frame with its file and line; a blocked sample ends at the CUDA call. GPU samples carry
the labels the OpenTelemetry eBPF profiler's CUDA support (which Parca uses) attaches to GPU
samples, with the same names and values: ``cuda_device`` (the device ordinal), ``cuda_stream``
and ``cuda_graph`` (where not zero), as decimal strings (opentelemetry-ebpf-profiler
``interpreter/gpu/cuda.go``, ``prepTrace``).

Samples are aggregated per (call path, GPU operation, device, stream, graph) in polars; only
those groups (hundreds to thousands, not events) are encoded here. Field numbers are those of
``perftools.profiles`` in google/pprof ``proto/profile.proto``; the tests decode the output
with protobuf compiled from that schema.
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from ..callpath import UNKNOWN_STACK
from .protowire import varint_bytes

if TYPE_CHECKING:
    from ..report import Analysis

# perftools.profiles field numbers (proto/profile.proto)
PROFILE_SAMPLE_TYPE, PROFILE_SAMPLE, PROFILE_LOCATION, PROFILE_FUNCTION = 1, 2, 4, 5
PROFILE_STRING_TABLE, PROFILE_DURATION_NANOS, PROFILE_PERIOD_TYPE, PROFILE_PERIOD = 6, 10, 11, 12
PROFILE_COMMENT, PROFILE_DEFAULT_SAMPLE_TYPE = 13, 14
VALUE_TYPE_TYPE, VALUE_TYPE_UNIT = 1, 2
SAMPLE_LOCATION_ID, SAMPLE_VALUE, SAMPLE_LABEL = 1, 2, 3
LABEL_KEY, LABEL_STR = 1, 2
LOCATION_ID, LOCATION_LINE = 1, 4
LINE_FUNCTION_ID, LINE_LINE = 1, 2
FUNCTION_ID, FUNCTION_NAME, FUNCTION_SYSTEM_NAME, FUNCTION_FILENAME = 1, 2, 3, 4

SAMPLE_TYPES = (("gpu_time", "nanoseconds"), ("cpu_blocked", "nanoseconds"))
LABELS = ("cuda_device", "cuda_stream", "cuda_graph")  # Parca / OTel eBPF profiler names
GPU_FILE = "[gpu]"  # the file name of GPU operation frames


def _key(field: int, wire: int) -> bytes:
    return varint_bytes((field << 3) | wire)


def _varint_field(field: int, value: int) -> bytes:
    return _key(field, 0) + varint_bytes(value) if value else b""


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + varint_bytes(len(payload)) + payload


def _packed(field: int, values: list[int]) -> bytes:
    return _len_field(field, b"".join(varint_bytes(v) for v in values)) if values else b""


class _Strings:
    """The profile's string table (index 0 is the empty string)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str | None) -> int:
        s = s or ""
        if s not in self.index:
            self.index[s] = len(self.index)
        return self.index[s]

    def encode(self) -> bytes:
        return b"".join(_len_field(PROFILE_STRING_TABLE, s.encode("utf-8", "replace"))
                        for s in self.index)


class _Frames:
    """Functions and locations: one location per distinct frame (stack frames and GPU
    operations), one function per distinct (name, file)."""

    def __init__(self, strings: _Strings) -> None:
        self.s = strings
        self.functions: dict[tuple[str, str], int] = {}
        self.locations: dict[tuple, int] = {}
        self.out: list[bytes] = []

    def location(self, name: str, file: str | None, line: int | None) -> int:
        key = (name, file or "", line or 0)
        loc = self.locations.get(key)
        if loc is None:
            fkey = (name, file or "")
            fid = self.functions.get(fkey)
            if fid is None:
                fid = self.functions[fkey] = len(self.functions) + 1
                self.out.append(_len_field(PROFILE_FUNCTION, (
                    _varint_field(FUNCTION_ID, fid) + _varint_field(FUNCTION_NAME, self.s(name))
                    + _varint_field(FUNCTION_SYSTEM_NAME, self.s(name))
                    + _varint_field(FUNCTION_FILENAME, self.s(file)))))
            loc = self.locations[key] = len(self.locations) + 1
            line_msg = _varint_field(LINE_FUNCTION_ID, fid) + _varint_field(LINE_LINE, line or 0)
            self.out.append(_len_field(PROFILE_LOCATION, _varint_field(LOCATION_ID, loc)
                                       + _len_field(LOCATION_LINE, line_msg)))
        return loc


def stack_locations(nodes: pl.DataFrame, frames: _Frames) -> dict[int, list[int]]:
    """Per stack node, its location ids leaf first (a pass over the distinct stack nodes)."""
    out: dict[int, list[int]] = {}
    for sid, parent, name, file, line in nodes.sort("depth").select(
            "stack_id", "parent_id", "name", "file", "line").iter_rows():
        here = frames.location(name or "?", file, line)
        out[sid] = [here] + (out.get(parent, []) if parent is not None else [])
    out[UNKNOWN_STACK] = [frames.location("(unknown stack)", None, None)]
    return out


def gpu_samples(analysis: Analysis) -> pl.DataFrame:
    """GPU work per (stack, operation, device, stream, graph): ``gpu_ns``."""
    g = analysis.facts.gpu.filter("work")
    return (g.select(pl.col("stack_id").fill_null(UNKNOWN_STACK),
                     pl.col("name").cast(pl.String), pl.col("device_id").fill_null(-1),
                     pl.col("stream_id").fill_null(0), pl.col("graph_id").fill_null(0),
                     pl.col("dur_ns"))
            .group_by("stack_id", "name", "device_id", "stream_id", "graph_id")
            .agg(pl.col("dur_ns").sum().alias("gpu_ns"))
            .sort("gpu_ns", "stack_id", "name", descending=[True, False, False]))


def blocked_samples(analysis: Analysis) -> pl.DataFrame:
    """CPU time blocked in CUDA calls per stack: ``blocked_ns``."""
    c = analysis.facts.calls.filter("blocking")
    return (c.select(pl.col("stack_id").fill_null(UNKNOWN_STACK), "dur_ns")
            .group_by("stack_id").agg(pl.col("dur_ns").sum().alias("blocked_ns"))
            .filter(pl.col("blocked_ns") > 0).sort("stack_id"))


def build_pprof(analysis: Analysis) -> bytes:
    """The profile (uncompressed protobuf bytes)."""
    s = _Strings()
    frames = _Frames(s)
    stacks = stack_locations(analysis.facts.nodes, frames)
    body = [_len_field(PROFILE_SAMPLE_TYPE, _varint_field(VALUE_TYPE_TYPE, s(t))
                       + _varint_field(VALUE_TYPE_UNIT, s(u))) for t, u in SAMPLE_TYPES]
    keys = {k: s(k) for k in LABELS}
    for sid, name, device, stream, graph, ns in gpu_samples(analysis).iter_rows():
        labels = [("cuda_device", device)] if device is not None and device >= 0 else []
        labels += [(k, v) for k, v in (("cuda_stream", stream), ("cuda_graph", graph)) if v]
        leaf = frames.location(name, GPU_FILE, None)
        body.append(_len_field(PROFILE_SAMPLE, (
            _packed(SAMPLE_LOCATION_ID, [leaf] + stacks.get(sid, stacks[UNKNOWN_STACK]))
            + _packed(SAMPLE_VALUE, [ns, 0])
            + b"".join(_len_field(SAMPLE_LABEL, _varint_field(LABEL_KEY, keys[k])
                                  + _varint_field(LABEL_STR, s(str(v)))) for k, v in labels))))
    for sid, ns in blocked_samples(analysis).iter_rows():
        body.append(_len_field(PROFILE_SAMPLE, (
            _packed(SAMPLE_LOCATION_ID, stacks.get(sid, stacks[UNKNOWN_STACK]))
            + _packed(SAMPLE_VALUE, [0, ns]))))
    lo, hi = analysis.window
    body += frames.out
    body.append(_len_field(PROFILE_PERIOD_TYPE, _varint_field(VALUE_TYPE_TYPE, s("gpu_time"))
                           + _varint_field(VALUE_TYPE_UNIT, s("nanoseconds"))))
    body.append(_varint_field(PROFILE_PERIOD, 1))
    body.append(_varint_field(PROFILE_DURATION_NANOS, hi - lo))
    body.append(_varint_field(PROFILE_COMMENT, s(
        f"zym: {analysis.data.source} ({analysis.window_spec} window)")))
    body.append(_varint_field(PROFILE_DEFAULT_SAMPLE_TYPE, s("gpu_time")))
    return b"".join(body) + s.encode()


def write_pprof(analysis: Analysis, out: Path) -> int:
    """Write the gzipped profile (as pprof tools read and write it); returns its sample count."""
    data = build_pprof(analysis)
    with open(out, "wb") as f:
        f.write(gzip.compress(data, compresslevel=6, mtime=0))
    return gpu_samples(analysis).height + blocked_samples(analysis).height
