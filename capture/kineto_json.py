"""Decode torch.profiler (Kineto) Chrome-trace JSON into columns, one frame per event group.

Groups: ``python`` (python_function), ``op`` (cpu_op, user_annotation), ``call`` (cuda_runtime,
cuda_driver) and ``gpu`` (kernel, gpu_memcpy, gpu_memset, cuda_sync).

The ``traceEvents`` array is decoded a batch (a few megabytes of text) at a time as the file
is read and decompressed (ISA-L), whatever its layout: Kineto's pretty print, a minified or
re-indented re-export, the keys in any order, or a bare array of events. A batch is cut
between two events (``}`` ``,`` ``{`` outside any string), found by a search from its end and
confirmed by the batch decoding as JSON. The text is never held whole.

Two decoders give the same columns. The compiled one (``_kineto_scan``, capture/_kineto_scan.c)
reads a batch straight into columns, no Python object per event, without the GIL, so threads
decode batches while this one reads; it refuses any batch it cannot read exactly as msgspec
does (not JSON, fields of other types...). msgspec decodes those, and every batch when the
extension is not built: typed structs that hold only the fields zym reads, one struct per
category (a tagged union on ``cat``), so a category's other fields are skipped without
building objects, and only one batch of Python objects is alive.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import compress, repeat
from operator import attrgetter, eq
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, NamedTuple, Union

import msgspec
import numpy as np
import polars as pl
from isal import isal_zlib
from zym.capture.kineto_text import (
    BETWEEN_EVENTS,
    CUT_TRIES,
    HEADER_LIMIT,
    GzipCut,
    gunzip,
    read_header,
    without_bom,
)
from zym.schemas.errors import InputError

if TYPE_CHECKING:
    from zym.capture.kineto_prefetch import Rest

try:  # the compiled columnar decoder (capture/_kineto_scan.c), built by pip install
    from zym.capture import _kineto_scan
except ImportError:  # not built: msgspec decodes every batch, to the same tables
    _kineto_scan = None

PYTHON_CATS = ("python_function",)
OP_CATS = ("cpu_op", "user_annotation")
CALL_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "memset", "cuda_sync": "sync"}
# Older Kineto (torch <= 1.12 wrote ``toString(ActivityType)`` capitalised) names for the same
# categories; their runtime and GPU events spell the op link ``external id`` (lowercase).
CAT_ALIASES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
               "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
_READ_CHUNK = 1 << 20  # bytes per piece of plain text
_GZ_READ = 1 << 16  # compressed bytes per read
_PIECE_CAP = 1 << 24  # decompressed bytes per piece, at most
# Text decoded at a time in the reading thread: ~3,000 events as msgspec's objects; as the
# compiled decoder's columns 4 MB (each batch's frames cost ~1 ms however small it is).
_DECODE_BATCH = 1 << 20 if _kineto_scan is None else 4 << 20

_EMPTY_RAW = msgspec.Raw(b"")


class _Dim3(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A CUDA grid or block size, written by Kineto as ``[x, y, z]``."""

    x: int | None = None
    y: int | None = None
    z: int | None = None


_NO_DIM = _Dim3()


# Two decoders. The fast one: one struct per category, told apart by "cat" (a msgspec tagged
# union), each with only its own fields, and one empty struct per category zym skips. A batch
# with an event outside these categories, or without "cat" (Kineto's trailing metadata), falls
# back to the general one (``_Event``); both give the same columns, as attribute names agree.
class _PythonArgs(msgspec.Struct, gc=False):
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")


class _OpArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(default=None, name="External id")
    # Autograd's sequence number: the op ran with autograd recording it (grad mode on).
    sequence: int | None = msgspec.field(default=None, name="Sequence number")
    # Kept as JSON text: shapes nest to varying depth (tensor lists), and only rules read them.
    input_dims: msgspec.Raw = msgspec.field(default=_EMPTY_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_EMPTY_RAW, name="Input type")


class _CallArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    cbid: int | None = None


class _GpuArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    bytes: int | None = None
    grid: _Dim3 = _NO_DIM
    block: _Dim3 = _NO_DIM
    graph_id: int | None = msgspec.field(default=None, name="graph id")


_ARGS_OF_GROUP = {"python": _PythonArgs, "op": _OpArgs, "call": _CallArgs, "gpu": _GpuArgs}


def _union_struct(name: str, structs: Iterable[type]) -> type:
    """One struct with every field of ``structs`` (same names, JSON names and defaults)."""
    fields = {}
    for struct in structs:
        for f in msgspec.structs.fields(struct):  # all have plain defaults
            fields.setdefault(f.name, (f.name, f.type,
                                       msgspec.field(default=f.default, name=f.encode_name)))
    return msgspec.defstruct(name, list(fields.values()), gc=False)


class _OldArgs(msgspec.Struct, gc=False):
    """Older Kineto's spelling of the op link on runtime and GPU events."""

    external_id_old: int | None = msgspec.field(default=None, name="external id")


# Every ``args`` field zym reads, for events of any category (the general decoder).
_Args = _union_struct("_Args", [*_ARGS_OF_GROUP.values(), _OldArgs])
# The same fields as their JSON text, whatever its type (the tolerant decoder, for batches the
# general one refuses): numbers written as strings, decimal or hex, dimensions as text...
_JSON_NAME = {f.name: f.encode_name for f in msgspec.structs.fields(_Args)}
_LooseArgs = msgspec.defstruct(
    "_LooseArgs", [(f.name, msgspec.Raw, msgspec.field(default=_EMPTY_RAW, name=f.encode_name))
                   for f in msgspec.structs.fields(_Args)], gc=False)


class _Event(msgspec.Struct, gc=False):
    """Any trace event (the general decoder)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: _Args = msgspec.field(default_factory=_Args)


class _LooseEvent(msgspec.Struct, gc=False):
    """Any trace event, its ``args`` kept as JSON text and times possibly as strings (the
    tolerant decoder); the fields zym reads are parsed per column (``_loose_columns``)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | str | None = None
    dur: float | str | None = None
    args: _LooseArgs = msgspec.field(default_factory=_LooseArgs)


class _Tagged(msgspec.Struct, tag_field="cat", gc=False):
    pass


class _Complete(_Tagged):
    ph: Literal["X"]  # zym reads complete events; another phase sends the batch to _Event
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None


# Kineto's other categories (ActivityType names, flows, the profiler's own spans).
_SKIPPED_CATS = ("ac2g", "fwdbwd", "gpu_user_annotation", "overhead", "Trace",
                 "cpu_instant_event", "external_correlation", "cuda_profiler_range",
                 "collective_comm", "gpu_pm_counter", "mtia_runtime", "mtia_ccp_events",
                 "xpu_runtime", "privateuse1_runtime", "privateuse1_driver", "hpu_op",
                 "glow_runtime", "async_cpu_op")


