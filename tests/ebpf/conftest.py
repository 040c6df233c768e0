"""Fixtures for the eBPF capture tests: skip (with the reason) without root or BCC, and the
stand-in CUDA libraries, built with gcc at test time."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ebpf_helpers import HERE, ebpf_unavailable


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "ebpf" in item.keywords and str(HERE) in str(item.fspath):
            reason = reason if reason is not None else (ebpf_unavailable() or "")
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"eBPF unavailable: {reason}"))


@pytest.fixture(scope="session")
def fake_cuda(tmp_path_factory) -> Path:
    """A directory holding libcuda.so.1 and libcudart.so.12 stand-ins."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the libcuda stand-in")
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(d / "libcuda.so.1"),
                    str(HERE / "fakecuda.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(d / "libcudart.so.12"),
                    str(HERE / "fakecudart.c"), str(d / "libcuda.so.1"),
                    "-Wl,-rpath,$ORIGIN"], check=True)
    return d


