// The tensor family's shared host helpers (tensor_internal.cuh): host copies of constant inputs,
// device-to-device copies, and the index check.
#include <vector>

#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::gpu::tensor {

// ---- shared helpers ----------------------------------------------------------------------------
std::vector<TensorView> with_host_constants(OpKind kind, std::span<const TensorView> in, const GpuEnv& env) {
  static const int64_t kNothing = 0;  // a non-null pointer for constants without elements
  std::vector<TensorView> v(in.begin(), in.end());
  const uint32_t mask = op_info(kind).const_inputs;
  for (size_t i = 0; i < v.size() && i < 32; ++i) {
    if (!(mask >> i & 1u) || !v[i].exists) continue;
    const void* h = env.host(i);
    if (!h && v[i].numel() > 0)
      throw Error(std::string(name_of(kind)) + ": input " + std::to_string(i) +
                  " is a build-time constant, but the kernel got no host copy of it");
    v[i].data = const_cast<void*>(h ? h : &kNothing);
  }
  return v;
}

void copy_device(void* dst, const void* src, size_t bytes, GpuEnv& env, const char* op) {
  if (dst != src && bytes > 0) check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, env.stream), op);
}

namespace {

__global__ void __launch_bounds__(kThreads)
    check_indices_kernel(const void* ind, bool i64, int64_t n, const __grid_constant__ IndexDims dims, int* error) {
  const int64_t step = grid_threads();
  for (int64_t j = global_thread(); j < n; j += step)
    if (fix_index(load_index(ind, i64, j), dims.dim[j % dims.m]) < 0) report(error, kGpuIndexOutOfRange);
}

}  // namespace

void check_indices(const void* ind, bool i64, int64_t n, const IndexDims& dims, GpuEnv& env, const char* op) {
  if (n <= 0) return;
  check_indices_kernel<<<blocks_for(n), kThreads, 0, env.stream>>>(ind, i64, n, dims, env.error);
  check_launch(op);
}

}  // namespace kiln::gpu::tensor