def _event_struct(cat: str) -> type:
    """The fast decoder's struct for one category; ``cat`` is a class attribute, as in the
    general decoder's events."""
    group = _GROUP_OF.get(cat)
    fields = [] if group is None else [
        ("args", _ARGS_OF_GROUP[group], msgspec.field(default_factory=_ARGS_OF_GROUP[group]))]
    struct = msgspec.defstruct(f"_{cat}", fields, bases=(_Tagged if group is None else _Complete,),
                               tag=cat, gc=False)
    struct.cat = cat
    return struct


class _TraceFile(msgspec.Struct):
    traceEvents: list[msgspec.Raw]
    deviceProperties: list[dict] = []
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    cupti_version: int | None = None
    baseTimeNanoseconds: int | None = None
    with_stack: int | None = None
    record_shapes: int | None = None
    # Set by the reader (its JSON key no writer uses): where the text was cut short
    # (:func:`_finish_cut`), None when the trace is whole.
    cut_short: dict | None = msgspec.field(default=None, name="zym: set by the reader")


def read_events(path: Path, accumulator: Callable[[Path], GroupAccumulator] | None = None
                ) -> tuple[dict[str, pl.DataFrame], _TraceFile]:
    """Decode a trace file (``.json`` or gzip, told by its magic bytes) into event groups.
    ``accumulator``: makes what keeps the decoded batches of a streaming read (one per
    attempt; ``kineto_stream``'s spills them to disk). A trace a forked process decoded
    ahead (small traces only) is taken from it, whatever ``accumulator``."""
    if (ahead := _decoded_ahead(path)) is not None:
        return ahead
    make = accumulator or GroupAccumulator
    try:
        try:
            result = _read_streaming(path, parallel=True, make=make)
        except (_BadCut, BrokenProcessPool):  # a batch cut inside an event, or a worker
            result = _read_streaming(path, parallel=False, make=make)  # died: again, here
        if result is not None:
            return result
        return parse_events(read_json_bytes(path), path)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from e


def _decoded_ahead(path: Path) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    """The groups of ``path`` from the events a forked process decoded while this one
    imported (``kineto_prefetch``; the `zym` command starts it for small traces), where one
    did and they are what the reader below would decode: the same text around the events,
    and the same columns, batches being cut anywhere between two events. None otherwise."""
    from . import kineto_prefetch

    decoded = kineto_prefetch.take(path)
    if decoded is None:
        return None
    top = None
    if decoded.rest is None:
        try:
            top = (_TraceFile(traceEvents=[]) if decoded.bare else
                   msgspec.json.decode(decoded.header + b"[]" + decoded.trailer,
                                       type=_TraceFile))
        except msgspec.MsgspecError:
            return None  # the reader below tries the ``]`` before this one, or says what is wrong
    acc = GroupAccumulator(path)
    for scanned in decoded.batches:
        frames = _scanned_frames(scanned, acc.names, acc.shapes)
        if frames is None:
            return None
        acc.batches.append(frames)
    if top is not None:
        return acc.groups(), top
    return _finish_ahead(acc, decoded.header, decoded.bare, decoded.rest)


def _finish_ahead(acc: GroupAccumulator, header: bytes, bare: bool, rest: Rest
                  ) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    """The end of a text the forked process did not find whole (``rest``: the text after its
    last batch), decoded here as :func:`_decode_streaming` decodes a text's end: the events'
    end and the keys after them, else what a text cut short holds. None where neither (the
    usual reader then reads the file, and says what is wrong)."""
    buf = bytearray(rest.text)
    try:
        got = None if rest.gzip_cut else _finish(buf, acc, header, bare)
        return got or _finish_cut(buf, acc, header, bare, rest.read, rest.gzip_cut)
    except InputError:
        return None


def _read_streaming(path: Path, parallel: bool,
                    make: Callable[[Path], GroupAccumulator] | None = None
                    ) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    from . import kineto_prefetch

    with open(path, "rb") as f:
        size = max(1, os.fstat(f.fileno()).st_size)
        kind = _Workers if _kineto_scan is None else _Threads
        if kind is _Threads and parallel:  # (worker processes start only past ~100 MB)
            parallel = kineto_prefetch.threads_wanted(path)
        workers = kind(path, lambda: f.tell() / size) if parallel else None
        try:
            return _decode_streaming(without_bom(_pieces(f, path)), path, workers, make)
        finally:
            if workers is not None:
                workers.close()


def _pieces(f: BinaryIO, path: Path) -> Iterator[bytes]:
    """The file's JSON text in pieces of about ``_READ_CHUNK`` bytes, gunzipped when gzip."""
    gz = f.read(2) == b"\x1f\x8b"
    f.seek(0)
    if not gz:
        while piece := f.read(_READ_CHUNK):
            yield piece
        return
    # Small reads: Kineto's text compresses ~15:1, so a piece is about _READ_CHUNK; the cap
    # only bounds a bomb, and leaves no unconsumed tail (a copy) in the usual case.
    try:
        yield from gunzip(f, _GZ_READ, _PIECE_CAP)
    except isal_zlib.error as e:
        raise InputError(f"{path}: corrupt gzip data ({e})") from e
    except GzipCut:
        raise _GzipCut(f"{path}: truncated gzip file: the trace was cut short") from None


class _GzipCut(InputError):
    """A gzip stream that ends before its end (a file cut short), raised once its text so far
    is yielded: the streaming reader decodes the events that are whole
    (:func:`_finish_cut`); a reader of the whole text refuses the file."""


# Where the events start: the ``traceEvents`` key of the top object (wherever it is among the
# keys), or a bare array of events (Chrome's "JSON Array Format").
# Between two events of the array: the end of one object, a comma, the start of the next, in
# any layout. The text can also occur inside a string or a nested array; a cut there leaves a
# batch that is not JSON, so the batch's decoding is what confirms a cut (and an earlier
# candidate is tried when it fails).
_CUT_WINDOW = 1 << 16  # tail of a batch searched for a cut at first; widened when it has none


