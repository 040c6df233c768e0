#pragma once
#define __host__
#define __device__
#define __global__
#define __device_builtin__
#define __cudart_builtin__
#define __builtin_align__(a) __attribute__((aligned(a)))
#define __align__(n) __attribute__((aligned(n)))
#define CUDARTAPI
#define CUDART_CB
#define __location__(a)
#define __inline__ inline
#define __forceinline__ inline
#define __thread__ __thread
#define __no_return__ __attribute__((noreturn))
#define __noinline__ __attribute__((noinline))
#define __specialization_static
#define __annotate__(a)
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __cudart_builtin__
