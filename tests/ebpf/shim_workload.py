"""Workload: a CUDA call under many C-to-Python hops, as every nn.Module call makes (a Python
function called from C gets an entry frame on the C stack in CPython 3.12+, outside the
thread's data stack). ``level`` calls itself through ``map`` HOPS times, then launches."""
import ctypes
import os

lib = ctypes.CDLL(os.environ["FAKECUDA"])


def level(n):
    if n == 0:
        lib.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(0x5), None, None)  # @leaf
        return 0
    return list(map(level, [n - 1]))[0]  # @hop  # noqa: RUF015 (map calls back into Python from C)


def main():
    for _ in range(int(os.environ.get("ITERS", "3"))):
        level(int(os.environ.get("HOPS", "8")))  # @main


main()  # @module
