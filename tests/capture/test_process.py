"""Process and library discovery used by the capture (no eBPF needed)."""
from __future__ import annotations

import os
import subprocess
import sys

from zym.capture.interpreter import detect
from zym.capture.libraries import candidate_libraries
from zym.capture.probes import DRIVER, RUNTIME
from zym.capture.process import descendants, is_alive, load_bias, read_maps


def test_descendants_lists_children_and_grandchildren():
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)']); "
            "print(p.pid, flush=True); time.sleep(20)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(parent.stdout.readline())
        assert parent.pid in descendants(os.getpid())
        assert descendants(parent.pid) == [grandchild]
        assert is_alive(grandchild)
    finally:
        parent.kill()
        parent.wait()
    assert not is_alive(parent.pid)


def test_candidate_libraries_come_from_ld_library_path_once_per_file(tmp_path):
    lib = tmp_path / "libcuda.so.580.1"
    lib.write_bytes(b"\x7fELF")
    (tmp_path / "libcuda.so.1").symlink_to(lib.name)
    (tmp_path / "libcudart.so.12").write_bytes(b"\x7fELF")
    (tmp_path / "libcudnn.so.9").write_bytes(b"\x7fELF")
    env = {"LD_LIBRARY_PATH": f"/nonexistent:{tmp_path}"}
    found = candidate_libraries(DRIVER, env)
    assert [p for p in found if p.startswith(str(tmp_path))] == [str(tmp_path / "libcuda.so.1")]
    assert str(tmp_path / "libcudart.so.12") in candidate_libraries(RUNTIME, env)


def test_this_interpreter_is_detected_with_its_load_bias():
    interp = detect(os.getpid())
    assert interp is not None
    assert interp.version == sys.version_info[:2]
    maps = read_maps(os.getpid())
    if interp.path != os.path.realpath(sys.executable):     # shared libpython
        assert load_bias(maps, interp.path) is not None
    assert interp.runtime_addr > 0 and interp.code_type_addr > 0
