// The GPU training backends behind make_backend's `--device gpu`: one CudaBackend for one GPU, a
// DataParallelBackend over several (--gpus N). Declared in every build; a CPU-only build (KILN_CUDA
// off) says that it was built without CUDA.
#pragma once

#include <memory>

#include "train/backend.h"

namespace kiln::train {

// Throws kiln::Error when this build has no CUDA, the machine too few GPUs, or NCCL is missing
// for N > 1.
std::unique_ptr<Backend> make_gpu_backend(const BackendOptions& options);

}  // namespace kiln::train
