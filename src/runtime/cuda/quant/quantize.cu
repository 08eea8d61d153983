// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on the GPU, with the CPU kernels' rules
// (runtime/cpu/quant/quantize.cpp):
//   quantize:   y = saturate(rint(x / scale) + zero_point), NaN -> zero point; in float, or in
//               double when x or the scale is int32 (as the ONNX reference does);
//   dequantize: y = (x - zero_point) * scale in float, stored as the output type.
// Scale and zero point are read on the device (they may be computed), per tensor, per axis or
// blocked: x is viewed as [outer, axis_len, inner] and element (o, a, i) uses scale index 0, a, or
// (o * n_blocks + a / block) * inner + i. One thread per element (grid-stride, 64-bit indices).
// The common form, a float32 per-tensor scale with an 8-bit (or no) zero point between float32 or
// float16 data and int8 / uint8 (what Kiln's quantize-int8 and onnxruntime's quantizer write for
// activations; float32 out for DequantizeLinear), takes the vectorized unary kernel instead, with the same arithmetic:
// the generic kernel read and converted every operand through a type switch per element, which made the QuantizeLinear
// after ResNet-50's stem take 10x its bytes.
//
// DynamicQuantizeLinear is two kernels: per-block partial min/max into the workspace, then one
// that reduces the partials again in every block (at most kDqlParts of them: cheap), derives
// scale and zero point on the device with the CPU's float operations (explicitly rounded: no FMA
// contraction), quantizes its share of x, and block 0 stores scale and zero point. Min and max of
// non-NaN values are order-independent, so the result is the CPU's bit for bit.
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/quant/quant_internal.cuh"

namespace kiln::gpu::ew {

namespace {

struct Layout {
  int mode = 0;  // 0 per tensor, 1 per axis, 2 blocked
  int64_t axis_len = 1, inner = 1, block = 1, n_blocks = 1;
};

Layout layout_of(const QuantizeAttrs& a, const TensorView& x, const TensorView& scale) {
  Layout l;
  l.inner = std::max<int64_t>(x.numel(), 1);
  if (scale.rank() == 0 || (scale.numel() == 1 && (scale.rank() == 1 || a.block_size > 0))) return l;
  const int64_t axis = a.axis < 0 ? a.axis + static_cast<int64_t>(x.rank()) : a.axis;
  l.axis_len = x.shape[static_cast<size_t>(axis)];
  l.inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.rank(); ++d) l.inner *= x.shape[d];
  if (a.block_size > 0) {
    l.mode = 2;
    l.block = a.block_size;
    l.n_blocks = scale.shape[static_cast<size_t>(axis)];
  } else {
    l.mode = 1;
  }
  return l;
}

__device__ __forceinline__ int64_t scale_index(const Layout& l, int64_t pos) {
  if (l.mode == 0) return 0;
  const int64_t r = pos / l.inner, i = pos - r * l.inner;
  const int64_t o = r / l.axis_len, a = r - o * l.axis_len;
  return l.mode == 1 ? a : (o * l.n_blocks + a / l.block) * l.inner + i;
}

// Element i of a tensor of ONNX type code `dt`, as double (all the types these ops take).
__device__ __forceinline__ double load_as_double(const void* p, int dt, int64_t i) {
  switch (static_cast<DataType>(dt)) {
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat16: return __half2float(static_cast<const __half*>(p)[i]);
    case DataType::kBFloat16: return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
    case DataType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(p)[i];
    case DataType::kUInt16: return static_cast<const uint16_t*>(p)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    default: return 0;
  }
}

// The CPU's BFloat16::from_float: round to nearest even, NaN stays a quiet NaN.
__device__ __forceinline__ uint16_t to_bf16(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

template <class Q, class O>
__global__ void quantize_kernel(const void* x, int x_dt, const void* scale, int s_dt, const void* zp, int zp_dt, O* y,
                                int64_t n, Layout l) {
  constexpr Q qmin = static_cast<Q>(std::numeric_limits<O>::min()),
              qmax = static_cast<Q>(std::numeric_limits<O>::max());
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = scale_index(l, i);
    // x and the scale as the CPU has them: converted to Q (float or double) first.
    const Q xv = static_cast<Q>(load_as_double(x, x_dt, i)), sv = static_cast<Q>(load_as_double(scale, s_dt, s));
    Q v = rint(xv / sv);
    v = (v == v ? v : Q(0)) + (zp ? static_cast<Q>(load_as_double(zp, zp_dt, s)) : Q(0));
    y[i] = static_cast<O>(v < qmin ? qmin : v > qmax ? qmax : v);
  }
}

template <class O>
__global__ void dequantize_kernel(const void* x, int x_dt, const void* scale, int s_dt, const void* zp, int zp_dt, O* y,
                                  int64_t n, Layout l) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = scale_index(l, i);
    const float sv = static_cast<float>(load_as_double(scale, s_dt, s));
    const float zv = zp ? static_cast<float>(load_as_double(zp, zp_dt, s)) : 0.f;
    const float v = (static_cast<float>(load_as_double(x, x_dt, i)) - zv) * sv;
    if constexpr (std::is_same_v<O, __half>)
      y[i] = __float2half_rn(v);
    else if constexpr (std::is_same_v<O, uint16_t>)  // bfloat16
      y[i] = to_bf16(v);
    else
      y[i] = v;
  }
}

