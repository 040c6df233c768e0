"""A small trace's JSON gunzipped and decoded into columns in a forked process while this one
imports numpy and polars.

`zym analyze` and `zym diff` spend their first ~0.15-0.2 s importing numpy, polars and the
analysis, on one core: the GIL serialises the import, and the gunzip (ISA-L holds the GIL) and
the glue around the compiled decoder would stall it if they ran in a thread. A process forked
before those imports (only the standard library loaded: fork is safe) reads the file, gunzips
it and decodes the events with the compiled decoder (capture/_kineto_scan.c) in one call, and
leaves the decoder's columns in a memory file; ``kineto_json.read_events`` then builds its
frames from them instead of reading the file again.

Nothing here decides a result: the child only hands over what the compiled decoder returned
for the whole event array, and only where the usual reader would take the same path (the
events' ``[`` found the same way, the last ``]``, a trailer that is JSON, no event the decoder
refuses). Anything else (an error, a refusal, a file changed since, a child that died) makes
``take`` return None, and the file is read as before, which names any problem. The child
ignores nothing: Ctrl-C (the terminal's SIGINT reaches it too) ends it at once, it dies with
this process (PR_SET_PDEATHSIG), and this process ends and reaps every child it did not use
at exit.

This module imports only the standard library (it runs before numpy and polars are).
"""
from __future__ import annotations

import atexit
import os
import pickle
import re
import signal
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from zym.capture.kineto_text import (
    BETWEEN_EVENTS,
    CUT_TRIES,
    GzipCut,
    gunzip,
    read_header,
    starts_like_json,
    without_bom,
)

# Only traces whose whole text is a few seconds of one core at most are decoded ahead: past
# this the usual reader (threads, bounded batches) is the faster and the leaner.
GZ_LIMIT = 8 << 20  # compressed bytes (Kineto's text compresses ~15:1)
TEXT_LIMIT = 128 << 20  # JSON text, plain or gunzipped
_LENGTH = struct.Struct("<q")
# The compiled decoder's categories, in kineto_json's order (_SCAN_CATS; a test checks).
SCAN_CATS = (b"python_function", b"cpu_op", b"user_annotation", b"cuda_runtime",
             b"cuda_driver", b"kernel", b"gpu_memcpy", b"gpu_memset", b"cuda_sync",
             b"Operator", b"Runtime", b"Kernel", b"Memcpy", b"Memset")


class Rest(NamedTuple):
    """The text after the child's last batch, where it did not find the events' end as a
    whole trace has it (a trace cut short, or last events the compiled decoder refuses): this
    process decodes it as the usual reader decodes a text's end (``kineto_json._finish``, then
    ``_finish_cut``), so a cut trace is not read a second time."""

    text: bytes
    read: int  # bytes of text read (the array's "[" and the text before it included)
    gzip_cut: bool  # the gzip stream ended before its end


class Decoded(NamedTuple):
    """What the child hands over: the text around the events, and the compiled decoder's
    result (``_kineto_scan.scan``'s tuple) for each batch of events, in file order; its
    buffers are views of the memory file the child wrote. ``rest``: None where the events'
    end was found (``trailer``: the text after their "]"); else the text left to decode."""

    header: bytes  # the text before the events' "["
    bare: bool  # a bare array of events (no top object)
    trailer: bytes  # the text after the events' "]"
    batches: list[tuple]
    rest: Rest | None = None


class _Child(NamedTuple):
    pid: int
    ready_fd: int  # the child writes the payload's length here when done (-1: none)
    memfd: int  # the pickled ``(key, Decoded)``
    owner: int  # the process that forked it (the only one that can reap it)


_children: dict[str, _Child] = {}
_cleanup_registered = False


def _key(path: str | Path) -> str:
    return os.path.realpath(os.fspath(path))


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def worth_it(path: str | Path) -> bool:
    """Whether ``path`` is a trace small enough to decode ahead, on a system that can."""
    if not (hasattr(os, "fork") and hasattr(os, "memfd_create")) or sys.platform != "linux":
        return False
    return small(path)


