"""Workload for the end-to-end test of `zym capture` with both sides: Python -> the libcuda
stand-in (eBPF sees it) inside runtime calls the libcupti stand-in records (CUPTI sees them).
Environment: FAKECUDA (libcuda stand-in), ZYM_CUPTI_LIB (libcupti stand-in), ITERS,
INIT_SLEEP (seconds after cuInit, as CUDA's own init takes: the eBPF side attaches meanwhile),
STEP_SLEEP (seconds after each step: a run that spans several --rotate intervals)."""
import ctypes
import os
import signal
import threading
import time

cupti = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
cupti.fake_api_begin.restype = ctypes.c_uint64
cupti.fake_api_end.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int]
cuda = ctypes.CDLL(os.environ["FAKECUDA"])
LAUNCH, SYNC = 211, 131  # cudaLaunchKernel, cudaStreamSynchronize callback ids


def launch():
    t = cupti.fake_api_begin()
    cuda.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(5), None, None)  # @launch
    cupti.fake_api_end(LAUNCH, t, 10)


def sync():
    t = cupti.fake_api_begin()
    cuda.cuStreamSynchronize(ctypes.c_void_p(5))  # @sync
    cupti.fake_api_end(SYNC, t, 38)


def step(n):
    for _ in range(n):
        launch()  # @step_launch
    sync()  # @step_sync
    time.sleep(PAUSE)


PAUSE = float(os.environ.get("STEP_SLEEP", "0"))


# SIGINT (zym ending the capture) ends the main thread's loop between steps, never inside a
# launch: a real runtime call is one C call, but here the driver call and the record CUPTI makes
# at the runtime call's end are two Python calls, and a KeyboardInterrupt between them would
# leave a driver call (seen by eBPF) that CUPTI never recorded. The worker thread runs on.
interrupted = threading.Event()
signal.signal(signal.SIGINT, lambda *_: interrupted.set())
cuda.cuInit(0)
time.sleep(float(os.environ.get("INIT_SLEEP", "0")))
iters = int(os.environ.get("ITERS", "20"))
t = threading.Thread(target=lambda: [step(3) for _ in range(iters)])
t.start()
for _ in range(iters):
    if interrupted.is_set():
        break
    step(2)
t.join()