def _decode_streaming(pieces: Iterator[bytes], path: Path, workers: _Workers | None = None,
                      make: Callable[[Path], GroupAccumulator] | None = None
                      ) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    """Decode the events batch by batch as the text arrives, whatever its layout (pretty,
    minified, keys in any order, a bare array); None when the events do not start within
    ``HEADER_LIMIT`` bytes or a batch cannot be cut into whole events (then the text is
    decoded whole, which names the problem). ``workers``: other processes that decode some
    of the batches, once the trace is known to be large."""
    pieces = iter(pieces)
    start = read_header(pieces)
    if start is None:
        return None
    buf, header, bare = start
    acc = (make or GroupAccumulator)(path)
    retry_at, batch, done = _DECODE_BATCH, _DECODE_BATCH, 0
    read = len(header) + 1 + len(buf)  # text read (with the array's "["): told of a cut
    gzip_cut = False
    try:
        for piece in pieces:
            buf += piece
            done += len(piece)
            if len(buf) < retry_at:
                continue
            if workers is not None and workers.started(done):
                batch = workers.batch
                if workers.has_room() and (rest := workers.submit(buf, acc)) is not None:
                    buf = buf[rest:]  # (a thread reads the batch in place: ``buf`` is its own)
                    retry_at = batch
                    continue
            rest = _cut_and_decode(buf, acc)
            if rest is None:  # no whole event yet, or no cut that decodes: a larger batch
                if workers is not None and workers.pool is not None:
                    raise _BadCut  # or a worker's batch was cut inside an event
                if len(buf) > HEADER_LIMIT:
                    return None
                retry_at = 2 * len(buf)
                continue
            del buf[:rest]
            retry_at = batch
    except _GzipCut:
        gzip_cut = True
    result = None if gzip_cut else _finish(buf, acc, header, bare)
    if result is None and workers is not None and workers.pool is not None:
        raise _BadCut  # (decoded again in this thread alone, which then finds the cut)
    if result is None:
        result = _finish_cut(buf, acc, header, bare, read + done, gzip_cut)
    return result


def _cut_and_decode(buf: bytearray, acc: GroupAccumulator) -> int | None:
    """Decode the whole events at the front of ``buf``, up to the last cut that decodes; the
    offset where the rest starts (the next event's ``{``), or None when no cut works."""
    window = _CUT_WINDOW
    while True:
        lo = max(0, len(buf) - window)
        cuts = list(BETWEEN_EVENTS.finditer(buf, lo))
        if cuts or lo == 0:
            break
        window *= 4
    for cut in reversed(cuts[-CUT_TRIES:]):
        if acc.add_text(buf, cut.start() + 1):
            return cut.end() - 1
    return None


def _finish(buf: bytearray, acc: GroupAccumulator, header: bytes, bare: bool
            ) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    """The last events (``buf``: them, the array's ``]``, and the rest of the text) and the
    top-level keys around the array."""
    close = len(buf)
    for _ in range(CUT_TRIES):
        close = buf.rfind(b"]", 0, close)
        if close < 0:
            return None
        trailer = bytes(buf[close + 1:])
        try:
            if bare:
                if trailer.strip():
                    continue
                top = _TraceFile(traceEvents=[])
            else:
                top = msgspec.json.decode(header + b"[]" + trailer, type=_TraceFile)
        except msgspec.MsgspecError:
            continue
        if acc.add_text(buf, close):
            return acc.groups(), top
    return None


# What a cut lost (``cut_short["lost"]``): part of an event; nothing (the text ends between
# two events); the top-level keys after the events (every event whole).
LOST_EVENT, LOST_NOTHING, LOST_KEYS = "an event", "nothing", "the keys after its events"


def _finish_cut(buf: bytearray, acc: GroupAccumulator, header: bytes, bare: bool,
                read: int, gzip_cut: bool) -> tuple[dict[str, pl.DataFrame], _TraceFile] | None:
    """The last events of a text cut short (a trace whose writer was killed while it wrote,
    a full disk, a copy or download stopped; ``gzip_cut``: its gzip stream ends early), and
    the top-level keys before the events: every event that is whole, where the text after
    the last of them is the start of JSON, cut (a part of an event, or of the keys after the
    array), not text that is wrong. The top's ``cut_short`` says so (``read``: bytes of text
    read), except for a bare array whose events all ended: the trace event format lets the
    JSON Array Format's closing ``]`` be left out. None when the text is not cut but wrong
    (the whole-text reader names the problem)."""
    try:
        top = (_TraceFile(traceEvents=[]) if bare
               else msgspec.json.decode(header + b"[]}", type=_TraceFile))
    except msgspec.MsgspecError:
        return None
    lost = None
    if not bare:  # the events whole, the array closed, and the keys after it cut short?
        close = len(buf)
        for _ in range(CUT_TRIES):
            close = buf.rfind(b"]", 0, close)
            if close < 0:
                break
            if (_is_cut(header + b"[]" + bytes(buf[close + 1:]))
                    and acc.add_text(buf, close)):
                lost = LOST_KEYS
                break
    if lost is None:
        rest = _cut_and_decode(buf, acc) or 0  # every event up to the last that is whole
        tail = bytes(buf[rest:]).rstrip()
        if tail.endswith(b","):
            tail = tail[:-1].rstrip()
        if not tail.strip():
            lost = LOST_NOTHING
        elif _is_cut(tail):
            lost = LOST_EVENT
        elif acc.add_text(bytearray(tail), len(tail)):  # the last event ends the text
            lost = LOST_NOTHING
        else:
            return None
    if not acc.has_events():
        raise InputError(f"{acc.path}: the trace was cut short before its first whole event")
    groups = acc.groups()
    if bare and lost == LOST_NOTHING and not gzip_cut:
        return groups, top
    top.cut_short = {"text_bytes_read": read, "gzip_cut": gzip_cut, "lost": lost}
    if groups and lost != LOST_KEYS:  # (every event whole: nothing to
        # clip; in memory: a trace spilled out of core is clipped as its windows are built)
        groups, until = clip_at_cut(groups)
        top.cut_short["complete_until_ns"] = None if until is None else us_to_ns(until)
    return groups, top


def us_to_ns(us: float) -> int:
    """A Kineto time in µs as the tables' integer ns (as :func:`zym.capture.kineto.in_ns`:
    the whole µs and the fraction apart)."""
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


# The groups of events, each written in (about) time order by Kineto, one after another:
# the CPU ops, the Python functions, then the CUDA calls and GPU work interleaved.
TIMED_GROUPS = ("python", "op", "call", "gpu")


def cut_frontier(ends: Iterable[float | None]) -> float | None:
    """Where a trace cut short is known whole: the earliest of its groups' last starts
    (``ends``; None for a group without events). A writer that writes its events group by
    group, each in time order (Kineto), wrote every group whole up to there; past it, the
    group being written when the text was cut lacks what came later, and the groups after it
    lack everything. None where no group has an event."""
    known = [t for t in ends if t is not None]
    return min(known) if known else None