// The per-tensor functors for launch_unary: the scale and zero point are read once per thread.
template <class Z>
struct QuantizeOne {
  const float* scale;
  const Z* zp;
  float qmin, qmax, s = 1, z = 0;
  __device__ void init() {
    s = *scale;
    z = zp ? static_cast<float>(*zp) : 0.0f;
  }
  __device__ float operator()(float x) const {
    // 0 / s is 0 (or NaN, which becomes 0 below as well) for every s; skipping the division for
    // zeros keeps them off its slow path (a zero dividend fails the fast path's range check), which
    // halved the speed of quantizing a ReLU's output, half zeros.
    float v = x == 0.0f ? 0.0f : rintf(__fdiv_rn(x, s));
    v = __fadd_rn(v == v ? v : 0.0f, z);
    return v < qmin ? qmin : v > qmax ? qmax : v;
  }
};

template <class Z>
struct DequantizeOne {
  const float* scale;
  const Z* zp;
  float s = 1, z = 0;
  __device__ void init() {
    s = *scale;
    z = zp ? static_cast<float>(*zp) : 0.0f;
  }
  __device__ float operator()(float x) const { return __fmul_rn(__fsub_rn(x, z), s); }
};

bool per_tensor_fast(const QuantizeAttrs& a, std::span<const TensorView> in, DataType q) {
  const bool has_zp = in.size() > 2 && in[2].exists;
  return layout_of(a, in[0], in[1]).mode == 0 && in[1].dtype == DataType::kFloat32 &&
         (q == DataType::kInt8 || q == DataType::kUInt8) && (!has_zp || in[2].dtype == q);
}

// Runs `fn(Tag<Z>{})` with Z the 8-bit type q (int8_t or uint8_t).
template <class Fn>
void with_8bit(DataType q, Fn&& fn) {
  if (q == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    fn(Tag<uint8_t>{});
}

bool quantized_type(DataType t) {
  return t == DataType::kInt8 || t == DataType::kUInt8 || t == DataType::kInt16 || t == DataType::kUInt16;
}
bool quant_float_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kInt32;
}

