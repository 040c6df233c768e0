/* A stand-in for libcudart.so: runtime entry points that call the driver stand-in, as the
 * real runtime does (so the capture must report one call, named after the runtime API). */
#include <stddef.h>
#include <stdint.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef struct { unsigned x, y, z; } dim3;

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shmem, void *s, void **params, void **extra);
int cuStreamSynchronize(void *s);

#define API __attribute__((visibility("default"), noinline))

API cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                 size_t shmem, cudaStream_t stream) {
    return cuLaunchKernel((void *)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                          (unsigned)shmem, stream, args, NULL);
}
API cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return cuStreamSynchronize(stream); }
