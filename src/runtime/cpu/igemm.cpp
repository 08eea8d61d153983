// Integer GEMM (see igemm.h). A is packed as one int32 per (row, pair of k) holding the two int16
// values, so a broadcast gives vpmaddwd its left operand; B rows 2p and 2p + 1 are interleaved in
// registers (vpunpck[lh]wd, which works within 128-bit lanes: the low result holds columns 0-3 and
// 8-11, the high one 4-7 and 12-15, put back in order at the end). A is zero-padded to 4 rows and
// an even k. The
// micro-tile is 4 rows x 16 columns: 8 accumulators of 8 int32. Work is split over (row tile,
// 64-column block) pairs; a block's packed B (k x 64 int16) is reused by every row tile.
//
// igemm8 (int8 operands): A packed per 4-row tile and quad of k (16 bytes: one vector whose lane r
// is row r's quad), B in quads (igemm.h); the Arm kernel's 16 accumulators of 4 int32 take one
// SDOT (by lane) per row and 4 columns, 256 multiply-adds per quad of k. The generic kernel is the
// same sums in plain loops. Compiled for Arm's dot products in that function only and chosen at
// run time (getauxval: asimddp), so the library still runs on ARMv8.0 cores.
#include "runtime/cpu/igemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_IGEMM_X86 1
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#define KILN_IGEMM_ARM 1
#include <arm_neon.h>
#include <sys/auxv.h>
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

// Writes the valid part of a 4 x 16 tile of sums to C.
void store_tile(const uint32_t (&out)[kMr][kNr], int64_t i0, int64_t j0, int64_t m, int64_t n, uint32_t* c,
                int64_t ldc) {
  for (int64_t r = 0; r < kMr && i0 + r < m; ++r)
    for (int64_t j = 0; j < kNr && j0 + j < n; ++j) c[(i0 + r) * ldc + j0 + j] = out[r][j];
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
  store_tile(acc, i0, j0, m, pb.n, c, ldc);
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
  store_tile(out, i0, j0, m, pb.n, c, ldc);
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

// Runs tile(i0, j0) over every (4-row tile, 16-column tile): work split over (row tile, 64-column
// block) pairs, row tiles innermost so that a block of B is reused by every row tile.
template <class Tile>
void for_tiles(int64_t row_tiles, int64_t np, int64_t macs, ThreadPool* pool, const Tile& tile) {
  const int64_t blocks = (np + kNBlock - 1) / kNBlock;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t blk = t / row_tiles, i0 = (t % row_tiles) * kMr;
      for (int64_t j0 = blk * kNBlock; j0 < std::min(np, (blk + 1) * kNBlock); j0 += kNr) tile(i0, j0);
    }
  };
  const int64_t tiles = row_tiles * blocks;
  if (!pool || pool->team() <= 1 || tiles < 2 || macs < (1 << 16))
    run(0, tiles);
  else
    pool->parallel_for(tiles, run);
}

// ---- int8 (igemm8) ---------------------------------------------------------------------------

// A for igemm8: per tile of 4 rows and quad of k, 16 bytes (row r's 4 values at 4r..4r + 3), so
// one load holds a quad of every row of the tile; zero-padded to whole tiles and quads.
struct PackedA8 {
  int64_t kq = 0;
  std::vector<int8_t> a;  // [tiles][kq][4][4]
  const int8_t* tile(int64_t i0) const { return a.data() + i0 / kMr * kq * 16; }
};

PackedA8 pack_a8(int64_t m, int64_t k, const int8_t* a, int64_t lda) {
  PackedA8 p;
  p.kq = (k + 3) / 4;
  p.a.assign(static_cast<size_t>((m + kMr - 1) / kMr * p.kq * 16), 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q)
      p.a[static_cast<size_t>(((i / kMr) * p.kq + q / 4) * 16 + (i % kMr) * 4 + q % 4)] = a[i * lda + q];
  return p;
}

void tile8_generic(const PackedA8& pa, const Igemm8B& pb, int64_t i0, int64_t j0, int64_t m, uint32_t* c, int64_t ldc) {
  uint32_t acc[kMr][kNr] = {};
  const int8_t* a = pa.tile(i0);
  for (int64_t q = 0; q < pa.kq; ++q, a += 16) {
    const int8_t* b = pb.quad(q, j0);
    for (int64_t r = 0; r < kMr; ++r)
      for (int64_t j = 0; j < kNr; ++j) {
        int32_t s = 0;  // at most 4 * 128 * 128
        for (int64_t t = 0; t < 4; ++t) s += int32_t{a[r * 4 + t]} * int32_t{b[j * 4 + t]};
        acc[r][j] += static_cast<uint32_t>(s);
      }
  }
  store_tile(acc, i0, j0, m, pb.n, c, ldc);
}