def clip_at_cut(groups: dict[str, pl.DataFrame]) -> tuple[dict[str, pl.DataFrame], float | None]:
    """``groups`` without the events that start after :func:`cut_frontier`, and that time
    (µs): a report of what is there does not count the time past it as idle, nor its steps."""
    until = cut_frontier(g["ts_us"].max() if (g := groups.get(name)) is not None and g.height
                         else None for name in TIMED_GROUPS)
    if until is None:
        return groups, None
    return ({name: (g.filter(pl.col("ts_us") <= until) if name in TIMED_GROUPS else g)
             for name, g in groups.items()}, until)


def _is_cut(text: bytes) -> bool:
    """Whether ``text`` is the start of a JSON value, cut before its end."""
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError as e:
        return str(e).startswith("Input data was truncated")
    return False


# Both cores. With the compiled decoder, batches of _THREAD_BATCH go to threads from the
# start (_Threads). Without it (msgspec alone): once this much text is decoded and the rest
# of the file is estimated at more than _PARALLEL_REST, batches of _WORKER_BATCH also go to
# worker processes (one fewer than the cores, at most 3), whichever is free. Either way this
# process reads, decompresses and cuts the text, decodes when the workers are busy, and
# merges their names into its own.
_PARALLEL_AFTER = 16 << 20
_PARALLEL_REST = 96 << 20
_WORKER_BATCH = 4 << 20
_THREAD_BATCH = 4 << 20  # text per batch for a thread (the compiled decoder)
_QUEUED = 2  # batches waiting per worker


class _BadCut(Exception):
    """A batch sent to a worker was cut inside an event (text that looks like the space
    between two events, inside a string): the file is decoded again in one process."""


class _Workers:
    """Worker processes decoding batches of events, started once the trace proves large."""

    @property
    def batch(self) -> int:
        """Text per batch sent to a worker."""
        return _WORKER_BATCH

    def __init__(self, path: Path, fraction_read: Callable[[], float]) -> None:
        self.path, self.fraction_read = path, fraction_read
        self.count = min(3, (os.cpu_count() or 1) - 1) if _spawn_is_safe() else 0
        self.pool: ProcessPoolExecutor | None = None
        self.queued: list[Future] = []

    def started(self, done: int) -> bool:
        """Whether workers run, starting them when ``done`` bytes of text read so far
        suggest that enough remains."""
        if self.pool is None and self.count > 0 and done >= _PARALLEL_AFTER:
            read = self.fraction_read()
            if 0 < read < 1 and done * (1 - read) / read >= _PARALLEL_REST:
                self.pool = ProcessPoolExecutor(self.count,
                                                mp_context=multiprocessing.get_context("spawn"))
            else:
                self.count = 0  # too little left: this process alone
        return self.pool is not None

    def has_room(self) -> bool:
        if any(f.done() and f.result() is None for f in self.queued):
            raise _BadCut
        self.queued = [f for f in self.queued if not f.done()]
        return len(self.queued) < _QUEUED * self.count

    def submit(self, buf: bytearray, acc: GroupAccumulator) -> int | None:
        """Send the whole events at the front of ``buf`` to a worker (cut at the last place
        that looks like the space between two events); the offset where the rest starts."""
        found = _last_cut(buf)
        if found is None:
            return None
        future = self.pool.submit(*self._job(buf, found.start() + 1))
        self.queued.append(future)
        acc.add_future(future)
        return found.end() - 1

    def _job(self, buf: bytearray, end: int) -> tuple:
        """A worker's job for the events in ``buf[:end]``: a process is sent a copy (JSON
        array text)."""
        with memoryview(buf) as view:
            return _decode_batch, b"".join((b"[", view[:end], b"]"))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


class _Threads(_Workers):
    """With the compiled decoder, threads decode batches: it scans without the GIL, so they
    run beside this thread, which reads, gunzips and cuts the text (and decodes a batch
    itself when they are all busy). Started at once: threads cost nothing to start, and a
    library caller's script is not run again as with processes."""

    @property
    def batch(self) -> int:
        return _THREAD_BATCH

    def __init__(self, path: Path, fraction_read: Callable[[], float]) -> None:
        super().__init__(path, fraction_read)
        self.count = max(1, min(3, (os.cpu_count() or 1) - 1))

    def started(self, done: int) -> bool:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.count, thread_name_prefix="zym-json")
        return True

    def _job(self, buf: bytearray, end: int) -> tuple:
        """A thread reads the events in ``buf`` itself, not a copy (copying each batch was
        ~0.4 s of the reading thread at 1.8 GB of text): the caller goes on in a new buffer
        (``_decode_streaming``), and this one is not changed again."""
        return _decode_slice, buf, 0, end


