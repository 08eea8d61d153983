// kiln: optimize, run and inspect models. Exit codes: 0 ok, 1 outputs do not match (--expect),
// 2 bad input, unsupported model or any other error.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "runtime/cuda/device.h"

namespace {

void add_model_options(CLI::App* cmd, kiln::cli::ModelOptions& m) {
  cmd->add_option("--batch", m.batch,
                  "Size of a symbolic leading (batch) dimension (default 1), or a range LO..HI: one engine for "
                  "every size in it");
  cmd->add_option("--shape", m.shapes,
                  "Shape of an input with other symbolic dims: NAME=1x3x224x224; any dimension may be a range "
                  "LO..HI (NAME=1..8x3x224x224)");
  cmd->add_option("--buckets", m.buckets,
                  "Range engines: the sizes to build a plan for, ascending, the last the range's top "
                  "(default: the powers of two and the range's ends)");
  cmd->add_option("--const", m.consts, "Freeze an input to a value (.npy or .pb): NAME=FILE");
  cmd->add_option("--disable-pass", m.disabled, "Switch off an optimization pass by name");
  cmd->add_option("--device", m.device, "cpu or gpu (default: the GPU where there is one)");
  cmd->add_flag("--fp16", m.fp16,
                "Float16 storage and compute inside the engine (inputs and outputs keep their types)");
  cmd->add_flag("--int8", m.int8, "INT8 Conv/Gemm/MatMul with calibrated scales (needs --calib or --calib-cache)");
  cmd->add_flag("--best", m.best, "INT8 where an INT8 kernel exists, float16 elsewhere (--int8 --fp16)");
  cmd->add_flag("--force-int8", m.force_int8,
                "GPU: keep the INT8 engine even where the build without INT8 runs faster (timed at build time)");
  cmd->add_option("--calib", m.calib, "Calibration data: a folder of .npy files or PNG/JPEG images, or an IDX file");
  cmd->add_option("--calib-method", m.calib_method, "entropy, percentile, minmax or mse")->capture_default_str();
  cmd->add_option("--calib-batches", m.calib_batches, "Calibration batches (default: 512 samples' worth)");
  cmd->add_option("--calib-percentile", m.calib_percentile, "Percentile of --calib-method percentile")
      ->capture_default_str();
  cmd->add_option("--calib-cache", m.calib_cache, "Calibration cache: read if it exists and matches, else written");
  cmd->add_option(
      "--calib-preprocess", m.calib_preprocess,
      "Images: \"resize=256 mean=0.485,0.456,0.406 std=0.229,0.224,0.225 layout=nchw color=rgb scale=1/255\"");
  cmd->add_option("--accuracy-budget", m.accuracy_budget,
                  "INT8: top-1 points the build may lose on --validate; sensitive layers fall back to float");
  cmd->add_option("--validate", m.validate, "Labelled data for --accuracy-budget (IDX folder, or .npy + labels.npy)");
  cmd->add_option("--timing-cache", m.timing_cache, "GPU: kernel timings file, read if present and updated");
  cmd->add_option("--target-arch", m.target_arch,
                  "GPU: use only the kernels a GPU of this compute capability has, e.g. sm_87 (Jetson Orin) on an "
                  "H100: no Hopper-only kernels (docs/jetson.md)");
  cmd->add_option("--memory-limit", m.memory_limit,
                  "GPU: the most device memory the build's own buffers may hold at once, e.g. 2G; tactics whose "
                  "workspace would pass it are not timed");
  cmd->add_flag("-v,--verbose", m.verbose, "List the passes run and what each changed");
}

void add_train_options(CLI::App* cmd, kiln::cli::TrainOptions& t) {
  cmd->add_option("--net", t.net, "Zoo network (mlp, lenet5, resnet8) or description file (.prototxt)")
      ->capture_default_str();
  cmd->add_option("--data", t.data,
                  "Folder of a data set: IDX (MNIST layout), CIFAR-10 binary, or x_train.npy/y_train.npy")
      ->capture_default_str();
  cmd->add_option("--epochs", t.epochs, "Passes over the training set")->capture_default_str();
  cmd->add_option("--batch", t.batch, "Images per step")->capture_default_str();
  cmd->add_option("--solver", t.solver, "sgd, adam or adamw")->capture_default_str();
  cmd->add_option("--lr", t.lr, "Learning rate (default: sgd 0.01, adam and adamw 0.001)");
  cmd->add_option("--momentum", t.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--weight-decay", t.weight_decay, "Weight decay of conv and linear weights")->capture_default_str();
  cmd->add_option("--lr-schedule", t.lr_schedule, "constant, step or cosine")->capture_default_str();
  cmd->add_option("--warmup", t.warmup, "Steps of linear warm-up")->capture_default_str();
  cmd->add_option("--lr-step", t.lr_step_epochs, "Step schedule: epochs between drops");
  cmd->add_option("--lr-gamma", t.lr_gamma, "Step schedule: factor of each drop")->capture_default_str();
  cmd->add_option("--min-lr", t.min_lr, "Cosine schedule: the final rate")->capture_default_str();
  cmd->add_option("--seed", t.seed, "Seed of initialization, shuffling and dropout")->capture_default_str();
  cmd->add_option("--val-split", t.val_split, "Share of the training images held out for validation")
      ->capture_default_str();
  cmd->add_option("--limit", t.limit, "Use only the first N training images (0: all)");
  cmd->add_option("--device", t.device, "cpu or gpu (default: the GPU where there is one)");
  cmd->add_flag("--fp16", t.fp16, "GPU: FP16 compute with FP32 master weights and dynamic loss scaling");
  cmd->add_option("--gpus", t.gpus, "GPU: data-parallel GPUs (the batch is split over them)")->capture_default_str();
  cmd->add_option("--timing-cache", t.timing_cache,
                  "GPU: file of cuDNN algorithm choices, read if present and updated; runs that share it train to the "
                  "same bits (default: DIR/timing_cache.json with --checkpoint or --resume DIR)");
  cmd->add_option("--threads", t.threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_option("--checkpoint", t.checkpoint, "Folder for checkpoints (written atomically)");
  cmd->add_option("--checkpoint-every", t.checkpoint_every, "Steps between checkpoints (default: one per epoch)");
  cmd->add_option("--resume", t.resume, "Continue from the checkpoint in this folder");
  cmd->add_option("--metrics", t.metrics, "Write the training metrics to FILE.csv or FILE.json");
  cmd->add_option("--plot", t.plot, "Write the training and validation curves to FILE.svg");
  cmd->add_option("-o,--output", t.output, "Export the trained network to MODEL.onnx (inference form)");
  cmd->add_option("--example", t.example,
                  "Write a validation batch and its logits here (input_0.pb, output_0.pb) to check an export");
  cmd->add_option("--log-every", t.log_every, "Steps per point of the training curves")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app{"Kiln: a fast, small, self-checking inference engine"};
  app.set_version_flag("--version", "kiln " + std::string(kiln::kiln_version()));
  app.require_subcommand(1);

  OptimizeOptions opt;
  CLI::App* optimize = app.add_subcommand("optimize", "Build an engine file from an ONNX model");
  optimize->add_option("model", opt.model, "MODEL.onnx")->required();
  optimize->add_option("-o,--output", opt.output, "Engine file to write (default: MODEL.kiln)");
  add_model_options(optimize, opt.build);

  RunOptions run;
  CLI::App* runc = app.add_subcommand("run", "Run a model (.kiln, or .onnx built in memory) on inputs");
  runc->add_option("model", run.model, "MODEL.kiln or MODEL.onnx")->required();
  runc->add_option("--input", run.inputs, "An input tensor: NAME=FILE (.npy or .pb)");
  runc->add_option("--inputs", run.inputs_dir, "A folder of input_0.pb, input_1.pb, ... (ONNX test-data layout)");
  runc->add_option("--outputs", run.outputs_dir, "Write output_N.pb and output_N.npy here");
  runc->add_option("--expect", run.expect_dir, "Compare with output_N.pb in this folder; exit 1 on mismatch");
  runc->add_option("--rtol", run.rtol, "Relative tolerance: |out - ref| <= atol + rtol * |ref|")->capture_default_str();
  runc->add_option("--atol", run.atol, "Absolute tolerance")->capture_default_str();
  runc->add_option("--threads", run.threads, "CPU threads (0: all cores)")->capture_default_str();
  add_model_options(runc, run.build);

  BenchOptions bench;
  CLI::App* benchc = app.add_subcommand("bench", "Measure latency and throughput (.kiln, or .onnx built in memory)");
  benchc->add_option("model", bench.model, "MODEL.kiln or MODEL.onnx")->required();
  benchc->add_option("--warmup", bench.warmup, "Inferences before measuring")->capture_default_str();
  benchc->add_option("--iterations", bench.iterations, "Measure at least this many inferences per stream")
      ->capture_default_str();
  benchc->add_option("--duration", bench.duration, "... and at least this many seconds")->capture_default_str();
  benchc->add_flag("--cuda-graph", bench.cuda_graph, "GPU: replay the steps as a CUDA graph");
  benchc->add_option("--streams", bench.streams, "Concurrent streams, each with its own context and thread")
      ->capture_default_str();
  benchc->add_flag("--no-transfers", bench.no_transfers, "GPU: leave out the input and output copies");
  benchc->add_flag("--profile", bench.profile, "Per-layer times and shares");
  benchc->add_flag("--no-side-stream", bench.no_side_stream,
                   "GPU: run every step on one stream (by default steps that need nothing from the steps just "
                   "before them run beside those on a second stream)");
  benchc->add_flag(
      "--whole-net", bench.whole_net,
      "GPU: run a small network as one whole-network kernel where it can (slower than the steps on an H200)");
  benchc
      ->add_option("--mapped-io", bench.mapped_io,
                   "GPU: the kernels read the inputs and write the outputs in mapped host memory in place, "
                   "no copies: on, off, or auto (on a GPU that shares the CPU's memory, a Jetson)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  benchc->add_option("--json", bench.json, "Write every figure to this JSON file");
  benchc->add_option("--threads", bench.threads, "CPU threads per context (0: all cores)")->capture_default_str();
  add_model_options(benchc, bench.build);

  InspectOptions insp;
  CLI::App* inspect = app.add_subcommand("inspect", "Show a model's or an engine's inputs, outputs and steps");
  inspect->add_option("model", insp.model, "MODEL.kiln or MODEL.onnx")->required();
  inspect->add_flag("--json", insp.json, "Print JSON");

  OpsOptions ops;
  CLI::App* opsc =
      app.add_subcommand("ops", "List the ONNX op types Kiln imports, and the backends (cpu, gpu) that run them");
  opsc->add_flag("--json", ops.json, "Print JSON with each op's attribute struct and backends");

  TrainOptions tr;
  CLI::App* trainc =
      app.add_subcommand("train", "Train a network (zoo name or description file) and export it as ONNX");
  add_train_options(trainc, tr);

  EvalOptions ev;
  ev.build.batch = "100";
  CLI::App* evalc = app.add_subcommand("eval", "Top-1 accuracy and confusion matrix of a classifier on a labelled set");
  evalc->add_option("model", ev.model, "MODEL.onnx or MODEL.kiln")->required();
  evalc->add_option("--data", ev.data, "Folder of a data set (IDX, CIFAR-10 binary or x_test.npy/y_test.npy)")
      ->capture_default_str();
  evalc->add_option("--split", ev.split, "test or train")->capture_default_str();
  evalc->add_option("--limit", ev.limit, "Use only the first N images (0: all)");
  evalc->add_option("--threads", ev.threads, "CPU threads (0: all cores)")->capture_default_str();
  evalc->add_option("--json", ev.json, "Write accuracy and confusion matrix to this JSON file");
  add_model_options(evalc, ev.build);

  ServeOptions srv;
  CLI::App* servec = app.add_subcommand(
      "serve", "Serve engines over the KServe v2 protocol (REST and gRPC) with dynamic batching; SIGTERM drains");
  servec->add_option("models", srv.models, "MODEL.kiln ... (a model's name is its file's stem)")->required();
  servec->add_option("--host", srv.host, "Address to listen on")->capture_default_str();
  servec->add_option("--http-port", srv.http_port, "REST port (0: none)")->capture_default_str();
  servec->add_option("--grpc-port", srv.grpc_port, "gRPC port (0: none)")->capture_default_str();
  servec->add_option("--metrics-port", srv.metrics_port, "Prometheus metrics port, GET /metrics (0: none)")
      ->capture_default_str();
  servec->add_option("--instances", srv.instances, "Contexts per model and GPU (CPU engines: in all)")
      ->capture_default_str();
  servec->add_option("--max-queue-delay-us", srv.max_queue_delay_us,
                     "How long the oldest request may wait for its batch to fill")
      ->capture_default_str();
  servec->add_option("--preferred-batch", srv.preferred_batch, "Batch sizes that run at once, e.g. 8,32");
  servec->add_option("--max-queue", srv.max_queue, "Queued requests per model; more get 503 / UNAVAILABLE")
      ->capture_default_str();
  servec->add_option("--device", srv.devices, "GPU engines: CUDA devices, e.g. 0 or 0,1 (default 0)");
  servec->add_option("--threads", srv.threads, "CPU engines: threads per context (0: the cores shared out)")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitError;
  }
  try {
    if (*optimize) return run_optimize(opt);
    if (*runc) return run_run(run);
    if (*inspect) return run_inspect(insp);
    if (*benchc) return run_bench(bench);
    if (*opsc) return run_ops(ops);
    if (*trainc) return run_train(tr);
    if (*evalc) return run_eval(ev);
    if (*servec) return run_serve(srv);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return kExitError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln: internal error: {}\n", e.what());
    return kExitError;
  }
  return kExitError;
}
