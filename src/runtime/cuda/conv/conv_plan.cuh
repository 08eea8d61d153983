// The plan of a Conv, ConvTranspose, FusedConv or NhwcConv step on the GPU (private to
// nn_conv*.cu): the geometry, cuDNN's descriptors and algorithm choice, or the GEMM form of a 1x1
// convolution. conv_plan.cu builds it once per step (host-only work, kept in the step's state);
// conv.cu runs it.
#pragma once

#include <cudnn.h>

#include <memory>
#include <span>
#include <vector>

#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDesc {
 public:
  CudnnDesc() { check_cudnn(Create(&d_), "creating a cuDNN descriptor"); }
  ~CudnnDesc() { Destroy(d_); }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  operator T() const { return d_; }

 private:
  T d_ = nullptr;
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActDesc =
    CudnnDesc<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// One cuDNN algorithm the heuristics offer for this step (status success, workspace <= 512 MiB).
struct Candidate {
  int algo;
  cudnnMathType_t math;
};

// Tactic kGemmTactic + i: the 1x1 Conv as a GEMM with cuBLASLt algorithm i (cuDNN's ids are < 10);
// kUnfusedTactic + id: cuDNN algorithm id, then the epilogue kernel, where the fused call could run.
inline constexpr int32_t kGemmTactic = 100;
inline constexpr int32_t kUnfusedTactic = 200;
// Kiln's small-channel stem kernel (small_c.cuh), where it takes the shape: on mma.sync, and
// on wgmma (compute capability 9.0).
inline constexpr int32_t kSmallCTactic = 300;
inline constexpr int32_t kSmallCWgmmaTactic = 301;
// With a channels-first X (x_channels_first), 300 and 301 read it themselves; 302 and 303 run them
// on X converted in the workspace first.
inline constexpr int32_t kSmallCConvertTactic = 302;
inline constexpr int32_t kSmallCWgmmaConvertTactic = 303;

struct ConvPlan final : StepState {
  std::vector<int64_t> key;
  bool transpose = false;
  bool empty = false;          // Y has no elements: nothing to do
  bool bias_only = false;      // no element of X reaches Y (no input channels, or X empty): Y = B or 0
  bool direct = false;         // cuDNN cannot take these shapes: the direct kernel runs
  bool small_c = false;        // tactic kSmallCTactic or kSmallCWgmmaTactic: the stem kernel runs
  bool small_c_wgmma = false;  // its wgmma form
  bool x_converted = false;    // tactics 302 and 303: on a channels-first X converted in the workspace
  bool channels_last = false;  // NhwcConv: X, Y and Z [N, spatial..., C], W [M, k..., C/group]
  DirectConv geometry;         // for the direct kernel (also used at run time with misaligned pointers)
  DataType dtype = DataType::kFloat32;
  size_t elem = 4;
  int64_t y_numel = 0, y_plane = 0, channels = 0;  // Y [N, channels, plane]; channels last: plane 1
  TensorDesc x, y, bias;                           // y: what cuDNN writes (the staged buffer or Y)
  FilterDesc w;
  ConvDesc conv;
  ActDesc activation;  // of the fused call
  std::vector<Candidate> candidates;
  std::vector<int32_t> tactics;
  Candidate chosen{-1, CUDNN_DEFAULT_MATH};
  std::unique_ptr<GemmPlan> pointwise;  // 1x1 Conv as a batched GEMM (null: not one, or no algorithm)
  int pointwise_algo = -1;              // >= 0: the GEMM runs, with this cuBLASLt algorithm
  // Channels last, the GEMM is one [N*P, C] x [C, M] product whose cuBLASLt epilogue may compute
  // the bias and the fused epilogue (what it leaves undone: pointwise_lt).
  LtEpilogue pointwise_lt;
  size_t algo_ws = 0;
  bool fused = false;
  bool staged = false;  // Conv: X padded into the workspace; ConvTranspose: Y computed there
  Window window;
  size_t staged_bytes = 0;
  // A channels-first X converted in the workspace for tactics other than the small-channel kernel:
  // cast to W's type (where it differs), then moved channels-last; before workspace()'s bytes.
  size_t x_convert_bytes = 0;

  size_t workspace() const {
    if (empty || bias_only || direct || small_c) return 0;
    if (pointwise_algo >= 0) return pointwise->workspace(pointwise_algo);
    return align_up(algo_ws) + staged_bytes;
  }
};

inline bool has_input(std::span<const TensorView> in, size_t i) { return in.size() > i && in[i].exists; }

// The convolution attributes and (FusedConv, NhwcConv) the epilogue of a step.
const ConvAttrs& conv_attrs(OpKind kind, const Attrs& attrs);
const EpilogueAttrs* conv_epilogue(OpKind kind, const Attrs& attrs);
// NhwcConv with x_channels_first: X arrives channels-first, in float32 or W's type.
bool x_channels_first(OpKind kind, const Attrs& attrs);

// This step's plan (kept in env.state, or in *local without a slot).
ConvPlan& plan_for(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env, std::unique_ptr<ConvPlan>& local);

}  // namespace kiln::gpu::nn
