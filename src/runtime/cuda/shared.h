// What code outside the runtime (src/train, src/calib, src/build) may use of the CUDA backend:
// error checks, device buffers and the cuBLASLt GEMM. The rest of src/runtime/cuda is the runtime's
// own and may change without notice to them; the builder alone also reads the kernel table
// (gpu_kernels.h) to time tactics.
#pragma once

#include "runtime/cuda/checks.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/nn_gemm.h"
