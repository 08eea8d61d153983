// One block of device memory, freed when its owner goes (on every path, an exception's too):
// the builder's test buffers and workspaces (build/choose_tactics.cpp), the buffers a pass
// allocates for itself (build/device_buffers.h), the calibration statistics' (calib/stats_gpu.cu).
// Move-only. The runtime's engine memory is gpu_context.cpp's device_alloc, which weights shared
// between contexts need (a shared_ptr).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "runtime/cuda/device_memory.h"

namespace kiln::gpu {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `bytes` (at least 1) of uninitialized device memory, charged to the thread's memory budget
  // (device_memory.h); a failure's error names `what`.
  DeviceBuffer(size_t bytes, std::string_view what) : bytes_(bytes) { p_ = device_malloc(bytes, what, &budget_); }
  ~DeviceBuffer() { device_free(p_, bytes_, budget_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), budget_(std::move(o.budget_)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      device_free(p_, bytes_, budget_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      budget_ = std::move(o.budget_);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  BudgetRef budget_;
};

}  // namespace kiln::gpu
