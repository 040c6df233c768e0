"""A service for the --rotate cost benchmark: two threads launch kernels (stand-in libcuda
under stand-in runtime calls the stand-in libcupti records) and synchronise, for SECONDS,
then print what they did and the CPU time this process spent (its own, from getrusage).
Environment: FAKECUDA, ZYM_CUPTI_LIB, SECONDS, PAUSE (seconds between steps)."""
import ctypes
import json
import os
import resource
import threading
import time

cupti = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
cupti.fake_api_begin.restype = ctypes.c_uint64
cupti.fake_api_end.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int]
cuda = ctypes.CDLL(os.environ["FAKECUDA"])
LAUNCH, SYNC = 211, 131
PAUSE = float(os.environ.get("PAUSE", "0.002"))
counts = {"launches": 0, "syncs": 0}
lock = threading.Lock()


def step(n: int) -> None:
    for _ in range(n):
        t = cupti.fake_api_begin()
        cuda.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(5), None, None)
        cupti.fake_api_end(LAUNCH, t, 10)
    t = cupti.fake_api_begin()
    cuda.cuStreamSynchronize(ctypes.c_void_p(5))
    cupti.fake_api_end(SYNC, t, 38)
    with lock:
        counts["launches"] += n
        counts["syncs"] += 1
    time.sleep(PAUSE)


def serve(n: int, until: float) -> None:
    while time.monotonic() < until:
        step(n)


cuda.cuInit(0)
time.sleep(float(os.environ.get("INIT_SLEEP", "0.5")))
until = time.monotonic() + float(os.environ.get("SECONDS", "10"))
worker = threading.Thread(target=serve, args=(3, until))
worker.start()
serve(2, until)
worker.join()
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps(counts | {"cpu_s": use.ru_utime + use.ru_stime}), flush=True)
