// A thin layer over cuDNN's graph (backend) API, for the fused operation graphs the legacy API
// cannot express: an INT8 convolution whose int32 sums are scaled per output channel, biased,
// activated, optionally added to a residual and rounded back to INT8, all in one kernel; a
// float16 product with its bias, GELU and residual (gemm/cudnn_matmul.cu).
//
// Build the operations (tensor, conv_forward, pointwise), then a Graph over them. The Graph asks
// cuDNN's heuristics for engine configurations, the candidates, and runs the one chosen by index:
// the builder times each candidate as a tactic. Finalizing a candidate's plan may compile a kernel
// (cuDNN's runtime fusion engines), a fraction of a second each, so plans are finalized when first
// asked for (workspace() or run(); a context asks for its step's workspace before any capture), and
// callers build a Graph once per distinct shape and share it. Tensors are addressed by unique id at
// run time (Graph::run).
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/checks.h"

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

// A tensor [dims...] with explicit strides (elements); virtual tensors live only inside the graph;
// one passed by value is a host value whose address Graph::run takes.
Desc tensor(int64_t uid, cudnnDataType_t dtype, std::span<const int64_t> dims, std::span<const int64_t> strides,
            bool is_virtual = false, int64_t alignment = 16, bool by_value = false);
// A scalar passed by value, of `rank` dims of 1 (Graph::run: the address of the host value).
Desc scalar(int64_t uid, cudnnDataType_t dtype, size_t rank);
// Channels-last strides for dims [N, C, spatial...] (cuDNN always takes dims in that order).
std::vector<int64_t> channels_last_strides(std::span<const int64_t> dims);

struct ConvGeometry {
  std::vector<int64_t> pads_begin, pads_end, strides, dilations;  // one per spatial axis
};
// y = conv(x, w) (cross-correlation) computed in `compute` (CUDNN_DATA_INT32 for INT8 inputs).
Desc conv_forward(const Desc& x, const Desc& w, const Desc& y, const ConvGeometry& g, cudnnDataType_t compute);
// c = a b, batched over the first dim ([batch, m, k] x [batch, k, n]), computed in `compute`.
Desc matmul(const Desc& a, const Desc& b, const Desc& c, cudnnDataType_t compute);
// y = mode(x) or mode(x, b), computed in float.
Desc pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y);
// o = softmax(scale q k^T) v as one operation (cuDNN's unified attention, 9.13.1 and later): q, o
// [batch, heads, rows, d], k and v [batch, kv heads, keys, d]; scale a float scalar.
Desc sdpa_forward(const Desc& q, const Desc& k, const Desc& v, const Desc& o, const Desc& scale);
// y = max(x, lower), then min(., upper) where an upper bound is given: ReLU and Clip.
Desc relu(const Desc& x, const Desc& y, float lower, std::optional<float> upper);

// Whether `stream` is being captured (or cannot say): no graph is made nor plan finalized then.
bool capturing(cudaStream_t stream);

class Graph {
 public:
  // ops: the operations in data-flow order. The candidates are the first engine configurations the
  // heuristics list. Throws if there is none.
  Graph(cudnnHandle_t handle, std::span<const Desc* const> ops, size_t max_workspace, const std::string& what);
  size_t candidates() const { return cfgs_.size(); }
  // Finalizes every candidate's plan not tried yet, in parallel (each may compile a kernel): what the
  // builder, which times them all, asks for first.
  void prepare_all() const;
  // Whether candidate i's plan finalizes within the workspace limit (finalizing it if not tried).
  bool builds(size_t i) const { return plan(i) != nullptr; }
  // Whether candidate i's plan has been finalized already and built (never finalizes: safe while a
  // stream is being captured, where a compile might invalidate the capture).
  bool built(size_t i) const;
  // The first candidate from `from` on whose plan finalizes within the workspace limit.
  std::optional<size_t> usable(size_t from = 0) const;
  // Candidate `plan`'s workspace; throws if its plan does not finalize or needs more than the limit.
  size_t workspace(size_t plan) const;
  // The tactics first + i of the candidates i < count whose plans build (finalizing them all).
  std::vector<int32_t> tactics(int32_t first, int32_t count) const;
  // Whether candidate i can run on `stream` within `workspace_bytes`: while the stream is captured
  // only a plan finalized before counts.
  bool runs(size_t i, size_t workspace_bytes, cudaStream_t stream) const;
  // Runs candidate `plan` with the tensors uids[i] at data[i] (every non-virtual tensor).
  void run(cudnnHandle_t handle, size_t plan, std::span<const int64_t> uids, std::span<void* const> data,
           void* workspace) const;

 private:
  // Candidate i's plan, finalized on first use; null if it does not finalize or fit.
  const Desc* plan(size_t i) const;
  // A finalized plan for candidate i and its workspace, or null (never throws).
  std::unique_ptr<Desc> finalize_plan(size_t i, size_t* workspace) const;

  std::string what_;
  cudnnHandle_t handle_;
  size_t max_workspace_;
  Desc graph_;              // the operation graph and the engine configurations, kept while the
  std::vector<Desc> cfgs_;  // plans made from them live
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Desc>> plans_;
  mutable std::vector<int> state_;  // per candidate: 0 not tried, 1 finalized, -1 failed
  mutable std::vector<size_t> workspace_;
};

// The graphs of one kind of step, made once per key on each device and shared by every step with
// that key: `Built` holds a graph and what it was made from. They are made with a cuDNN handle of
// the cache's own per device, which lives as long as the process, and run with the step's handle
// (cuDNN 9's plans are not tied to the handle that made them). Never freed: keep a cache in a
// pointer that is never deleted, since at exit it would outlive the CUDA context.
template <class Built>
class GraphCache {
 public:
  explicit GraphCache(std::string what) : what_(std::move(what)) {}

  // The entry for `key` on the current device, made by make(handle) where there is none yet; with
  // only_made (while a stream is being captured) never made: null where there is none.
  template <class Make>
  std::shared_ptr<const Built> get(const std::vector<int64_t>& key, Make&& make, bool only_made = false) {
    int device = 0;
    check_cuda(cudaGetDevice(&device), what_);
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<const Built>& b = built_[{key, device}];
    if (!b && !only_made) {
      cudnnHandle_t& h = handles_[device];
      if (!h) check_cudnn(cudnnCreate(&h), what_ + ": creating the cuDNN handle for its graphs");
      b = make(h);
    }
    return b;
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::map<std::pair<std::vector<int64_t>, int>, std::shared_ptr<const Built>> built_;
  std::map<int, cudnnHandle_t> handles_;
};

}  // namespace kiln::gpu::cudnn_graph
