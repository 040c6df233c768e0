"""The importer's tests decode with the thread pool whenever they ask for it
(``parallel=True``), as on an idle machine: the reader otherwise skips the pool for a small
trace while no core is free (kineto_prefetch.threads_wanted), which would make the thread
paths' tests depend on the machine's load. tests/importer/test_decode_ahead.py tests that
choice itself."""
from __future__ import annotations

import pytest
from zym.capture import kineto_prefetch


@pytest.fixture(autouse=True)
def decode_threads_as_asked(monkeypatch):
    monkeypatch.setattr(kineto_prefetch, "_threads", True)
