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

#include "runtime/cuda/checks.h"

namespace kiln::gpu {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `bytes` (at least 1) of uninitialized device memory; a failure's error names `what`.
  DeviceBuffer(size_t bytes, std::string_view what) { check_cuda(cudaMalloc(&p_, std::max<size_t>(bytes, 1)), what); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
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
};

}  // namespace kiln::gpu
