#include "runtime/cpu/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "runtime/cpu/onednn.h"

// Blocking scheme (Goto / BLIS). op(A) is m x k, op(B) is k x n.
//   for jc over n in steps of NC, pc over k in steps of KC:
//     packed_b <- op(B)[pc:+KC, jc:+NC]             shared by all threads (L3-sized)
//     parallel over tasks = (MC-row block of C) x (group of NR-column slivers):
//       packed_a <- alpha * op(A)[ic:+MC, pc:+KC]    per thread (L2-sized)
//       for each NR sliver of the task:             its kc x NR of packed_b stays in L1
//         for each MR sliver of the block:          its MR x kc of packed_a streams from L2
//           micro-kernel: MR x NR tile of C kept in registers over kc, then
//           C_tile = acc + beta' * C_tile, beta' = beta for the first k block, else 1.
// packed_a: sliver s (rows ic + s*MR ...) is kc*MR contiguous floats, for each p the MR values of
// column p (alpha folded in). packed_b: sliver t (columns jc + t*NR ...) is kc*NR contiguous
// floats, for each p the NR values of row p. Both are zero-padded to whole slivers so the kernel
// always computes full tiles; tiles sticking out of C go through a small buffer. Each kernel step
// is an outer product (MR*NR/lanes FMAs per NR/lanes vector loads + MR broadcasts): compute-bound.
// Threads split C only, never k, so results do not depend on the thread count.

namespace kiln::cpu {
namespace {

typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

inline V4 load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(V4));
  return v;
}

constexpr int kMaxTile = 16 * 32;  // floats in the largest MR x NR tile of any config
// Products below this many multiply-adds stay on one thread: waking workers costs more.
constexpr double kMinParallelWork = 64.0 * 64.0 * 64.0;
// The multiply-adds from which sgemm hands a product to oneDNN.
constexpr int64_t kLibraryMinWork = 64 * 64 * 64;
// A task covers at least this many NR slivers, so re-packing its A block stays cheap (kc*MC
// moves against kc*MC*NR*slivers multiply-adds).
constexpr int64_t kMinSliversPerTask = 4;
// Tasks per thread when splitting; more than one lets the pool's dynamic chunking balance load.
constexpr int64_t kTasksPerThread = 4;

struct KernelConfig {
  const char* name;
  int64_t mr, nr;      // register tile
  int64_t mc, kc, nc;  // cache blocks
  void (*kernel)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float beta);
  // Packs w rows of op(A) / columns of op(B) into MR / NR-wide slivers; see pack_panel.
  void (*pack_a)(const float*, int64_t, int64_t, int64_t, int64_t, float, float*);
  void (*pack_b)(const float*, int64_t, int64_t, int64_t, int64_t, float, float*);
};

// acc[r][j] = sum_p a[p*kMr + r] * b[p*kNr + j]; then C = acc + beta * C (beta == 0: C not read).
// always_inline so that each target-specific wrapper below compiles it for its own ISA.
template <class V, int kMr, int kNv>
[[gnu::always_inline]] inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b,
                                                float* __restrict c, int64_t ldc, float beta) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  V acc[kMr][kNv] = {};
  for (int64_t p = 0; p < kc; ++p, a += kMr, b += kNv * kLanes) {
    V bv[kNv];
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) std::memcpy(&bv[v], b + v * kLanes, sizeof(V));
#pragma GCC unroll 32
    for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 8
      for (int v = 0; v < kNv; ++v) acc[r][v] += a[r] * bv[v];  // an FMA: this file compiles with -ffp-contract=fast
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      float* cp = c + r * ldc + v * kLanes;
      V old{};
      if (beta != 0.f) std::memcpy(&old, cp, sizeof(V));
      const V out = beta != 0.f ? acc[r][v] + beta * old : acc[r][v];
      std::memcpy(cp, &out, sizeof(V));
    }
  }
}

// d[i * ld_d + j] = scale * s[j * ld_s + i] for a 4x4 block (unpck / movlhps / movhlps on SSE).
inline void transpose4(const float* s, int64_t ld_s, float* d, int64_t ld_d, float scale) {
  const V4 x[4] = {load4(s), load4(s + ld_s), load4(s + 2 * ld_s), load4(s + 3 * ld_s)};
  const V4 t0 = __builtin_shufflevector(x[0], x[1], 0, 4, 1, 5);  // x00 x10 x01 x11
  const V4 t1 = __builtin_shufflevector(x[0], x[1], 2, 6, 3, 7);  // x02 x12 x03 x13
  const V4 t2 = __builtin_shufflevector(x[2], x[3], 0, 4, 1, 5);
  const V4 t3 = __builtin_shufflevector(x[2], x[3], 2, 6, 3, 7);
  const V4 y[4] = {__builtin_shufflevector(t0, t2, 0, 1, 4, 5) * scale,  // x00 x10 x20 x30
                   __builtin_shufflevector(t0, t2, 2, 3, 6, 7) * scale,  // x01 x11 x21 x31
                   __builtin_shufflevector(t1, t3, 0, 1, 4, 5) * scale,
                   __builtin_shufflevector(t1, t3, 2, 3, 6, 7) * scale};
  for (int i = 0; i < 4; ++i) std::memcpy(d + i * ld_d, &y[i], sizeof(V4));
}

