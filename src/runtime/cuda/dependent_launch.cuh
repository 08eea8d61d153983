// Programmatic dependent launch for Kiln's tensor-core convolutions (quant/conv/igemm/igemm_kernel.cuh,
// quant/conv/stream/stream_kernel.cuh, quant/conv/halo/halo_sm90a.cu). On compute capability 9.0 and later a
// kernel launched with launch_dependent() may start while the kernel before it in the stream (or
// in the CUDA graph captured from it) still runs, once every CTA of that one has called
// start_next_kernel() or finished. Until it calls wait_for_inputs(), which returns when the kernel
// before it has finished and its writes are visible, it may only read the weights (constants in
// every engine) and its own shared memory: so a layer's launch and its weight loads overlap the
// previous layer's last tiles. At batch 1, where a layer takes a few microseconds, that overlap is a large
// share of the time.
//
// The rule that keeps it correct: every kernel launched this way calls wait_for_inputs() before it
// reads an activation or writes global memory. A kernel that follows without the attribute (cuDNN,
// the elementwise kernels, a copy) waits for the whole previous kernel as usual. The attribute is
// set only where the kernel's code was compiled for compute capability 9.0 or later (its PTX
// version), since older code has no wait in it: a build for sm_80 that an H100 JIT-compiles runs
// without it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/mma.cuh"

namespace kiln::gpu {

// Lets the next kernel in the stream start (its CTAs wait in wait_for_inputs()).
__device__ __forceinline__ void start_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Until the kernel before this one in the stream has finished and its writes are visible.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Whether `kernel` runs code compiled for compute capability 9.0 or later on `device` (so that its
// wait_for_inputs() and cluster code exist), and no older architecture limits the thread
// (kernel_arch_limit(): sm_87 has neither); asked once per device, a failed query not remembered.
template <auto kernel>
bool runs_sm90_code(int device) {
  if (const int limit = kernel_arch_limit(); limit != 0 && limit < 90) return false;
  static std::atomic<int> known[mma::kMaxDevices] = {};  // 0: not asked yet, 1: no, 2: yes
  if (device >= 0 && device < mma::kMaxDevices)
    if (const int v = known[device].load(std::memory_order_relaxed); v != 0) return v == 2;
  cudaFuncAttributes attr = {};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const bool yes = attr.ptxVersion >= 90 && attr.binaryVersion >= 90;
  if (device >= 0 && device < mma::kMaxDevices) known[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

// Whether the CUDA runtime and driver capture programmatic dependent launches into graphs (12.3
// and later); asked once.
inline bool dependent_launch_supported() {
  static const bool yes = [] {
    int runtime = 0, driver = 0;
    return cudaRuntimeGetVersion(&runtime) == cudaSuccess && cudaDriverGetVersion(&driver) == cudaSuccess &&
           runtime >= 12030 && driver >= 12030;
  }();
  return yes;
}

// kernel<<<grid, threads, smem, stream>>>(args...), as a programmatic dependent launch where the
// runtime has it and the kernel's code has the wait (runs_sm90_code), in clusters of `cluster` CTAs along x where
// cluster > 1 (only kernels compiled for sm_90a ask for that). `what` names the step in an error.
template <auto kernel, class... Args>
void launch_dependent(dim3 grid, int threads, size_t smem, cudaStream_t stream, int cluster, const char* what,
                      Args&&... args) {
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  int device = 0;
  check_cuda(cudaGetDevice(&device), what);
  if (dependent_launch_supported() && runs_sm90_code<kernel>(device)) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // so that a later check_launch does not report it again
    check_cuda(err, what);
  }
}

}  // namespace kiln::gpu
