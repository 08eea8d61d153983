// The loaded, verified form of an engine, shared by Engine and Context.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/attrs.h"
#include "core/op_kind.h"
#include "kiln/engine.h"

namespace kiln::detail {

enum class TensorKind : uint8_t { kInput, kOutput, kWeight, kActivation };

struct TensorRec {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  TensorKind kind = TensorKind::kActivation;
  uint64_t offset = 0;  // weights: into the weight blob; activations and outputs: into the arena; views: into base
  uint64_t bytes = 0;
  int32_t base = -1;  // a view: the activation or output whose memory it lies in (never a view itself)
};

struct StepRec {
  OpKind kind = OpKind::kIdentity;
  Attrs attrs;
  std::string name;
  std::vector<int32_t> inputs;  // -1: omitted optional input
  std::vector<int32_t> outputs;
  int32_t tactic = -1;  // GPU: the builder's timed choice (GpuEnv::tactic)
};

// "step 'NAME' (OP)", as errors name a step.
inline std::string step_name(const StepRec& st) {
  return "step '" + st.name + "' (" + std::string(op_name(st.kind)) + ")";
}

// GPU engines: the weight blob on each device that has a context (uploaded by the first one),
// shared by every plan of a range engine.
struct GpuWeights {
  std::mutex mu;
  std::vector<std::pair<int, std::shared_ptr<void>>> on_device;
};

struct EngineImpl {
  std::string origin;
  std::vector<uint8_t> file;         // the whole file (empty in the plans of a range engine's buckets)
  const uint8_t* weights = nullptr;  // the weight blob, in `file` (a bucket's plan: its engine's)
  uint32_t format_version = 0;
  std::string producer, target, model_name;
  int cuda_version = 0, cudnn_version = 0, cublaslt_version = 0;  // GPU engines: the libraries built with
  int kernel_arch = 0;  // GPU engines: the compute capability its kernels are limited to (0: none)
  std::vector<TensorRec> tensors;
  std::vector<StepRec> steps;
  std::vector<int32_t> input_ids, output_ids;
  std::vector<int32_t> view_ids;  // tensors with a base, whose address contexts derive from their base's
  std::vector<TensorInfo> inputs, outputs;
  uint64_t weights_bytes = 0, arena_bytes = 0;

  const uint8_t* weight_data(const TensorRec& t) const { return weights + t.offset; }

  std::shared_ptr<GpuWeights> gpu_weights = std::make_shared<GpuWeights>();

  // Range engines (format 5): this is the plan of the largest bucket; `buckets` has the others,
  // smallest first. plan(i) for i < plan_count(): the buckets' plans, then this one.
  std::vector<ShapeRangeInfo> ranges;
  struct BucketPlan {
    std::vector<int64_t> sizes;  // one per range
    std::unique_ptr<EngineImpl> plan;
  };
  std::vector<BucketPlan> buckets;
  std::vector<int64_t> top_sizes;  // this plan's sizes: every range's hi

  size_t plan_count() const { return buckets.size() + 1; }
  const EngineImpl& plan(size_t i) const { return i < buckets.size() ? *buckets[i].plan : *this; }
  const std::vector<int64_t>& plan_sizes(size_t i) const { return i < buckets.size() ? buckets[i].sizes : top_sizes; }
  uint64_t max_arena_bytes() const {
    uint64_t m = arena_bytes;
    for (const BucketPlan& b : buckets) m = std::max(m, b.plan->arena_bytes);
    return m;
  }
};

// Parses and verifies an engine file; throws kiln::Error naming `origin` and the problem.
std::shared_ptr<EngineImpl> parse_engine(std::vector<uint8_t> file, std::string origin);

}  // namespace kiln::detail