#ifdef KILN_IGEMM_ARM
// 16 SDOTs a quad of k: accumulator (r, v) holds row r's columns 4v..4v + 3; lane r of the A
// vector is row r's quad. SDOT's lanes wrap modulo 2^32, as the generic loop's uint32 sums do.
[[gnu::target("arch=armv8.2-a+dotprod")]] void tile8_dot(const PackedA8& pa, const Igemm8B& pb, int64_t i0, int64_t j0,
                                                         int64_t m, uint32_t* c, int64_t ldc) {
  int32x4_t acc[kMr][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_s32(0);
  const int8_t* a = pa.tile(i0);
  for (int64_t q = 0; q < pa.kq; ++q, a += 16) {
    const int8x16_t av = vld1q_s8(a);
    const int8_t* b = pb.quad(q, j0);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {  // unrolled: the 16 accumulators stay in registers
      const int8x16_t bv = vld1q_s8(b + 16 * v);
      acc[0][v] = vdotq_laneq_s32(acc[0][v], bv, av, 0);
      acc[1][v] = vdotq_laneq_s32(acc[1][v], bv, av, 1);
      acc[2][v] = vdotq_laneq_s32(acc[2][v], bv, av, 2);
      acc[3][v] = vdotq_laneq_s32(acc[3][v], bv, av, 3);
    }
  }
  uint32_t out[kMr][kNr];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < 4; ++v) vst1q_u32(out[r] + 4 * v, vreinterpretq_u32_s32(acc[r][v]));
  store_tile(out, i0, j0, m, pb.n, c, ldc);
}

bool has_dotprod() {
  static const bool ok = (getauxval(AT_HWCAP) & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
  return ok;
}
#else
bool has_dotprod() { return false; }
#endif

}  // namespace

void Igemm8B::resize(int64_t k_, int64_t n_) {
  k = k_;
  n = n_;
  np = (n + kNr - 1) / kNr * kNr;
  data.resize(static_cast<size_t>((k + 3) / 4 * np * 4));
}

bool igemm8_kernel_supported(Igemm8Kernel kernel) { return kernel != Igemm8Kernel::kDot || has_dotprod(); }

void igemm8(Igemm8Kernel kernel, int64_t m, const int8_t* a, int64_t lda, const Igemm8B& b, uint32_t* c, int64_t ldc,
            ThreadPool* pool) {
  if (m <= 0 || b.n <= 0) return;
  const PackedA8 pa = pack_a8(m, b.k, a, lda);
  const int64_t row_tiles = (m + kMr - 1) / kMr;
#ifdef KILN_IGEMM_ARM
  if (kernel != Igemm8Kernel::kGeneric && has_dotprod()) {
    for_tiles(row_tiles, b.np, m * b.n * b.k, pool,
              [&](int64_t i0, int64_t j0) { tile8_dot(pa, b, i0, j0, m, c, ldc); });
    return;
  }
#endif
  (void)kernel;
  for_tiles(row_tiles, b.np, m * b.n * b.k, pool,
            [&](int64_t i0, int64_t j0) { tile8_generic(pa, b, i0, j0, m, c, ldc); });
}

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
  const int64_t row_tiles = pa.mp / kMr;
#ifdef KILN_IGEMM_X86
  if (kernel != IgemmKernel::kGeneric && has_avx2()) {
    for_tiles(row_tiles, b.np, m * b.n * b.k, pool,
              [&](int64_t i0, int64_t j0) { tile_avx2(pa, b, i0, j0, m, c, ldc); });
    return;
  }
#endif
  (void)kernel;
  for_tiles(row_tiles, b.np, m * b.n * b.k, pool,
            [&](int64_t i0, int64_t j0) { tile_generic(pa, b, i0, j0, m, c, ldc); });
}

void igemm16(IgemmKernel kernel, int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const int16_t* b,
             int64_t ldb, uint32_t* c, int64_t ldc, ThreadPool* pool) {
  IgemmB pb;
  pb.resize(k, n);
  for (int64_t q = 0; q < k; ++q) std::copy_n(b + q * ldb, n, pb.row(q));
  igemm16(kernel, m, a, lda, pb, c, ldc, pool);
}

}  // namespace kiln::cpu