// dst[(s*kc + p)*kW + r] = scale * src[(s*kW + r)*stride_w + p*stride_k], for r < w - s*kW, else
// 0. stride_w steps along the sliver's width (rows of op(A), columns of op(B)), stride_k along k.
// Source reads follow memory order: big jumps between consecutive reads defeat the hardware
// prefetcher (it stops at page boundaries), which otherwise makes packing the bottleneck.
template <int kW>
void pack_panel(const float* src, int64_t stride_w, int64_t stride_k, int64_t w, int64_t kc, float scale, float* dst) {
  int64_t s0 = 0;
  if (stride_w == 1) {
    // Source rows run along w: read each k step's row once, left to right, dealing kW-wide
    // pieces out to the slivers (each sliver's writes are sequential too).
    s0 = w / kW * kW;
    for (int64_t p = 0; p < kc; ++p) {
      float* d = dst + p * kW;
      for (int64_t j = 0; j < s0; j += kW, d += kc * kW) {
        for (int r = 0; r < kW; ++r) d[r] = scale * src[p * stride_k + j + r];
      }
    }
  }
  // Transposing copy (or a partial sliver): each source row of the sliver is read along k in
  // kBlk-long runs (a cache line) while the kBlk x kW destination block stays in L1.
  constexpr int64_t kBlk = 16;
  for (dst += s0 * kc; s0 < w; s0 += kW, dst += kc * kW) {
    const int64_t rows = std::min<int64_t>(kW, w - s0);
    const float* base = src + s0 * stride_w;
    for (int64_t p0 = 0; p0 < kc; p0 += kBlk) {
      const int64_t pn = std::min(kBlk, kc - p0);
      float* d = dst + p0 * kW;
      int64_t r = 0;
      for (; stride_k == 1 && pn == kBlk && r + 4 <= rows; r += 4) {  // a quarter of the stores
        for (int64_t q = 0; q < kBlk; q += 4) {
          transpose4(base + r * stride_w + p0 + q, stride_w, d + q * kW + r, kW, scale);
        }
      }
      for (; r < rows; ++r) {
        const float* s = base + r * stride_w + p0 * stride_k;
        for (int64_t q = 0; q < pn; ++q) d[q * kW + r] = scale * s[q * stride_k];
      }
      for (; r < kW; ++r) {
        for (int64_t q = 0; q < pn; ++q) d[q * kW + r] = 0.f;
      }
    }
  }
}

// Baseline: 6x8 tile of 4-wide vectors = 12 accumulators, fits the 16 SSE registers.
void kernel_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float beta) {
  micro_kernel<V4, 6, 2>(kc, a, b, c, ldc, beta);
}
const KernelConfig kGenericConfig{"generic", 6, 8, 120, 256, 4096, kernel_generic, pack_panel<6>, pack_panel<8>};

#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_GEMM_X86 1
// 6x16 tile: 12 ymm accumulators + 2 for B + 1 broadcast, of 16 registers.
[[gnu::target("avx2,fma")]] void kernel_avx2(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                             float beta) {
  micro_kernel<V8, 6, 2>(kc, a, b, c, ldc, beta);
}
// 14x32 tile: 28 zmm accumulators + 2 for B + 1 broadcast, of 32 registers.
[[gnu::target("avx512f,fma")]] void kernel_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                                  float beta) {
  micro_kernel<V16, 14, 2>(kc, a, b, c, ldc, beta);
}
// The KC x NR B sliver (16 KiB for avx2, 24 KiB for avx512) must stay in L1 (32-48 KiB on
// current x86) beside the streamed A sliver; the MC x KC packed A block (~100-150 KiB) in L2.
const KernelConfig kAvx2Config{"avx2", 6, 16, 144, 256, 4096, kernel_avx2, pack_panel<6>, pack_panel<16>};
const KernelConfig kAvx512Config{"avx512", 14, 32, 140, 192, 4096, kernel_avx512, pack_panel<14>, pack_panel<32>};
#endif

bool cpu_has(GemmKernel kind) {
#ifdef KILN_GEMM_X86
  __builtin_cpu_init();
  const bool fma = __builtin_cpu_supports("fma");
  if (kind == GemmKernel::kAvx2) return fma && __builtin_cpu_supports("avx2");
  if (kind == GemmKernel::kAvx512) return fma && __builtin_cpu_supports("avx512f");
#endif
  return kind == GemmKernel::kGeneric;
}

