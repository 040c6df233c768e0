/* A stand-in for libcuda.so.1 with the driver entry points zym probes, for the eBPF tests.
 * Built with gcc at test time. Each function does a little controllable work:
 *   synchronizing calls sleep FAKECUDA_SYNC_US microseconds (set by the workload),
 *   launches and copies just touch their arguments.
 * Exported with default visibility and not inlined, so uprobes on the symbols fire. */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;
typedef void *CUfunction;
typedef void *CUevent;
typedef uint64_t CUdeviceptr;
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

static volatile uint64_t sink;
static unsigned sync_us = 1000;

static void sleep_us(unsigned us) {
    if (!us)
        return;   /* the overhead benchmark's sync loop: no sleep, no syscall */
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

#define API __attribute__((visibility("default"), noinline))

API CUresult cuInit(unsigned flags) { sink += flags; return 0; }
API void fakecuda_set_sync_us(unsigned us) { sync_us = us; }

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                            void **extra) {
    sink += (uintptr_t)f + gx + gy + gz + bx + by + bz + shmem + (uintptr_t)s;
    return 0;
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params,
                              void **extra) {
    sink += cfg->gridDimX + (uintptr_t)cfg->hStream + (uintptr_t)f;
    return 0;
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    sink += dst + n + (uintptr_t)s;
    return 0;
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    sink += src + n + (uintptr_t)s;
    return 0;
}
API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
    sink += dst + v + n + (uintptr_t)s;
    return 0;
}
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
    sink += dst + v + n + (uintptr_t)s;
    return 0;
}
API CUresult cuStreamSynchronize(CUstream s) { sink += (uintptr_t)s; sleep_us(sync_us); return 0; }
API CUresult cuCtxSynchronize(void) { sleep_us(sync_us); return 0; }
API CUresult cuEventSynchronize(CUevent e) { sink += (uintptr_t)e; sleep_us(sync_us); return 0; }
/* The caching allocator's driver calls: a free waits as a sync does (the device drains). */
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { if (p) *p = 0x100000 + n; sink += n; return 0; }
API CUresult cuMemFree_v2(CUdeviceptr p) { sink += p; sleep_us(sync_us); return 0; }
API CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
    if (pp) *pp = 0;
    sink += n + flags;
    return 0;
}
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    sink += src + n;
    sleep_us(sync_us);
    return 0;
}
