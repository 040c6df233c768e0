"""Line tables and code objects, checked against CPython itself: each pyenv interpreter dumps
its own line tables and the line of every instruction (py-spy's fabricated-code-object test,
with real ones), and the symbolizer reads this process's code objects via /proc/self/mem."""
from __future__ import annotations

import glob
import json
import os
import subprocess

import pytest
from zym.capture.interpreter import detect
from zym.capture.process import ProcessMemory
from zym.capture.symbolize import Symbolizer, parse_location_table, parse_pep626_table

# For every code object of a module with loops, comprehensions, decorators and a multi-line
# call: the raw line table, co_firstlineno, and the line of each instruction per co_lines().
DUMP = r"""
import json, sys, types
src = '''
import functools

def deco(f):
    @functools.wraps(f)
    def inner(*a):
        return f(*a)
    return inner

class K:
    @deco
    def method(self, xs):
        total = 0
        for x in xs:
            if x % 2:
                total += sum(
                    y * 2
                    for y in range(x)
                )
        return [total
                for _ in range(2)]
'''
def codes(c):
    yield c
    for k in c.co_consts:
        if isinstance(k, types.CodeType):
            yield from codes(k)
out = []
for c in codes(compile(src, "m.py", "exec")):
    lines = {}
    for start, end, line in c.co_lines():
        for off in range(start, end, 2):
            lines[off // 2] = line
    out.append({"table": c.co_linetable.hex(), "first": c.co_firstlineno, "lines": lines})
json.dump(out, sys.stdout)
"""
PYTHONS = sorted(glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python3.1[0-3]"))


@pytest.mark.skipif(not PYTHONS, reason="no pyenv CPython 3.10-3.13")
@pytest.mark.parametrize("python", PYTHONS)
def test_line_tables_match_co_lines(python):
    minor = int(python.rsplit(".", 1)[1])
    dumps = json.loads(subprocess.run([python, "-c", DUMP], capture_output=True, text=True,
                                      check=True).stdout)
    parse = parse_location_table if minor >= 11 else parse_pep626_table
    checked = 0
    for d in dumps:
        table = parse(bytes.fromhex(d["table"]), d["first"])
        for index, line in d["lines"].items():
            assert table.line_at(int(index)) == line, (python, d["first"], index)
            checked += 1
    assert checked > 50


def sample_function(n):
    total = 0
    for i in range(n):
        total += i
    return total


def test_symbolizer_reads_this_process():
    interp = detect(os.getpid())
    assert interp is not None and interp.version >= (3, 10)
    code = sample_function.__code__
    sym = Symbolizer(interp, ProcessMemory(os.getpid()))
    lines = {}
    for start, end, line in code.co_lines():
        for off in range(start, end, 2):
            lines[off // 2] = line
    for index, line in lines.items():
        if line is None:
            continue
        if interp.version >= (3, 11):
            instr = id(code) + interp.layout["co_code_adaptive"] + 2 * index
        else:
            instr = index
        name, file, got = sym.frame(id(code), instr)
        assert (name, file, got) == ("sample_function", __file__, line)
    assert sym.frame(id(object()), 0)[0] == "[unreadable frame]"   # not a code object
    assert sym.unreadable == 1
