#include "runtime/cuda/device.h"

#include "kiln/types.h"

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kiln::gpu {

#if defined(KILN_HAVE_CUDA)

namespace {

// The device count, or the CUDA error that prevented counting (no driver, driver too old, no
// device). The failed call's error is cleared so that it does not surface in a later
// cudaGetLastError (check_launch would misreport it as a launch failure).
cudaError_t device_count(int* n) {
  *n = 0;
  const cudaError_t err = cudaGetDeviceCount(n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *n = 0;
  }
  return err;
}

}  // namespace

bool gpu_available() {
  int n = 0;
  return device_count(&n) == cudaSuccess && n > 0;
}

std::string gpu_target() {
  int n = 0;
  const cudaError_t err = device_count(&n);
  if (err != cudaSuccess) throw Error(std::string("no CUDA device: ") + cudaGetErrorString(err));
  if (n == 0) throw Error("no CUDA device: the CUDA runtime reports 0 devices");
  int major = 0, minor = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("no CUDA device: cannot read device 0's compute capability: ") + cudaGetErrorString(e));
  }
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

#else  // a CPU-only build

bool gpu_available() { return false; }

std::string gpu_target() { throw Error("no CUDA device: Kiln was built without CUDA (KILN_CUDA=OFF)"); }

#endif

}  // namespace kiln::gpu
