// Integer and quantized matrix products of the quant family: MatMulInteger, QLinearMatMul and
// Kiln's kiln.QMatMul.
//
// MatMulInteger and QLinearMatMul: the products run on int32 values with the zero points subtracted
// ((a - a_zp) and (b - b_zp) lie in [-255, 255]) and accumulate in uint32: unsigned arithmetic
// wraps, so the result is the exact int32 sum modulo 2^32, what ONNX Runtime's int32 accumulators
// give, without signed overflow. Requantization (QLinearMatMul) follows the ONNX reference:
// multiplier = x_scale * w_scale / y_scale in float32,
// y = saturate(round_half_even(acc * multiplier + y_zero_point)), the product in double.
//
// kiln.QMatMul (made by the fuse-qdq pass): x [..., rows, K] times w [N, K] transposed, then the
// epilogue of runtime/qfused_math.h (see quant_internal.h and conv.cpp's kiln.QConv). The sums:
// small products (below 64^3 multiply-adds) in Kiln's dot products on one thread, larger ones in
// oneDNN's matmul (runtime/cpu/onednn.h), else the integer GEMM (cpu/igemm.h: int16 values, or
// int8 values and dot products on the int8 route of quant_internal.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/igemm.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu::quant {

namespace {

// ---- batched integer matrix product ----------------------------------------------------------

// A per-row (of A) or per-column (of B) parameter: one value, one per row shared by all batches,
// or one per (batch, row). index = mode 0: 0; mode 1: i; mode 2: batch * rows + i.
struct RowParam {
  int mode = 0;
  int64_t rows = 1;
  int64_t index(int64_t batch, int64_t i) const { return mode == 0 ? 0 : mode == 1 ? i : batch * rows + i; }
};
RowParam row_param(int64_t numel, int64_t rank, int64_t rows) {
  if (numel == 1) return {0, rows};
  return {rank == 1 ? 1 : 2, rows};
}
RowParam row_param(std::span<const TensorView> in, size_t i, int64_t rows) {
  if (i >= in.size() || !in[i].exists) return {0, rows};
  return row_param(in[i].numel(), static_cast<int64_t>(in[i].rank()), rows);
}

struct MatmulDims {
  int64_t M = 1, K = 1, N = 1, batches = 1;
  std::vector<int64_t> a_batch, b_batch;  // per output batch: the batch index of A and of B
};

MatmulDims matmul_dims(const TensorView& A, const TensorView& B) {
  MatmulDims d;
  d.K = A.shape[A.rank() - 1];
  d.M = A.rank() >= 2 ? A.shape[A.rank() - 2] : 1;
  d.N = B.rank() >= 2 ? B.shape[B.rank() - 1] : 1;
  std::span<const int64_t> ab = A.rank() > 2 ? A.shape.first(A.rank() - 2) : std::span<const int64_t>();
  std::span<const int64_t> bb = B.rank() > 2 ? B.shape.first(B.rank() - 2) : std::span<const int64_t>();
  const std::vector<int64_t> ob = broadcast_shapes(ab, bb);
  for (int64_t x : ob) d.batches *= x;
  d.a_batch.assign(static_cast<size_t>(d.batches), 0);
  d.b_batch.assign(static_cast<size_t>(d.batches), 0);
  // Walk the output batch index; each operand's stride is 0 along its broadcast axes.
  auto strides = [&](std::span<const int64_t> s) {
    std::vector<int64_t> st(ob.size(), 0);
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
      st[ob.size() - s.size() + i] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
    return st;
  };
  const std::vector<int64_t> sa = strides(ab), sb = strides(bb);
  for (int64_t b = 0; b < d.batches; ++b) {
    int64_t rem = b, ia = 0, ib = 0;
    for (size_t i = ob.size(); i-- > 0;) {
      const int64_t idx = rem % ob[i];
      rem /= ob[i];
      ia += idx * sa[i];
      ib += idx * sb[i];
    }
    d.a_batch[b] = ia;
    d.b_batch[b] = ib;
  }
  return d;
}

// For every output row (batch, i): acc[j] = sum_p (a[i,p] - a_zp) * (b[p,j] - b_zp), then
// emit(batch, a_batch, i, acc) writes the N outputs of the row at out offset (batch * M + i) * N.
template <class TA, class TB, class Emit>
void qmatmul(const TensorView& A, const TensorView& B, const std::vector<int32_t>& zpa, RowParam pa,
             const std::vector<int32_t>& zpb, RowParam pb, KernelEnv& env, const MatmulDims& d, Emit&& emit) {
  const int64_t M = d.M, K = d.K, N = d.N;
  const TA* a = A.as<const TA>();
  const TB* b = B.as<const TB>();
  // B with its zero points subtracted, once for all rows: values in [-255, 255].
  const int64_t b_batches = K * N > 0 ? B.numel() / (K * N) : 0;
  std::vector<int16_t> bq(static_cast<size_t>(B.numel()));
  for (int64_t bb = 0; bb < b_batches; ++bb)
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < N; ++j) {
        const int64_t idx = (bb * K + p) * N + j;
        bq[idx] = static_cast<int16_t>(static_cast<int32_t>(b[idx]) - zpb[pb.index(bb, j)]);
      }
  parallel(env, d.batches * M, std::max<int64_t>(K * N, 1), [&](int64_t r0, int64_t r1) {
    std::vector<uint32_t> acc(static_cast<size_t>(N));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t batch = r / M, i = r % M, ab = d.a_batch[batch];
      const TA* ar = a + (ab * M + i) * K;
      const int16_t* bm = bq.data() + d.b_batch[batch] * K * N;
      const int32_t za = zpa[pa.index(ab, i)];
      std::fill(acc.begin(), acc.end(), 0u);
      for (int64_t p = 0; p < K; ++p) {
        const uint32_t av = static_cast<uint32_t>(static_cast<int32_t>(ar[p]) - za);
        if (av == 0) continue;
        const int16_t* br = bm + p * N;
        for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<uint32_t>(static_cast<int32_t>(br[j]));
      }
      emit(batch, ab, i, acc.data());
    }
  });
}

}  // namespace

