#include <fmt/format.h>

#include <chrono>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "graph/onnx_import.h"

namespace kiln::cli {

int run_optimize(const OptimizeOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  std::filesystem::path in = o.model;
  if (!is_onnx(in)) throw Error(o.model + ": expected an .onnx model");
  std::filesystem::path out =
      o.output.empty() ? std::filesystem::path(in).replace_extension(".kiln") : std::filesystem::path(o.output);
  build::BuildOptions bo = build_options(o.build);
  graph::Graph g = graph::import_onnx(in);
  build::BuildReport report;
  std::vector<uint8_t> bytes = build::build_engine(g, bo, &report);
  std::ofstream f(out, std::ios::binary);
  if (!f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    throw Error(out.string() + ": cannot write the engine file");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!report.precision_choice.empty()) fmt::print("{}\n", report.precision_choice);
  fmt::print("{}: {} nodes -> {} steps, target {}{}\n", in.string(), report.nodes_in, report.steps, bo.target,
             bo.kernel_arch ? fmt::format(" (the kernels of sm_{} only)", bo.kernel_arch) : "");
  for (const std::string& r : report.ranges) fmt::print("range {}\n", r);
  if (bo.target != "cpu")
    fmt::print(
        "memory: peak {} of GPU memory in Kiln's buffers{} (the GPU had {} in use before: the CUDA context, "
        "libraries); peak {} of host memory\n",
        human_bytes(report.peak_device_bytes),
        bo.memory_limit ? " within --memory-limit " + human_bytes(bo.memory_limit) : std::string(),
        human_bytes(report.device_bytes_at_start), human_bytes(report.peak_host_bytes));
  else
    fmt::print("memory: peak {} of host memory\n", human_bytes(report.peak_host_bytes));
  if (report.plans > 1)
    fmt::print("{} plans (one per bucket), the weights stored once; steps and arena above are the largest's\n",
               report.plans);
  fmt::print("wrote {}: {} (weights {}, activation arena {}) in {:.2f} s\n", out.string(),
             human_bytes(report.engine_bytes), human_bytes(report.weight_bytes), human_bytes(report.arena_bytes), s);
  return kExitOk;
}

}  // namespace kiln::cli
