"""Words users read: every message names real things with counts that add up, on captures of
each kind (issue 11's list of wrong or empty words, each reproduced here)."""
from __future__ import annotations

import re

import polars as pl
from zym import rules
from zym.analysis.export.summary import build_report
from zym.rules.testing import CaptureBuilder

STEP = [("python", "main", "app.py", 1), ("python", "step", "app.py", 20)]
TORCH_ONLY = [("python", "_call_impl", "torch/nn/modules/module.py", 1750),
              ("python", "forward", "torch/nn/modules/linear.py", 125)]


def test_low_utilization_fires_on_windows_longer_than_an_int32_of_ns():
    """A 3 s window, mostly idle: the slice length (60 ms) times 50 is past 2**31 ns, where
    an Int32 literal overflowed and the rule never fired."""
    b = CaptureBuilder()
    for _ in range(6):
        b.kernel(STEP, "k", gpu_us=100)
        b.tick(500_000)
    a = b.analysis()
    assert a.facts.window_ns > 2**31
    [f] = [f for f in rules.evaluate(a) if f.rule_id == "utilization.low-utilization"]
    assert f.evidence["share"] > 0.9


def test_no_question_marks_when_no_frame_is_the_users():
    """Syncs reached through framework frames only: the site says so, the per-call phrase
    names the enclosing function rather than '?'."""
    b = CaptureBuilder()
    for _ in range(4):
        with b.enclosing(TORCH_ONLY):
            for _ in range(3):
                b.scalar_readback(TORCH_ONLY)
    for spans in (True, False):
        found = rules.evaluate(b.analysis(spans=spans))
        assert found
        for f in found:
            text = f.title + f.message + f.fix + f.site + f.saving_how
            assert "?" not in text.replace("(?)", "?"), text
            assert "(?)" not in text and "of ?" not in text


def test_pageable_copies_are_reported_per_direction():
    """One line uploading 3 and downloading 5 through pageable memory: two findings, each
    counting its own direction ("88 HtoD copies" counted both before)."""
    b = CaptureBuilder()
    for _ in range(3):
        b.copy(STEP, "HtoD", nbytes=4096, sync=False)
    for _ in range(5):
        b.copy(STEP, "DtoH", nbytes=4096)
    found = [f for f in rules.evaluate(b.analysis()) if f.rule_id == "transfers.pageable-memory"]
    got = sorted((f.evidence["copy_kind"], f.evidence["copies"]) for f in found)
    assert got == [("DtoH", 5), ("HtoD", 3)]
    for f in found:
        assert re.search(rf"{f.evidence['copies']} {f.evidence['copy_kind']} copies", f.message)


def test_no_gpu_idle_claim_without_a_gpu_side():
    """An eBPF-only capture cannot know GPU idle time: no "GPU sat idle 0 ns"."""
    b = CaptureBuilder()
    for _ in range(3):
        with b.enclosing(STEP):
            for _ in range(8):
                b.scalar_readback(STEP)
    found = rules.evaluate(b.analysis(drop="gpu"))
    assert found and not [f for f in found if "idle" in f.message]


def test_header_gpu_op_counts_add_up():
    """CUPTI sync records time a host wait: they are counted apart, not as GPU operations."""
    b = CaptureBuilder()
    b.kernel(STEP, "k", gpu_us=50)
    b.copy(STEP, "DtoH")
    b.gpu.append(dict(b.gpu[-1], kind="sync", name="Stream Sync", ts_ns=b.now, dur_ns=10,
                      correlation_id=b._corr - 1, size_bytes=None, copy_kind=None,
                      src_mem=None, dst_mem=None))
    cap = build_report(b.analysis(), None)["capture"]
    assert cap["gpu_ops"] == cap["kernels"] + cap["copies"] + cap["memsets"] == 2
    assert cap["sync_records"] == 1


def test_every_number_in_a_finding_matches_its_evidence():
    """Counts in the messages are the evidence's counts (one source, no re-derivation)."""
    b = CaptureBuilder()
    for _ in range(3):
        with b.enclosing(STEP):
            for _ in range(5):
                b.kernel(STEP, "k", gpu_us=300)
            for _ in range(6):
                b.scalar_readback(STEP)
    [f] = [f for f in rules.evaluate(b.analysis()) if f.rule_id == "syncs.scalar-readback"]
    assert f"{f.evidence['syncs']} host syncs" in f.message
    assert f"({f.evidence['per_call']:.3g} per call of step)" in f.message
    calls = b.analysis().data.calls
    assert f.evidence["syncs"] == calls.filter(pl.col("kind") == "sync").height == 18