def _spawn_is_safe() -> bool:
    """Whether worker processes may start: a spawned process imports the main module again,
    which only zym's own commands are known to allow (a library caller's script would run a
    second time), so elsewhere the trace is decoded in this process alone."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return bool(spec is not None and spec.name.startswith("zym.")
                or Path(getattr(main, "__file__", "") or "").name == "zym")


def _last_cut(buf: bytearray) -> re.Match | None:
    window = _CUT_WINDOW
    while True:
        lo = max(0, len(buf) - window)
        found = None
        for found in BETWEEN_EVENTS.finditer(buf, lo):  # the last one is kept
            pass
        if found is not None or lo == 0:
            return found
        window *= 4


def _decode_batch(text: bytes) -> tuple[dict[str, pl.DataFrame], list, list] | str | None:
    """In a worker process: one batch of events (JSON array text), see :func:`_decode_slice`."""
    return _decode_slice(text, 1, len(text) - 1)  # inside the [ ]


def _decode_slice(buf: bytes | bytearray, start: int, end: int
                  ) -> tuple[dict[str, pl.DataFrame], list, list] | str | None:
    """The events in ``buf[start:end]`` (comma-separated), read in place: group frames whose
    ids refer to the batch's own names and shapes, with those; None when the text is not JSON
    (a cut in the wrong place), the message of a malformed event."""
    names, shapes = _Interner(), _Interner(b"")
    frames = _scan_frames(buf, start, end, names, shapes)
    if frames is None:  # refused by the compiled decoder (or not built): msgspec says why
        with memoryview(buf) as view:
            text = b"".join((b"[", view[start:end], b"]"))
        try:
            frames = _group_frames(_decode_events(text), names, shapes)
        except msgspec.ValidationError as e:
            return str(e)
        except msgspec.DecodeError:
            return None
    return frames, names.values, shapes.values


class GroupAccumulator:
    """Decodes comma-separated event text and keeps the columns of each event group."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Each batch's group frames in file order, or a worker's future for them.
        self.batches: list[dict[str, pl.DataFrame] | Future] = []
        # CPU events repeat a few thousand names and shapes: rows hold their ids.
        self.names, self.shapes = _Interner(), _Interner(b"")

    def add_text(self, buf: bytearray, end: int) -> bool:
        """Decode ``buf[:end]``: whole events separated by commas (or only whitespace).
        False when it does not decode as JSON (a cut in the wrong place)."""
        frames = _scan_frames(buf, 0, end, self.names, self.shapes)
        if frames is not None:
            self.batches.append(frames)
            return True
        with memoryview(buf) as view:
            text = bytearray(b"[")
            text += view[:end]
        text += b"]"
        try:
            self.add_events(_decode_events(text))  # (a value the tolerant decoder cannot
        except msgspec.ValidationError as e:       # read is named by _group_frames)
            raise InputError(f"{self.path}: malformed trace event, not a torch.profiler "
                             f"(Kineto) trace ({e})") from e
        except msgspec.DecodeError:
            return False
        return True

    def add_events(self, events: list) -> None:
        self.batches.append(_group_frames(events, self.names, self.shapes))

    def has_events(self) -> bool:
        """Whether any batch was decoded (each holds at least one event)."""
        return bool(self.batches)

    def add_future(self, future: Future) -> None:
        self.batches.append(future)

    def _merged(self, result: tuple[dict[str, pl.DataFrame], list, list] | str | None
                ) -> dict[str, pl.DataFrame]:
        """A worker's batch with its names' and shapes' ids mapped to this accumulator's."""
        if result is None:
            raise _BadCut
        if isinstance(result, str):
            raise InputError(f"{self.path}: malformed trace event, not a torch.profiler "
                             f"(Kineto) trace ({result})")
        frames, names, shapes = result
        name_ids = pl.Series(self.names(names), dtype=pl.UInt32)
        shape_ids = pl.Series(self.shapes(shapes), dtype=pl.UInt32)
        return {g: f.with_columns(
            [name_ids.gather(f[c]).alias(c) for c in ("name_id",) if c in f.columns]
            + [shape_ids.gather(f[c]).alias(c) for c in ("shape_id", "dtypes_id")
               if c in f.columns]) for g, f in frames.items()}

    def groups(self) -> dict[str, pl.DataFrame]:
        """The event groups, and the ``names`` (``name_id, name``) and ``shapes``
        (``shape_id, shape``: JSON text) their ids refer to."""
        batches = [self._merged(b.result()) if isinstance(b, Future) else b
                   for b in self.batches]
        self.batches = []
        groups = {g: pl.concat(dfs) if (dfs := [b[g] for b in batches if g in b])
                  else pl.DataFrame(schema=GROUP_SCHEMAS[g]) for g in GROUP_SCHEMAS}
        del batches
        if sum(df.height for df in groups.values()) == 0:
            raise InputError(f"{self.path}: JSON, but no torch.profiler events (python_function, "
                             "cpu_op, cuda_runtime, kernel...): not a Kineto trace")
        # Names and shapes numbered in sorted order, not in order of appearance, which
        # depends on where the batches were cut and which were decoded by workers: the
        # tables (frame ids) do not depend on the layout.
        name_ids, groups["names"] = _sorted_ids("name_id", "name", self.names.values, pl.String)
        shape_ids, groups["shapes"] = _sorted_ids("shape_id", "shape", self.shapes.values,
                                                  pl.Binary)
        groups["shapes"] = groups["shapes"].with_columns(pl.col("shape").cast(pl.String))
        for g in ("python", "op", "call"):
            groups[g] = groups[g].with_columns(name_ids.gather(groups[g]["name_id"]).alias("name_id"))
        groups["op"] = groups["op"].with_columns(
            shape_ids.gather(groups["op"][c]).alias(c) for c in ("shape_id", "dtypes_id"))
        return groups


def _sorted_ids(id_name: str, value_name: str, values: list, dtype: pl.DataType
                ) -> tuple[pl.Series, pl.DataFrame]:
    """For interned ``values``: each one's id in sorted order (indexed by its old id), and
    the (id, value) table in that order."""
    series = pl.Series(value_name, values, dtype=dtype)
    order = series.arg_sort()
    ids = pl.int_range(series.len(), dtype=pl.UInt32, eager=True)
    new_id = pl.repeat(0, series.len(), dtype=pl.UInt32, eager=True).scatter(order, ids)
    return new_id, pl.DataFrame({id_name: ids, value_name: series.gather(order)})


class _Interner:
    """Dense ids for repeated values, in order of first appearance; ``preset`` values map to
    null."""

    def __init__(self, *preset: object) -> None:
        self.ids: dict = dict.fromkeys(preset)
        self.values: list = []

    def __call__(self, values: list) -> list[int | None]:
        ids = self.ids
        for value in dict.fromkeys(values):  # the batch's distinct values: a few hundred
            if value not in ids:
                ids[value] = len(self.values)
                self.values.append(value)
        return list(map(ids.__getitem__, values))


# JSON not laid out as Kineto writes it is decoded whole, so its text must fit in memory; past
# this size it is refused rather than risking the machine (a gzip bomb stops here too).
MAX_WHOLE_JSON = 512 << 20


def read_json_bytes(path: Path) -> bytearray:
    """The whole JSON text of a trace file, gunzipped when it is gzip, at most MAX_WHOLE_JSON
    bytes (an ``InputError`` past that, before more is read)."""
    text = bytearray()
    with open(path, "rb") as f:
        for piece in without_bom(_pieces(f, path)):
            if not text.strip():  # until the text starts: JSON or not?
                start = (text + piece).lstrip()[:1]
                if start and start not in b"{[":
                    raise InputError(f"{path}: not JSON (it starts with {bytes(start)!r})")
            text += piece
            if len(text) > MAX_WHOLE_JSON:
                raise InputError(f"{path}: more than {MAX_WHOLE_JSON >> 20} MiB of JSON text "
                                 "not laid out as torch.profiler writes it (a re-exported trace, "
                                 "or a decompression bomb): refused")
    return text


