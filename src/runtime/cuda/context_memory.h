// A GPU context's memory and shared resources (gpu_context.cpp): device memory charged to the
// context's budget (device_memory.h), pinned host staging (mapped where kernels use it in place),
// the engine's weights on a device, and what the plans of one context share. Internal to the
// runtime; built only with CUDA.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/cuda/checks.h"
#include "runtime/cuda/device_memory.h"

namespace kiln::detail {
struct EngineImpl;
}

namespace kiln::gpu {

// Device memory charged to the thread's memory budget, with an error that says what it was for.
// Null for 0 bytes.
std::shared_ptr<void> device_alloc(size_t bytes, const std::string& what);

// Pinned host memory; null for 0 bytes. Throws kiln::Error naming `what`.
std::shared_ptr<void> pinned_alloc(size_t bytes, const std::string& what);

// Pinned host memory that kernels use in place, at *device on the GPU; charged to the thread's
// budget (on an integrated GPU it is the GPU's memory too). Null for 0 bytes.
std::shared_ptr<void> mapped_alloc(size_t bytes, const std::string& what, void** device);

// Where kernels can reach caller host memory `p` in place: its device address if it is pinned
// (cudaHostAlloc, cudaMallocHost, cudaHostRegister) or managed (cudaMallocManaged); else null.
void* device_alias(const void* p);

// True for a GPU that shares the CPU's memory (cudaDevAttrIntegrated: a Jetson).
bool integrated_gpu(int device);

// The engine's weights on `device`, uploaded by the first context there.
std::shared_ptr<void> device_weights(const detail::EngineImpl& e, int device);

constexpr size_t kAlign = 256;
inline size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// What the plans of one context share. They run one at a time, so one activation arena, one set of
// streams and library handles and one workspace of each kind serve them all: with a set per plan,
// a six-bucket BERT context held 18 streams, more than the GPU has hardware queues, and ran 5%
// slower than the fixed engine of its largest bucket. Workspaces only grow while the context's
// runners are made, before any of them records a graph.
struct GpuShared {
  BudgetRef budget;  // the context's memory budget (ContextOptions::memory_limit), one for all its plans
  std::shared_ptr<void> arena, workspace, side_workspace;
  size_t workspace_bytes = 0, side_workspace_bytes = 0;
  cudaStream_t own = nullptr, capture = nullptr, side = nullptr;
  cudnnHandle_t cudnn = nullptr, cudnn_side = nullptr;
  cublasLtHandle_t lt = nullptr;

  GpuShared() {
    try {
      check_cuda(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cuda(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cudnn(cudnnCreate(&cudnn), "cudnnCreate");
      check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
    } catch (...) {
      release();
      throw;
    }
  }
  GpuShared(const GpuShared&) = delete;
  GpuShared& operator=(const GpuShared&) = delete;
  ~GpuShared() { release(); }

  // The side stream and its cuDNN handle, made for the first plan with side steps.
  void need_side() {
    if (side) return;
    check_cuda(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cudnn(cudnnCreate(&cudnn_side), "cudnnCreate");
    check_cudnn(cudnnSetStream(cudnn_side, side), "cudnnSetStream");
  }

  void grow_workspaces(size_t main_bytes, size_t side_bytes) {
    grow(workspace, workspace_bytes, main_bytes, "the workspace");
    grow(side_workspace, side_workspace_bytes, side_bytes, "the side stream's workspace");
  }

 private:
  static void grow(std::shared_ptr<void>& w, size_t& have, size_t bytes, const char* what) {
    bytes = align_up(bytes);
    if (bytes <= have) return;
    w.reset();  // free the smaller one first
    w = device_alloc(bytes, what);
    have = bytes;
  }

  void release() noexcept {
    if (own) cudaStreamSynchronize(own);
    if (side) cudaStreamSynchronize(side);
    if (cudnn_side) cudnnDestroy(cudnn_side);
    if (side) cudaStreamDestroy(side);
    if (cudnn) cudnnDestroy(cudnn);
    if (lt) cublasLtDestroy(lt);
    if (own) cudaStreamDestroy(own);
    if (capture) cudaStreamDestroy(capture);
  }
};

}  // namespace kiln::gpu
