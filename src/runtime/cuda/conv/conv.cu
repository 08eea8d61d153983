// Conv, ConvTranspose, FusedConv and NhwcConv on the GPU through cuDNN's descriptor API (float32,
// float16, bfloat16, float64: the CPU kernel's types).
//
// Conv is cudnnConvolutionForward; ConvTranspose is the data gradient of the Conv that maps Y back
// onto X (cudnnConvolutionBackwardData), which also covers output_padding and output_shape: Y's
// view already has its final size. The bias, and FusedConv's epilogue (core/attrs.h), run inside
// cudnnConvolutionBiasActivationForward where cuDNN can: it computes act(conv + z + bias) with act
// Relu or identity, identity with the IMPLICIT_PRECOMP_GEMM algorithm only. Otherwise the
// epilogue kernel (nn_epilogue.cu) adds the bias and applies the rest in one pass over Y
// (cudnnAddTensor is 3x slower on NCHW float16). float32
// runs with CUDNN_FMA_MATH (no TF32) and without the Winograd algorithms (less accurate), float16
// and bfloat16 as half tensors with float accumulation (CUDNN_TENSOR_OP_MATH), float64 with FMA
// math. A 1x1 Conv can also run as a batched cuBLASLt GEMM (plan_pointwise). The bias is fused for
// float32 and float16 only. Shapes for which cuDNN offers no algorithm (bfloat16 ones, say) take
// the direct kernel.
// NhwcConv is FusedConv on channels-last tensors. Padding, 1-D, the direct kernel and the
// channels-last descriptors: conv_plan.cu.
//
// Everything host-side (geometry, descriptors, the algorithm choice) is kept in the step's state.
// The tactics: 100 + i for the GEMM form of a 1x1 Conv with cuBLASLt algorithm i (the default where
// it exists), then cuDNN's algorithm ids, best heuristic guess first; for FusedConv also 200 + id,
// the same algorithm with the epilogue kernel where cuDNN could have fused it (timing decides);
// 300 and 301, Kiln's kernels for float16 stems with 3 input channels (small_c.cuh; 301 on
// wgmma), where they fit.
// NhwcConv with y_scale and y_zero_point quantizes its output (below). NhwcConv with
// x_channels_first reads a channels-first X (fuse-conv-input): tactics 300 and 301 stage and
// convert its rows themselves; 302 and 303 (the same kernels) and every other tactic run the Cast
// and Transpose kernels into the workspace first.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/layout.h"
#include "runtime/cuda/conv/small_c.cuh"
#include "runtime/cuda/conv/conv_plan.cuh"

