// Calibration run for quantize-int8: the float graph, with the tensors to calibrate made outputs,
// is built into an engine for the build's target (the CPU, or the GPU being built for) and run over
// the calibration data (calib::DataSource) in batches of the engine's batch size; every batch
// updates each tensor's calib::TensorStats.
#pragma once

#include <vector>

#include "calib/stats.h"
#include "build/build.h"

namespace kiln::build {

struct CalibrationRun {
  std::vector<calib::TensorStats> stats;  // one per requested tensor, in order
  int64_t samples = 0;
  int batches = 0;
};

// tensors: float32 values of g (graph inputs or node outputs). Throws kiln::Error for bad data
// (naming the file) or too little of it.
CalibrationRun run_calibration(const graph::Graph& g, const std::vector<graph::ValueId>& tensors,
                               const BuildOptions& options);

}  // namespace kiln::build
