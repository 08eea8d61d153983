// The kiln subcommands: each has an options struct filled by main.cpp's CLI11 parser and a run
// function returning the process exit code (cli/common.h). Errors are thrown as kiln::Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

struct ModelOptions {  // how a model becomes an engine, shared by optimize and run
  int64_t batch = 1;
  std::vector<std::string> shapes;    // NAME=DxDxD
  std::vector<std::string> consts;    // NAME=FILE
  std::vector<std::string> disabled;  // pass names
  std::string device = "cpu";
  bool fp16 = false;
  bool int8 = false;
  bool best = false;  // int8 + fp16
  std::string calib;  // calibration data
  std::string calib_method = "entropy";
  int calib_batches = 0;
  double calib_percentile = 99.99;
  std::string calib_cache;
  std::string calib_preprocess;
  double accuracy_budget = -1;  // points of top-1; < 0: no guard
  std::string validate;
  std::string timing_cache;  // GPU: file of kernel timings reused across builds
  bool verbose = false;
};

struct OptimizeOptions {
  std::string model;
  std::string output;
  ModelOptions build;
};

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE
  std::string inputs_dir;
  std::string outputs_dir;
  std::string expect_dir;
  double rtol = 1e-3;
  double atol = 1e-5;
  int threads = 0;
  ModelOptions build;
};

struct BenchOptions {
  std::string model;
  int warmup = 20;
  int iterations = 100;
  double duration = 2.0;  // seconds, at least
  bool cuda_graph = false;
  int streams = 1;
  bool no_transfers = false;
  bool profile = false;
  std::string json;
  int threads = 0;
  ModelOptions build;
};

struct InspectOptions {
  std::string model;
  bool json = false;
};

struct OpsOptions {
  bool json = false;
};

int run_ops(const OpsOptions& o);
int run_optimize(const OptimizeOptions& o);
int run_run(const RunOptions& o);
int run_inspect(const InspectOptions& o);
int run_bench(const BenchOptions& o);

}  // namespace kiln::cli