namespace kiln::gpu::nn {

namespace {

// ---- entry points --------------------------------------------------------------------------------
// cuDNN's kernels and the small-channel one need 16-byte aligned tensors (a Kiln engine's are
// 64-byte aligned; the tests shift them); null (an absent input) counts as aligned.
bool aligned_16(std::initializer_list<const void*> ptrs) {
  return std::all_of(ptrs.begin(), ptrs.end(), [](const void* p) { return alignment_of(p, 16) == 16; });
}

// ---- NhwcConv with a channels-first X (x_channels_first) ---------------------------------------
// The small-channel kernel reads X itself (16-byte aligned, as its other tensors); every other
// tactic, and that one on misaligned pointers, reads X's channels-last view in W's type, which the
// Cast and Transpose kernels make in the front of the workspace.
bool reads_x_first(const ConvPlan& p, std::span<const TensorView> in, const void* y) {
  return p.small_c && !p.x_converted &&
         aligned_16({in[0].data, in[1].data, has_input(in, 2) ? in[2].data : nullptr, y});
}

// The workspace bytes that a step with plan p needs for X in front of the convolution's own.
size_t x_convert_workspace(const ConvPlan& p, std::span<const TensorView> in, const void* y) {
  return p.geometry.x_first_bytes && !reads_x_first(p, in, y) ? p.x_convert_bytes : 0;
}

// X's channels-last view in W's type, made at the front of env's workspace, which then starts
// after it (env is the caller's copy).
const void* convert_x_first(const ConvPlan& p, const TensorView& X, DataType to, GpuEnv& env) {
  if (env.workspace_bytes < p.x_convert_bytes)
    throw Error(
        "NhwcConv: its channels-first input needs 16-byte aligned tensors (a device buffer bound to an input or "
        "output is not; cudaMalloc's are)");
  const std::vector<int64_t> last = channels_last_shape(X.shape);
  char* ws = static_cast<char*>(env.workspace);
  GpuEnv plain = env;  // the steps below keep no state and need no workspace
  plain.state = nullptr;
  plain.workspace = nullptr;
  plain.workspace_bytes = 0;
  TensorView from = X;
  const size_t view = align_up(static_cast<size_t>(X.numel()) * dtype_size(to));
  if (X.dtype != to) {
    const TensorView cast{to, X.shape, ws + view};
    CastAttrs a;
    a.to = to;
    gpu_kernel_entry(OpKind::kCast)->fn(OpKind::kCast, a, {&X, 1}, {&cast, 1}, plain);
    from = cast;
  }
  const TensorView moved{to, last, ws};
  TransposeAttrs t;
  t.perm = channels_last_perm(last.size());
  gpu_kernel_entry(OpKind::kTranspose)->fn(OpKind::kTranspose, t, {&from, 1}, {&moved, 1}, plain);
  env.workspace = ws + p.x_convert_bytes;
  env.workspace_bytes -= p.x_convert_bytes;
  return ws;
}

void conv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& caller_env) {
  const char* op = op_name(kind).data();
  std::unique_ptr<ConvPlan> local;
  ConvPlan& p = plan_for(kind, attrs, in, out, caller_env, local);
  const TensorView &W = in[1], &Y = out[0];
  GpuEnv env = caller_env;
  TensorView X = in[0];  // below only its data is read: the plan has X's shape and type
  DirectConv geometry = p.geometry;
  if (geometry.x_first_bytes && !p.empty && !p.bias_only && !reads_x_first(p, in, Y.data)) {
    X.data = const_cast<void*>(convert_x_first(p, in[0], W.dtype, env));
    geometry.x_first_bytes = 0;
  }
  const void* B = has_input(in, 2) ? in[2].data : nullptr;
  const void* Z = has_input(in, 3) ? in[3].data : nullptr;
  const EpilogueAttrs plain;
  const EpilogueAttrs* epi = conv_epilogue(kind, attrs);
  // The epilogue pass over Y, adding `bias` (null: the bias is in Y already).
  auto finish = [&](const void* bias) {
    apply_epilogue(Y.data, bias, Z, epi ? *epi : plain, p.y_numel, p.y_plane, p.channels, p.dtype, env.stream, op);
  };
  if (p.empty) return;
  if (p.bias_only) {
    bias_fill(B, Y.data, p.y_numel, p.y_plane, p.channels, p.elem, env.stream, op);
    return finish(nullptr);
  }
  const bool aligned = aligned_16({X.data, W.data, Y.data, B, Z});
  if (p.small_c && aligned)
    return small_c_conv(geometry, epi ? *epi : plain, X.data, W.data, B, Y.data, nullptr, p.small_c_wgmma, env.stream);
  if (p.direct || !aligned) {
    direct_conv(geometry, p.dtype, X.data, W.data, B, Y.data, env.stream, op);
    return finish(nullptr);
  }
  const float f1 = 1.0f, f0 = 0.0f;
  const double d1 = 1.0, d0 = 0.0;
  const bool dbl = p.dtype == DataType::kFloat64;
  const void* one = dbl ? static_cast<const void*>(&d1) : &f1;
  const void* zero = dbl ? static_cast<const void*>(&d0) : &f0;
  if (p.pointwise_algo >= 0 && p.channels_last) {  // Y = X W^T, the epilogue partly in cuBLASLt's
    const LtEpilogue& lt = p.pointwise_lt;
    const void* c_z = lt.z_as_c ? Z : nullptr;
    p.pointwise->run(env.stream, p.pointwise_algo, 1.0, X.data, W.data, c_z ? 1.0 : 0.0, c_z, Y.data,
                     lt.whole ? B : nullptr, env.workspace, env.workspace_bytes);
    if (!lt.whole) finish(B);
    return;
  }
  if (p.pointwise_algo >= 0) {
    p.pointwise->run(env.stream, p.pointwise_algo, 1.0, W.data, X.data, 0.0, nullptr, Y.data, nullptr, env.workspace,
                     env.workspace_bytes);
    return finish(B);
  }
  if (env.workspace_bytes < p.workspace())
    throw Error(std::string(op) + ": the workspace is smaller than the step asked for");
  char* ws = static_cast<char*>(env.workspace);
  char* stage = ws + align_up(p.algo_ws);
  if (!p.transpose) {
    const void* x = X.data;
    if (p.staged) {
      window_copy(X.data, stage, p.window, p.elem, env.stream, op);
      x = stage;
    }
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(p.chosen.algo);
    if (p.fused) {  // without a residual, z is Y with a weight of 0
      check_cudnn(cudnnConvolutionBiasActivationForward(env.cudnn, one, p.x, x, p.w, W.data, p.conv, algo, ws,
                                                        p.algo_ws, Z ? one : zero, p.y, Z ? Z : Y.data, p.bias, B,
                                                        p.activation, p.y, Y.data),
                  op);
      return;
    }
    check_cudnn(
        cudnnConvolutionForward(env.cudnn, one, p.x, x, p.w, W.data, p.conv, algo, ws, p.algo_ws, zero, p.y, Y.data),
        op);
  } else {
    const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(p.chosen.algo);
    void* y = p.staged ? static_cast<void*>(stage) : Y.data;
    check_cudnn(cudnnConvolutionBackwardData(env.cudnn, one, p.w, W.data, p.x, X.data, p.conv, algo, ws, p.algo_ws,
                                             zero, p.y, y),
                op);
    if (p.staged) window_copy(stage, Y.data, p.window, p.elem, env.stream, op);
  }
  finish(B);
}

size_t conv_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  std::unique_ptr<ConvPlan> local;
  const ConvPlan& p = plan_for(kind, attrs, in, out, env, local);
  return x_convert_workspace(p, in, out[0].data) + p.workspace();
}

