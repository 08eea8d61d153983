// Device memory that a pass allocates for itself (the calibration engine's tensors, the buffers an
// engine is timed on), freed when the object goes, on every path. CUDA builds only.
#pragma once

#if defined(KILN_HAVE_CUDA)
#include <string_view>
#include <vector>

#include "runtime/cuda/device_buffer.h"

namespace kiln::build {

class DeviceBuffers {
 public:
  // `bytes` of device memory (at least 1), uninitialized; an error names `what`.
  void* alloc(size_t bytes, std::string_view what) { return buffers_.emplace_back(bytes, what).get(); }

 private:
  std::vector<gpu::DeviceBuffer> buffers_;
};

}  // namespace kiln::build
#endif