void quantize(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
              GpuEnv& env) {
  const int64_t n = out[0].numel();
  if (!quant_float_type(in[0].dtype) || !quant_float_type(in[1].dtype))
    throw Error("QuantizeLinear: unsupported input type " + std::string(dtype_name(in[0].dtype)));
  if (!quantized_type(out[0].dtype))
    throw Error("QuantizeLinear: unsupported output type " + std::string(dtype_name(out[0].dtype)));
  if (n == 0) return;
  const auto& qa = attrs_as<QuantizeAttrs>(attrs);
  const bool has_zp = in.size() > 2 && in[2].exists;
  if (per_tensor_fast(qa, in, out[0].dtype) &&
      (in[0].dtype == DataType::kFloat32 || in[0].dtype == DataType::kFloat16)) {
    with_8bit(out[0].dtype, [&](auto tag) {
      using Z = typename decltype(tag)::type;
      const QuantizeOne<Z> f{
          static_cast<const float*>(in[1].data), has_zp ? static_cast<const Z*>(in[2].data) : nullptr,
          static_cast<float>(std::numeric_limits<Z>::min()), static_cast<float>(std::numeric_limits<Z>::max())};
      if (in[0].dtype == DataType::kFloat32)
        launch_unary<float, Z>(in[0], out[0], env, f, "QuantizeLinear");
      else
        launch_unary<__half, Z>(in[0], out[0], env, f, "QuantizeLinear");
    });
    return;
  }
  const Layout l = layout_of(qa, in[0], in[1]);
  const void* zp = has_zp ? in[2].data : nullptr;
  const int zp_dt = has_zp ? static_cast<int>(in[2].dtype) : 0;
  const bool wide = in[0].dtype == DataType::kInt32 || in[1].dtype == DataType::kInt32;
  auto launch = [&](auto* y) {
    using O = std::remove_pointer_t<decltype(y)>;
    if (wide)
      quantize_kernel<double, O><<<blocks_for(n), kThreads, 0, env.stream>>>(
          in[0].data, static_cast<int>(in[0].dtype), in[1].data, static_cast<int>(in[1].dtype), zp, zp_dt, y, n, l);
    else
      quantize_kernel<float, O><<<blocks_for(n), kThreads, 0, env.stream>>>(
          in[0].data, static_cast<int>(in[0].dtype), in[1].data, static_cast<int>(in[1].dtype), zp, zp_dt, y, n, l);
  };
  switch (out[0].dtype) {
    case DataType::kInt8: launch(static_cast<int8_t*>(out[0].data)); break;
    case DataType::kUInt8: launch(static_cast<uint8_t*>(out[0].data)); break;
    case DataType::kInt16: launch(static_cast<int16_t*>(out[0].data)); break;
    default: launch(static_cast<uint16_t*>(out[0].data)); break;
  }
  check_launch("QuantizeLinear");
}

void dequantize(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env) {
  const int64_t n = out[0].numel();
  if (!quantized_type(in[0].dtype) && in[0].dtype != DataType::kInt32)
    throw Error("DequantizeLinear: unsupported input type " + std::string(dtype_name(in[0].dtype)));
  const DataType ot = out[0].dtype;
  if (ot != DataType::kFloat32 && ot != DataType::kFloat16 && ot != DataType::kBFloat16)
    throw Error("DequantizeLinear: unsupported output type " + std::string(dtype_name(ot)));
  if (n == 0) return;
  const auto& qa = attrs_as<QuantizeAttrs>(attrs);
  const bool has_zp = in.size() > 2 && in[2].exists;
  if (per_tensor_fast(qa, in, in[0].dtype) && ot == DataType::kFloat32) {
    with_8bit(in[0].dtype, [&](auto tag) {
      using Z = typename decltype(tag)::type;
      const DequantizeOne<Z> f{static_cast<const float*>(in[1].data),
                               has_zp ? static_cast<const Z*>(in[2].data) : nullptr};
      launch_unary<Z, float>(in[0], out[0], env, f, "DequantizeLinear");
    });
    return;
  }
  const Layout l = layout_of(qa, in[0], in[1]);
  const void* zp = has_zp ? in[2].data : nullptr;
  const int zp_dt = has_zp ? static_cast<int>(in[2].dtype) : 0;
  auto launch = [&](auto* y) {
    using O = std::remove_pointer_t<decltype(y)>;
    dequantize_kernel<O><<<blocks_for(n), kThreads, 0, env.stream>>>(
        in[0].data, static_cast<int>(in[0].dtype), in[1].data, static_cast<int>(in[1].dtype), zp, zp_dt, y, n, l);
  };
  if (ot == DataType::kFloat32)
    launch(static_cast<float*>(out[0].data));
  else if (ot == DataType::kFloat16)
    launch(static_cast<__half*>(out[0].data));
  else
    launch(static_cast<uint16_t*>(out[0].data));
  check_launch("DequantizeLinear");
}

}  // namespace

}  // namespace kiln::gpu::ew

namespace kiln::gpu::quant {

namespace {

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
    {OpKind::kDequantizeLinear, ew::dequantize},
    {OpKind::kDynamicQuantizeLinear, dynamic_quantize_kernel, dynamic_quantize_workspace},
    {OpKind::kQuantizeLinear, ew::quantize},
};

}  // namespace

std::span<const GpuKernelEntry> quantize_entries() { return kEntries; }

}  // namespace kiln::gpu::quant
