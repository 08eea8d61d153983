// The extra family's CUDA kernels (the GPU side of runtime/cpu/ops/extra*.cpp): the table, plus
// BitShift and DynamicQuantizeLinear here; the losses in extra_loss.cu, the integer matrix
// products and convolutions in extra_quant.cu.
//
// BitShift is a broadcasting binary elementwise op and reuses the elementwise launcher.
// DynamicQuantizeLinear is two kernels: per-block partial min/max into the workspace, then one
// that reduces the partials again in every block (at most kDqlParts of them: cheap), derives
// scale and zero point on the device with the CPU's float operations (explicitly rounded: no FMA
// contraction), quantizes its share of x, and block 0 stores scale and zero point. Min and max of
// non-NaN values are order-independent, so the result is the CPU's bit for bit.
#include "runtime/cuda/extra_internal.cuh"

namespace kiln::gpu {

namespace extra {

namespace {

// ---- BitShift --------------------------------------------------------------------------------
// Shift amounts >= the bit width give 0, as on the CPU (a C++ shift by that much is undefined).
template <class T, bool kLeft>
struct ShiftOp : ew::NoInit {
  __device__ T operator()(T x, T s) const {
    constexpr T kBits = sizeof(T) * 8;
    if (s >= kBits) return T(0);
    if constexpr (kLeft)
      return static_cast<T>(static_cast<uint64_t>(x) << s);
    else
      return static_cast<T>(x >> s);
  }
};

// ---- DynamicQuantizeLinear -------------------------------------------------------------------
constexpr int kDqlThreads = 256;
constexpr int kDqlParts = 1024;  // partial min/max pairs at most (one per block of the first kernel)

// Min and max with x's NaNs skipped (comparisons with NaN are false), starting from 0 as the CPU.
__device__ __forceinline__ void minmax_step(float v, float& lo, float& hi) {
  lo = v < lo ? v : lo;
  hi = v > hi ? v : hi;
}
// Joins another partial (never NaN) into (lo, hi).
__device__ __forceinline__ void minmax_join(float olo, float ohi, float& lo, float& hi) {
  lo = olo < lo ? olo : lo;
  hi = ohi > hi ? ohi : hi;
}

// Block-wide min/max of (lo, hi); every thread gets the result.
__device__ void block_minmax(float& lo, float& hi) {
  __shared__ float slo[kDqlThreads], shi[kDqlThreads];
  const int t = static_cast<int>(threadIdx.x);
  slo[t] = lo;
  shi[t] = hi;
  __syncthreads();
  for (int s = kDqlThreads / 2; s > 0; s >>= 1) {
    if (t < s) minmax_join(slo[t + s], shi[t + s], slo[t], shi[t]);
    __syncthreads();
  }
  lo = slo[0];
  hi = shi[0];
}

__global__ void __launch_bounds__(kDqlThreads) dql_minmax_kernel(const float* x, int64_t n, float* part) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = ew::global_thread(); i < n; i += ew::grid_threads()) minmax_step(x[i], lo, hi);
  block_minmax(lo, hi);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = lo;
    part[2 * blockIdx.x + 1] = hi;
  }
}

__global__ void __launch_bounds__(kDqlThreads)
    dql_quantize_kernel(const float* x, int64_t n, const float* part, int parts, uint8_t* y, float* scale_out,
                        uint8_t* zp_out) {
  float mn = 0.0f, mx = 0.0f;
  for (int p = threadIdx.x; p < parts; p += kDqlThreads) {
    minmax_join(part[2 * p], part[2 * p + 1], mn, mx);
  }
  block_minmax(mn, mx);
  const float scale = __fdiv_rn(mx == mn ? 1.0f : __fsub_rn(mx, mn), 255.0f);
  float zpf = __fsub_rn(0.0f, __fdiv_rn(mn, scale));
  if (!(zpf >= 0.0f)) zpf = 0.0f;
  if (zpf > 255.0f) zpf = 255.0f;
  const float zp = rintf(zpf);
  for (int64_t i = ew::global_thread(); i < n; i += ew::grid_threads()) {
    float v = __fadd_rn(rintf(__fdiv_rn(x[i], scale)), zp);
    if (!(v >= 0.0f)) v = 0.0f;
    if (v > 255.0f) v = 255.0f;
    y[i] = static_cast<uint8_t>(v);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *scale_out = scale;
    *zp_out = static_cast<uint8_t>(zp);
  }
}

