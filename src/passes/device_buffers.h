// Device memory that a pass allocates for itself (the calibration engine's tensors, the buffers an
// engine is timed on), freed when the object goes, on every path. CUDA builds only.
#pragma once

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "runtime/cuda/gpu_kernels.h"

namespace kiln::passes {

class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  ~DeviceBuffers() {
    for (void* p : buffers_) cudaFree(p);
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  // `bytes` of device memory (at least 1), uninitialized; an error names `what`.
  void* alloc(size_t bytes, std::string_view what) {
    void* p = nullptr;
    gpu::check_cuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), what);
    buffers_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> buffers_;
};

}  // namespace kiln::passes
#endif