def parse_events(text: bytes | bytearray, path: Path) -> tuple[dict[str, pl.DataFrame], _TraceFile]:
    """Decode a whole JSON text into one frame per event group (python, op, call, gpu).

    The first pass only splits ``traceEvents`` into raw byte views; events are then decoded in
    batches and turned into columns at once, so only one batch of Python objects is alive.
    """
    if not text or text.isspace():
        raise InputError(f"{path}: empty file")
    try:
        top = msgspec.json.decode(text, type=_TraceFile)
    except msgspec.ValidationError as e:
        if _is_execution_trace(text):
            raise InputError(f"{path}: a PyTorch execution trace (ExecutionTraceObserver: "
                             "\"nodes\", no \"traceEvents\"), not a torch.profiler (Kineto) "
                             "trace: give zym the Kineto trace recorded with it") from e
        raise InputError(f"{path}: JSON, but not a torch.profiler (Kineto) trace ({e})") from e
    except msgspec.DecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e}); a truncated or non-trace file?") from e
    raws, top.traceEvents = top.traceEvents, []
    acc = GroupAccumulator(path)
    for start in range(0, len(raws), BATCH_EVENTS):
        try:
            acc.add_events(_decode_events(b"[" + b",".join(raws[start:start + BATCH_EVENTS])
                                          + b"]"))
        except msgspec.ValidationError as e:
            raise InputError(f"{path}: malformed trace event, not a torch.profiler (Kineto) "
                             f"trace ({e})") from e
    return acc.groups(), top


class _ExecutionTrace(msgspec.Struct):
    """What tells a PyTorch execution trace (torch.profiler.ExecutionTraceObserver) apart."""

    nodes: list[msgspec.Raw]
    schema: str | None = None


def _is_execution_trace(text: bytes | bytearray) -> bool:
    try:
        msgspec.json.decode(text, type=_ExecutionTrace)
    except msgspec.MsgspecError:
        return False
    return True


def _decode_events(text: bytes | memoryview) -> list:
    """The events of a JSON array text: by the fast decoder, else by the general one, else
    by the tolerant one (which raises ValidationError for an event that is not an object of
    the trace's shape). DecodeError: the text is not JSON."""
    try:
        return _FAST_DECODER.decode(text)
    except msgspec.ValidationError:
        pass
    try:
        return _DECODER.decode(text)
    except msgspec.ValidationError:
        return _LOOSE_DECODER.decode(text)


def _group_frames(events: list, names: _Interner, shapes: _Interner
                  ) -> dict[str, pl.DataFrame]:
    """Columns of the complete events that zym reads, one frame per event group.

    Each group's events are picked with ``itertools.compress`` and read with
    ``map(attrgetter)``: C loops, no Python bytecode per event and no per-batch polars
    queries, and each group reads only its own fields (GPU activity: device, stream, grid...;
    torch ops: shapes).
    """
    groups = list(map(_GROUP_OF_ANY.get, map(_CAT, events)))
    if groups and groups[0] is not None and groups.count(groups[0]) == len(groups):
        return {groups[0]: _group_frame(groups[0], events, names, shapes)}  # Kineto: most batches
    out = {}
    for group in _GROUPS:
        picked = list(compress(events, map(eq, groups, repeat(group))))
        if picked:
            out[group] = _group_frame(group, picked, names, shapes)
    return out


def _group_frame(group: str, events: list, names: _Interner, shapes: _Interner
                 ) -> pl.DataFrame:
    """The columns of one group's events (CPU events: names and shapes as interned ids)."""
    schema = GROUP_SCHEMAS[group]
    name, pid, tid, ts, dur, args = _columns(events, "name", "pid", "tid", "ts", "dur", "args")
    cats = _CATS_OF_GROUP[group]
    general = not isinstance(events[0], _Complete)  # the general or the tolerant decoder
    loose = isinstance(events[0], _LooseEvent)
    cols = {"cat": _CAT_VALUE[cats[0]].new_from_index(0, len(events)) if len(cats) == 1
            else _canonical_cats(_columns(events, "cat")[0]) if general
            else _columns(events, "cat")[0],
            "pid": _int_column(pid), "tid": _int_column(tid),
            "ts_us": _loose_floats("ts", ts) if loose else ts,
            "dur_us": _loose_floats("dur", dur) if loose else dur}
    if group == "gpu":  # kernel names: a few per path, kept as text
        cols["name"] = name
    else:
        cols["name_id"] = names(name)
    fields = [f for f in schema if f not in cols]
    if loose:
        cols.update(_loose_columns(args, fields, schema))
    else:
        cols.update(zip(fields, _columns(args, *[_ARG_ATTR[f] for f in fields])))
    if group == "op":  # shapes stay JSON text, by id (an absent one: empty, a null id)
        cols["shape_id"] = shapes(list(map(bytes, cols["shape_id"])))
        cols["dtypes_id"] = shapes(list(map(bytes, cols["dtypes_id"])))
    frame = pl.DataFrame(cols, schema=schema)
    if general:  # complete events only; older Kineto's "external id" where "External id" lacks
        if "external_id" in schema:
            old = _columns(args, "external_id_old")[0]
            old = (_loose_ints("external id", old) if loose
                   else pl.Series(old, dtype=pl.Int64))
            frame = frame.with_columns(pl.coalesce("external_id", old).alias("external_id"))
        frame = frame.filter(pl.Series(_columns(events, "ph")[0], dtype=pl.String) == "X")
    return frame


def _canonical_cats(cats: list[str]) -> pl.Series:
    """Category names with older Kineto's spellings replaced by the current ones."""
    return pl.Series("cat", cats, dtype=pl.String).replace(CAT_ALIASES).cast(CAT_TYPE)


def _columns(items: list | tuple, *attrs: str) -> list[list]:
    """The named attributes of ``items``, one list per attribute (map + attrgetter run in C)."""
    return [list(map(attrgetter(a), items)) for a in attrs]


_DECODER = msgspec.json.Decoder(list[_Event])
_LOOSE_DECODER = msgspec.json.Decoder(list[_LooseEvent])
BATCH_EVENTS = 10_000
_GROUP_OF = ({c: "python" for c in PYTHON_CATS} | {c: "op" for c in OP_CATS}
             | {c: "call" for c in CALL_CATS} | {c: "gpu" for c in GPU_CATS})
_GROUP_OF_ANY = _GROUP_OF | {old: _GROUP_OF[cat] for old, cat in CAT_ALIASES.items()}
_GROUPS = ("python", "op", "call", "gpu")
_CATS = tuple(_GROUP_OF)
_CATS_OF_GROUP = {g: [c for c in _CATS if _GROUP_OF[c] == g] for g in _GROUPS}
_CAT = attrgetter("cat")
_FAST_DECODER = msgspec.json.Decoder(
    list[Union[tuple(_event_struct(cat) for cat in (*_CATS, *_SKIPPED_CATS))]])  # noqa: UP007
# Event field -> _Args attribute, for the fields that live in "args".
_ARG_ATTR = {"external_id": "external_id", "correlation_id": "correlation",
             "python_id": "python_id", "python_parent_id": "python_parent_id",
             "device_id": "device", "stream_id": "stream", "size_bytes": "bytes", "cbid": "cbid",
             "graph_id": "graph_id", "shape_id": "input_dims", "dtypes_id": "input_type",
             "sequence": "sequence",
             **{f"{d}_{axis}": f"{d}.{axis}" for d in ("grid", "block") for axis in "xyz"}}
