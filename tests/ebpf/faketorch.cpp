// A stand-in for torch's C++ layers between a Python call and the CUDA runtime: a binding
// that runs two operators (as one Python line running linear then relu does), each entering
// the dispatcher through at::_ops::<op>::call and reaching cudaLaunchKernel through a kernel
// function. Built with -O2 -fomit-frame-pointer, as torch is, so only .eh_frame unwinds it.
// The tests derive the frames they expect from this file, not from zym's output.
#include <cstddef>
#include <cstdint>

extern "C" int cudaLaunchKernel(const void *func, uint64_t grid_xy, uint32_t grid_z,
                                uint64_t block_xy, uint32_t block_z, void **args,
                                size_t shmem, void *stream);

#define NOINLINE __attribute__((noinline))

namespace at {
namespace native {
// Frames of different sizes, some with a locally allocated buffer, so the unwinder meets
// several CFA offsets.
NOINLINE int launch_gemm(int n) {
    volatile char scratch[512];
    for (int i = 0; i < n && i < 512; i++) scratch[i] = (char)i;
    int rc = cudaLaunchKernel((const void *)&launch_gemm, 1, 1, 1, 1, nullptr, 0, nullptr);
    return rc + scratch[0];
}
// Dynamic stack realignment with a DRAP register (GCC: an over-aligned local plus alloca
// under force_align_arg_pointer, as AVX code in torch's kernels): the CFA becomes a DWARF
// expression (DW_OP_breg6 -8; DW_OP_deref) and rbp's save slot another.
NOINLINE __attribute__((force_align_arg_pointer)) int addmm_out_cuda(int n) {
    alignas(64) volatile char tile[128];
    volatile char *extra = static_cast<volatile char *>(__builtin_alloca((n & 63) + 16));
    tile[n & 127] = 1;
    extra[0] = 2;
    return launch_gemm(n + 1) + tile[n & 127] + extra[0];
}
NOINLINE int relu_kernel(int n) {
    volatile long big[200];
    big[n % 200] = n;
    return cudaLaunchKernel((const void *)&relu_kernel, 2, 1, 2, 1, nullptr, 0, nullptr)
        + (int)big[n % 200];
}
}  // namespace native
namespace _ops {
struct addmm { static int call(int n); };
struct relu { static int call(int n); };
struct add_Tensor { static int call(int n); };
NOINLINE int addmm::call(int n) { return native::addmm_out_cuda(n) * 2; }
NOINLINE int relu::call(int n) { return native::relu_kernel(n) * 3; }
NOINLINE int add_Tensor::call(int n) { return addmm::call(n) + 1; }   // an op calling an op
}  // namespace _ops
}  // namespace at

namespace torch { namespace autograd {
NOINLINE int THPVariable_linear_relu(int n) {
    volatile int a = at::_ops::addmm::call(n);
    return a + at::_ops::relu::call(n);
}
NOINLINE int THPVariable_add(int n) { return at::_ops::add_Tensor::call(n); }
}}  // namespace torch::autograd

extern "C" NOINLINE int faketorch_linear_relu(int n) {
    return torch::autograd::THPVariable_linear_relu(n);
}
extern "C" NOINLINE int faketorch_add(int n) { return torch::autograd::THPVariable_add(n); }
