// kiln::calib: INT8 calibration. What the user asks for (`kiln optimize --int8 --calib DATA ...`) as
// one options struct that the builder carries to the quantize-int8 pass; the pieces live in
// stats.h (histograms and the amax methods), data_source.h (.npy, IDX, images) and cache.h (the
// calibration cache file).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kiln::calib {

// How a tensor's clipping range amax is chosen from its statistics (stats.h has the math).
enum class Method { kEntropy, kPercentile, kMinMax, kMse };

std::string_view method_name(Method m);
// "entropy", "percentile", "minmax" or "mse"; throws kiln::Error listing the choices otherwise.
Method parse_method(std::string_view name);

struct Options {
  std::string data;        // --calib: a folder of .npy batches, an IDX file or folder, a folder of images
  std::string preprocess;  // --calib-preprocess: "resize=256 mean=0.485,0.456,0.406 std=... layout=nchw"
  Method method = Method::kEntropy;
  double percentile = 99.99;  // Method::kPercentile
  int batches = 0;            // batches of the engine's batch size; 0: enough for kDefaultSamples
  std::string cache;          // --calib-cache: read if it exists (and matches), else written
  // The accuracy guard: with a budget >= 0, layers fall back to float (FP16 with --best) until
  // top-1 on `validate` drops by at most `accuracy_budget` points.
  double accuracy_budget = -1;
  std::string validate;  // --validate: labelled data (an IDX folder, .npy files with labels.npy)
  std::function<void(const std::string&)> report;  // the guard's per-layer table; may be empty
  // Called after every calibration batch (done of total); may be empty. The command line draws a
  // progress bar with it; the library itself prints nothing.
  std::function<void(int done, int total)> progress;
};

// Samples used when Options::batches is 0 (TensorRT's guidance for ImageNet models is ~500).
inline constexpr int kDefaultSamples = 512;

// The symmetric INT8 scale of a clipping range: amax / 127 (1 / 127 for an all-zero tensor).
float int8_scale(double amax);

}  // namespace kiln::calib
