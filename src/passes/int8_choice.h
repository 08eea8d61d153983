// GPU INT8 builds keep INT8 only where it pays: `--int8` means "INT8 where a fast INT8 kernel
// exists", and on a GPU that is decided by timing, as tactics are. The builder times the INT8 engine
// against the engine it would build without INT8 (float16 with --best or --fp16, float32 otherwise)
// on the device and keeps the faster one; BuildOptions::force_int8 keeps INT8 regardless.
#pragma once

#include <cstdint>
#include <span>

namespace kiln::passes {

// The median time in ms of one inference of the engine on kiln bench's inputs (sample_inputs.h),
// after a few warm-up runs: GPU engines on device buffers, a CUDA graph timed with CUDA events (no
// host copies); CPU engines the wall time of Context::run().
double median_run_ms(std::span<const uint8_t> engine, int runs = 20);

}  // namespace kiln::passes
