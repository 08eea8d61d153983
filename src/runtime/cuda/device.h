// Which CUDA device Kiln would run on. Usable in every build: without CUDA (KILN_HAVE_CUDA unset)
// gpu_available() is false and gpu_target() throws.
#pragma once

#include <string>

namespace kiln::gpu {

// True if the CUDA runtime finds a driver and at least one device. Never crashes or throws: a
// machine without a driver (or a CPU-only build) just answers false.
bool gpu_available();

// The compute capability of device 0 as an nvcc target name, e.g. "sm_90" for an H100 or H200.
// Throws kiln::Error "no CUDA device: <CUDA's reason>" if there is none.
std::string gpu_target();

}  // namespace kiln::gpu
