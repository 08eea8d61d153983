// The wait kernel of HeldTimer (gpu_bench_util.h): one thread that sleeps until the GPU's global
// timer (nanoseconds) has advanced by the requested time.
#include <cstdint>

#include "gpu_bench_util.h"

namespace kiln::gpu::bench {
namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) __nanosleep(1000);
}

}  // namespace

void hold_stream(cudaStream_t stream, double seconds) {
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(seconds * 1e9));
  check_launch("hold_stream");
}

}  // namespace kiln::gpu::bench