const KernelConfig& config_for(GemmKernel kind) {
#ifdef KILN_GEMM_X86
  static const bool has_avx512 = cpu_has(GemmKernel::kAvx512);
  static const bool has_avx2 = cpu_has(GemmKernel::kAvx2);
  if (kind == GemmKernel::kAuto) {
    kind = has_avx512 ? GemmKernel::kAvx512 : has_avx2 ? GemmKernel::kAvx2 : GemmKernel::kGeneric;
  }
  if (kind == GemmKernel::kAvx512 && has_avx512) return kAvx512Config;
  if (kind == GemmKernel::kAvx2 && has_avx2) return kAvx2Config;
#endif
  return kGenericConfig;
}

// Per-thread, 64-byte aligned, grow-only scratch: slot 0 holds packed B or the GEMV vector (owned
// by the thread that called sgemm), slot 1 packed A (owned by the thread running a task). Reused
// across calls, so steady-state GEMMs neither allocate nor fault in fresh pages.
float* scratch(int slot, int64_t count) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& buf = buffers[slot];
  if (buf.size() < size_t(count) + 16) buf.resize(count + 16);  // + 16 floats: room to align
  const auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((addr + 63) & ~uintptr_t{63});
}

void for_range(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool != nullptr) return pool->parallel_for(n, fn);
  if (n > 0) fn(0, n);
}

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// out = acc + beta * out, without reading out when beta == 0 (it may be NaN).
inline void store_out(float& out, float acc, float beta) { out = beta == 0.f ? acc : acc + beta * out; }

float dot(const float* x, const float* y, int64_t k) {
  V4 s0{}, s1{}, s2{}, s3{};  // independent chains hide the add latency
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    s0 += load4(x + p) * load4(y + p);
    s1 += load4(x + p + 4) * load4(y + p + 4);
    s2 += load4(x + p + 8) * load4(y + p + 8);
    s3 += load4(x + p + 12) * load4(y + p + 12);
  }
  s0 += s1 + s2 + s3;
  float sum = s0[0] + s0[1] + s0[2] + s0[3];
  for (; p < k; ++p) sum += x[p] * y[p];
  return sum;
}

// Matrix-vector product, for m == 1 or n == 1: bandwidth-bound, so the matrix is streamed once
// in place (packing it would triple the memory traffic).
// y[j * incy] = sum_p x[p] * mat[p * sp + j * sj] + beta * y[j * incy], x already scaled by alpha.
// Either sp == 1 (each output is a dot product with a contiguous row) or sj == 1 (each k step
// adds a contiguous row segment, scaled, to a block of outputs held in L1).
void gemv(int64_t len, int64_t k, const float* x, const float* mat, int64_t sp, int64_t sj, float beta, float* y,
          int64_t incy, ThreadPool* pool) {
  constexpr int64_t kMaxChunk = 1024;  // outputs per task: 4 KiB of accumulators
  const int64_t tasks = pool != nullptr ? pool->team() * kTasksPerThread : 1;
  const int64_t chunk = std::clamp(ceil_div(len, tasks * 16) * 16, int64_t{64}, kMaxChunk);
  for_range(pool, ceil_div(len, chunk), [&](int64_t c0, int64_t c1) {
    alignas(64) float acc[kMaxChunk];
    for (int64_t j0 = c0 * chunk; j0 < std::min(len, c1 * chunk); j0 += chunk) {
      const int64_t jn = std::min(chunk, len - j0);
      if (sp == 1) {
        for (int64_t j = 0; j < jn; ++j) acc[j] = dot(x, mat + (j0 + j) * sj, k);
      } else {
        std::fill(acc, acc + jn, 0.f);
        for (int64_t p = 0; p < k; ++p) {
          const float* row = mat + p * sp + j0;
          for (int64_t j = 0; j < jn; ++j) acc[j] += x[p] * row[j];
        }
      }
      for (int64_t j = 0; j < jn; ++j) store_out(y[(j0 + j) * incy], acc[j], beta);
    }
  });
}

}  // namespace

bool gemm_kernel_supported(GemmKernel kernel) { return kernel == GemmKernel::kAuto || cpu_has(kernel); }

const char* gemm_kernel_name(GemmKernel kernel) { return config_for(kernel).name; }

