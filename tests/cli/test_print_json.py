"""`zym analyze/diff --format json` write their report with msgspec (cli/bodies.print_json):
the text the json module would write (indented by one space, ASCII: every character past
``~`` escaped), but for floats in their shortest form and NaN as null."""
from __future__ import annotations

import io
import json
import math
import subprocess
import sys

from zym.cli.bodies import print_json

VALUE = {"message": "blocked 315.4 µs \u202e\x1b😀\x7f", "ratio": 1e-05, "big": 1e16,
         "n": 2**62, "none": None,
         "nan": math.nan, "list": [1, 2.5, "x", True, {"3": []}], "empty": {}}


def test_the_values_are_the_json_modules_with_nan_as_null(monkeypatch):
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    print_json(VALUE)
    text = raw.getvalue().decode("utf-8")
    assert text.endswith("}\n") and text.isascii() and "\x7f" not in text
    assert json.loads(text) == VALUE | {"nan": None}
    # the json module's layout: one space a level, "key": value, one item a line
    first = ' "message": "blocked 315.4 \\u00b5s \\u202e\\u001b\\ud83d\\ude00\\u007f",'
    assert text.splitlines()[:2] == ["{", first]
    assert ' "list": [\n  1,\n  2.5,' in text


def test_a_text_only_stdout_gets_text(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    print_json({"a": "µ"})
    assert out.getvalue() == '{\n "a": "\\u00b5"\n}\n'


def test_a_report_larger_than_the_pipe_arrives_whole(tmp_path):
    """A write larger than the pipe's buffer is taken in parts, none lost."""
    code = ("import sys; from zym.cli.bodies import print_json; "
            "print_json({'rows': [{'i': i, 'text': 'µ' * 50} for i in range(20000)]})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    rows = json.loads(done.stdout)["rows"]
    assert len(rows) == 20000 and rows[-1] == {"i": 19999, "text": "µ" * 50}


def _value(rng, depth=0):
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice([1, 2.5, -3, "µs \"q\"\n", "\u202e\x1b\x7f😀\u2028", None, True,
                           False, [], {}])
    if r < 0.35:  # a long list of scalars and small containers, at any depth
        return [rng.choice([1, "x", None, [2], {"k": 3}]) for _ in range(rng.choice([
            513, 1030]))]
    if r < 0.6:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randint(0, 4))}


def test_the_pieces_are_the_json_modules_layout():
    """Reports with lists longer than a batch (written a batch at a time) and dicts and lists
    nested deeper than the pieces go (encoded at once), text with control characters,
    bidirectional overrides, DEL and characters past U+FFFF: the text is the json module's,
    piece boundaries included."""
    import random

    from zym.analysis.export.jsontext import BATCH, json_chunks

    rng = random.Random(7)
    sizes = [0, 1, BATCH - 1, BATCH, BATCH + 1, 3 * BATCH - 1]
    for _ in range(40):
        value = {f"entry{i}": ([rng.choice([1, "µ", [], {"k": [1]}, _value(rng, 4)])
                                for _ in range(rng.choice(sizes))]
                               if rng.random() < 0.3 else _value(rng))
                 for i in range(rng.randint(0, 5))}
        got = b"".join(json_chunks(value)).decode()
        assert got == json.dumps(value, indent=1)
    for other in ([1, {"a": []}], "x", {}, [], {1: "int key"}, [[[[[1]]]]],
                  {"a": {"b": {"c": {"d": [1, 2]}}}}):
        assert b"".join(json_chunks(other)).decode() == json.dumps(other, indent=1)


def test_no_piece_holds_much_of_a_large_report():
    """A few paths each with thousands of kernels (a list short at the top, long inside): the
    pieces are batches, not the whole text or a whole path."""
    from zym.analysis.export.jsontext import json_chunks

    value = {"paths": [{"path": i, "kernels": [{"name": f"k{j}", "gpu_ns": j}
                                                for j in range(5000)]} for i in range(3)]}
    pieces = list(json_chunks(value))
    total = sum(map(len, pieces))
    assert b"".join(pieces).decode() == json.dumps(value, indent=1)
    assert max(map(len, pieces)) < total / 10
