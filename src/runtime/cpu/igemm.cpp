// Integer GEMM (see igemm.h). A is packed as one int32 per (row, pair of k) holding the two int16
// values, so a broadcast gives vpmaddwd its left operand; B rows 2p and 2p + 1 are interleaved in
// registers (vpunpck[lh]wd, which works within 128-bit lanes: the low result holds columns 0-3 and
// 8-11, the high one 4-7 and 12-15, put back in order at the end). A is zero-padded to 4 rows and
// an even k. The
// micro-tile is 4 rows x 16 columns: 8 accumulators of 8 int32. Work is split over (row tile,
// 64-column block) pairs; a block's packed B (k x 64 int16) is reused by every row tile.
#include "runtime/cpu/igemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_IGEMM_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

namespace kiln::cpu {

namespace {

constexpr int64_t kMr = 4, kNr = 16, kNBlock = 64;

// A packed: one uint32 per (row, pair of k) holding the two int16 values (the high half is the odd k).
struct PackedA {
  int64_t mp = 0, kp = 0;
  std::vector<uint32_t> a;  // [mp][kp], zero-padded
};

PackedA pack_a(int64_t m, int64_t k, const int16_t* a, int64_t lda) {
  PackedA p;
  p.mp = (m + kMr - 1) / kMr * kMr;
  p.kp = (k + 1) / 2;
  p.a.assign(static_cast<size_t>(p.mp * p.kp), 0);
  for (int64_t i = 0; i < m; ++i) {
    const int16_t* ai = a + i * lda;
    uint32_t* pi = p.a.data() + i * p.kp;
    for (int64_t q = 0; q + 1 < k; q += 2)
      pi[q / 2] = uint32_t{static_cast<uint16_t>(ai[q])} | uint32_t{static_cast<uint16_t>(ai[q + 1])} << 16;
    if (k % 2) pi[k / 2] = static_cast<uint16_t>(ai[k - 1]);
  }
  return p;
}

// One 4 x 16 tile: rows i0.., columns j0.. of the padded problem; writes the valid part of C.
void tile_generic(const PackedA& pa, const IgemmB& pb, int64_t i0, int64_t j0, int64_t m, uint32_t* c, int64_t ldc) {
  uint32_t acc[kMr][kNr] = {};
  for (int64_t q = 0; q < pa.kp; ++q) {
    const int16_t *b0 = pb.row(2 * q) + j0, *b1 = pb.row(2 * q + 1) + j0;
    for (int64_t r = 0; r < kMr; ++r) {
      const uint32_t ap = pa.a[static_cast<size_t>((i0 + r) * pa.kp + q)];
      const auto a0 = static_cast<int32_t>(static_cast<int16_t>(ap & 0xffff)),
                 a1 = static_cast<int32_t>(static_cast<int16_t>(ap >> 16));
      for (int64_t j = 0; j < kNr; ++j) acc[r][j] += static_cast<uint32_t>(a0 * b0[j] + a1 * b1[j]);
    }
  }
  for (int64_t r = 0; r < kMr && i0 + r < m; ++r)
    for (int64_t j = 0; j < kNr && j0 + j < pb.n; ++j) c[(i0 + r) * ldc + j0 + j] = acc[r][j];
}

#ifdef KILN_IGEMM_X86
[[gnu::target("avx2")]] void tile_avx2(const PackedA& pa, const IgemmB& pb, int64_t i0, int64_t j0, int64_t m,
                                       uint32_t* c, int64_t ldc) {
  __m256i acc[kMr][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
  const uint32_t* a = pa.a.data() + i0 * pa.kp;
  for (int64_t q = 0; q < pa.kp; ++q) {
    const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb.row(2 * q) + j0));
    const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb.row(2 * q + 1) + j0));
    const __m256i lo = _mm256_unpacklo_epi16(r0, r1), hi = _mm256_unpackhi_epi16(r0, r1);
    for (int64_t r = 0; r < kMr; ++r) {
      const __m256i ar = _mm256_set1_epi32(static_cast<int32_t>(a[r * pa.kp + q]));
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(ar, lo));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(ar, hi));
    }
  }
  alignas(32) uint32_t out[kMr][kNr];
  for (int64_t r = 0; r < kMr; ++r) {  // columns 0-3, 8-11 | 4-7, 12-15 back to 0-7 | 8-15
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[r]), _mm256_permute2x128_si256(acc[r][0], acc[r][1], 0x20));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[r] + 8), _mm256_permute2x128_si256(acc[r][0], acc[r][1], 0x31));
  }
  for (int64_t r = 0; r < kMr && i0 + r < m; ++r)
    for (int64_t j = 0; j < kNr && j0 + j < pb.n; ++j) c[(i0 + r) * ldc + j0 + j] = out[r][j];
}

bool has_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return ok;
}
#else  // Arm and other CPUs: the generic tile only (the compiler vectorizes its inner loop)
bool has_avx2() { return false; }
#endif

}  // namespace

void IgemmB::resize(int64_t k_, int64_t n_) {
  k = k_;
  n = n_;
  np = (n + kNr - 1) / kNr * kNr;
  data.resize(static_cast<size_t>((k + 1) / 2 * 2 * np));
}

bool igemm_kernel_supported(IgemmKernel kernel) { return kernel != IgemmKernel::kAvx2 || has_avx2(); }

void igemm16(IgemmKernel kernel, int64_t m, const int16_t* a, int64_t lda, const IgemmB& b, uint32_t* c, int64_t ldc,
             ThreadPool* pool) {
  if (m <= 0 || b.n <= 0) return;
  const PackedA pa = pack_a(m, b.k, a, lda);
  const bool avx2 = kernel != IgemmKernel::kGeneric && has_avx2();
  const int64_t row_tiles = pa.mp / kMr, blocks = (b.np + kNBlock - 1) / kNBlock;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t blk = t / row_tiles, i0 = (t % row_tiles) * kMr;  // row tiles innermost: B block reuse
      for (int64_t j0 = blk * kNBlock; j0 < std::min(b.np, (blk + 1) * kNBlock); j0 += kNr) {
#ifdef KILN_IGEMM_X86
        if (avx2) {
          tile_avx2(pa, b, i0, j0, m, c, ldc);
          continue;
        }
#endif
        tile_generic(pa, b, i0, j0, m, c, ldc);
      }
    }
  };
  const int64_t tiles = row_tiles * blocks;
  if (!pool || pool->size() <= 1 || tiles < 2 || m * b.n * b.k < (1 << 16))
    run(0, tiles);
  else
    pool->parallel_for(tiles, run);
}

void igemm16(IgemmKernel kernel, int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const int16_t* b,
             int64_t ldb, uint32_t* c, int64_t ldc, ThreadPool* pool) {
  IgemmB pb;
  pb.resize(k, n);
  for (int64_t q = 0; q < k; ++q) std::copy_n(b + q * ldb, n, pb.row(q));
  igemm16(kernel, m, a, lda, pb, c, ldc, pool);
}

}  // namespace kiln::cpu
