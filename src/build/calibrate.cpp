// The calibration run (see calibrate.h). A CPU engine's statistics are made on the host, the
// tensors in parallel, one per task. A GPU engine's stay on the device (GpuTensors): its context has
// no host staging, its inputs are device buffers bound to it, the calibrated tensors (its outputs)
// are read where the context keeps them (Context::output_device), and the statistics are made
// there (calib/stats_gpu.h): at batch 256 ResNet-50's 54 calibrated tensors are 8 GiB, whose pinned
// staging took seconds to allocate and whose counting on the host took 3 s a batch.
#include "build/calibrate.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "build/engine_writer.h"
#include "build/stopwatch.h"
#include "calib/data_source.h"
#include "kiln/engine.h"
#include "passes/pass.h"
#include "runtime/copy_corner.h"
#include "runtime/cpu/thread_pool.h"

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "build/device_buffers.h"
#include "calib/stats_gpu.h"
#include "runtime/cuda/gpu_kernels.h"
#endif

namespace kiln::build {

using passes::remove_dead_nodes;

namespace {

// A GPU calibration engine's inputs in device memory bound to its context, and its outputs where the
// context keeps them (its own memory: buffers of their own would hold the 8 GiB of ResNet-50's
// calibrated tensors at batch 256 a second time).
class GpuTensors {
 public:
  GpuTensors(const Engine& engine, Context& ctx);
  GpuTensors(const GpuTensors&) = delete;
  GpuTensors& operator=(const GpuTensors&) = delete;

  // Copies a batch in and runs the engine.
  void run(const std::vector<calib::InputSpec>& specs, const std::vector<std::vector<uint8_t>>& inputs);
  // Adds each named tensor's values to its statistics, on the GPU.
  void add_to(std::vector<calib::TensorStats>& stats, const std::vector<std::string>& names) const;

 private:
  void* alloc(const TensorInfo& t);

