// Integer and quantized matrix products on the GPU: MatMulInteger, QLinearMatMul, and the matmul
// group's table, which also lists QMatMul (qfused.cu). Bit-exact with the CPU kernels
// (runtime/cpu/quant/matmul.cpp): products of zero-point-subtracted int8/uint8 values accumulate
// in uint32 (the exact int32 sum modulo 2^32, no signed overflow), and requantization forms the
// multiplier in float and rounds acc * multiplier + zero_point once per operation in double, half to
// even (quant_internal.cuh).
//
// 16 x 16 output tiles per block of 256 threads, K in steps of 16 through shared
// memory (int32 values with the zero points already subtracted). Batch axes broadcast numpy-style:
// the output batch index is decoded on the device into A's and B's batch indices (up to 8 batch
// axes). Quantization parameters (scalar, per row of A / column of B, or per batch and row) are
// read from device memory by the kernels.
#include "runtime/cuda/quant/quant_internal.cuh"

namespace kiln::gpu::quant {

namespace {

constexpr int kTile = 16;
constexpr int kMaxBatchDims = 8;

// ---- matrix products -------------------------------------------------------------------------

// Output batch b -> (A's batch, B's batch): b's digits in `shape`, dotted with each one's strides.
struct BatchMap {
  int rank = 0;
  int64_t shape[kMaxBatchDims] = {};
  int64_t sa[kMaxBatchDims] = {};
  int64_t sb[kMaxBatchDims] = {};
  __device__ void decode(int64_t b, int64_t& ia, int64_t& ib) const {
    ia = 0;
    ib = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = b % shape[d];
      b /= shape[d];
      ia += idx * sa[d];
      ib += idx * sb[d];
    }
  }
};

struct MatmulDims {
  int64_t M = 1, K = 1, N = 1, batches = 1;
  BatchMap map;
};

MatmulDims matmul_dims(const TensorView& A, const TensorView& B, const char* op) {
  MatmulDims d;
  d.K = A.shape[A.rank() - 1];
  d.M = A.rank() >= 2 ? A.shape[A.rank() - 2] : 1;
  d.N = B.rank() >= 2 ? B.shape[B.rank() - 1] : 1;
  std::span<const int64_t> ab = A.rank() > 2 ? A.shape.first(A.rank() - 2) : std::span<const int64_t>();
  std::span<const int64_t> bb = B.rank() > 2 ? B.shape.first(B.rank() - 2) : std::span<const int64_t>();
  const std::vector<int64_t> ob = broadcast_shapes(ab, bb);
  if (ob.size() > static_cast<size_t>(kMaxBatchDims))
    throw Error(std::string(op) + ": " + std::to_string(ob.size()) + " batch axes; the CUDA backend supports at most " +
                std::to_string(kMaxBatchDims));
  auto strides = [&](std::span<const int64_t> s, int64_t* st) {
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
      st[ob.size() - s.size() + i] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
  };
  d.map.rank = static_cast<int>(ob.size());
  for (size_t i = 0; i < ob.size(); ++i) {
    d.map.shape[i] = ob[i];
    d.batches *= ob[i];
  }
  strides(ab, d.map.sa);
  strides(bb, d.map.sb);
  return d;
}

// epi(out_index, a_batch, b_batch, i, j, acc) for every output of every batch.
template <class TA, class TB, class Epi>
__global__ void __launch_bounds__(kTile* kTile)
    qmatmul_kernel(const TA* a, const TB* b, int64_t M, int64_t K, int64_t N, int64_t batches, BatchMap map, QParam za,
                   QParam zb, Epi epi) {
  __shared__ int32_t as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  // Loop bounds depend on the block only, so every thread reaches every barrier.
  for (int64_t batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    int64_t ia, ib;
    map.decode(batch, ia, ib);
    const TA* am = a + ia * M * K;
    const TB* bm = b + ib * K * N;
    const int32_t zb_j = j < N ? load_zero_point(zb, zb.at(ib, j)) : 0;
    for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile; i0 < M; i0 += static_cast<int64_t>(gridDim.y) * kTile) {
      const int64_t i = i0 + ty;  // this thread's output row, and the A row it loads
      const int32_t za_i = i < M ? load_zero_point(za, za.at(ia, i)) : 0;
      uint32_t acc = 0;
      for (int64_t k0 = 0; k0 < K; k0 += kTile) {
        as[ty][tx] = i < M && k0 + tx < K ? static_cast<int32_t>(am[i * K + k0 + tx]) - za_i : 0;
        bs[ty][tx] = k0 + ty < K && j < N ? static_cast<int32_t>(bm[(k0 + ty) * N + j]) - zb_j : 0;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile; ++kk) acc += static_cast<uint32_t>(as[ty][kk]) * static_cast<uint32_t>(bs[kk][tx]);
        __syncthreads();
      }
      if (i < M && j < N) epi((batch * M + i) * N + j, ia, ib, i, j, acc);
    }
  }
}