void sgemm_with_kernel(GemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                       ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.f) {  // C = beta * C
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) store_out(c[i * ldc + j], 0.f, beta);
    }
    return;
  }
  if (pool != nullptr && double(m) * double(n) * double(k) < kMinParallelWork) pool = nullptr;
  // Element strides of op(A) along its rows / along k, and of op(B) along its columns / along k.
  const int64_t a_sw = trans_a ? 1 : lda, a_sk = trans_a ? lda : 1;
  const int64_t b_sw = trans_b ? ldb : 1, b_sk = trans_b ? 1 : ldb;
  if (m == 1 || n == 1) {
    // m == 1: y = row 0 of C, x = row 0 of op(A), mat(p, j) = op(B)(p, j).
    // n == 1: y = column 0 of C, x = column 0 of op(B), mat(p, i) = op(A)(i, p).
    const bool row = m == 1;
    float* x = scratch(0, k);
    for (int64_t p = 0; p < k; ++p) x[p] = alpha * (row ? a[p * a_sk] : b[p * b_sk]);
    gemv(row ? n : m, k, x, row ? b : a, row ? b_sk : a_sk, row ? b_sw : a_sw, beta, c, row ? 1 : ldc, pool);
    return;
  }
  const int64_t threads = pool != nullptr ? pool->team() : 1;
  const KernelConfig& cfg = config_for(kernel);
  const int64_t mr = cfg.mr, nr = cfg.nr;
  // Split m into equal blocks of at most cfg.mc rows (rounded up to MR), so none is a sliver.
  const int64_t m_blocks = ceil_div(m, cfg.mc);
  const int64_t mc = std::min(cfg.mc, ceil_div(ceil_div(m, m_blocks), mr) * mr);
  float* packed_b = scratch(0, std::min(k, cfg.kc) * std::min(cfg.nc, ceil_div(n, nr) * nr));

  for (int64_t jc = 0; jc < n; jc += cfg.nc) {
    const int64_t nc = std::min(cfg.nc, n - jc);
    const int64_t slivers = ceil_div(nc, nr);
    // Split the panel's columns too when there are too few row blocks to keep threads busy.
    int64_t groups = 1;
    if (threads > 1) {
      const int64_t max_groups = std::max<int64_t>(1, slivers / kMinSliversPerTask);
      groups = std::clamp(ceil_div(threads * kTasksPerThread, m_blocks), int64_t{1}, max_groups);
    }
    const int64_t per_group = ceil_div(slivers, groups);
    groups = ceil_div(slivers, per_group);

    for (int64_t pc = 0; pc < k; pc += cfg.kc) {
      const int64_t kc = std::min(cfg.kc, k - pc);
      const float beta_eff = pc == 0 ? beta : 1.f;
      const float* b_panel = b + pc * b_sk + jc * b_sw;
      for_range(pool, slivers, [&](int64_t s0, int64_t s1) {
        const int64_t w = std::min(nc, s1 * nr) - s0 * nr;
        cfg.pack_b(b_panel + s0 * nr * b_sw, b_sw, b_sk, w, kc, 1.f, packed_b + s0 * kc * nr);
      });

      for_range(pool, m_blocks * groups, [&](int64_t t0, int64_t t1) {
        float* packed_a = scratch(1, mc * kc);
        int64_t packed_block = -1;  // consecutive tasks of one row block share the packed A
        alignas(64) float tile[kMaxTile];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t i0 = t / groups * mc;
          const int64_t rows = std::min(mc, m - i0);
          if (t / groups != packed_block) {
            cfg.pack_a(a + i0 * a_sw + pc * a_sk, a_sw, a_sk, rows, kc, alpha, packed_a);
            packed_block = t / groups;
          }
          const int64_t s_end = std::min(slivers, (t % groups + 1) * per_group);
          for (int64_t s = (t % groups) * per_group; s < s_end; ++s) {
            const int64_t j = jc + s * nr;
            const int64_t cols = std::min(nr, n - j);
            for (int64_t ir = 0; ir < rows; ir += mr) {
              const float* a_sliver = packed_a + ir * kc;
              const float* b_sliver = packed_b + s * kc * nr;
              float* ct = c + (i0 + ir) * ldc + j;
              const int64_t tile_rows = std::min(mr, rows - ir);
              if (tile_rows == mr && cols == nr) {
                cfg.kernel(kc, a_sliver, b_sliver, ct, ldc, beta_eff);
                continue;
              }
              cfg.kernel(kc, a_sliver, b_sliver, tile, nr, 0.f);
              for (int64_t r = 0; r < tile_rows; ++r) {
                for (int64_t q = 0; q < cols; ++q) {
                  store_out(ct[r * ldc + q], tile[r * nr + q], beta_eff);
                }
              }
            }
          }
        }
      });
    }
  }
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool* pool) {
  // Products of some size in oneDNN's GEMM where Kiln has it (runtime/cpu/onednn.h): about twice
  // this file's speed on a BERT encoder's Linear layers. Small ones stay here (no library call).
  if (m * n * k >= kLibraryMinWork &&
      onednn::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool ? pool->team() : 1))
    return;
  sgemm_with_kernel(GemmKernel::kAuto, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
}

}  // namespace kiln::cpu
