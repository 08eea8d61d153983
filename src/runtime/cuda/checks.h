// Errors of the CUDA runtime and its libraries as kiln::Error (defined in gpu_kernels.cpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string_view>

namespace kiln::gpu {

// Throws kiln::Error "<what>: <CUDA error string>" unless err is cudaSuccess.
void check_cuda(cudaError_t err, std::string_view what);
void check_cudnn(cudnnStatus_t st, std::string_view what);
void check_cublas(cublasStatus_t st, std::string_view what);
// After a kernel launch: reports a bad launch (configuration, missing sm_90 image, ...) without
// synchronizing. cudaGetLastError also returns an earlier asynchronous failure of this thread.
void check_launch(std::string_view what);

}  // namespace kiln::gpu
