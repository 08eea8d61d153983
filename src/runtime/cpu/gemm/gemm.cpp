// CPU kernels of the gemm family: Gemm, MatMul, and the fused FusedGemm and FusedMatMul (the
// product, then the epilogue of runtime/cpu/fused_epilogue.h).
// float32 products go through kiln::cpu::sgemm; half types are widened to float32 buffers and
// take the same path; float64 and the integer types use a plain blocked loop (integers wrap
// modulo 2^bits, computed in the unsigned type so overflow is defined).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/cpu/fused_epilogue.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

namespace gemm {

namespace {

void parallel(ThreadPool* pool, int64_t n, int64_t work_per_item, const std::function<void(int64_t, int64_t)>& fn) {
  // Below ~32k operations waking the workers costs more than it saves.
  if (!pool || pool->team() == 1 || n < 2 || n * work_per_item < (1 << 15)) {
    fn(0, n);
  } else {
    pool->parallel_for(n, fn);
  }
}

// Arithmetic type of the generic product: the unsigned twin of an integer type (wrapping), the
// compute type of a float type.
template <class T, bool = std::is_integral_v<T>>
struct GemmAccOf {
  using type = ComputeType<T>;
};
template <class T>
struct GemmAccOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using GemmAcc = typename GemmAccOf<T>::type;

// C = alpha * op(A) op(B) + beta * C (C not read when !use_c), row-major.
template <class T>
void gemm_generic(bool ta, bool tb, int64_t m, int64_t n, int64_t k, GemmAcc<T> alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, GemmAcc<T> beta, bool use_c, T* c, int64_t ldc, ThreadPool* pool) {
  using Acc = GemmAcc<T>;
  parallel(pool, m, n * std::max<int64_t>(k, 1), [&](int64_t i0, int64_t i1) {
    std::vector<Acc> row(static_cast<size_t>(n));
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(row.begin(), row.end(), Acc(0));
      for (int64_t p = 0; p < k; ++p) {
        const Acc av = static_cast<Acc>(static_cast<ComputeType<T>>(ta ? a[p * lda + i] : a[i * lda + p]));
        if (!tb) {
          const T* br = b + p * ldb;
          for (int64_t j = 0; j < n; ++j) row[j] += av * static_cast<Acc>(static_cast<ComputeType<T>>(br[j]));
        } else {
          for (int64_t j = 0; j < n; ++j) row[j] += av * static_cast<Acc>(static_cast<ComputeType<T>>(b[j * ldb + p]));
        }
      }
      T* cr = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) {
        Acc v = alpha * row[j];
        if (use_c) v += beta * static_cast<Acc>(static_cast<ComputeType<T>>(cr[j]));
        cr[j] = static_cast<T>(v);
      }
    }
  });
}

// Float attribute -> integer multiplier: truncated and saturated (a float->int cast of an
// out-of-range value would be undefined).
template <class T>
GemmAcc<T> int_scalar(float f) {
  if (std::isnan(f)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  double v = std::trunc(static_cast<double>(f));
  if (v <= lo) return static_cast<GemmAcc<T>>(std::numeric_limits<T>::lowest());
  if (v >= hi) return static_cast<GemmAcc<T>>(std::numeric_limits<T>::max());
  return static_cast<GemmAcc<T>>(static_cast<T>(v));
}

template <class T>
std::vector<float> widen(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const T* p = t.as<const T>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p[i]);
  return v;
}
template <class T>
void narrow(const std::vector<float>& v, const TensorView& t) {
  T* p = t.as<T>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = T(v[i]);
}

// ---- Gemm ----------------------------------------------------------------------------------

// Y[m, n] = C broadcast (unidirectionally) to [M, N].
template <class T>
void broadcast_c(const TensorView& c, T* y, int64_t m, int64_t n) {
  const T* cp = c.as<const T>();
  const int64_t cr = c.rank() == 2 ? c.shape[0] : 1, cc = c.rank() >= 1 ? c.shape[c.rank() - 1] : 1;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * n + j] = cp[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
}

}  // namespace

