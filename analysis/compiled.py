"""The compiled loops' one way to numba (a dependency; it was the ``zym[fast]`` extra): a loop
written in plain Python over numpy arrays is compiled once (cached on disk, releasing the
GIL); where numba cannot be imported, callers run the same source interpreted or take a numpy
path (the same results; at 1-10 M GPU operations the whole analysis took 3-11x as long:
docs/benchmarks.md, "Twenty-third round")."""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np

_SETTING = threading.Lock()  # held while numba's cache folder is set to the private one

# numba's array functions look for a BLAS as they load, by importing scipy.linalg (~0.13 s
# where scipy is installed, as it often is beside torch), and use a plain loop for the one
# function the answer gates; zym's loops make no BLAS call. A process that has no other use
# for numba (the CLI: :func:`skip_blas_check`) loads numba without that look.
_BLAS_CHECK = True
_LOADING = threading.Lock()

# What a progress display shows while numba compiles one of zym's loops: a first analysis of
# a large capture on this machine (or after an upgrade) spends seconds there, once.
COMPILING = "compiling zym's loops for this machine (once: later runs load them)"
_NOTICES: list[Callable[[str | None], None]] = []  # told COMPILING, then None when done
_NOTICE_LOCK = threading.Lock()
_listening = False
_depth = 0  # zym loops being compiled (numba compiles the helpers a loop calls inside it)


def njit(*loops: Callable, inline: bool = False) -> tuple[Callable, ...] | None:
    """``loops`` compiled by numba, in order; None without numba. ``inline``: the loops are
    helpers, inlined into the compiled loops that call them (numba's ``inline="always"``).
    A loop marked with :func:`writes` is called with every other array argument read-only
    (:func:`reading_read_only`)."""
    numba = _numba()
    if numba is None:
        return None
    _listen()
    options = {"nogil": True, **({"inline": "always"} if inline else {})}
    compiled = (_compiled(numba, loop, options) for loop in loops)
    if inline:  # (called from compiled code, where a Python wrapper cannot be)
        return tuple(compiled)
    return tuple(reading_read_only(loop, fast) for loop, fast in zip(loops, compiled))


def skip_blas_check() -> None:
    """Load numba, when a loop first needs it, without its look for a BLAS (for a process
    whose numba is zym's alone: the CLI)."""
    global _BLAS_CHECK
    _BLAS_CHECK = False


def _numba() -> ModuleType | None:
    """numba, or None where it cannot be imported; without its look for a BLAS where
    :func:`skip_blas_check` asked (scipy.linalg seen as absent while numba's array functions
    load, unless something imported it already)."""
    try:
        import numba
    except ImportError:
        return None
    with _LOADING:
        if _BLAS_CHECK or "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
            return numba
        sys.modules["scipy.linalg"] = None  # (an import of it raises ImportError)
        try:
            import numba.np.arraymath
        finally:
            del sys.modules["scipy.linalg"]
    return numba


def writes(*params: str) -> Callable[[Callable], Callable]:
    """Mark a loop for :func:`njit` with the parameters it writes into; the others it only
    reads (a loop that writes one of those fails to compile: numba refuses a read-only
    array's store)."""
    def mark(loop: Callable) -> Callable:
        loop.writes = frozenset(params)
        return loop
    return mark


def reading_read_only(loop: Callable, fast: Callable) -> Callable:
    """``fast`` (``loop`` compiled) called with each array argument ``loop`` does not write
    (its :func:`writes` mark; arrays inside tuples too) as a read-only view. numba compiles a
    loop once per set of argument types, and whether an array may be written is part of its
    type: polars hands its own buffers read-only and copies writable, so the same loop met
    both as captures differed, and compiled again (the sparse replay: ~4.5-5 s on a first
    run). Unmarked loops are returned as they are."""
    marked = getattr(loop, "writes", None)
    if marked is None:
        return fast
    code = loop.__code__
    frozen = tuple(name not in marked for name in code.co_varnames[:code.co_argcount])

    def call(*args):
        return fast(*(_read_only_all(a) if ro else a for a, ro in zip(args, frozen)))
    call.dispatcher = fast  # numba's, for its compiled types
    return call


