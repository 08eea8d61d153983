// What a build is asked for (kiln optimize's options). The rewrites of src/passes take it too: it
// says the target, the precision and which passes are disabled.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "calib/calib.h"
#include "core/shape_range.h"
#include "graph/tensor_file.h"

namespace kiln::build {

// Where a long stage of the build is: `done` of `total` steps, and the step at hand.
struct BuildProgress {
  const char* stage;
  size_t done = 0, total = 0;
  std::string step;
};

struct BuildOptions {
  int64_t batch = 1;  // the value of a symbolic leading (batch) dimension of the inputs
  // Full shapes for inputs with other symbolic dimensions.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Shape ranges (docs/decisions/55-shape-ranges.md): a range engine, one plan per bucket.
  // batch_range: --batch LO..HI, the symbolic leading dimension of the inputs no --shape gives;
  // shape_ranges: --shape NAME=... with a range on some dimension. Unset (fixed, or empty): one
  // fixed shape, from batch and input_shapes.
  DimRange batch_range{1, 1};
  std::map<std::string, ShapeRange> shape_ranges;
  std::vector<int64_t> buckets;  // --buckets: the sizes to plan for, in every range; empty: default_buckets
  // Inputs frozen to known values: they become constants. Needed when an input determines a shape
  // (a Reshape target, Range bounds); `kiln run` freezes such inputs to the values it is given.
  std::map<std::string, HostTensor> constant_inputs;
  std::string target = "cpu";  // or the GPU architecture, e.g. "sm_90" (kernels are timed on the GPU here)
  // GPU targets: use only the kernels of this compute capability (87 for sm_87, `--target-arch`:
  // runtime/cuda/device.h); 0: the target's own. The engine records it.
  int kernel_arch = 0;
  // GPU targets: the most device memory the build's own buffers may hold at once (`--memory-limit`;
  // runtime/cuda/device_memory.h): tactics whose workspace would pass it are not timed; 0: none.
  size_t memory_limit = 0;
  bool fp16 = false;           // float32 tensors inside the graph become float16 (inputs/outputs keep theirs)
  bool int8 = false;           // Conv/Gemm/MatMul in INT8 with calibrated scales (quantize-int8)
  calib::Options calib;        // --calib DATA, method, batches, cache (used with int8)
  // An INT8 engine slower than the same build without INT8 is replaced by that build (timed on the
  // GPU, or on the CPU that builds a CPU engine: engine_timing.h) unless force_int8.
  bool force_int8 = false;
  // GPU: close calls between tactics decided by timing whole engines (close_calls.h). Off for the
  // build without INT8 that an --int8 build is timed against (the calls would add up to 8 s to
  // every such build); that engine is built again with them where it wins.
  bool close_calls = true;
  std::string timing_cache;  // GPU: a file of measured tactic timings; read if present, written after
  std::vector<std::string> disabled_passes;
  std::function<void(const std::string&)> log;  // verbose messages (-v); may be empty
  // Called as the long stages (choosing GPU kernels) advance; may be empty. The library prints
  // nothing itself: the command line draws a progress line from it.
  std::function<void(const BuildProgress&)> progress;
};

}  // namespace kiln::build
