// The kiln subcommands: each has an options struct filled by main.cpp's CLI11 parser and a run
// function returning the process exit code (cli/common.h). Errors are thrown as kiln::Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

struct ModelOptions {  // how a model becomes an engine, shared by optimize and run
  // --batch: N, or LO..HI for a range engine; empty: 1 (building), the engine's (running an engine)
  std::string batch;
  std::vector<std::string> shapes;    // NAME=DxDxD, any dimension a range LO..HI
  std::string buckets;                // --buckets 1,8,32,64: a range engine's plans
  std::vector<std::string> consts;    // NAME=FILE
  std::vector<std::string> disabled;  // pass names
  std::string device = "auto";        // auto: the GPU where there is one, else the CPU
  bool fp16 = false;
  bool int8 = false;
  bool best = false;  // int8 + fp16
  bool force_int8 = false;
  std::string calib;  // calibration data
  std::string calib_method = "entropy";
  int calib_batches = 0;
  double calib_percentile = 99.99;
  std::string calib_cache;
  std::string calib_preprocess;
  double accuracy_budget = -1;  // points of top-1; < 0: no guard
  std::string validate;
  std::string timing_cache;  // GPU: file of kernel timings reused across builds
  std::string target_arch;   // GPU: --target-arch sm_87, only the kernels of that compute capability
  std::string memory_limit;  // GPU: --memory-limit 2G, the most device memory the build's buffers may hold
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
  bool whole_net = false;
  bool no_side_stream = false;
  std::string mapped_io = "auto";  // GPU: host inputs/outputs in place (auto: on an integrated GPU)
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

struct TrainOptions {
  std::string net = "lenet5";  // zoo name or description file
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 10;
  int64_t batch = 64;
  std::string solver = "sgd";
  double lr = 0;  // 0: the solver's default (sgd 0.01, adam/adamw 0.001)
  double momentum = 0.9;
  double weight_decay = 0;
  std::string lr_schedule = "constant";
  int64_t warmup = 0;         // steps
  double lr_step_epochs = 0;  // step schedule: epochs between drops
  double lr_gamma = 0.1;
  double min_lr = 0;
  uint64_t seed = 1;
  double val_split = 0.1;
  int64_t limit = 0;
  std::string device = "auto";  // auto: the GPU where there is one, else the CPU
  bool fp16 = false;
  int gpus = 1;
  int threads = 0;
  std::string timing_cache;      // GPU: cuDNN algorithm choices; default: the checkpoint folder's
  int64_t checkpoint_every = 0;  // steps; 0 with --checkpoint: one per epoch
  std::string checkpoint;
  std::string resume;
  std::string metrics;
  std::string plot;
  std::string output;
  std::string example;
  int64_t log_every = 50;
};

struct EvalOptions {
  std::string model;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string split = "test";
  int64_t limit = 0;
  int threads = 0;
  std::string json;
  ModelOptions build;
};

struct ServeOptions {
  std::vector<std::string> models;  // engine files; a model's name is its file's stem
  std::string host = "0.0.0.0";
  int http_port = 8000, grpc_port = 8001, metrics_port = 8002;
  int instances = 1;
  int64_t max_queue_delay_us = 0;
  std::string preferred_batch;  // "8,32"
  int64_t max_queue = 1024;
  std::string devices;  // "0" or "0,1"
  int threads = 0;
};

int run_ops(const OpsOptions& o);
int run_serve(const ServeOptions& o);
int run_optimize(const OptimizeOptions& o);
int run_run(const RunOptions& o);
int run_inspect(const InspectOptions& o);
int run_bench(const BenchOptions& o);
int run_train(const TrainOptions& o);
int run_eval(const EvalOptions& o);

}  // namespace kiln::cli
