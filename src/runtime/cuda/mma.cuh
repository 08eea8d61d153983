// Device helpers of Kiln's tensor-core convolutions (quant/conv/igemm/igemm_kernel.cuh,
// quant/conv/stream/stream_kernel.cuh, and the float16 conv/small_c.cu): cp.async copies into shared memory,
// ldmatrix, int8 mma.m16n8k32 and float16 mma.m16n8k16, the XOR swizzle of [rows][64]-byte operand
// tiles, and the int8 kernels' mma.sync multiply policy. sm_80 and later (the wgmma policy, for
// sm_90a, is wgmma.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "runtime/cuda/device.h"

namespace kiln::gpu::mma {

constexpr int kBK = 64;          // bytes of one operand row in a tile: 64 int8 values of the reduction
constexpr int kMaxDevices = 64;  // devices whose one-time setup is remembered without a lock

// Attribute `attr` of device `device`, asked once per device (the kernels' fits() and run() are
// called on every step); 0 where the query fails (not remembered).
template <cudaDeviceAttr attr>
int device_attribute(int device) {
  static std::atomic<int> known[kMaxDevices] = {};  // 0: not asked yet
  if (device >= 0 && device < kMaxDevices)
    if (const int v = known[device].load(std::memory_order_relaxed); v != 0) return v;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, device) != cudaSuccess) return 0;
  if (device >= 0 && device < kMaxDevices) known[device].store(v, std::memory_order_relaxed);
  return v;
}

// Whether the current device runs these kernels (sm_80 and later: cp.async, ldmatrix, int8
// mma.m16n8k32).
inline bool device_supported() {
  int device = 0;
  return cudaGetDevice(&device) == cudaSuccess && device_attribute<cudaDevAttrComputeCapabilityMajor>(device) >= 8;
}

// The most shared memory a block may opt into on `device`, within the thread's architecture limit
// (kernel_arch_limit(): an engine built with --target-arch sm_87 plans for 8.7's 163 KiB).
inline int max_block_smem(int device) {
  const int here = device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device);
  const int limit = kernel_arch_limit();
  return limit == 0 ? here : std::min(here, static_cast<int>(max_block_smem_of(limit)));
}

// Whether Kiln's sm_90a kernels (the *_sm90a.cu files) were built and the current device runs them (compute
// capability 9.0 only, and no other architecture limits the thread); asked once per device (run() is
// called on every step), a failed query not remembered.
inline bool runs_sm90a() {
#if KILN_HAVE_SM90A
  if (const int limit = kernel_arch_limit(); limit != 0 && limit != 90) return false;
  static std::atomic<int> known[kMaxDevices] = {};  // 0: not asked yet, 1: no, 2: yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return false;
  if (device < kMaxDevices)
    if (const int v = known[device].load(std::memory_order_relaxed); v != 0) return v == 2;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  const bool yes = major == 9 && minor == 0;
  if (device < kMaxDevices) known[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
#else
  return false;
#endif
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The dynamic shared memory at `raw` moved up to the next multiple of kAlign bytes (a power of
// two); a kernel reserves kAlign bytes beyond its layout for the move.
template <uint32_t kAlign>
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* raw) {
  return raw + ((0u - smem_u32(raw)) & (kAlign - 1));
}
// 16 bytes from global memory, or 16 zero bytes where !valid (src is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 8 bytes (through L1: the 16-byte-only .cg form does not take 8), or 8 zero bytes where !valid.
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// ldmatrix_x4 with each 8 x 8 matrix transposed: thread t receives elements (2 (t % 4), t / 4) and
// (2 (t % 4) + 1, t / 4) of each, the B fragment of mma.m16n8k16 from a row-major [k][n] tile.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// d += a b on float16 operands with float accumulation (the fragments of mma.m16n8k16).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The same on bfloat16 operands.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Byte offset of 16-byte chunk `chunk` (0..3) of row `row` in a [rows][64] tile: the 8 rows one
// ldmatrix phase reads fall in distinct banks.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * kBK + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// One k32 step of a warp's MT x NT mma tiles: A fragments of rows row_a.. (16 per tile) and B
// fragments of rows row_b.. (8 per tile) from swizzled [rows][64] tiles at a_tile and b_tile;
// ks (0 or 1) picks the step's half of the 64 bytes.
template <int MT, int NT>
__device__ __forceinline__ void mma_step(int32_t (&acc)[MT][NT][4], uint32_t a_tile, uint32_t b_tile, int row_a,
                                         int row_b, int ks, int lane) {
  uint32_t af[MT][4], bf[NT][2];
#pragma unroll
  for (int i = 0; i < MT; ++i) ldmatrix_x4(a_tile + swizzled(row_a + i * 16 + (lane & 15), ks * 2 + (lane >> 4)), af[i]);
#pragma unroll
  for (int j = 0; j < NT / 2; ++j) {
    uint32_t r[4];
    ldmatrix_x4(b_tile + swizzled(row_b + j * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)), r);
    bf[2 * j][0] = r[0];
    bf[2 * j][1] = r[1];
    bf[2 * j + 1][0] = r[2];
    bf[2 * j + 1][1] = r[3];
  }
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) mma_s8(acc[i][j], af[i], bf[j][0], bf[j][1]);
}

// How a tile's warps multiply its A rows (pixels) by its B rows (weights), one k32 step of
// swizzled [rows][64] tiles at a time: mma.m16n8k32 from ldmatrix fragments (sm_80 and later), for
// the kernels' Tile types (WM x WN warp tiles). The wgmma form (wgmma.cuh) has the same
// members.
struct MmaSync {
  static constexpr int kAlign = 128;  // bytes the operand tiles' base address needs
  static constexpr int kInFlight = 0;  // stages' multiplies worth keeping in flight (wait<kInFlight>)
  // After a stage's cp.async copies have landed, before the barrier that publishes them.
  __device__ static void operands_landed() {}
  template <int MT, int NT>
  __device__ static void begin(int32_t (&)[MT][NT][4]) {}
  // acc += the step's products (first: the tile's first step; acc is zeroed before it here).
  template <class T, int MT, int NT>
  __device__ static void step(int32_t (&acc)[MT][NT][4], uint32_t a_tile, uint32_t b_tile, int warp_m, int warp_n,
                              int ks, int lane, bool first) {
    mma_step(acc, a_tile, b_tile, warp_m * T::WM, warp_n * T::WN, ks, lane);
  }
  // After a stage's (or a tile's) steps: they form one group.
  template <int MT, int NT>
  __device__ static void end(int32_t (&)[MT][NT][4]) {}
  // Until at most N groups' multiplies still run (N = 0: the accumulators can be read).
  template <int N, int MT, int NT>
  __device__ static void wait(int32_t (&)[MT][NT][4]) {}
};

}  // namespace kiln::gpu::mma
