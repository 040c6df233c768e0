"""One write path for every file zym writes: a temporary file in the target's folder, fsync,
then an atomic rename, so a reader sees either the old file or the whole new one.

>>> with atomic_output("trace.pftrace", force=False) as tmp:   # doctest: +SKIP
...     tmp.write_bytes(data)                                   # the producer writes ``tmp``

* **Nothing lost.** On any error, on SIGINT and on SIGTERM the temporary file is removed and
  the old output is left as it was. A run killed with SIGKILL leaves its temporary file
  behind; the next write to the same output removes it (the writer holds an ``flock`` on its
  temporary file while it lives, so a temporary file that nobody locks is a dead one's).
* **Only regular files are replaced.** A symlink, folder, FIFO, device or socket at the
  output path is refused, with or without ``force``; an existing regular file is replaced
  only with ``force``. Without ``force`` the last step is ``link(2)``, which fails if the
  output appeared meanwhile, so a file that another program wrote during the run is kept.
* **Concurrent writers are detected.** A second zym writing the same output while the first
  runs finds the first one's locked temporary file and stops with an error, instead of both
  saying "wrote" and one result being lost.
* **Errors are one line.** A missing or read-only folder, a full disk, a name too long for
  the file system or a folder path through a regular file raise ``OutputError``.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from .errors import OutputError, Terminated

NAME_MAX = 255  # bytes in one path component on Linux file systems
_TEMP_RE = re.compile(r"^\.zym-tmp\.([0-9a-f]{12})\.(\d+)$")


def display(path: str | os.PathLike) -> str:
    """A path as one printable line: undecodable bytes as ``\\xNN``, control characters
    escaped, so a hostile file name can neither break a message nor drive the terminal."""
    from .text import printable

    raw = os.fsencode(os.fspath(path))
    return printable(raw.decode("utf-8", "backslashreplace"))


# This process's temporary folders, each with the process that made it: a forked child
# inherits the list, and removes only its own (a parent's are the parent's to remove).
_temp_folders: list[tuple[int, Path]] = []
_removal_set: list[int] = []  # the processes that set their removal up (a fork inherits it)
_CLEANED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def process_temp_folder(prefix: str) -> Path:
    """A new folder in ``$TMPDIR`` for this process's own temporary files (a capture imported or
    sampled for one analysis), removed with what it holds when the process exits: at a normal
    exit, and on SIGTERM or SIGHUP where they would end it at once (their default action: the
    folders are removed, then the signal ends the process as it would have). A forked child
    that leaves with ``os._exit`` calls :func:`remove_temp_folders` itself."""
    import atexit
    import tempfile

    if os.getpid() not in _removal_set:
        _removal_set.append(os.getpid())
        atexit.register(remove_temp_folders)
        _remove_on_signals()
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    _temp_folders.append((os.getpid(), folder))
    return folder


def remove_temp_folders() -> None:
    """Remove the temporary folders this process made (:func:`process_temp_folder`), not those
    of the process it was forked from."""
    import shutil

    me = os.getpid()
    for pid, folder in [t for t in _temp_folders if t[0] == me]:
        shutil.rmtree(folder, True)
        _temp_folders.remove((pid, folder))


def _remove_then_end(signum: int, frame: object) -> None:
    """A signal whose default action ends the process: the temporary folders removed first."""
    remove_temp_folders()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _remove_on_signals() -> None:
    """:func:`_remove_then_end` for SIGTERM and SIGHUP where they have their default action
    (a handler someone else set is left alone), from the main thread only (the only one that
    may set one; from another, the folders are removed at a normal exit only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _CLEANED_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _remove_then_end)


def temp_name(target: Path) -> str:
    """The temporary file for ``target``: short (any target name fits NAME_MAX) and tied to the
    target by a hash of its name, so writers of one output find each other's."""
    key = hashlib.sha256(os.fsencode(target.name)).hexdigest()[:12]
    return f".zym-tmp.{key}.{os.getpid()}"


