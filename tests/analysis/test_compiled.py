"""The compiled loops' one way to numba (``analysis.compiled.njit``): the loops compiled, in
order, giving what they give interpreted; None where numba cannot be imported."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from zym.analysis.compiled import (
    PRIVATE_CACHE,
    fallback_cache_dir,
    njit,
    private_cache_dir,
    writes,
)


def _running_total(x, out) -> None:
    total = 0
    for i in range(len(x)):
        total += x[i]
        out[i] = total


def _doubled(x, out) -> None:
    for i in range(len(x)):
        out[i] = 2 * x[i]


def test_loops_compiled_in_order_give_what_they_give_interpreted():
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    compiled = njit(_running_total, _doubled)
    assert compiled is not None and len(compiled) == 2
    x = np.arange(1, 8, dtype=np.int64)
    for loop, fast in zip((_running_total, _doubled), compiled, strict=True):
        want, got = np.zeros(7, np.int64), np.zeros(7, np.int64)
        loop(x, want)
        fast(x, got)
        assert np.array_equal(got, want)
        # compiled: numba's, for these arrays (checked: the loops themselves passed the rest)
        assert getattr(fast, "py_func", None) is loop and len(getattr(fast, "signatures", ())) == 1
    assert np.array_equal(want, 2 * x)


@writes("out")
def _scaled_sum(x, k, pair, out) -> None:
    for i in range(len(x)):
        out[i] = x[i] * k + pair[0][i] - pair[1][i]


def test_a_marked_loop_reads_its_arrays_read_only_whoever_made_them():
    """A loop marked with the parameters it writes is compiled once for its inputs however
    they come (writable copies, read-only buffers as polars hands its own, inside a tuple
    too): every array it only reads is passed read-only; the one it writes is written."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    (fast,) = njit(_scaled_sum)

    def frozen(a: np.ndarray) -> np.ndarray:
        a = a.copy()
        a.flags.writeable = False
        return a

    x, y = np.arange(6, dtype=np.int64), np.arange(6, dtype=np.int64) * 10
    want = np.zeros(6, np.int64)
    _scaled_sum(x, 3, (y, x), want)
    for args in ((x, 3, (y, x)), (frozen(x), 3, (y, frozen(x))), (frozen(x), 3, (frozen(y), x))):
        out = np.zeros(6, np.int64)
        fast(*args, out)
        assert np.array_equal(out, want)
    assert len(fast.dispatcher.signatures) == 1
    assert x.flags.writeable  # the caller's arrays are left as they were


def test_every_loop_zym_compiles_is_marked_with_what_it_writes():
    """Every loop of zym's compiled from Python (not an inlined helper) is wrapped so: a
    loop added without a mark would meet read-only and writable inputs apart again."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    from zym.analysis import instances, replay

    loops = [replay._compiled_epochs(), replay._compiled_waits(), replay._compiled_shifts(),
             *replay._compiled_sparse(), *instances._compiled_pass(),
             instances._compiled_firsts()]
    assert len(loops) == 12
    for loop in loops:
        assert hasattr(loop, "dispatcher"), loop


def test_none_without_numba(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # ``import numba`` raises ImportError
    assert njit(_running_total) is None


def test_compiled_where_no_cache_can_be_written(monkeypatch, tmp_path):
    """Where numba can use no cache folder at all it refuses ``cache=True`` with a
    RuntimeError at compile time; the loops are then compiled for this process alone, with
    the same results (before: the error ended the analysis)."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    from numba.core import caching

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])
    import numba

    with pytest.raises(RuntimeError, match="no locator"):  # what numba does there
        numba.njit(cache=True)(_doubled)
    compiled = njit(_running_total, _doubled)
    assert compiled is not None
    x = np.arange(1, 8, dtype=np.int64)
    got = np.zeros(7, np.int64)
    compiled[1](x, got)
    assert np.array_equal(got, 2 * x)
    assert compiled[0]._cache.__class__.__name__ == "NullCache"  # compiled, not cached


def _plus_one(x):
    return x + 1


def _uses_helper(x, out, helper) -> None:
    for i in range(len(x)):
        out[i] = helper(x[i])


def test_inline_helpers_compile_and_are_called_from_compiled_loops():
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    (helper,) = njit(_plus_one, inline=True)
    assert helper.targetoptions.get("inline") == "always"
    (loop,) = njit(_uses_helper)
    x, got = np.arange(5, dtype=np.int64), np.zeros(5, np.int64)
    loop(x, got, helper)
    assert np.array_equal(got, x + 1)


def test_another_numba_failure_is_not_hidden(monkeypatch):
    """Only numba's "cannot cache" refusal is compiled around: another error at compile
    time is raised as it is, not turned into an uncached compile."""
    numba = pytest.importorskip("numba",
                                reason="numba not installed (a zym dependency: pip install -e .)")

    def failing(**options):
        def decorate(loop):
            raise RuntimeError("something else")
        return decorate

    monkeypatch.setattr(numba, "njit", failing)
    with pytest.raises(RuntimeError, match="something else"):
        njit(_doubled)


