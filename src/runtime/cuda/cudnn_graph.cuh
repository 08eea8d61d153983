// A thin layer over cuDNN's graph (backend) API, for the fused operation graphs the legacy API
// cannot express: an INT8 convolution whose int32 sums are scaled per output channel, biased,
// activated, optionally added to a residual and rounded back to INT8, all in one kernel.
//
// Build the operations (tensor, conv_forward, pointwise), then a Graph over them. The Graph asks
// cuDNN's heuristics for engine configurations, keeps those that finalize (and fit the workspace
// limit) as candidate plans, and runs the one chosen by index: the builder times each candidate as a
// tactic. Tensors are addressed by unique id at run time (Graph::run).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::gpu::cudnn_graph {

// One backend descriptor (created on construction, destroyed with the object; move-only).
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set_desc(cudnnBackendAttributeName_t name, const Desc& value);
  // Throws with `what` and cuDNN's message unless the descriptor finalizes.
  void finalize(const std::string& what);
  // False (no throw) where cuDNN cannot finalize it (a candidate that does not apply).
  bool try_finalize();
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A tensor [dims...] with explicit strides (elements); virtual tensors live only inside the graph.
Desc tensor(int64_t uid, cudnnDataType_t dtype, std::span<const int64_t> dims, std::span<const int64_t> strides,
            bool is_virtual = false, int64_t alignment = 16);
// Channels-last strides for dims [N, C, spatial...] (cuDNN always takes dims in that order).
std::vector<int64_t> channels_last_strides(std::span<const int64_t> dims);

struct ConvGeometry {
  std::vector<int64_t> pads_begin, pads_end, strides, dilations;  // one per spatial axis
};
// y = conv(x, w) (cross-correlation) computed in `compute` (CUDNN_DATA_INT32 for INT8 inputs).
Desc conv_forward(const Desc& x, const Desc& w, const Desc& y, const ConvGeometry& g, cudnnDataType_t compute);
// y = mode(x) or mode(x, b), computed in float.
Desc pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y);
// y = max(x, lower) (and min(., upper) when upper > lower): ReLU and Clip.
Desc relu(const Desc& x, const Desc& y, float lower, float upper);

class Graph {
 public:
  // ops: the operations in data-flow order. Candidate plans are those the heuristics list that
  // finalize with a workspace of at most max_workspace bytes. Throws if there is none.
  Graph(cudnnHandle_t handle, std::span<const Desc* const> ops, size_t max_workspace, const std::string& what);
  size_t candidates() const { return plans_.size(); }
  size_t workspace(size_t plan) const { return workspace_[plan]; }
  // Runs candidate `plan` with the tensors uids[i] at data[i] (every non-virtual tensor).
  void run(cudnnHandle_t handle, size_t plan, std::span<const int64_t> uids, std::span<void* const> data,
           void* workspace) const;

 private:
  std::string what_;
  std::vector<Desc> plans_;
  std::vector<size_t> workspace_;
};

}  // namespace kiln::gpu::cudnn_graph