std::vector<int32_t> conv_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                  std::span<const TensorView> out, GpuEnv& env) {
  std::unique_ptr<ConvPlan> local;
  return plan_for(kind, attrs, in, out, env, local).tactics;
}

// ---- NhwcConv with a quantized output (y_scale, y_zero_point: inputs 4 and 5) --------------------
// The small-channel kernel quantizes in its epilogue; every other tactic computes the float output
// into the workspace (after its own) and QuantizeLinear's kernel reads it from there. The plans are
// those of the same convolution with a float output, so the tactics are the same.
bool quantized_output(std::span<const TensorView> in) { return has_input(in, 4); }

struct QuantizedConv {
  std::span<const TensorView> conv_in;  // X, W, B, Z
  TensorView y_float;                   // Y's shape in X's type (no data)
  ConvPlan* plan;
  bool fused;                           // the small-channel kernel quantizes (aligned tensors)
  size_t conv_workspace;                // the float convolution's, aligned
};

QuantizedConv quantized_conv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                             std::span<const TensorView> out, GpuEnv& env, std::unique_ptr<ConvPlan>& local) {
  QuantizedConv q;
  q.conv_in = in.first(std::min<size_t>(in.size(), 4));
  q.y_float = out[0];
  q.y_float.dtype = in[1].dtype;  // the convolution's type (X's, unless X is channels-first float32)
  q.y_float.data = nullptr;
  q.plan = &plan_for(kind, attrs, q.conv_in, {&q.y_float, 1}, env, local);
  // Tactics 302 and 303 read X converted in the workspace: its own alignment does not matter.
  q.fused = q.plan->small_c && aligned_16({q.plan->x_converted ? nullptr : in[0].data, in[1].data,
                                           has_input(in, 2) ? in[2].data : nullptr, out[0].data});
  q.conv_workspace = align_up(x_convert_workspace(*q.plan, q.conv_in, nullptr) + q.plan->workspace());
  return q;
}

