"""The compiled part of zym: the columnar Kineto JSON decoder (capture/_kineto_scan.c).

Everything else is configured in pyproject.toml. zym runs without it (kineto_json.py then
decodes with msgspec alone, to the same tables), so a failed build is not fatal here; CI
checks that it was built (tests/importer/test_native_json.py under ZYM_REQUIRE_SYSTEM=1).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("zym.capture._kineto_scan", ["capture/_kineto_scan.c"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True)])
