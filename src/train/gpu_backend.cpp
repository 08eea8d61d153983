// make_gpu_backend (gpu_backend.h): the one place that knows whether this build has CUDA.
#include "train/gpu_backend.h"

#include <string>

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "train/algorithm_cache.h"
#include "train/cuda_backend.h"
#include "train/data_parallel.h"
#endif

namespace kiln::train {

#if defined(KILN_HAVE_CUDA)

std::unique_ptr<Backend> make_gpu_backend(const BackendOptions& options) {
  if (options.gpus < 1) throw Error("--gpus must be at least 1");
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("--device gpu: no CUDA device (") + cudaGetErrorString(err) + "); train with --device cpu");
  }
  if (count < options.gpus)
    throw Error("--gpus " + std::to_string(options.gpus) + ": this machine has " + std::to_string(count) +
                (count == 1 ? " GPU" : " GPUs"));
  if (!options.timing_cache.empty()) AlgorithmCache::instance().use_file(options.timing_cache);
  if (options.gpus == 1) return std::make_unique<CudaBackend>(0, options.fp16);
  return std::make_unique<DataParallelBackend>(options.gpus, options.fp16);
}

#else

std::unique_ptr<Backend> make_gpu_backend(const BackendOptions&) {
  throw Error(
      "--device gpu: this kiln was built without CUDA (KILN_CUDA=OFF); rebuild it with the CUDA toolkit, or train "
      "with --device cpu");
}

#endif

}  // namespace kiln::train
