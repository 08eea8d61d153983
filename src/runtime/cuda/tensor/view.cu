// Reshape, Flatten, Squeeze, Unsqueeze (a device-to-device copy, nothing when input and output
// share memory), Shape and Size (their values come from static shapes and reach the device as kernel
// arguments: a copy from pageable host memory would break stream capture) on the GPU: the ops of
// the tensor family that need no kernel of their own.
#include <vector>

#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::tensor_plan {
// Defined in src/core/infer/tensor/view.cpp.
void shape_bounds(int64_t start, int64_t end, int64_t rank, int64_t& s, int64_t& e);
}  // namespace kiln::tensor_plan

namespace kiln::gpu::tensor {

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

}  // namespace kiln::gpu::tensor