void matmul_integer_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           KernelEnv& env) {
  const TensorView &A = in[0], &B = in[1];
  const MatmulDims d = matmul_dims(A, B);
  const std::vector<int32_t> zpa = zero_points(in, 2), zpb = zero_points(in, 3);
  const RowParam pa = row_param(in, 2, d.M), pb = row_param(in, 3, d.N);
  int32_t* y = out[0].as<int32_t>();
  dispatch_q8(A.dtype, "MatMulInteger", [&](auto ta) {
    dispatch_q8(B.dtype, "MatMulInteger", [&](auto tb) {
      qmatmul<typename decltype(ta)::type, typename decltype(tb)::type>(
          A, B, zpa, pa, zpb, pb, env, d, [&](int64_t batch, int64_t, int64_t i, const uint32_t* acc) {
            int32_t* yr = y + (batch * d.M + i) * d.N;
            for (int64_t j = 0; j < d.N; ++j) yr[j] = static_cast<int32_t>(acc[j]);
          });
    });
  });
}

void qlinear_matmul_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           KernelEnv& env) {
  const TensorView &A = in[0], &B = in[3];
  const MatmulDims d = matmul_dims(A, B);
  const std::vector<int32_t> zpa = zero_points(in, 2), zpb = zero_points(in, 5), zpy = zero_points(in, 7);
  const std::vector<float> sa = scales(in[1]), sb = scales(in[4]), sy = scales(in[6]);
  const RowParam pa = row_param(in, 2, d.M), pb = row_param(in, 5, d.N);
  const RowParam psa = row_param(in, 1, d.M), psb = row_param(in, 4, d.N);
  const bool y_per_row = in[6].numel() != 1, zy_per_row = in[7].numel() != 1;
  const bool y_signed = out[0].dtype == DataType::kInt8;
  const double lo = y_signed ? -128 : 0, hi = y_signed ? 127 : 255;
  void* y = out[0].data;
  dispatch_q8(A.dtype, "QLinearMatMul", [&](auto ta) {
    dispatch_q8(B.dtype, "QLinearMatMul", [&](auto tb) {
      qmatmul<typename decltype(ta)::type, typename decltype(tb)::type>(
          A, B, zpa, pa, zpb, pb, env, d, [&](int64_t batch, int64_t ab, int64_t i, const uint32_t* acc) {
            const int64_t o = (batch * d.M + i) * d.N;
            const float s_a = sa[psa.index(ab, i)], s_y = sy[y_per_row ? i : 0];
            const double zy = zpy[zy_per_row ? i : 0];
            for (int64_t j = 0; j < d.N; ++j) {
              // b's parameters are per column of the (broadcast) B matrix of this batch.
              const float mult = s_a * sb[psb.index(d.b_batch[batch], j)] / s_y;
              const int32_t v = requantize(static_cast<int32_t>(acc[j]) * static_cast<double>(mult) + zy, lo, hi);
              if (y_signed)
                store_q<int8_t>(y, o + j, v);
              else
                store_q<uint8_t>(y, o + j, v);
            }
          });
    });
  });
}

