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
