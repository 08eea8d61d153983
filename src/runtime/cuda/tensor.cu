// The tensor family's CUDA kernels (the GPU side of runtime/cpu/ops/tensor*.cpp): the table joining
// the entries of tensor_layout.cu, tensor_index.cu, tensor_scatter.cu and tensor_gen.cu, the
// family's shared host helpers, and the ops that need no kernel of their own: Reshape, Flatten,
// Squeeze, Unsqueeze (a device-to-device copy, nothing when input and output share memory), Shape
// and Size (their values come from static shapes and reach the device as kernel arguments: a copy
// from pageable host memory would break stream capture).
#include <vector>

#include "runtime/cuda/tensor_internal.cuh"

namespace kiln::tensor_plan {
// Defined in src/core/infer/tensor_index.cpp.
void shape_bounds(int64_t start, int64_t end, int64_t rank, int64_t& s, int64_t& e);
}  // namespace kiln::tensor_plan

namespace kiln::gpu {

namespace tensor {

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

namespace {

// ---- Reshape, Flatten, Squeeze, Unsqueeze ------------------------------------------------------
void view_kernel(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  copy_device(out[0].data, in[0].data, out[0].bytes(), env, name_of(kind));
}

// ---- Shape, Size -------------------------------------------------------------------------------
constexpr int kValuesPerLaunch = 16;
struct Values {
  int64_t v[kValuesPerLaunch];
};

__global__ void write_values_kernel(int64_t* out, int n, const __grid_constant__ Values vals) {
  if (static_cast<int>(threadIdx.x) < n) out[threadIdx.x] = vals.v[threadIdx.x];
}

void write_values(int64_t* out, const std::vector<int64_t>& v, GpuEnv& env, const char* op) {
  for (size_t b = 0; b < v.size(); b += kValuesPerLaunch) {
    const int n = static_cast<int>(std::min<size_t>(kValuesPerLaunch, v.size() - b));
    Values vals{};
    for (int i = 0; i < n; ++i) vals.v[i] = v[b + i];
    write_values_kernel<<<1, kValuesPerLaunch, 0, env.stream>>>(out + b, n, vals);
    check_launch(op);
  }
}

void shape_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  const auto& a = attrs_as<ShapeAttrs>(attrs);
  int64_t s = 0, e = 0;
  tensor_plan::shape_bounds(a.start, a.end, static_cast<int64_t>(in[0].rank()), s, e);
  write_values(out[0].as<int64_t>(), std::vector<int64_t>(in[0].shape.begin() + s, in[0].shape.begin() + e), env,
               "Shape");
}

void size_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  write_values(out[0].as<int64_t>(), {in[0].numel()}, env, "Size");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kReshape, view_kernel},   {OpKind::kFlatten, view_kernel}, {OpKind::kSqueeze, view_kernel},
    {OpKind::kUnsqueeze, view_kernel}, {OpKind::kShape, shape_kernel},  {OpKind::kSize, size_kernel},
};

}  // namespace

std::span<const GpuKernelEntry> view_entries() { return kEntries; }

}  // namespace tensor

std::span<const GpuKernelEntry> tensor_gpu_kernels() {
  static const std::vector<GpuKernelEntry> all = [] {
    std::vector<GpuKernelEntry> v;
    for (auto part : {tensor::view_entries(), tensor::layout_entries(), tensor::index_entries(),
                      tensor::scatter_entries(), tensor::gen_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::gpu