CAT_TYPE = pl.Enum([*_CATS])
_CAT_VALUE = {cat: pl.Series("cat", [cat], dtype=CAT_TYPE) for cat in _CATS}  # repeated per batch
_COMMON = {"cat": CAT_TYPE, "pid": pl.Int64, "tid": pl.Int64, "ts_us": pl.Float64,
           "dur_us": pl.Float64}
_CPU = _COMMON | {"name_id": pl.UInt32}
GROUP_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "python": _CPU | {"python_id": pl.Int64, "python_parent_id": pl.Int64},
    "op": _CPU | {"external_id": pl.Int64, "shape_id": pl.UInt32, "dtypes_id": pl.UInt32,
                  "sequence": pl.Int64},
    "call": _CPU | {"external_id": pl.Int64, "correlation_id": pl.Int64, "cbid": pl.Int32},
    "gpu": _COMMON | {"name": pl.String, "external_id": pl.Int64, "correlation_id": pl.Int64,
                      "device_id": pl.Int32, "stream_id": pl.Int64, "size_bytes": pl.Int64,
                      "graph_id": pl.Int64}
    | {f"{d}_{axis}": pl.Int32 for d in ("grid", "block") for axis in "xyz"},
}


def _int_column(values: list[int | str | None]) -> pl.Series:
    """Kineto writes pids and tids as numbers, except for its own pseudo-processes ("Spans")."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (TypeError, pl.exceptions.PolarsError):
        return pl.Series([_as_int(v) for v in values], dtype=pl.Int64)


def _as_int(value: int | str | None) -> int | None:
    if isinstance(value, int) or value is None:
        return value
    digits = value.removeprefix("-")
    return int(value) if digits.isascii() and digits.isdigit() else None




# Values as the tolerant decoder keeps them: JSON text (b"": the key is absent). A number
# written as a string, decimal or hex, is that number; ``null``, absent or "" are null.
_HEX = r"^[+-]?0[xX][0-9a-fA-F]+$"


def _json_texts(name: str, raws: list) -> pl.Series:
    """The values' JSON text, outer quotes and spaces removed (null: absent or null)."""
    text = pl.Series(name, list(map(bytes, raws)), dtype=pl.Binary).cast(pl.String)
    value = text.str.strip_chars()
    quoted = value.str.starts_with('"') & value.str.ends_with('"') & (value.str.len_chars() > 1)
    inner = value.str.slice(1, value.str.len_chars() - 2)
    return (pl.select(pl.when(quoted).then(inner).otherwise(value).str.strip_chars().alias(name))
            .to_series().replace({"": None, "null": None}))


def _parse_ints(value: pl.Series) -> pl.Series:
    """Integers from text: decimal, hex (``0x``), or a number with no fraction; null where
    none of these."""
    v = pl.col(value.name)
    negative = v.str.starts_with("-")
    hex_digits = v.str.replace(r"^[+-]?0[xX]", "").str.to_integer(base=16, strict=False)
    as_float = v.cast(pl.Float64, strict=False)
    integral = as_float.is_finite() & (as_float == as_float.floor()) & (as_float.abs() < 2.0**63)
    return value.to_frame().select(
        pl.when(v.str.contains(_HEX))
        .then(pl.when(negative).then(-hex_digits).otherwise(hex_digits))
        .otherwise(pl.coalesce(v.str.to_integer(strict=False),
                               pl.when(integral).then(as_float.cast(pl.Int64))))
    ).to_series()


def _loose_ints(name: str, raws: list) -> pl.Series:
    """An integer field from its JSON text; ValidationError for a value that is no integer."""
    value = _json_texts(name, raws)
    ints = _parse_ints(value)
    _refuse_unparsed(name, value, ints, "an integer")
    return ints


def _refuse_unparsed(name: str, value: pl.Series, parsed: pl.Series, what: str) -> None:
    bad = value.is_not_null() & parsed.is_null()
    if bad.any():
        first = value.filter(bad)[0]
        raise msgspec.ValidationError(f"Expected {what}, got `{first[:40]}` - at `args.{name}` "
                                      f"({bad.sum()} event(s))")


def _loose_floats(name: str, values: list) -> pl.Series:
    """Times as numbers, or as strings that hold one."""
    try:
        return pl.Series(name, values, dtype=pl.Float64)
    except (TypeError, pl.exceptions.PolarsError):
        text = pl.Series(name, values, dtype=pl.String, strict=False).str.strip_chars()
        out = text.cast(pl.Float64, strict=False)
        bad = text.is_not_null() & out.is_null()
        if bad.any():
            raise msgspec.ValidationError(f"Expected a number, got `{text.filter(bad)[0][:40]}`"
                                          f" - at `{name}`") from None
        return out


def _loose_dims(name: str, raws: list) -> list[pl.Series]:
    """A grid or block size as x, y, z: ``[x, y, z]`` (fewer allowed, more ignored, as the
    other decoders do; items possibly strings), or text holding them (Inductor's
    ``"grid(100,)"``, ``"[1, 1, 1]"``)."""
    value = _json_texts(name, raws)
    v = pl.col(name)
    items = value.to_frame().select(
        pl.coalesce(v.str.extract(r"^[^\[(]*[\[(](.*)[\])]$", 1), v).str.split(",")
        .list.eval(pl.element().str.strip_chars().str.strip_chars('"').str.strip_chars())
        .list.eval(pl.element().filter(pl.element() != ""))).to_series()
    out = []
    for axis in range(3):
        item = items.list.get(axis, null_on_oob=True).replace({"null": None})
        parsed = _parse_ints(item)
        _refuse_unparsed(name, item, parsed, "an integer size")
        out.append(parsed)
    return out


def _loose_columns(args: list, fields: list[str], schema: dict[str, pl.DataType]
                   ) -> dict[str, pl.Series | list]:
    """The ``args`` fields of one group's events from their JSON text, per column."""
    cols: dict[str, pl.Series | list] = {}
    for f in fields:
        attr = _ARG_ATTR[f]
        if f in cols:
            continue
        if "." in attr:  # grid_x... : the three axes at once
            dim = attr.split(".")[0]
            xyz = _loose_dims(_JSON_NAME[dim], _columns(args, dim)[0])
            cols.update({f"{dim}_{axis}": s for axis, s in zip("xyz", xyz)})
        elif schema[f] == pl.UInt32:  # shapes: JSON text, by id
            cols[f] = _columns(args, attr)[0]
        else:
            cols[f] = _loose_ints(_JSON_NAME[attr], _columns(args, attr)[0])
    return cols


