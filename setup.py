"""The compiled parts of zym: the columnar Kineto JSON decoder (capture/_kineto_scan.c), the
nesting of torch ops (capture/_nesting.c) and the stack interning walk (schemas/_stacks.c).

Everything else is configured in pyproject.toml. zym runs without them (kineto_json.py then
decodes with msgspec alone, kineto.py nests and stacks.py interns by numpy passes, to the same
tables), so a failed build is not fatal here; CI checks that they were built (tests/importer/
test_native_json.py, test_nesting.py and tests/schemas/test_stacks.py under
ZYM_REQUIRE_SYSTEM=1).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension(name, [source], extra_compile_args=["-O2", "-std=c11"], optional=True)
                   for name, source in (("zym.capture._kineto_scan", "capture/_kineto_scan.c"),
                                        ("zym.capture._nesting", "capture/_nesting.c"),
                                        ("zym.schemas._stacks", "schemas/_stacks.c"))])