def _read_only_all(value):
    """``value`` with its arrays (itself, or those of a tuple) as read-only views."""
    if isinstance(value, tuple):
        return tuple(_read_only_all(v) for v in value)
    if hasattr(value, "flags") and value.flags.writeable:  # a numpy array
        return read_only(value)
    return value


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (see :func:`reading_read_only`)."""
    view = a.view()
    view.flags.writeable = False
    return view


def notify_compiles(say: Callable[[str | None], None]) -> Callable[[], None]:
    """Have ``say`` told :data:`COMPILING` when numba starts compiling a loop of zym's (not
    when it loads one from its cache) and None when it is done; returns what stops it. Does
    not import numba (the first loop that needs it does); ``say`` may be called from the
    thread that compiles, and must not raise."""
    with _NOTICE_LOCK:
        _NOTICES.append(say)
    if "numba" in sys.modules:
        _listen()

    def stop() -> None:
        with _NOTICE_LOCK:
            if say in _NOTICES:
                _NOTICES.remove(say)
    return stop


def _listen() -> None:
    """Register, once, a listener for numba's compile events (numba's event API) that tells
    the :func:`notify_compiles` callbacks."""
    global _listening
    with _NOTICE_LOCK:
        if _listening:
            return
        _listening = True
    from numba.core import event

    class _Notices(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            _compile_event(ev, 1)

        def on_end(self, ev: event.Event) -> None:
            _compile_event(ev, -1)

    event.register("numba:compile", _Notices())


def _compile_event(ev: object, step: int) -> None:
    """A compile of a zym loop started (``step`` 1) or ended (-1): the callbacks are told at
    the outermost one's start and end. Never raises (numba would fail the compile)."""
    global _depth
    with contextlib.suppress(Exception):  # a notice is not worth a failed compile
        loop = getattr(getattr(ev, "data", {}).get("dispatcher"), "py_func", None)
        if not getattr(loop, "__module__", "").startswith("zym."):
            return
        with _NOTICE_LOCK:
            _depth = max(_depth + step, 0)
            tell = (step > 0 and _depth == 1) or (step < 0 and _depth == 0)
            says = list(_NOTICES) if tell else []
        for say in says:
            say(COMPILING if step > 0 else None)


def _compiled(numba, loop: Callable, options: dict) -> Callable:
    """``loop`` compiled and cached on disk. numba refuses ``cache=True`` (a RuntimeError, "no
    locator available") where neither the module's folder nor the user's cache folder is
    writable: a read-only install and home, as in containers with a read-only root file
    system. There the cache goes to :func:`fallback_cache_dir`, so that only the first
    process compiles (at 1 M GPU operations ~6 s of a ~9 s analysis); where there is none,
    the loop is compiled for this process alone."""
    try:
        return numba.njit(cache=True, **options)(loop)
    except RuntimeError as e:
        if "cannot cache" not in str(e):  # another failure: not this one's to hide
            raise
    folder = fallback_cache_dir()
    if folder is not None:
        from numba.core import config

        with _SETTING:  # (replay threads compile loops too: one setting at a time)
            before = config.CACHE_DIR  # numba's locators read it as the loop is decorated
            config.CACHE_DIR = folder
            try:
                return numba.njit(cache=True, **options)(loop)
            except RuntimeError as e:
                if "cannot cache" not in str(e):
                    raise
            finally:
                config.CACHE_DIR = before
    return numba.njit(cache=False, **options)(loop)


PRIVATE_CACHE = "zym-numba-{uid}"  # in the temporary directory


def fallback_cache_dir() -> str | None:
    """Where the loops are cached when numba's own folders cannot be written: zym's cache
    folder (``$ZYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/zym``, else ``~/.cache/zym``:
    :func:`zym.schemas.jsoncache.cache_dir`), ``numba`` in it, where it can be made and
    written; else this user's own folder in the temporary directory
    (:func:`private_cache_dir`). None with ``ZYM_CACHE=0``, which asks zym to keep no files
    between runs. numba loads what these folders hold as code: each must be a real directory
    this user owns that nobody else can write to."""
    import os

    from zym.schemas.jsoncache import ENV_SWITCH, cache_dir

    if os.environ.get(ENV_SWITCH, "") == "0":
        return None
    own = cache_dir("numba")
    if own is not None and _made(str(own), 0o777, parents=True) and _trusted(str(own), 0o022):
        return str(own)
    return private_cache_dir()


def private_cache_dir() -> str | None:
    """This user's folder for compiled loops in the temporary directory (``tempfile``'s:
    ``TMPDIR``, else ``/tmp``), made 0700 if missing; None where it cannot be made, trusted
    or written. A folder another user made first (``/tmp`` is shared), a link, or one others
    may read or write is not used."""
    import os
    import tempfile

    if not hasattr(os, "getuid"):
        return None
    path = os.path.join(tempfile.gettempdir(), PRIVATE_CACHE.format(uid=os.getuid()))
    return path if _made(path, 0o700) and _trusted(path, 0o077) else None


def _made(path: str, mode: int, parents: bool = False) -> bool:
    """``path`` made (with ``mode``, less the umask) unless it is there; False if it cannot be."""
    import os

    try:
        (os.makedirs if parents else os.mkdir)(path, mode)
    except FileExistsError:
        pass
    except OSError:
        return False
    return True


def _trusted(path: str, others: int) -> bool:
    """``path`` is a directory (not a link) this user owns and can write, with none of the
    permission bits ``others`` set."""
    import os
    import stat

    if not hasattr(os, "getuid"):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & others
            and os.access(path, os.W_OK | os.X_OK))
