// oneDNN (Debian's libdnnl) for the CPU's compute-heavy channels-last ops: NhwcConv with its
// epilogue as post-ops (bias, activation, residual Add, activation) and NhwcMaxPool /
// NhwcAveragePool, float32, 2-D; NhwcQConv with its epilogue as the library's output scales and
// post-ops, or its integer sums with Kiln's own epilogue after (bit for bit Kiln's kernels). The
// builder makes those ops for CPU engines where the library is present (passes/channels_last.cpp):
// one layout for the whole engine, the one oneDNN's convolutions are fastest in. Each call
// returns false where the library cannot run the op (another type, an activation it lacks, a
// build without oneDNN); the caller then runs Kiln's own kernel, which stays the reference the
// tests compare with. A step's primitive and its weights in the library's layout are made on its
// first run and kept in the step's state (KernelEnv::state). KILN_CPU_KERNELS=kiln (read once per
// process) turns the library off: every op then runs Kiln's kernels, and the builder keeps CPU
// engines channels-first.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/attrs.h"
#include "core/tensor.h"
#include "runtime/cpu/kernels.h"

namespace kiln::cpu::onednn {

// True where Kiln was built with oneDNN, KILN_CPU_KERNELS is not "kiln" and set_enabled(false) was
// not called.
bool available();

// Turns the library on or off for the process (tests compare both paths in one process); on
// cannot override a build without it or KILN_CPU_KERNELS=kiln.
void set_enabled(bool on);

// C = alpha * op(A) * op(B) + beta * C, row-major, as cpu::sgemm (runtime/cpu/gemm.h), in the
// library's GEMM on `threads` threads (beta 0: C is not read). False where the library is off.
bool sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads);

// y = Gelu(y) in place (erf or tanh form: a = kGelu, kGeluTanh), n float32 values, in the
// library's vectorized kernel (the float epilogues' scalar erf took 1.4 ms of a BERT FFN's 4.6).
bool gelu_inplace(Activation a, float* y, int64_t n, KernelEnv& env);

// y = NhwcConv(in) (X [N,H,W,C], or [N,C,H,W] with x_channels_first; W [M,kh,kw,C/group];
// optional B [M] and Z [N,OH,OW,M]).
bool nhwc_conv(const FusedConvAttrs& a, std::span<const TensorView> in, const TensorView& y, KernelEnv& env);

// Whether the INT8 convolutions below can run: available() and a CPU with VNNI (AVX512-VNNI or
// AVX-VNNI), whose int8 products the library accumulates exactly, or with AVX2, where it sums
// pairs of products in 16 bits and is exact only for weights within a range (int8_weights_exact).
// The CPU channels-last pass converts INT8 convolutions only then.
bool int8_sums_available();

// Whether the library sums int8 x (x's type: int8 or uint8) times these weights exactly on this CPU:
// always with VNNI; with AVX2 alone, for int8 x where every weight is even (the library halves
// them), for uint8 x where every |w| <= 64.
bool int8_weights_exact(std::span<const int8_t> w, DataType x);

// True on a CPU whose INT8 convolutions run in the library only with even weights (AVX2 without
// VNNI): the builder quantizes convolutions' weights to even values in [-126, 126] there.
bool int8_even_weights();

// The exact int32 sums of an INT8 convolution, channels last: [n, oh, ow, m] = sum over the
// window of (x - x_zero) * w, taps in the padding contributing 0 (x [N,H,W,C] int8 or uint8, w
// [M,kh,kw,C/group] int8, 2-D, any groups), where int8_sums_available() and the library's kernel
// for the shape sums exactly (VNNI; AVX2 with weights as int8_weights_exact asks).
// Returns the sums ([N, OH, OW, M]) or null where the library does not run; they live in the
// step's state until its next run, or, for a kernel called without a slot (env.state null), in
// `hold` as long as the caller keeps it.
const int32_t* nhwc_qconv_sums(const ConvAttrs& a, const TensorView& x, int32_t x_zero, const TensorView& w,
                               std::span<const int64_t> y_shape, KernelEnv& env, std::shared_ptr<void>& hold);
// nhwc_qconv_sums' runs in the library so far (the tests check that it ran).
uint64_t qconv_sums_runs();

// kiln.QConv's epilogue (runtime/qfused_math.h) for nhwc_qconv_fused, per output channel m.
struct QEpilogue {
  std::span<const float> alpha, bias;  // x_scale * w_scale[m]; the float32 bias
  int32_t x_zero = 0;
  int act = 0;  // QActivation: none, relu, clip(act_alpha, act_beta), leaky_relu(act_alpha)
  float act_alpha = 0, act_beta = 0;
  bool quantize = false;  // y int8/uint8 with y_scale and y_zero; else y float32
  float y_scale = 1;
  int32_t y_zero = 0;
  const TensorView* z = nullptr;  // the residual [N, OH, OW, M], y's type (scale and zero if quantized)
  float z_scale = 1;
  int32_t z_zero = 0;
};

// NhwcQConv whole in the library, one pass that writes y: the int8 sums, then scale, bias,
// residual, activation and requantization as the library's output scales, post-ops and zero points.
// The library rounds in its own order (bias before the scale, y_scale folded into the scales), so
// an output may differ from Kiln's kernels by one quantization step where the real value lies
// within float32 rounding of a half step (decision 65). Same conditions as nhwc_qconv_sums, plus:
// a residual of y's type, nonzero finite scales; false otherwise, and where
// int8_epilogue_in_library() is false.
bool nhwc_qconv_fused(const ConvAttrs& a, const TensorView& x, const TensorView& w, const QEpilogue& e,
                      const TensorView& y, KernelEnv& env);
// Its runs so far.
uint64_t qconv_fused_runs();

// Whether INT8 epilogues run in the library (nhwc_qconv_fused): int8_sums_available(), unless
// KILN_CPU_INT8_EPILOGUE=kiln (read once) or set_int8_epilogue_in_library(false) chose Kiln's
// exact epilogue on the library's sums.
bool int8_epilogue_in_library();
void set_int8_epilogue_in_library(bool on);

// The exact int32 sums of an INT8 matrix product, [rows, N]: [r, n] = sum over k of (x[r, k] - x_zero) *
// w[n, k] (x [rows, K] int8 or uint8, w [N, K] int8, read as they are each run). As
// nhwc_qconv_sums: VNNI only, the result in the state or `hold`.
const int32_t* qmatmul_sums(const TensorView& x, int64_t rows, int32_t x_zero, const TensorView& w, KernelEnv& env,
                            std::shared_ptr<void>& hold);

// y = NhwcMaxPool / NhwcAveragePool(x) on [N,H,W,C] (no Indices output), float32. (int8 max pools
// run Kiln's channels-last loop, runtime/cpu/pool/nhwc.cpp: 3-5x faster than the library's.)
bool nhwc_pool(OpKind kind, const PoolAttrs& a, const TensorView& x, const TensorView& y, KernelEnv& env);

}  // namespace kiln::cpu::onednn
