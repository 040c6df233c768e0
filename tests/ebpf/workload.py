"""Workload for the eBPF capture tests: Python -> ctypes -> the libcuda stand-in.

Calls go through ctypes.CDLL (GIL released, like a torch op) and ctypes.PyDLL (GIL held),
from nested functions and methods, in the main thread and a second thread. Lines the tests
expect in stacks carry a ``# @name`` marker; the tests find them by marker, not by number.

Environment: FAKECUDA (library name or path to load), ITERS, SYNC_US, GO_FILE (when set,
wait for this file to exist before loading the library: the --pid tests attach first),
INIT_SLEEP (seconds between loading the library and the first call, as CUDA's own init),
CUDART (also call the runtime stand-in, which calls the driver), FORK (also run one
iteration in a forked child and in a child that execs a new interpreter).
"""
import ctypes
import os
import subprocess
import sys
import threading
import time


class LaunchConfig(ctypes.Structure):
    _fields_ = [("dims", ctypes.c_uint * 7), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Model:
    def __init__(self, nogil, gil, runtime=None):
        self.nogil, self.gil, self.runtime = nogil, gil, runtime
        self.config = LaunchConfig(hStream=0x9)

    def forward(self, i):
        self.launch(i)  # @forward_launch
        self.copy_back()  # @forward_copy

    def launch(self, i):
        self.nogil.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(0x5), None, None)  # @launch
        self.nogil.cuLaunchKernelEx(ctypes.byref(self.config), None, None, None)  # @launch_ex
        self.nogil.cuMemsetD32Async(ctypes.c_uint64(0x1000), 0, ctypes.c_size_t(256), ctypes.c_void_p(0x5))  # @memset

        if self.runtime:
            self.runtime.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, ctypes.c_size_t(0), ctypes.c_void_p(0x6))  # @rt_launch

    def copy_back(self):
        self.gil.cuMemcpyDtoHAsync_v2(None, ctypes.c_uint64(0x2000), ctypes.c_size_t(4096), ctypes.c_void_p(0x7))  # @copy
        self.nogil.cuStreamSynchronize(ctypes.c_void_p(0x7))  # @sync
        if self.runtime:
            self.runtime.cudaStreamSynchronize(ctypes.c_void_p(0x8))  # @rt_sync


def worker(model, n):
    for i in range(n):
        model.forward(i)  # @worker_forward


def run_children(model):
    """One iteration in a forked child (same interpreter, same addresses) and one in a child
    that execs a fresh interpreter running this file."""
    pid = os.fork()
    if pid == 0:
        worker(model, 1)  # @fork_child
        time.sleep(float(os.environ.get("LINGER") or 0))
        os._exit(0)
    os.waitpid(pid, 0)
    env = {**os.environ, "FORK": "", "ITERS": "1", "GO_FILE": ""}
    subprocess.run([sys.executable, __file__], env=env, check=True)


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
    runtime = ctypes.CDLL(os.environ["CUDART"]) if os.environ.get("CUDART") else None
    n = int(os.environ.get("ITERS", "10"))
    if os.environ.get("FORK"):
        run_children(Model(nogil, gil))
    thread = threading.Thread(target=worker, args=(Model(nogil, gil, runtime), n),
                              name="worker", daemon=True)
    thread.start()
    worker(Model(nogil, gil, runtime), n)  # @main_worker
    thread.join()
    if os.environ.get("LINGER"):
        time.sleep(float(os.environ["LINGER"]))


if __name__ == "__main__":
    main()  # @module_main
