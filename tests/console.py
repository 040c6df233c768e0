"""The `zym` console script (cli/entry.py) run as users run it, in a fresh process that reports,
as the last line of its stderr, which of the given heavy modules it imported; and the typer app
itself (cli/main.py), to compare with."""
from __future__ import annotations

import re
import subprocess
import sys


def script(heavy: tuple[str, ...]) -> str:
    """``python -c`` code that runs the console script and reports ``heavy`` at exit."""
    return ("import atexit, sys\n"
            "atexit.register(lambda: print('imported:', ' '.join(m for m in "
            f"{heavy!r} if m in sys.modules), file=sys.stderr))\n"
            "sys.argv[0] = 'zym'\n"
            "from zym.cli.entry import main\n"
            "main()\n")


def console(heavy: tuple[str, ...], *args: str, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script(heavy), *args], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


def typer_app(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The typer commands themselves (cli/main.py, not through cli/entry.py)."""
    return subprocess.run([sys.executable, "-m", "zym.cli.main", *args], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one line a command refused its input with (exit 2, nothing on stdout)."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def imported(r: subprocess.CompletedProcess) -> set[str]:
    """The heavy modules a ``console`` run imported ({"?"}: it printed no report)."""
    lines = r.stderr.splitlines()
    return set(lines[-1].split()[1:]) if lines and lines[-1].startswith("imported:") else {"?"}


def stderr_without_report(r: subprocess.CompletedProcess) -> str:
    return re.sub(r"^imported:.*\n?", "", r.stderr, flags=re.MULTILINE)
