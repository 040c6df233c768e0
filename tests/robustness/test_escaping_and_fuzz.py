"""Terminal and markup injection, --no-rules --fail-on, and property-based fuzzing of the
Kineto decoder, the capture reader and the rule compiler (issue 14)."""
from __future__ import annotations

import json

import pytest
from hostile import SAMPLE_PARQUET, assert_clean_error, capture_rows, write_sealed, zym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zym.schemas.errors import InputError

EVIL = "evil\x1b[2J[/]<script>alert(1)</script>|`x\u202e"


def test_names_cannot_drive_the_terminal_or_inject_markup(tmp_path):
    rows = capture_rows([(0, None, 0, 0)])
    rows["name"] = [EVIL if r in ("frame", "gpu") else n for n, r in zip(rows["name"], rows["record"])]
    p = write_sealed(tmp_path / "evil.parquet", rows)
    for fmt in ("text", "markdown", "json"):
        out = zym("analyze", p, "-f", fmt, "--no-progress")
        assert out.returncode == 0, out.stderr[-800:]
        assert b"\x1b" not in out.stdout and "\u202e".encode() not in out.stdout
        if fmt == "markdown":  # literal inside code spans; nowhere else
            import re
            prose = re.sub(rb"(`+).*?\1", b"", out.stdout)
            assert b"<script>" not in prose


def test_fail_on_without_rules_is_refused():
    assert "--no-rules" in assert_clean_error(
        zym("analyze", SAMPLE_PARQUET, "--no-rules", "--fail-on", "warning", "--no-progress"))


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**80), 2**80),
                    st.floats(allow_nan=True), st.text(max_size=8))
event = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "i", "B"]), "cat": st.sampled_from(
        ["python_function", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "x"]),
    "name": st.text(max_size=12), "pid": scalars, "tid": scalars, "ts": scalars, "dur": scalars,
    "args": st.dictionaries(st.sampled_from(["correlation", "device", "stream", "Python id",
                                             "Python parent id", "External id", "grid", "bytes"]),
                            scalars, max_size=4)})


@FUZZ
@given(st.lists(event, max_size=12))
def test_kineto_decoder_raises_only_input_errors(tmp_path, events):
    from zym.capture.kineto import load_kineto

    p = tmp_path / "f.json"
    p.write_text(json.dumps({"traceEvents": events}))
    try:
        load_kineto(p)
    except InputError:
        pass


@FUZZ
@given(st.integers(0, 10**9), st.binary(min_size=1, max_size=16))
def test_capture_reader_never_accepts_a_changed_file(tmp_path, where, junk):
    from zym.schemas.io import open_capture

    data = bytearray(SAMPLE_PARQUET.read_bytes())
    at = where % len(data)
    changed = data[:at] + junk + data[at + len(junk):]
    if changed == data:
        return
    p = tmp_path / "c.parquet"
    p.write_bytes(changed)
    with pytest.raises(InputError):
        cap = open_capture(p)
        for t in ("frame", "stack", "call", "gpu", "span"):
            cap.load(t)


rule = st.fixed_dictionaries({
    "id": st.just("mine.r"), "title": st.text(max_size=10), "severity": st.sampled_from(
        ["info", "warning", "x"]), "doc": st.just("d"), "relation": st.sampled_from(
        ["calls", "gpu", "gaps", "windows", "nope"]),
    "where": st.dictionaries(st.sampled_from(["api", "kind", "dur_ns", "bytes", "name"]),
                             st.one_of(scalars, st.dictionaries(st.sampled_from(
                                 ["gt", "lt", "regex", "in", "between"]), scalars, max_size=2)),
                             max_size=2),
    "message": st.sampled_from(["{count}", "{api:pct}", "{name:ns}", "{x}", "{count:int}"]),
    "fix": st.just("f")})


@FUZZ
@given(rule)
def test_a_pack_that_lints_clean_runs_clean(tmp_path, r):
    from zym.rules import RuleError, evaluate, parse_pack
    from zym.rules.packcheck import _probe_analysis, run_against_engine

    try:
        pack = parse_pack(json.dumps({"pack": "mine", "version": 1, "rules": [r]}))
        run_against_engine(pack, lambda rid, msg: RuleError(f"{rid}: {msg}"))
    except RuleError:
        return
    evaluate(_probe_analysis(), [pack])  # linted clean: must run clean