void quantized_conv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env) {
  std::unique_ptr<ConvPlan> local;
  QuantizedConv q = quantized_conv(kind, attrs, in, out, env, local);
  if (q.plan->empty) return;
  if (q.fused) {
    const EpilogueAttrs* epi = conv_epilogue(kind, attrs);
    const SmallCQuant quant{static_cast<const float*>(in[4].data), in[5].data, out[0].dtype};
    DirectConv geometry = q.plan->geometry;
    const void* x = in[0].data;
    if (q.plan->x_converted) {
      GpuEnv x_env = env;
      x = convert_x_first(*q.plan, in[0], in[1].dtype, x_env);
      geometry.x_first_bytes = 0;
    }
    return small_c_conv(geometry, *epi, x, in[1].data, has_input(in, 2) ? in[2].data : nullptr, out[0].data, &quant,
                        q.plan->small_c_wgmma, env.stream);
  }
  // The workspace was sized for the fused kernel when the tensors were aligned then: a caller's
  // buffer bound later (set_output_device) is not 16-byte aligned.
  if (env.workspace_bytes < q.conv_workspace + q.y_float.bytes())
    throw Error(
        "NhwcConv: its quantized output needs 16-byte aligned tensors (a device buffer bound to an input or "
        "output is not; cudaMalloc's are)");
  q.y_float.data = static_cast<char*>(env.workspace) + q.conv_workspace;
  GpuEnv conv_env = env;
  conv_env.workspace_bytes = q.conv_workspace;
  conv_kernel(kind, attrs, q.conv_in, {&q.y_float, 1}, conv_env);
  const TensorView q_in[3] = {q.y_float, in[4], in[5]};
  gpu_kernel_entry(OpKind::kQuantizeLinear)->fn(OpKind::kQuantizeLinear, QuantizeAttrs{}, std::span<const TensorView>(q_in), out, env);
}

void nhwc_conv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  if (quantized_output(in)) return quantized_conv_kernel(kind, attrs, in, out, env);
  conv_kernel(kind, attrs, in, out, env);
}

size_t nhwc_conv_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env) {
  if (!quantized_output(in)) return conv_workspace(kind, attrs, in, out, env);
  std::unique_ptr<ConvPlan> local;
  const QuantizedConv q = quantized_conv(kind, attrs, in, out, env, local);
  // Fused, X converted in the workspace by tactics 302 and 303 (reads_x_first is false for them).
  return q.fused ? x_convert_workspace(*q.plan, in, out[0].data) + q.plan->workspace()
                 : q.conv_workspace + q.y_float.bytes();
}

std::vector<int32_t> nhwc_conv_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                       std::span<const TensorView> out, GpuEnv& env) {
  if (!quantized_output(in)) return conv_tactics(kind, attrs, in, out, env);
  std::unique_ptr<ConvPlan> local;
  return quantized_conv(kind, attrs, in, out, env, local).plan->tactics;
}

const GpuKernelEntry kEntries[] = {
    {OpKind::kConv, conv_kernel, conv_workspace, conv_tactics},
    {OpKind::kConvTranspose, conv_kernel, conv_workspace, conv_tactics},
    {OpKind::kFusedConv, conv_kernel, conv_workspace, conv_tactics},
    {OpKind::kNhwcConv, nhwc_conv_kernel, nhwc_conv_workspace, nhwc_conv_tactics},
};

}  // namespace

}  // namespace kiln::gpu::nn

namespace kiln::gpu {

// The conv family's table.
std::span<const GpuKernelEntry> conv_gpu_kernels() { return nn::kEntries; }

}  // namespace kiln::gpu