def check_target(path: Path, force: bool) -> None:
    """Refuse a non-regular file at ``path`` (always) and a regular one without ``force``."""
    if len(os.fsencode(path.name)) > NAME_MAX:
        raise OutputError(f"{display(path)[:80]}...: file name longer than {NAME_MAX} bytes")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise OutputError(f"{display(path)}: a folder on the path is a file") from None
    except OSError as e:
        raise OutputError(f"{display(path)}: cannot check the output ({e.strerror})") from None
    kind = _kind(st.st_mode)
    if kind != "file":
        raise OutputError(f"{display(path)}: is a {kind}; zym writes only regular files: give "
                          "another output name")
    if not force:
        raise OutputError(f"{display(path)}: already exists; pass --force to overwrite it")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{display(folder)}: exists and is not a folder") from None
    except NotADirectoryError:
        raise OutputError(f"{display(folder)}: a folder on the path is a file") from None
    except OSError as e:
        raise OutputError(f"{display(folder)}: cannot create the output folder "
                          f"({e.strerror})") from None
    if not folder.is_dir():
        raise OutputError(f"{display(folder)}: not a folder")


def _sweep_temps(folder: Path, target: Path, mine: str) -> None:
    """Remove dead writers' temporary files of ``target``; raise if a live writer holds one."""
    key = temp_name(target).split(".")[2]
    legacy = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)\.tmp$")  # zym <= 0.1 write_capture
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _TEMP_RE.match(name)
        if m and m.group(1) == key and name != mine:
            if _locked(folder / name):
                raise OutputError(f"{display(target)}: another zym (pid {m.group(2)}) is writing "
                                  "this file now; wait for it to finish or choose another output")
            with contextlib.suppress(OSError):
                (folder / name).unlink()
        elif (lm := legacy.match(name)) and not _alive(int(lm.group(1))):
            with contextlib.suppress(OSError):
                (folder / name).unlink()


def _locked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def write_error(path: Path, e: OSError) -> OutputError:
    """An OSError met while writing ``path``, as one line naming the output."""
    reason = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
              errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
              errno.EPERM: "permission denied", errno.ENAMETOOLONG: "file name too long",
              errno.ENOTDIR: "a folder on the path is a file"}.get(e.errno or 0)
    return OutputError(f"{display(path)}: cannot write ({reason or e.strerror or e}); the "
                       "old file, if any, is unchanged")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, force: bool = False,
                  make_folder: bool = True) -> Iterator[Path]:
    """Yield a temporary path for the producer to write; on success it becomes ``path``.

    See the module doc for what is guaranteed. ``make_folder``: create a missing output
    folder (otherwise a missing folder is an ``OutputError``).
    """
    path = Path(path)
    check_target(path, force)
    folder = path.parent
    if make_folder:
        _make_folder(folder)
    elif not folder.is_dir():
        raise OutputError(f"{display(folder)}: no such folder for the output")
    tmp = folder / temp_name(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with terminate_as_exception():
            try:
                _sweep_temps(folder, path, tmp.name)
                yield tmp
                _fsync(tmp)
                _publish(tmp, path, force)
            except OSError as e:
                raise write_error(path, e) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(tmp: Path, path: Path, force: bool) -> None:
    """Move ``tmp`` onto ``path``, checking again what is there now."""
    try:
        check_target(path, force)
    except OutputError as e:
        raise OutputError(f"{e} (it appeared while zym was writing; nothing was replaced)"
                          ) from None
    if force:
        os.replace(tmp, path)
    else:
        try:
            os.link(tmp, path)  # fails if the output appeared since the check: never replaces
        except FileExistsError:
            raise OutputError(f"{display(path)}: appeared while zym was writing it; kept it, "
                              "pass --force to overwrite") from None
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            os.replace(tmp, path)  # file systems without hard links
        else:
            tmp.unlink()
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """Inside: SIGTERM raises ``Terminated`` (so ``finally`` blocks clean up) instead of ending
    the process at once. Only from the main thread, and only where SIGTERM had its default
    action, or the temporary folders' (:func:`process_temp_folder`: a ``Terminated`` ends the
    process through its normal exit, which removes them); a capture session's own handler
    is left alone."""
    previous = signal.getsignal(signal.SIGTERM)
    if (threading.current_thread() is not threading.main_thread()
            or previous not in (signal.SIG_DFL, _remove_then_end)):
        yield
        return

    def handler(signum, frame):
        raise Terminated("terminated (SIGTERM); the unfinished output was removed")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:  # (a temporary folder made inside keeps its removal on SIGTERM after it)
        made = previous is signal.SIG_DFL and os.getpid() in _removal_set
        signal.signal(signal.SIGTERM, _remove_then_end if made else previous)
