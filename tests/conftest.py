from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"


@pytest.fixture(scope="session")
def sample_trace() -> Path:
    return SAMPLE


@pytest.fixture(scope="session")
def sample_analysis():
    from zym.analysis import analyze

    return analyze(SAMPLE)


@pytest.fixture(scope="session")
def sample_capture(tmp_path_factory) -> Path:
    """The sample, imported once into a zym capture file."""
    from zym.capture.kineto import import_kineto

    return import_kineto(SAMPLE, tmp_path_factory.mktemp("capture") / "sample.parquet")


# Skips that mean "a system part is missing". Under ZYM_REQUIRE_SYSTEM=1 (.ci/run, which
# installs these parts) they fail instead: a broken install must not turn CI green.
SYSTEM_SKIPS = ("eBPF unavailable", "chromium not installed", "cupti-python not installed",
                "needs gcc", "no C compiler", "needs root", "chdb not installed",
                "protoc not installed", "mcp not installed", "needs readelf",
                "numba not installed", "native JSON decoder not built",
                "native stack walk not built", "native nesting not built")


def system_required() -> bool:
    import os

    return os.environ.get("ZYM_REQUIRE_SYSTEM") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and system_required():
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        if any(s in reason for s in SYSTEM_SKIPS):
            report.outcome = "failed"
            report.longrepr = f"ZYM_REQUIRE_SYSTEM=1 but skipped: {reason}"


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory) -> Path:
    """The stand-in libcupti (tests/cupti/fakecupti.c), built once for the CUPTI agent tests."""
    from cupti_builder import build_fake_cupti  # tests/cupti

    out = build_fake_cupti(tmp_path_factory.mktemp("fakecupti"))
    if out is None:
        pytest.skip("no C compiler to build the stand-in libcupti")
    return out
