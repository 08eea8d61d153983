// KILN_HOST_DEVICE: a function compiled for the host and, in CUDA sources, for the device too, so
// that small helpers (an epilogue's math, an op's index arithmetic) are written once for the CPU
// and CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KILN_HOST_DEVICE inline
#endif
