// DepthToSpace and SpaceToDepth on the GPU: the CPU kernel's 6-D view of the input
// (runtime/cpu/tensor/depth_space.cpp) copied into the contiguous output, one thread per
// output element (coalesced writes). Elements move as raw bytes, so every element type works.
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::gpu::tensor {

namespace {

struct View6 {
  int64_t shape[6];   // output order
  int64_t stride[6];  // input element strides
};

template <class T, class I>
__global__ void __launch_bounds__(kThreads) gather6_kernel(const T* __restrict__ x, T* __restrict__ y, I n, View6 v) {
  const I step = static_cast<I>(ew::grid_threads());
  for (I i = static_cast<I>(ew::global_thread()); i < n; i += step) {
    I rem = i, off = 0;
#pragma unroll
    for (int d = 5; d >= 0; --d) {
      const I dim = static_cast<I>(v.shape[d]);
      const I q = d > 0 ? rem / dim : 0;
      off += (rem - q * dim) * static_cast<I>(v.stride[d]);
      rem = q;
    }
    y[i] = x[off];
  }
}

void depth_space_gpu(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const auto& a = std::get<DepthToSpaceAttrs>(attrs);
  const char* name = ew::name_of(kind);
  const TensorView& X = in[0];
  const int64_t numel = X.numel();
  if (numel == 0) return;
  if (a.blocksize == 1) {
    check_cuda(cudaMemcpyAsync(out[0].data, X.data, X.bytes(), cudaMemcpyDeviceToDevice, env.stream), name);
    return;
  }
  const int64_t b = a.blocksize, n = X.shape[0], c = X.shape[1], h = X.shape[2], w = X.shape[3];
  const int64_t hw = h * w, chw = c * hw;
  View6 v;
  if (kind == OpKind::kDepthToSpace) {
    const int64_t cc = c / (b * b);
    const int64_t shape[6] = {n, cc, h, b, w, b};
    const int64_t dcr[6] = {chw, hw, w, b * cc * hw, 1, cc * hw};  // input [N, b1, b2, C', H, W]
    const int64_t crd[6] = {chw, b * b * hw, w, b * hw, 1, hw};    // input [N, C', b1, b2, H, W]
    for (int i = 0; i < 6; ++i) {
      v.shape[i] = shape[i];
      v.stride[i] = a.mode == DepthToSpaceMode::kDcr ? dcr[i] : crd[i];
    }
  } else {
    const int64_t shape[6] = {n, b, b, c, h / b, w / b};
    const int64_t stride[6] = {chw, w, 1, hw, b * w, b};  // input [N, C, H', b1, W', b2]
    for (int i = 0; i < 6; ++i) v.shape[i] = shape[i], v.stride[i] = stride[i];
  }
  dispatch_bytes(X.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* x = static_cast<const T*>(X.data);
    auto* y = static_cast<T*>(out[0].data);
    if (numel < (int64_t{1} << 31))
      gather6_kernel<T, uint32_t>
          <<<ew::blocks_for(numel), kThreads, 0, env.stream>>>(x, y, static_cast<uint32_t>(numel), v);
    else
      gather6_kernel<T, uint64_t>
          <<<ew::blocks_for(numel), kThreads, 0, env.stream>>>(x, y, static_cast<uint64_t>(numel), v);
  });
  check_launch(name);
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kDepthToSpace, depth_space_gpu},
    {OpKind::kSpaceToDepth, depth_space_gpu},
};

}  // namespace

std::span<const GpuKernelEntry> depth_space_entries() { return kEntries; }

}  // namespace kiln::gpu::tensor