int dql_parts(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kDqlThreads * 8 - 1) / (kDqlThreads * 8), kDqlParts));
}

}  // namespace

void bitshift_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const bool left = std::get<BitShiftAttrs>(attrs).direction == BitShiftDirection::kLeft;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (left)
      ew::launch_binary<T, T, T>(in[0], in[1], out[0], env, ShiftOp<T, true>{}, "BitShift");
    else
      ew::launch_binary<T, T, T>(in[0], in[1], out[0], env, ShiftOp<T, false>{}, "BitShift");
  };
  switch (in[0].dtype) {
    case DataType::kUInt8: return run(Tag<uint8_t>{});
    case DataType::kUInt16: return run(Tag<uint16_t>{});
    case DataType::kUInt32: return run(Tag<uint32_t>{});
    case DataType::kUInt64: return run(Tag<uint64_t>{});
    default: ew::throw_gpu_dtype(in[0].dtype, "BitShift");
  }
}

size_t dynamic_quantize_workspace(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView>,
                                  GpuEnv&) {
  return static_cast<size_t>(2 * dql_parts(in[0].numel())) * sizeof(float);
}

void dynamic_quantize_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                             GpuEnv& env) {
  if (in[0].dtype != DataType::kFloat32) ew::throw_gpu_dtype(in[0].dtype, "DynamicQuantizeLinear");
  const int64_t n = in[0].numel();
  const int parts = dql_parts(n);
  const auto* x = static_cast<const float*>(in[0].data);
  auto* part = static_cast<float*>(env.workspace);
  if (parts > 0) {
    if (env.workspace_bytes < static_cast<size_t>(2 * parts) * sizeof(float))
      throw Error("DynamicQuantizeLinear: the workspace is smaller than the kernel asked for");
    dql_minmax_kernel<<<parts, kDqlThreads, 0, env.stream>>>(x, n, part);
    check_launch("DynamicQuantizeLinear");
  }
  dql_quantize_kernel<<<ew::blocks_for(n), kDqlThreads, 0, env.stream>>>(
      x, n, part, parts, static_cast<uint8_t*>(out[0].data), static_cast<float*>(out[1].data),
      static_cast<uint8_t*>(out[2].data));
  check_launch("DynamicQuantizeLinear");
}

namespace {

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kBitShift, bitshift_kernel},
    {OpKind::kConvInteger, conv_integer_kernel},
    {OpKind::kDynamicQuantizeLinear, dynamic_quantize_kernel, dynamic_quantize_workspace},
    {OpKind::kMatMulInteger, matmul_integer_kernel},
    {OpKind::kNegativeLogLikelihoodLoss, loss_kernel, loss_workspace},
    {OpKind::kQLinearConv, qlinear_conv_kernel},
    {OpKind::kQLinearMatMul, qlinear_matmul_kernel},
    {OpKind::kSoftmaxCrossEntropyLoss, loss_kernel, loss_workspace},
    {OpKind::kQConv, qconv_kernel},
    {OpKind::kQMatMul, qmatmul_kernel},
    {OpKind::kNhwcQConv, qconv_nhwc_kernel, qconv_nhwc_workspace, qconv_nhwc_tactics},
};

}  // namespace
}  // namespace extra

std::span<const GpuKernelEntry> extra_gpu_kernels() { return extra::kEntries; }

}  // namespace kiln::gpu
