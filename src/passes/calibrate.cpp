// The calibration run (see calibrate.h). Statistics of different tensors are independent, so after
// each batch they are updated in parallel, one tensor per task.
#include "passes/calibrate.h"

#include <fmt/format.h>

#include <cstring>

#include "calib/data_source.h"
#include "kiln/engine.h"
#include "passes/engine_writer.h"
#include "passes/pass.h"
#include "passes/stopwatch.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::passes {

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
  if (!cg.outputs.empty()) {
    remove_dead_nodes(cg, options);
    engine = Engine::from_bytes(write_engine(plan_views(cg, options), options.target, {}, nullptr), "calibration engine");
    ctx = engine->create_context();
  }

  const double setup_s = timer.lap();
  std::vector<std::vector<uint8_t>> inputs;
  cpu::ThreadPool pool(0);
  // Seconds reading the data, running the float model, and updating the statistics (-v).
  double read_s = 0, model_s = 0, stats_s = 0;
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
    if (ctx) {
      for (size_t i = 0; i < specs.size(); ++i) ctx->set_input(specs[i].name, inputs[i].data(), inputs[i].size());
      ctx->run();
    }
    model_s += timer.lap();
    pool.parallel_for(static_cast<int64_t>(tensors.size()), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        std::span<const std::byte> bytes =
            from_input[t] >= 0 ? std::as_bytes(std::span<const uint8_t>(inputs[static_cast<size_t>(from_input[t])]))
                               : ctx->output(g.value(tensors[t]).name);
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
    options.log(fmt::format("calibration: {} batches of {}, {} tensors: {:.1f} s making the float engine, {:.1f} s "
                            "reading data, {:.1f} s running it, {:.1f} s statistics (and reading the tensors back)",
                            run.batches, batch, tensors.size(), setup_s, read_s, model_s, stats_s));
  return run;
}

}  // namespace kiln::passes