void gemm_compute(const GemmAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  const TensorView &A = in[0], &B = in[1], &Y = out[0];
  const bool ta = a.transA != 0, tb = a.transB != 0;
  const int64_t m = Y.shape[0], n = Y.shape[1], k = ta ? A.shape[0] : A.shape[1];
  const int64_t lda = A.shape[1], ldb = B.shape[1];
  const bool has_c = in.size() > 2 && in[2].exists && a.beta != 0.0f;
  if (m == 0 || n == 0) return;
  dispatch_numeric(A.dtype, "Gemm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      // FusedGemm's float16 weights under a float32 product (core/infer/gemm/gemm.cpp): widened, exactly.
      std::vector<float> wide;
      if (B.dtype == DataType::kFloat16) wide = widen<Half>(B);
      const float* b = wide.empty() ? B.as<const float>() : wide.data();
      float* y = Y.as<float>();
      if (has_c) broadcast_c<float>(in[2], y, m, n);
      if (k == 0) {
        for (int64_t i = 0; i < m * n; ++i) y[i] = has_c ? a.beta * y[i] : 0.0f;
        return;
      }
      sgemm(ta, tb, m, n, k, a.alpha, A.as<const float>(), lda, b, ldb, has_c ? a.beta : 0.0f, y, n, env.pool);
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      std::vector<float> af = widen<T>(A), bf = widen<T>(B), yf(static_cast<size_t>(m * n), 0.0f);
      if (has_c) {
        std::vector<float> cf = widen<T>(in[2]);
        TensorView cv = in[2];
        cv.dtype = DataType::kFloat32;
        cv.data = cf.data();
        broadcast_c<float>(cv, yf.data(), m, n);
      }
      if (k == 0) {
        for (float& v : yf) v = has_c ? a.beta * v : 0.0f;
      } else {
        sgemm(ta, tb, m, n, k, a.alpha, af.data(), lda, bf.data(), ldb, has_c ? a.beta : 0.0f, yf.data(), n, env.pool);
      }
      narrow<T>(yf, Y);
    } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                         std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
      T* y = Y.as<T>();
      if (has_c) broadcast_c<T>(in[2], y, m, n);
      GemmAcc<T> alpha, beta;
      if constexpr (std::is_integral_v<T>) {
        alpha = int_scalar<T>(a.alpha);
        beta = int_scalar<T>(a.beta);
      } else {
        alpha = a.alpha;
        beta = a.beta;
      }
      gemm_generic<T>(ta, tb, m, n, k, alpha, A.as<const T>(), lda, B.as<const T>(), ldb, beta, has_c, y, n, env.pool);
    } else {
      throw_unsupported_dtype(A.dtype, "Gemm");
    }
  });
}

namespace {

void gemm_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  gemm_compute(std::get<GemmAttrs>(attrs), in, out, env);
}

// ---- MatMul --------------------------------------------------------------------------------

struct MatMulPlan {
  int64_t m, n, k, batch;
  std::vector<int64_t> a_off, b_off;  // element offset of each batch's matrices
  bool a_folds;                       // B shared by every batch and A's batches contiguous
};

MatMulPlan matmul_plan(const TensorView& A, const TensorView& B, const TensorView& Y) {
  MatMulPlan p;
  const size_t ra = A.rank(), rb = B.rank();
  p.m = ra >= 2 ? A.shape[ra - 2] : 1;
  p.k = A.shape[ra - 1];
  p.n = rb >= 2 ? B.shape[rb - 1] : 1;
  const size_t batch_rank = Y.rank() - (ra >= 2) - (rb >= 2);
  std::vector<int64_t> bshape(Y.shape.begin(), Y.shape.begin() + batch_rank);
  p.batch = 1;
  for (int64_t d : bshape) p.batch *= d;
  // Element strides of each operand's batch dims, aligned right, 0 where broadcast.
  auto batch_strides = [&](const TensorView& t, int64_t mat) {
    std::vector<int64_t> s(batch_rank, 0);
    const size_t tr = t.rank() > 2 ? t.rank() - 2 : 0;
    int64_t acc = mat;
    for (size_t i = 0; i < tr; ++i) {
      const size_t ti = tr - 1 - i, oi = batch_rank - 1 - i;
      s[oi] = t.shape[ti] == 1 ? 0 : acc;
      acc *= t.shape[ti];
    }
    return s;
  };
  const std::vector<int64_t> sa = batch_strides(A, p.m * p.k), sb = batch_strides(B, p.k * p.n);
  p.a_off.assign(static_cast<size_t>(p.batch), 0);
  p.b_off.assign(static_cast<size_t>(p.batch), 0);
  std::vector<int64_t> idx(batch_rank, 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t oa = 0, ob = 0;
    for (size_t i = 0; i < batch_rank; ++i) {
      oa += idx[i] * sa[i];
      ob += idx[i] * sb[i];
    }
    p.a_off[b] = oa;
    p.b_off[b] = ob;
    for (size_t i = batch_rank; i-- > 0;)
      if (++idx[i] < bshape[i])
        break;
      else
        idx[i] = 0;
  }
  bool a_contig = true, b_shared = true;
  for (int64_t b = 0; b < p.batch; ++b) {
    a_contig &= p.a_off[b] == b * p.m * p.k;
    b_shared &= p.b_off[b] == 0;
  }
  p.a_folds = a_contig && b_shared;
  return p;
}