def _tripled(x, out) -> None:
    for i in range(len(x)):
        out[i] = 3 * x[i]


def _read_only_install(monkeypatch, tmp_path) -> None:
    """numba as in a container with a read-only install and home: of its cache folders only
    ``NUMBA_CACHE_DIR`` would do, and it is not set; zym's cache folder cannot be made
    (``/proc``: not even by root); the temporary directory is ``tmp_path``."""
    from numba.core import caching, config

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes",
                        [caching.UserProvidedCacheLocator])
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("ZYM_CACHE_DIR", "/proc/zym-no-cache-here")
    monkeypatch.delenv("ZYM_CACHE", raising=False)


def test_cached_in_a_private_folder_where_the_install_and_home_are_read_only(monkeypatch,
                                                                            tmp_path):
    """There the loops are cached in this user's own folder in the temporary directory (mode
    0700), so the next process loads them instead of compiling again (~7 s at 1 M GPU
    operations); numba's setting is left as it was."""
    numba = pytest.importorskip("numba",
                                reason="numba not installed (a zym dependency: pip install -e .)")
    from numba.core import config

    _read_only_install(monkeypatch, tmp_path)
    with pytest.raises(RuntimeError, match="no locator"):  # what numba does there
        numba.njit(cache=True)(_tripled)
    (loop,) = njit(_tripled)
    x, got = np.arange(1, 8, dtype=np.int64), np.zeros(7, np.int64)
    loop(x, got)
    assert np.array_equal(got, 3 * x)
    folder = tmp_path / PRIVATE_CACHE.format(uid=os.getuid())
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in folder.rglob("*.nbi") if p.name.startswith("test_compiled._tripled")]
    assert config.CACHE_DIR == ""
    # another process (a new dispatcher) finds the loop there: loaded, not compiled
    (again,) = njit(_tripled)
    again(x, got)
    assert again.stats.cache_hits and not again.stats.cache_misses


@pytest.mark.parametrize("made", ["open to others", "a link", "another user's"])
def test_a_private_folder_that_cannot_be_trusted_is_not_used(monkeypatch, tmp_path, made):
    """numba loads what the folder holds as code: a folder others may write to, a symbolic
    link (to anywhere) or a folder of another user (``/tmp`` is shared: anyone can make the
    name first) is not used; the loops are compiled for this process alone."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    _read_only_install(monkeypatch, tmp_path)
    uid = os.getuid()
    if made == "another user's":  # a folder this user made, under another user's name
        uid += 1
        monkeypatch.setattr(os, "getuid", lambda: uid)
    folder = tmp_path / PRIVATE_CACHE.format(uid=uid)
    if made == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir(mode=0o700)
        if made == "open to others":
            folder.chmod(0o777)
    assert private_cache_dir() is None
    (loop,) = njit(_tripled)
    x, got = np.arange(1, 8, dtype=np.int64), np.zeros(7, np.int64)
    loop(x, got)
    assert np.array_equal(got, 3 * x)
    assert loop._cache.__class__.__name__ == "NullCache"
    assert not list(tmp_path.rglob("*.nbi"))


def _tripled_cached_in(tmp_path) -> list:
    (loop,) = njit(_tripled)
    x, got = np.arange(1, 8, dtype=np.int64), np.zeros(7, np.int64)
    loop(x, got)
    assert np.array_equal(got, 3 * x)
    return sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*.nbi")
                  if p.name.startswith("test_compiled._tripled"))


def test_zym_cache_folder_first_where_it_can_be_written(monkeypatch, tmp_path):
    """``$ZYM_CACHE_DIR`` (or the default zym cache folder), where writable, before the
    temporary directory: the folder the user chose for what zym keeps between runs."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    _read_only_install(monkeypatch, tmp_path)
    monkeypatch.setenv("ZYM_CACHE_DIR", str(tmp_path / "zym-cache"))
    assert _tripled_cached_in(tmp_path) == ["zym-cache"]
    assert (tmp_path / "zym-cache" / "numba").is_dir()


def test_zym_cache_folder_others_can_write_is_not_used(monkeypatch, tmp_path):
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    _read_only_install(monkeypatch, tmp_path)
    monkeypatch.setenv("ZYM_CACHE_DIR", str(tmp_path / "zym-cache"))
    (tmp_path / "zym-cache" / "numba").mkdir(parents=True)
    (tmp_path / "zym-cache" / "numba").chmod(0o777)
    assert _tripled_cached_in(tmp_path) == [PRIVATE_CACHE.format(uid=os.getuid())]


