"""`zym analyze/diff --format json` write their report with msgspec (cli/bodies.print_json):
the values the json module would write, indented by one space, text as UTF-8."""
from __future__ import annotations

import io
import json
import math
import subprocess
import sys

from zym.cli.bodies import print_json

VALUE = {"message": "blocked 315.4 µs", "ratio": 1e-05, "big": 1e16, "n": 2**62, "none": None,
         "nan": math.nan, "list": [1, 2.5, "x", True, {"3": []}], "empty": {}}


def test_the_values_are_the_json_modules_with_nan_as_null(monkeypatch):
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    print_json(VALUE)
    text = raw.getvalue().decode("utf-8")
    assert text.endswith("}\n") and "315.4 µs" in text  # UTF-8, not \u00b5
    assert json.loads(text) == VALUE | {"nan": None}
    # the json module's layout: one space a level, "key": value, one item a line
    assert text.splitlines()[:2] == ["{", ' "message": "blocked 315.4 µs",']
    assert ' "list": [\n  1,\n  2.5,' in text


def test_a_text_only_stdout_gets_text(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    print_json({"a": "µ"})
    assert out.getvalue() == '{\n "a": "µ"\n}\n'


def test_a_report_larger_than_the_pipe_arrives_whole(tmp_path):
    """A write larger than the pipe's buffer is taken in parts, none lost."""
    code = ("import sys; from zym.cli.bodies import print_json; "
            "print_json({'rows': [{'i': i, 'text': 'µ' * 50} for i in range(20000)]})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    rows = json.loads(done.stdout)["rows"]
    assert len(rows) == 20000 and rows[-1] == {"i": 19999, "text": "µ" * 50}