namespace {

// Products below this many multiply-adds run Kiln's dot products on one thread: oneDNN's matmul
// costs 1-3 us a call whatever its size, more than LeNet-5's classifier layers take in float32 at
// batch 1 (0.2-4.9 us), and a parallel region costs a few more.
constexpr int64_t kSmallProduct = 64 * 64 * 64;

// The sums of a small product: x's rows centered once, each times every row of w, less each
// channel's w zero point times the row's sum (sum (x)(w - zw) = sum x w - zw sum x).
bool small_product_sums(const Channels& ch, const TensorView& X, const TensorView& W, int64_t R, int64_t Nc, int64_t K,
                        std::vector<int32_t>& sums) {
  if (R * Nc * K >= kSmallProduct || K > 32768) return false;
  thread_local std::vector<int16_t> xs;
  xs.resize(static_cast<size_t>(R * K));
  centered(X, 0, R * K, ch.x_zero, xs.data());
  sums.resize(static_cast<size_t>(R * Nc));
  const bool w_zero = std::any_of(ch.w_zero.begin(), ch.w_zero.end(), [](int32_t z) { return z != 0; });
  for (int64_t r = 0; r < R; ++r) {
    const int16_t* x = xs.data() + r * K;
    int32_t* s = sums.data() + r * Nc;
    if (W.dtype == DataType::kInt8)
      dot_rows(x, K, W.as<const int8_t>(), Nc, s);
    else
      dot_rows(x, K, W.as<const uint8_t>(), Nc, s);
    if (!w_zero) continue;
    int32_t row_sum = 0;
    for (int64_t i = 0; i < K; ++i) row_sum += x[i];
    // In uint32: the difference is within int32 (|x| and |w - zw| <= 255, K <= 32768), its terms
    // need not be.
    for (int64_t j = 0; j < Nc; ++j)
      s[j] =
          static_cast<int32_t>(static_cast<uint32_t>(s[j]) - static_cast<uint32_t>(ch.w_zero[static_cast<size_t>(j)]) *
                                                                 static_cast<uint32_t>(row_sum));
  }
  return true;
}

}  // namespace

void qmatmul_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    KernelEnv& env) {
  const auto& a = std::get<QMatMulAttrs>(attrs);
  const TensorView &X = in[0], &W = in[3], &Y = out[0];
  const int64_t K = W.shape[1], Nc = W.shape[0];
  const int64_t R = K > 0 ? X.numel() / K : Y.numel() / std::max<int64_t>(Nc, 1);
  if (R == 0 || Nc == 0) return;
  const Channels ch = channels(in, Nc, a.activation, a.act_alpha, a.act_beta, Y.dtype);
  thread_local std::vector<int32_t> small;
  if (small_product_sums(ch, X, W, R, Nc, K, small)) {
    store_rows(ch, small.data(), 0, R, Nc, Y);
    return;
  }
  // The sums in oneDNN where it runs them (runtime/cpu/onednn.h: VNNI, weights' zero points 0).
  if (std::all_of(ch.w_zero.begin(), ch.w_zero.end(), [](int32_t z) { return z == 0; })) {
    std::shared_ptr<void> hold;  // the sums' owner where the step has no state slot
    if (const int32_t* sums = onednn::qmatmul_sums(X, R, ch.x_zero, W, env, hold)) {
      parallel(env, R, Nc, [&](int64_t r0, int64_t r1) { store_rows(ch, sums, r0, r1, Nc, Y); });
      return;
    }
  }
  if (int8_route(W, ch)) {  // int8 values and dot products; the zero point's term from the weights' sums
    const int8_t* w = W.as<const int8_t>();
    Igemm8B wt;  // w transposed to [K, N]
    wt.resize(K, Nc);
    for (int64_t j = 0; j < Nc; ++j)
      for (int64_t k = 0; k < K; ++k) wt.set(k, j, w[j * K + k]);
    std::vector<int8_t> xs(static_cast<size_t>(R * K));
    shifted(X, 0, R * K, xs.data());
    std::vector<uint32_t> acc(static_cast<size_t>(R * Nc));
    igemm8(Igemm8Kernel::kAuto, R, xs.data(), K, wt, acc.data(), Nc, env.pool);
    subtract_zero_terms(acc.data(), R * Nc, shifted_zero(X.dtype, ch.x_zero), row_sums(w, Nc, K).data(), Nc, false);
    parallel(env, R, Nc, [&](int64_t r0, int64_t r1) {
      store_rows(ch, reinterpret_cast<const int32_t*>(acc.data()), r0, r1, Nc, Y);
    });
    return;
  }
  const std::vector<int16_t> w = centered_weights(W, ch, Nc, K);
  IgemmB wt;  // w transposed to [K, N]
  wt.resize(K, Nc);
  for (int64_t j = 0; j < Nc; ++j)
    for (int64_t k = 0; k < K; ++k) wt.row(k)[j] = w[static_cast<size_t>(j * K + k)];
  std::vector<int16_t> xs(static_cast<size_t>(R * K));
  centered(X, 0, R * K, ch.x_zero, xs.data());
  std::vector<uint32_t> acc(static_cast<size_t>(R * Nc));
  igemm16(IgemmKernel::kAuto, R, xs.data(), K, wt, acc.data(), Nc, env.pool);
  parallel(env, R, Nc, [&](int64_t r0, int64_t r1) {
    store_rows(ch, reinterpret_cast<const int32_t*>(acc.data()), r0, r1, Nc, Y);
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kMatMulInteger, matmul_integer_kernel},
    {OpKind::kQLinearMatMul, qlinear_matmul_kernel},
    {OpKind::kQMatMul, qmatmul_kernel},
};

}  // namespace

std::span<const KernelEntry> matmul_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::quant
