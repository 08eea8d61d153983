// Built only with CUDA (the CPU-only build has no GPU context).
#if defined(KILN_HAVE_CUDA)
#include "runtime/cuda/context_memory.h"

#include <mutex>

#include "kiln/types.h"
#include "runtime/cuda/checks.h"
#include "runtime/engine_impl.h"

namespace kiln::gpu {

std::shared_ptr<void> device_alloc(size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  BudgetRef budget;
  void* p = device_malloc(bytes, what, &budget);
  return std::shared_ptr<void>(p, [bytes, budget](void* q) { device_free(q, bytes, budget); });
}

std::shared_ptr<void> pinned_alloc(size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("cannot allocate " + format_mib(bytes) + " of pinned host memory for " + what + ": " +
                cudaGetErrorString(err));
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

std::shared_ptr<void> mapped_alloc(size_t bytes, const std::string& what, void** device) {
  *device = nullptr;
  if (bytes == 0) return nullptr;
  BudgetRef budget;
  void* p = mapped_host_malloc(bytes, what, &budget, device);
  return std::shared_ptr<void>(p, [bytes, budget](void* q) { mapped_host_free(q, bytes, budget); });
}

void* device_alias(const void* p) {
  cudaPointerAttributes a{};
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeManaged ? a.devicePointer : nullptr;
}

bool integrated_gpu(int device) {
  int integrated = 0;
  return cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device) == cudaSuccess && integrated != 0;
}

std::shared_ptr<void> device_weights(const detail::EngineImpl& e, int device) {
  detail::GpuWeights& g = *e.gpu_weights;
  std::lock_guard lock(g.mu);
  for (auto& [d, w] : g.on_device)
    if (d == device) return w;
  std::shared_ptr<void> w = device_alloc(e.weights_bytes, "the engine's weights");
  if (w)
    check_cuda(cudaMemcpy(w.get(), e.weights, e.weights_bytes, cudaMemcpyHostToDevice),
               "uploading the engine's weights");
  g.on_device.emplace_back(device, w);
  return w;
}

}  // namespace kiln::gpu

#endif