  Context& ctx_;
#if defined(KILN_HAVE_CUDA)
  DeviceBuffers buffers_;
#endif
  std::map<std::string, std::pair<void*, size_t>> at_;  // inputs: device pointer and bytes, by name
  std::set<std::string> outputs_;                       // the engine's outputs
};

#if defined(KILN_HAVE_CUDA)

using gpu::check_cuda;

GpuTensors::GpuTensors(const Engine& engine, Context& ctx) : ctx_(ctx) {
  for (const TensorInfo& t : engine.inputs()) ctx.set_input_device(t.name, alloc(t), t.bytes());
  for (const TensorInfo& t : engine.outputs()) outputs_.insert(t.name);
}

void* GpuTensors::alloc(const TensorInfo& t) {
  void* p = buffers_.alloc(t.bytes(), fmt::format("calibration: allocating {:.1f} MiB of GPU memory for tensor '{}' "
                                                  "(a smaller --batch needs less)",
                                                  static_cast<double>(t.bytes()) / (1 << 20), t.name));
  at_[t.name] = {p, t.bytes()};
  return p;
}

void GpuTensors::run(const std::vector<calib::InputSpec>& specs, const std::vector<std::vector<uint8_t>>& inputs) {
  for (size_t i = 0; i < specs.size(); ++i)
    check_cuda(cudaMemcpy(at_.at(specs[i].name).first, inputs[i].data(), inputs[i].size(), cudaMemcpyHostToDevice),
               "calibration: copying a batch of '" + specs[i].name + "' to the GPU");
  ctx_.run();
}

void GpuTensors::add_to(std::vector<calib::TensorStats>& stats, const std::vector<std::string>& names) const {
  std::vector<calib::TensorStats*> to;
  std::vector<calib::DeviceFloats> values;
  for (size_t t = 0; t < names.size(); ++t) {
    to.push_back(&stats[t]);
    if (outputs_.count(names[t])) {
      // This batch's size: an output after NonZero or NonMaxSuppression holds less than its bound.
      const auto n = static_cast<size_t>(detail::element_count(ctx_.output_shape(names[t])));
      values.push_back({static_cast<const float*>(ctx_.output_device(names[t])), n});
    } else {
      const auto& [p, bytes] = at_.at(names[t]);
      values.push_back({static_cast<const float*>(p), bytes / sizeof(float)});
    }
  }
  calib::add_on_gpu(to, values);
}

#else

GpuTensors::GpuTensors(const Engine&, Context& ctx) : ctx_(ctx) {
  throw Error("GPU engines need a Kiln built with CUDA");
}
void GpuTensors::run(const std::vector<calib::InputSpec>&, const std::vector<std::vector<uint8_t>>&) {}
void GpuTensors::add_to(std::vector<calib::TensorStats>&, const std::vector<std::string>&) const {}

#endif

}  // namespace

CalibrationRun run_calibration(const graph::Graph& g, const std::vector<graph::ValueId>& tensors,
                               const BuildOptions& options) {
  const calib::Options& co = options.calib;
  if (co.data.empty()) throw Error("calibration needs data: give --calib DATA");
  std::vector<calib::InputSpec> specs;
  for (graph::ValueId id : g.inputs) {
    const graph::Value& v = g.value(id);
    specs.push_back({v.name, v.dtype, v.shape});
  }
  if (specs.empty()) throw Error("the model has no inputs to calibrate with");
  std::unique_ptr<calib::DataSource> source = calib::open_data_source(co.data, specs, co.preprocess);
  const int64_t batch = specs[0].shape.empty() ? 1 : specs[0].shape[0];
  for (const calib::InputSpec& s : specs)
    if (s.shape[0] != batch)
      throw Error("calibration: model inputs '" + specs[0].name + "' and '" + s.name +
                  "' have different leading (batch) dimensions");
  int planned = co.batches > 0 ? co.batches : static_cast<int>((calib::kDefaultSamples + batch - 1) / batch);
  if (source->size() >= 0) {
    if (source->size() < batch)
      throw Error(source->describe() + ": " + std::to_string(source->size()) +
                  " calibration samples, fewer than one batch of " + std::to_string(batch));
    planned = static_cast<int>(std::min<int64_t>(planned, source->size() / batch));
  }

  // The float graph with the calibrated tensors as its outputs.
  graph::Graph cg = g;
  cg.outputs.clear();
  std::vector<int> from_input(tensors.size(), -1);  // index into specs for graph inputs
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.inputs[i] == tensors[t]) from_input[t] = static_cast<int>(i);
    if (from_input[t] < 0 && !cg.is_graph_output(tensors[t])) cg.outputs.push_back(tensors[t]);
  }
  Stopwatch timer;
  CalibrationRun run;
  run.stats.resize(tensors.size());
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<Context> ctx;
  double write_s = 0, context_s = 0;  // of the float engine: writing and loading it, its context
  std::unique_ptr<GpuTensors> on_gpu;
  if (!cg.outputs.empty()) {
    remove_dead_nodes(cg, options);
    engine =
        Engine::from_bytes(write_engine(plan_views(cg, options), options.target, {}, nullptr), "calibration engine");
    write_s = timer.lap();
    ContextOptions context_options;
    context_options.host_staging = !engine->is_gpu();
    ctx = engine->create_context(context_options);
    if (engine->is_gpu()) on_gpu = std::make_unique<GpuTensors>(*engine, *ctx);
    context_s = timer.lap();
  }
  // The engine's name of each calibrated tensor (an input's, for a graph input).
  std::vector<std::string> names;
  for (size_t t = 0; t < tensors.size(); ++t)
    names.push_back(from_input[t] >= 0 ? specs[static_cast<size_t>(from_input[t])].name : g.value(tensors[t]).name);

  std::vector<std::vector<uint8_t>> inputs;
  cpu::ThreadPool pool(0);
  // Seconds reading the data, running the float model, and updating the statistics (-v).
  double read_s = 0, model_s = 0, first_run_s = 0, stats_s = 0;
  for (int b = 0; b < planned; ++b) {
    timer.lap();
    const int64_t got = calib::next_batch(*source, specs, batch, inputs);
    read_s += timer.lap();
    if (got < batch) {  // the data ran out: a partial batch is dropped
      if (b == 0)
        throw Error(source->describe() + ": " + std::to_string(got) + " calibration samples, fewer than one batch of " +
                    std::to_string(batch));
      break;
    }
    if (on_gpu)
      on_gpu->run(specs, inputs);
    else if (ctx) {
      for (size_t i = 0; i < specs.size(); ++i) ctx->set_input(specs[i].name, inputs[i].data(), inputs[i].size());
      ctx->run();
    }
    (b == 0 ? first_run_s : model_s) += timer.lap();
    if (on_gpu)
      on_gpu->add_to(run.stats, names);
    else
      pool.parallel_for(static_cast<int64_t>(tensors.size()), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          std::span<const std::byte> bytes =
              from_input[t] >= 0 ? std::as_bytes(std::span<const uint8_t>(inputs[static_cast<size_t>(from_input[t])]))
                                 : ctx->output(names[t]);
          run.stats[t].add({reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float)});
        }
      });
    stats_s += timer.lap();
    ++run.batches;
    run.samples += batch;
    if (co.progress) co.progress(b + 1, planned);
  }
  if (co.progress && run.batches < planned) co.progress(run.batches, run.batches);  // ends the bar
  if (options.log)
    options.log(
        fmt::format("calibration: {} batches of {}, {} tensors: {:.1f} s writing and loading the float engine, "
                    "{:.1f} s making its context, {:.1f} s reading data, {:.1f} s running it ({:.1f} s the first "
                    "time), {:.1f} s statistics on the {}",
                    run.batches, batch, tensors.size(), write_s, context_s, read_s, first_run_s + model_s, first_run_s,
                    stats_s, on_gpu ? "GPU" : "CPU"));
  return run;
}

}  // namespace kiln::build