# The compiled decoder's columns (capture/_kineto_scan.c), in its order; older Kineto's
# category names are looked for too, and a batch that holds one goes to msgspec instead.
_SCAN_CATS = tuple(c.encode() for c in (*_CATS, *CAT_ALIASES))
_SCAN_INTS = ("pid", "tid", "external_id", "python_id", "python_parent_id", "correlation_id",
              "cbid", "device_id", "stream_id", "size_bytes", "graph_id",
              "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "sequence")
_SCAN_FLOATS = ("ts_us", "dur_us")
_SCAN_TEXTS = ("name", "shape_id", "dtypes_id")
_GROUP_OF_CODE = np.array([_GROUPS.index(_GROUP_OF[c]) for c in _CATS], dtype=np.uint8)
_CAT_SERIES = pl.Series("cat", list(_CATS), dtype=CAT_TYPE)


def _scan_frames(buf: bytes | bytearray, start: int, end: int, names: _Interner,
                 shapes: _Interner) -> dict[str, pl.DataFrame] | None:
    """The group frames of the events in ``buf[start:end]`` (comma-separated JSON objects) by
    the compiled decoder: no Python object per event; names and shapes interned in ``names``
    and ``shapes``. None when it is not built, or the text is not plain JSON of the shape it
    decodes (not JSON, a field of another type...): msgspec then decodes it, or says why not."""
    if _kineto_scan is None:
        return None
    scanned = _kineto_scan.scan(buf, start, end, _SCAN_CATS)
    if scanned is None:
        return None
    return _scanned_frames(scanned, names, shapes)


def _scanned_frames(scanned: tuple, names: _Interner, shapes: _Interner
                    ) -> dict[str, pl.DataFrame] | None:
    """The group frames of what the compiled decoder returned (``_kineto_scan.scan``); None
    where it holds older Kineto's category names (msgspec decodes and renames those)."""
    n, cat_codes, ints, floats, texts = scanned
    if n == 0:
        return {}
    codes = np.frombuffer(cat_codes, dtype=np.uint8)
    if codes.max() >= len(_CATS):  # older Kineto's names: decoded (and renamed) by msgspec
        return None
    groups = _GROUP_OF_CODE[codes]
    batch = _ScannedBatch(
        n, codes,
        dict(zip(_SCAN_INTS, ((*c, np.int64) for c in ints)))
        | dict(zip(_SCAN_FLOATS, ((*c, np.float64) for c in floats))),
        {name: np.frombuffer(ids, dtype=np.int32) for name, (ids, _) in zip(_SCAN_TEXTS, texts)},
        {name: values for name, (_, values) in zip(_SCAN_TEXTS, texts)}, names, shapes)
    if (groups == groups[0]).all():  # Kineto's layout: most batches hold one group
        return {_GROUPS[groups[0]]: batch.frame(_GROUPS[groups[0]], None)}
    return {group: batch.frame(group, rows) for k, group in enumerate(_GROUPS)
            if len(rows := np.flatnonzero(groups == k))}


class _ScannedBatch(NamedTuple):
    """One batch as the compiled decoder returns it: ``numbers``: column -> (values, Arrow
    validity bitmap, dtype); ``text_ids``: column -> the rows' ids (-1: none) into
    ``distinct`` values."""

    n: int
    codes: np.ndarray
    numbers: dict[str, tuple[bytes, bytes, type]]
    text_ids: dict[str, np.ndarray]
    distinct: dict[str, list]
    names: _Interner
    shapes: _Interner

    def frame(self, group: str, rows: np.ndarray | None) -> pl.DataFrame:
        """The frame of one group: its ``rows`` (None: all)."""
        frame = {}
        for column, dtype in GROUP_SCHEMAS[group].items():
            if column == "cat":
                frame[column] = _CAT_SERIES.gather(self.codes if rows is None
                                                   else self.codes[rows])
            elif column in ("name", "name_id", "shape_id", "dtypes_id"):
                text = "name" if column == "name_id" else column
                ids = self.text_ids[text] if rows is None else self.text_ids[text][rows]
                interner = (None if column == "name" else self.names if column == "name_id"
                            else self.shapes)
                frame[column] = _texts(column, ids, self.distinct[text], interner)
            else:
                values, valid = _numbers(self.n, *self.numbers[column])
                if rows is not None:
                    values, valid = values[rows], None if valid is None else valid[rows]
                frame[column] = _with_nulls(column, values, valid).cast(dtype)
        return pl.DataFrame(frame)


def _numbers(n: int, values: bytes, valid: bytes, dtype: type
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """A column's values and its validity (None: all valid) from an Arrow bitmap."""
    bits = np.unpackbits(np.frombuffer(valid, dtype=np.uint8), count=n, bitorder="little")
    return np.frombuffer(values, dtype=dtype), None if bits.all() else bits.view(bool)


def _with_nulls(name: str, values: np.ndarray, valid: np.ndarray | None) -> pl.Series:
    series = pl.Series(name, values)
    return series if valid is None else series.scatter(np.flatnonzero(~valid), None)


def _texts(name: str, ids: np.ndarray, values: list, interner: _Interner | None) -> pl.Series:
    """A text column from the batch's ids (-1: none) into its distinct ``values``: the text
    itself (``interner`` None), or the ids ``interner`` gives the values these rows use (a
    missing name: None's id, as for the msgspec decoder; a missing shape: null, as its
    ``b""`` is)."""
    missing = ids < 0
    absent = np.flatnonzero(missing)
    if interner is None:
        series = (pl.Series(name, values, dtype=pl.String).gather(np.where(missing, 0, ids))
                  if values else pl.Series(name, [None] * len(ids), dtype=pl.String))
        return series.scatter(absent, None) if len(absent) else series
    # The values these rows use, by counting (one pass; a sort of every row's id was ~8% of
    # the decoding at 6.6 M events). Their order only sets the interner's ids, which the
    # groups renumber in sorted order (``GroupAccumulator.groups``).
    used = np.flatnonzero(np.bincount(ids[~missing] if len(absent) else ids,
                                      minlength=len(values)))
    mapped = np.zeros(len(values) + 1, dtype=np.uint32)  # [-1]: a missing value
    mapped[used] = interner([values[i] for i in used])
    shapes = interner.ids.get(b"", 0) is None
    if len(absent) and not shapes:
        mapped[-1] = interner([None])[0]
    series = pl.Series(name, mapped[ids], dtype=pl.UInt32)
    return series.scatter(absent, None) if len(absent) and shapes else series
