from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def export_source(sample_capture):
    """The sample capture loaded for export, findings included."""
    from zym.analysis.export.source import load_export_source

    return load_export_source(sample_capture)


@pytest.fixture(scope="session")
def sample_pftrace(export_source, tmp_path_factory):
    """The sample exported to a Perfetto trace file."""
    from zym.analysis.export.perfetto import export_perfetto

    out = tmp_path_factory.mktemp("perfetto") / "sample.pftrace"
    export_perfetto(export_source, out)
    return out


@pytest.fixture(scope="session")
def checked(sample_pftrace):
    from zym.analysis.export.check import check_trace

    return check_trace(sample_pftrace.read_bytes())
