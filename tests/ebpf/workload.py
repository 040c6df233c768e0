"""Workload for the eBPF capture tests: Python -> ctypes -> the libcuda stand-in.

Calls go through ctypes.CDLL (GIL released, like a torch op) and ctypes.PyDLL (GIL held),
from nested functions and methods, in the main thread and a second thread. Lines the tests
expect in stacks carry a ``# @name`` marker; the tests find them by marker, not by number.

Environment: FAKECUDA (library name or path to load), ITERS, SYNC_US, GO_FILE (when set,
wait for this file to exist before loading the library: the --pid tests attach first),
INIT_SLEEP (seconds between loading the library and the first call, as CUDA's own init).
"""
import ctypes
import os
import threading
import time


class LaunchConfig(ctypes.Structure):
    _fields_ = [("dims", ctypes.c_uint * 7), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


class Model:
    def __init__(self, nogil, gil):
        self.nogil, self.gil = nogil, gil
        self.config = LaunchConfig(hStream=0x9)

    def forward(self, i):
        self.launch(i)  # @forward_launch
        self.copy_back()  # @forward_copy

    def launch(self, i):
        self.nogil.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(0x5), None, None)  # @launch
        self.nogil.cuLaunchKernelEx(ctypes.byref(self.config), None, None, None)  # @launch_ex
        self.nogil.cuMemsetD32Async(ctypes.c_uint64(0x1000), 0, ctypes.c_size_t(256), ctypes.c_void_p(0x5))  # @memset

    def copy_back(self):
        self.gil.cuMemcpyDtoHAsync_v2(None, ctypes.c_uint64(0x2000), ctypes.c_size_t(4096), ctypes.c_void_p(0x7))  # @copy
        self.nogil.cuStreamSynchronize(ctypes.c_void_p(0x7))  # @sync


def worker(model, n):
    for i in range(n):
        model.forward(i)  # @worker_forward


def main():
    go_file = os.environ.get("GO_FILE")
    print(f"pid {os.getpid()}", flush=True)
    while go_file and not os.path.exists(go_file):
        time.sleep(0.02)
    nogil = ctypes.CDLL(os.environ["FAKECUDA"])
    gil = ctypes.PyDLL(os.environ["FAKECUDA"])
    nogil.cuInit(0)
    nogil.fakecuda_set_sync_us(int(os.environ.get("SYNC_US", "20000")))
    time.sleep(float(os.environ.get("INIT_SLEEP", "0")))
    n = int(os.environ.get("ITERS", "10"))
    thread = threading.Thread(target=worker, args=(Model(nogil, gil), n), name="worker")
    thread.start()
    worker(Model(nogil, gil), n)  # @main_worker
    thread.join()
    if os.environ.get("LINGER"):
        time.sleep(float(os.environ["LINGER"]))


if __name__ == "__main__":
    main()  # @module_main
