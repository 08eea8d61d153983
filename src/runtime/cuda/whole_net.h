// The whole-network kernel's host side (whole_net.cu): a plan's layer table uploaded to the device
// once, and the launch that runs the whole engine as one kernel, one cluster of thread blocks per
// sample (one block before Hopper; whole_net_plan.h says which engines and how the shared memory
// is laid out).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/whole_net_plan.h"

namespace kiln::gpu {

class WholeNet {
 public:
  // Uploads plan's table (eligible) with the device address of every weight it names: data[t] for
  // tensor t. Blocking (context creation); throws kiln::Error.
  WholeNet(WholeNetPlan plan, const std::vector<void*>& data);
  ~WholeNet();
  WholeNet(const WholeNet&) = delete;
  WholeNet& operator=(const WholeNet&) = delete;

  // Enqueues the kernel: `input` the engine input [batch, ...], `output` the engine output (device
  // memory). Allocates nothing, never synchronizes; fine under stream capture.
  void launch(const void* input, void* output, cudaStream_t stream) const;
  const WholeNetPlan& plan() const { return plan_; }

 private:
  int cluster_size(int device) const;

  WholeNetPlan plan_;
  int cluster_ = 1;  // blocks per sample (cluster_size)
  WnLayer* table_ = nullptr;  // device copy of plan_.layers, charged to the context's memory budget
  size_t table_bytes_ = 0;
  BudgetRef table_budget_;
};

// The most shared memory a block may opt into on `device` (cudaDevAttrMaxSharedMemoryPerBlockOptin).
size_t whole_net_max_smem(int device);

}  // namespace kiln::gpu