struct IntOut {
  int32_t* y;
  __device__ void operator()(int64_t o, int64_t, int64_t, int64_t, int64_t, uint32_t acc) const {
    y[o] = static_cast<int32_t>(acc);
  }
};

// y = requantize(acc * (s_a * s_b / s_y) + z_y); y's parameters are scalar or per output row.
template <class TY>
struct QLinearMatmulOut {
  TY* y;
  QParam sa, sb, sy, zy;
  double lo, hi;
  __device__ void operator()(int64_t o, int64_t ia, int64_t ib, int64_t i, int64_t j, uint32_t acc) const {
    const float s_a = load_scale(sa, sa.at(ia, i)), s_b = load_scale(sb, sb.at(ib, j)),
                s_y = load_scale(sy, sy.at(0, i));
    y[o] = static_cast<TY>(
        requantize_acc(static_cast<int32_t>(acc), s_a, s_b, s_y, load_zero_point(zy, zy.at(0, i)), lo, hi));
  }
};

template <class Fn>
void dispatch_q8(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kUInt8)
    fn(Tag<uint8_t>{});
  else if (t == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    ew::throw_gpu_dtype(t, op);
}

// Dispatches A's and B's types and launches with epi.
template <class Epi>
void launch_qmatmul(const TensorView& A, const TensorView& B, const MatmulDims& d, const QParam& za, const QParam& zb,
                    const Epi& epi, GpuEnv& env, const char* op) {
  if (d.M == 0 || d.N == 0 || d.batches == 0) return;
  const dim3 grid(static_cast<unsigned>((d.N + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>((d.M + kTile - 1) / kTile, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(d.batches, 65535)));
  if ((d.N + kTile - 1) / kTile > 0x7fffffff) throw Error(std::string(op) + ": N is too large for the CUDA backend");
  dispatch_q8(A.dtype, op, [&](auto ta) {
    dispatch_q8(B.dtype, op, [&](auto tb) {
      using TA = typename decltype(ta)::type;
      using TB = typename decltype(tb)::type;
      qmatmul_kernel<TA, TB, Epi><<<grid, kTile * kTile, 0, env.stream>>>(
          static_cast<const TA*>(A.data), static_cast<const TB*>(B.data), d.M, d.K, d.N, d.batches, d.map, za, zb, epi);
      check_launch(op);
    });
  });
}

}  // namespace

void matmul_integer_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           GpuEnv& env) {
  const char* op = "MatMulInteger";
  const MatmulDims d = matmul_dims(in[0], in[1], op);
  launch_qmatmul(in[0], in[1], d, make_qparam(in, 2, d.M, op), make_qparam(in, 3, d.N, op),
                 IntOut{static_cast<int32_t*>(out[0].data)}, env, op);
}

void qlinear_matmul_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           GpuEnv& env) {
  const char* op = "QLinearMatMul";
  const MatmulDims d = matmul_dims(in[0], in[3], op);
  // y's scale and zero point: one value, or one per output row (mode 1 whenever not a single value).
  QParam sy = make_qparam(in, 6, d.M, op), zy = make_qparam(in, 7, d.M, op);
  sy.at.mode = sy.at.mode ? 1 : 0;
  zy.at.mode = zy.at.mode ? 1 : 0;
  const QParam sa = make_qparam(in, 1, d.M, op), sb = make_qparam(in, 4, d.N, op);
  const QParam za = make_qparam(in, 2, d.M, op), zb = make_qparam(in, 5, d.N, op);
  if (out[0].dtype == DataType::kInt8)
    launch_qmatmul(in[0], in[3], d, za, zb,
                   QLinearMatmulOut<int8_t>{static_cast<int8_t*>(out[0].data), sa, sb, sy, zy, -128, 127}, env, op);
  else if (out[0].dtype == DataType::kUInt8)
    launch_qmatmul(in[0], in[3], d, za, zb,
                   QLinearMatmulOut<uint8_t>{static_cast<uint8_t*>(out[0].data), sa, sb, sy, zy, 0, 255}, env, op);
  else
    ew::throw_gpu_dtype(out[0].dtype, op);
}

namespace {

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kMatMulInteger, matmul_integer_kernel},
    {OpKind::kQLinearMatMul, qlinear_matmul_kernel},
    {OpKind::kQMatMul, quant::qmatmul_kernel},  // qfused.cu (not the kernel template above)
};

}  // namespace

std::span<const GpuKernelEntry> matmul_entries() { return kEntries; }

}  // namespace kiln::gpu::quant