void matmul_f32(const MatMulPlan& p, const float* a, const float* b, float* y, ThreadPool* pool) {
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    std::fill(y, y + p.batch * p.m * p.n, 0.0f);
    return;
  }
  if (p.a_folds) {  // [batch*M, K] x [K, N] in one call
    sgemm(false, false, p.batch * p.m, p.n, p.k, 1.0f, a, p.k, b, p.n, 0.0f, y, p.n, pool);
    return;
  }
  const int threads = pool ? pool->team() : 1;
  const double work = static_cast<double>(p.m) * p.n * p.k;
  if (threads > 1 && p.batch >= threads && work < 128.0 * 128 * 128) {
    // Many small products: one thread per product beats splitting each one.
    pool->parallel_for(p.batch, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi)
        sgemm(false, false, p.m, p.n, p.k, 1.0f, a + p.a_off[bi], p.k, b + p.b_off[bi], p.n, 0.0f, y + bi * p.m * p.n,
              p.n, nullptr);
    });
    return;
  }
  for (int64_t bi = 0; bi < p.batch; ++bi)
    sgemm(false, false, p.m, p.n, p.k, 1.0f, a + p.a_off[bi], p.k, b + p.b_off[bi], p.n, 0.0f, y + bi * p.m * p.n, p.n,
          pool);
}

}  // namespace

void matmul_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  const TensorView &A = in[0], &B = in[1], &Y = out[0];
  const MatMulPlan p = matmul_plan(A, B, Y);
  dispatch_numeric(A.dtype, "MatMul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      matmul_f32(p, A.as<const float>(), B.as<const float>(), Y.as<float>(), env.pool);
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      std::vector<float> af = widen<T>(A), bf = widen<T>(B), yf(static_cast<size_t>(Y.numel()));
      matmul_f32(p, af.data(), bf.data(), yf.data(), env.pool);
      narrow<T>(yf, Y);
    } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                         std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
      const T *a = A.as<const T>(), *b = B.as<const T>();
      T* y = Y.as<T>();
      const int threads = env.pool ? env.pool->team() : 1;
      if (threads > 1 && p.batch >= threads) {
        parallel(env.pool, p.batch, p.m * p.n * std::max<int64_t>(p.k, 1), [&](int64_t b0, int64_t b1) {
          for (int64_t bi = b0; bi < b1; ++bi)
            gemm_generic<T>(false, false, p.m, p.n, p.k, 1, a + p.a_off[bi], p.k, b + p.b_off[bi], p.n, 0, false,
                            y + bi * p.m * p.n, p.n, nullptr);
        });
      } else {
        for (int64_t bi = 0; bi < p.batch; ++bi)
          gemm_generic<T>(false, false, p.m, p.n, p.k, 1, a + p.a_off[bi], p.k, b + p.b_off[bi], p.n, 0, false,
                          y + bi * p.m * p.n, p.n, env.pool);
      }
    } else {
      throw_unsupported_dtype(A.dtype, "MatMul");
    }
  });
}

// ---- FusedGemm / FusedMatMul ----------------------------------------------------------------

void fused_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const std::span<const TensorView> product_in = in.first(std::min<size_t>(in.size(), 3));
  const TensorView* z = fused::optional_input(in, 3);
  switch (kind) {
    case OpKind::kFusedGemm: {
      const auto& a = std::get<FusedGemmAttrs>(attrs);
      gemm_compute(a, product_in, out, env);  // float16 weights under a float32 product included
      return fused::apply_epilogue(a, out[0], nullptr, z, env);
    }
    case OpKind::kFusedMatMul:
      matmul_kernel(OpKind::kMatMul, NoAttrs{}, in.first(2), out, env);
      return fused::apply_epilogue(std::get<EpilogueAttrs>(attrs), out[0], fused::optional_input(in, 2), z, env);
    default: throw Error(std::string(op_name(kind)) + " is not a fused op");
  }
}

// gemm/attention.cpp
void attention_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env);

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kAttention, attention_kernel},  // gemm/attention.cpp
    {OpKind::kGemm, gemm_kernel},
    {OpKind::kMatMul, matmul_kernel},
    {OpKind::kFusedGemm, fused_kernel},
    {OpKind::kFusedMatMul, fused_kernel},
};

}  // namespace

// runtime/cpu/gemm.h: the float64 product of Conv, ConvTranspose and Attention.
void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
              int64_t ldb, double* c, int64_t ldc, ThreadPool* pool) {
  gemm_generic<double>(ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, false, c, ldc, pool);
}

}  // namespace gemm

std::span<const KernelEntry> gemm_kernels() { return gemm::kEntries; }

}  // namespace kiln::cpu
