// Calibration statistics of float32 tensors in GPU memory (CUDA builds only). add_on_gpu makes
// both of TensorStats::add's passes on the device, one launch for all tensors each, and leaves
// every TensorStats as add() would with the tensor copied to the host, to the bit: the summaries'
// minima and maxima are exact in float, the bins are floor(|x| / width) in double on both sides, and
// the bin width is still chosen by TensorStats::add_summary. The calibration engine's tensors at
// batch 256 are gigabytes (ResNet-50: 8 GiB), which the host took seconds to copy and count.
#pragma once

#include <cstddef>
#include <span>

#include "calib/stats.h"

namespace kiln::calib {

struct DeviceFloats {
  const float* data = nullptr;  // device memory of the current device
  size_t count = 0;
};

// Adds batch[i] to *stats[i] for every i; synchronous. Throws kiln::Error on a CUDA error.
void add_on_gpu(std::span<TensorStats* const> stats, std::span<const DeviceFloats> batch);

}  // namespace kiln::calib
