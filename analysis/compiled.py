"""The compiled loops' one way to numba (a dependency; it was the ``zym[fast]`` extra): a loop
written in plain Python over numpy arrays is compiled once (cached on disk, releasing the
GIL); where numba cannot be imported, callers run the same source interpreted or take a numpy
path (the same results; at 1-10 M GPU operations the whole analysis took 3-11x as long:
docs/benchmarks.md, "Twenty-third round")."""
from __future__ import annotations

import threading
from collections.abc import Callable

_SETTING = threading.Lock()  # held while numba's cache folder is set to the private one


def njit(*loops: Callable, inline: bool = False) -> tuple[Callable, ...] | None:
    """``loops`` compiled by numba, in order; None without numba. ``inline``: the loops are
    helpers, inlined into the compiled loops that call them (numba's ``inline="always"``)."""
    try:
        import numba
    except ImportError:
        return None
    options = {"nogil": True, **({"inline": "always"} if inline else {})}
    return tuple(_compiled(numba, loop, options) for loop in loops)


def _compiled(numba, loop: Callable, options: dict) -> Callable:
    """``loop`` compiled and cached on disk. numba refuses ``cache=True`` (a RuntimeError, "no
    locator available") where neither the module's folder nor the user's cache folder is
    writable: a read-only install and home, as in containers with a read-only root file
    system. There the cache goes to this user's own folder in the temporary directory
    (:func:`private_cache_dir`), so that only the first process compiles (at 1 M GPU
    operations ~6 s of a ~9 s analysis); where there is none either, the loop is compiled
    for this process alone."""
    try:
        return numba.njit(cache=True, **options)(loop)
    except RuntimeError as e:
        if "cannot cache" not in str(e):  # another failure: not this one's to hide
            raise
    folder = private_cache_dir()
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


def private_cache_dir() -> str | None:
    """This user's folder for compiled loops in the temporary directory (``tempfile``'s:
    ``TMPDIR``, else ``/tmp``), made if missing; None where it cannot be trusted or written.
    numba loads what it finds there as code, so the folder must be a real directory that
    this user owns and nobody else may write to or read (mode 0700): a folder another user
    made first (``/tmp`` is shared) is not used."""
    import os
    import stat
    import tempfile

    if not hasattr(os, "getuid"):
        return None
    path = os.path.join(tempfile.gettempdir(), PRIVATE_CACHE.format(uid=os.getuid()))
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
            or st.st_mode & 0o077 or not os.access(path, os.W_OK | os.X_OK)):
        return None
    return path