def test_no_cache_folder_with_zym_cache_off(monkeypatch, tmp_path):
    """``ZYM_CACHE=0`` (no files kept between runs): compiled for this process alone."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    _read_only_install(monkeypatch, tmp_path)
    monkeypatch.setenv("ZYM_CACHE_DIR", str(tmp_path / "zym-cache"))
    monkeypatch.setenv("ZYM_CACHE", "0")
    assert fallback_cache_dir() is None
    assert _tripled_cached_in(tmp_path) == []
    assert not (tmp_path / "zym-cache").exists()


def test_private_folder_made_once_and_reused(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = private_cache_dir()
    assert first == str(tmp_path / PRIVATE_CACHE.format(uid=os.getuid()))
    assert private_cache_dir() == first
    assert os.stat(first).st_mode & 0o777 == 0o700


def test_a_compile_of_a_zym_loop_is_told_a_load_from_the_cache_is_not(monkeypatch, tmp_path):
    """``notify_compiles``: told when numba compiles one of zym's loops (and when it is done),
    not when a loop is loaded from numba's cache, already compiled, or not zym's; not after
    it is stopped."""
    import numba
    from numba.core import config
    from zym.analysis import compiled
    from zym.analysis.instances import _firsts

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path))  # read as a loop is decorated
    ids, out = np.array([3, 1, 3, 2, 1], np.int64), np.zeros(5, np.bool_)
    told: list = []
    stop = compiled.notify_compiles(told.append)
    try:
        first = numba.njit(cache=True)(_firsts)
        first(ids, out)
        assert told == [compiled.COMPILING, None]
        assert out.tolist() == [True, True, False, True, False]
        first(ids, out)  # compiled already
        numba.njit(cache=True)(_firsts)(ids, out)  # a new dispatcher: loaded from the cache
        numba.njit(cache=False)(_doubled)(ids, np.zeros(5, np.int64))  # not zym's
        assert told == [compiled.COMPILING, None]
    finally:
        stop()
    numba.njit(cache=False)(_firsts)(ids, out)  # compiled, but nobody is told any more
    assert told == [compiled.COMPILING, None]


def test_the_progress_display_says_a_loop_is_compiling():
    """`zym`'s spinner (stderr a terminal) names the compile beside the stage while numba
    compiles a loop of zym's, then the stage alone."""
    import subprocess

    from zym.analysis.compiled import COMPILING

    code = ("import numpy as np, numba\n"
            "from zym.cli.progress import stage_progress\n"
            "from zym.analysis.instances import _firsts\n"
            "with stage_progress(True) as say:\n"
            "    say('estimating')\n"
            "    numba.njit(cache=False)(_firsts)(np.arange(9), np.zeros(9, np.bool_))\n"
            "    say('writing')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": "200"},
                          check=True)
    assert f"estimating: {COMPILING}…" in done.stderr
    assert done.stderr.index(f"estimating: {COMPILING}…") < done.stderr.rindex("writing…")


_LOADS_NUMBA = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from zym.analysis import compiled
if sys.argv[2] == "cli":
    compiled.skip_blas_check()

def total(x):
    s = 0
    for v in x:
        s += v
    return s

(loop,) = compiled.njit(total)
print(loop(np.arange(10, dtype=np.int64)), "scipy.linalg" in sys.modules,
      "seen" if hasattr(sys.modules.get("scipy"), "linalg_seen") else "not seen")
"""


@pytest.mark.parametrize("process", ["library", "cli"])
def test_the_cli_loads_numba_without_its_look_for_a_blas(tmp_path, process):
    """numba's array functions import scipy.linalg as they load (to see whether a BLAS is
    there: ~0.13 s where scipy is installed); the CLI (``skip_blas_check``) loads them
    without it, and its loops give the same. A stand-in scipy that records being imported
    shows the look, scipy installed or not; a library user's numba keeps it."""
    fake = tmp_path / "scipy"
    (fake / "linalg").mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "1.17.0"\n')  # (numba checks it)
    (fake / "linalg" / "__init__.py").write_text(
        "import sys\nsys.modules['scipy'].linalg_seen = True\n")
    got = subprocess.run([sys.executable, "-c", _LOADS_NUMBA, str(tmp_path), process],
                         capture_output=True, text=True, check=True).stdout.split()
    assert got[0] == "45"
    if process == "cli":
        assert got[1:] == ["False", "not", "seen"]
    else:
        assert got[2] == "seen"   # (numba's look, as it is for a library user)


def test_the_console_script_skips_the_look():
    """`zym` itself (cli/entry.py) asks for it before any command runs."""
    code = ("import sys; sys.argv = ['zym', 'rules', 'list']\n"
            "from zym.analysis import compiled\n"
            "from zym.cli import entry\n"
            "try:\n    entry.main()\nexcept SystemExit:\n    pass\n"
            "print(compiled._BLAS_CHECK)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert got.stdout.strip().splitlines()[-1] == "False", got.stderr