def small(path: str | Path) -> bool:
    """Whether ``path`` is a trace (gzip, or text that starts as JSON) of at most GZ_LIMIT
    compressed or TEXT_LIMIT plain bytes."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    if not os.path.isfile(path) or st.st_size == 0:
        return False
    if head[:2] == b"\x1f\x8b":
        return st.st_size <= GZ_LIMIT
    return starts_like_json(head) and st.st_size <= TEXT_LIMIT


def core_free(looks: int = 3) -> bool:
    """Whether a core looks free now: fewer tasks runnable (this process included: the 4th
    field of /proc/loadavg) than cores, at the least of ``looks`` looks 0.5 ms apart (a task
    that wakes for a moment, such as a benchmark's memory sampler, does not count; one that
    computes does). On a busy machine a child would only take the core this process works
    on, and a pool of threads would wait for one."""
    import time

    cores, running = os.cpu_count() or 1, None
    for look in range(looks):
        if look:
            time.sleep(0.0005)
        try:
            with open("/proc/loadavg") as f:
                now = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return False
        running = now if running is None else min(running, now)
        if running < cores:
            return True
    return False


# Decoding threads: None, for a small trace only where a core is free; False: never (a diff's
# two processes); True: always (tests of the thread paths).
_threads: bool | None = None


def set_decode_threads(value: bool | None) -> bool | None:
    """Decode later traces with a pool of threads always (True), never (False: `zym diff`'s
    two processes, whose analyses already take a core each), or where a core is free (None);
    the previous setting."""
    global _threads
    previous, _threads = _threads, value
    return previous


def threads_wanted(path: str | Path) -> bool:
    """Whether the reader of ``path`` decodes with threads beside it: for a small trace only
    where a core is free now (on a busy machine the pool costs more CPU than it saves time);
    for a larger one always; as :func:`set_decode_threads` says where it was called."""
    if _threads is not None:
        return _threads
    return not small(path) or core_free()


def start(path: str | Path) -> bool:
    """Fork a child that decodes ``path`` (call before numpy and polars are imported, and
    before any thread starts). False where not worth it or not possible."""
    global _cleanup_registered
    key = _key(path)
    if key in _children or not worth_it(path):
        return False
    try:
        from zym.capture import _kineto_scan  # noqa: F401 (built?)
    except ImportError:
        return False
    ready_r, ready_w = os.pipe()
    memfd = os.memfd_create("zym-trace", getattr(os, "MFD_CLOEXEC", 0))
    try:
        pid = os.fork()
    except OSError:
        for fd in (ready_r, ready_w, memfd):
            os.close(fd)
        return False
    if pid == 0:  # the child: never returns
        _child_main(path, ready_r, ready_w, memfd)
    os.close(ready_w)
    _children[key] = _Child(pid, ready_r, memfd, os.getpid())
    if not _cleanup_registered:
        atexit.register(cancel_all)
        _cleanup_registered = True
    return True


def _child_main(path: str | Path, ready_r: int, ready_w: int, memfd: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: end now, say nothing
        os.close(ready_r)
        _die_with_parent()
        for other in _children.values():  # another trace's fds, inherited
            if other.owner == os.getppid():
                os.close(other.ready_fd)
                os.close(other.memfd)
        try:
            payload = decode(path)
        except Exception:  # noqa: BLE001 (the usual reader reads it again, and says what is wrong)
            payload = None
        at = _write(memfd, payload)
        os.write(ready_w, _LENGTH.pack(at))
    except BaseException:  # noqa: BLE001 (the parent sees no length, and reads the file itself)
        code = 1
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    """SIGKILL this child when the process that forked it ends (Linux's PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent ended before the call
        os._exit(1)


_PIECE = 1 << 20  # gunzipped text per step
_BATCH = 4 << 20  # text per decoder call


def decode(path: str | Path) -> tuple[tuple[int, int, int, int], Decoded] | None:
    """The file's identity and its events decoded, or None where the usual reader would not
    take the same path (then it reads the file itself). The text is gunzipped a piece at a
    time and decoded in batches cut between two events, as the usual reader does, so the
    same memory serves every batch. Where the events' end is not found as a whole trace has
    it (a trace cut short), the text after the last batch is handed over (``Rest``)."""
    from zym.capture import _kineto_scan

    with open(path, "rb") as f:
        ident = _identity(os.fstat(f.fileno()))
        ended = _Ended()
        pieces = without_bom(_pieces(f, ended))
        start = read_header(pieces)
        if start is None:
            return None
        buf, header, bare = start
        read = len(header) + 1 + len(buf)  # as the usual reader counts it (``_finish_cut``)
        batches = []
        for piece in pieces:
            if piece is None:
                return None  # not whole gzip, or too much text
            buf += piece
            read += len(piece)
            if len(buf) < _BATCH:
                continue
            cut = _last_cut(buf)
            if cut is None:
                continue
            scanned = _kineto_scan.scan(buf, 0, cut.start() + 1, SCAN_CATS)
            if scanned is None:
                return None
            batches.append(scanned)
            del buf[:cut.end() - 1]
    last = None if ended.gzip_cut else _last_events(buf, header, bare)
    if last is None:
        return ident, Decoded(header, bare, b"", batches, Rest(bytes(buf), read, ended.gzip_cut))
    trailer, scanned = last
    batches.append(scanned)
    if sum(b[0] for b in batches) == 0:
        return None
    return ident, Decoded(header, bare, trailer, batches)


class _Ended:
    """How ``_pieces``' text ended: ``gzip_cut``, its gzip stream before its end."""

    gzip_cut = False


def _last_events(buf: bytearray, header: bytes, bare: bool) -> tuple[bytes, tuple] | None:
    """The text after the events' ``]`` and the last events decoded, as the usual reader
    finds them (kineto_json._finish): the last ``]`` (of the last few) after which the rest
    of the text is JSON and before which the events decode. The parent checks the rest's
    fields (kineto_json._TraceFile), and reads the file itself where they are not right
    (the usual reader would then try an earlier ``]``)."""
    import msgspec
    from zym.capture import _kineto_scan

    close = len(buf)
    for _ in range(CUT_TRIES):
        close = buf.rfind(b"]", 0, close)
        if close < 0:
            return None
        trailer = bytes(buf[close + 1:])
        if bare:
            if trailer.strip():
                continue
        else:
            try:
                msgspec.json.decode(header + b"[]" + trailer)
            except msgspec.MsgspecError:
                continue
        scanned = _kineto_scan.scan(buf, 0, close, SCAN_CATS)
        if scanned is not None:
            return trailer, scanned
    return None


def _last_cut(buf: bytearray) -> re.Match | None:
    found = None
    for found in BETWEEN_EVENTS.finditer(buf, max(0, len(buf) - (1 << 16))):
        pass
    return found


def _pieces(f, ended: _Ended) -> Iterator[bytes | None]:
    """The file's text a piece at a time, gunzipped when gzip; None (last) where the gzip is
    corrupt or the text passes TEXT_LIMIT; where the gzip stream ends before its end (a file
    cut short), the text up to there, and ``ended.gzip_cut`` set."""
    gz = f.read(2) == b"\x1f\x8b"
    f.seek(0)
    if not gz:
        while piece := f.read(_PIECE):
            yield piece
        return
    from isal import isal_zlib

    size = 0
    try:
        for piece in gunzip(f, 1 << 16, _PIECE):
            size += len(piece)
            if size > TEXT_LIMIT:
                yield None
                return
            yield piece
    except isal_zlib.error:
        yield None
    except GzipCut:
        ended.gzip_cut = True


def _write(fd: int, payload: tuple | None) -> int:
    """Write ``payload`` to the memory file ``fd``: each batch's buffers as they are (8-byte
    aligned), then a pickle of the rest with their places; the pickle's offset."""
    done = 0

    def put(data) -> tuple[int, int]:
        nonlocal done
        at = done
        with memoryview(data) as view:
            while done - at < len(view):
                done += os.write(fd, view[done - at:])
        pad = -done % 8
        if pad:
            done += os.write(fd, bytes(pad))
        return at, len(data)

    def number(values: bytes, valid: bytes) -> tuple:
        if valid.count(0) == len(valid):  # all null (another group's field): not written
            return len(values), len(valid)
        return put(values), put(valid)

    if payload is not None:
        ident, d = payload
        batches = [(n, put(codes), [number(v, ok) for v, ok in ints],
                    [number(v, ok) for v, ok in floats],
                    [(put(ids), values) for ids, values in texts])
                   for n, codes, ints, floats, texts in d.batches]
        payload = ident, d._replace(batches=batches)
    at = done
    put(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    return at


def _read(view: memoryview, at: int) -> tuple | None:
    """What ``_write`` wrote, its buffers as views of ``view``."""
    payload = pickle.loads(view[at:])
    if payload is None:
        return None
    ident, d = payload

    def get(place: tuple[int, int]) -> memoryview:
        return view[place[0]:place[0] + place[1]]

    # All null (another group's field, in most batches): zeros, as the decoder writes them,
    # views of one buffer (each its own was ~60 MB zeroed for the bundled trace, never read).
    zeros = memoryview(bytes(max((size for b in d.batches for column in (*b[2], *b[3])
                                  for size in column if isinstance(size, int)), default=0)))

    def number(values: tuple, valid: tuple) -> tuple:
        if isinstance(values, int):
            return zeros[:values], zeros[:valid]
        return get(values), get(valid)

    batches = [(n, get(codes), tuple(number(v, ok) for v, ok in ints),
                tuple(number(v, ok) for v, ok in floats),
                tuple((get(ids), values) for ids, values in texts))
               for n, codes, ints, floats, texts in d.batches]
    return ident, d._replace(batches=batches)


def take(path: str | Path) -> Decoded | None:
    """The events of ``path`` as a child decoded them, when one was started for it (here or
    in a process this one was forked from), finished, and the file is still the one it read;
    else None. Each child's result is taken once."""
    child = _children.pop(_key(path), None)
    if child is None:
        return None
    try:
        at = _read_ready(child.ready_fd)
        payload = None
        if at is not None:
            import mmap

            # The columns stay views of this map (no copy); it lives as long as they do.
            view = memoryview(mmap.mmap(child.memfd, 0, access=mmap.ACCESS_READ))
            payload = _read(view, at)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError):
        payload = None
    finally:
        _close(child)
    if payload is None:
        return None
    ident, decoded = payload
    try:
        if _identity(os.stat(path)) != ident:
            return None
    except OSError:
        return None
    return decoded


def _read_ready(fd: int) -> int | None:
    """Where the child's pickle starts (waiting for it), None where it ended without."""
    data = b""
    while len(data) < _LENGTH.size:
        more = os.read(fd, _LENGTH.size - len(data))
        if not more:
            return None
        data += more
    return _LENGTH.unpack(data)[0]


def _close(child: _Child) -> None:
    for fd in (child.ready_fd, child.memfd):
        try:
            os.close(fd)
        except OSError:
            pass
    if child.owner == os.getpid():
        _reap(child.pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def handed_over(path: str | Path) -> None:
    """``path``'s child is now a forked process's to read (``zym diff``'s baseline): this
    process closes its ends and only reaps the child at exit."""
    child = _children.get(_key(path))
    if child is not None and child.owner == os.getpid():
        for fd in (child.ready_fd, child.memfd):
            os.close(fd)
        _children[_key(path)] = child._replace(ready_fd=-1, memfd=-1)


def cancel_all() -> None:
    """End and reap every child this process started and did not take (at exit)."""
    for key in list(_children):
        child = _children.pop(key)
        if child.owner != os.getpid():
            continue
        try:  # done by now, or no longer wanted
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for fd in (child.ready_fd, child.memfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        _reap(child.pid)
