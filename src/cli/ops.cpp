// kiln ops: the ONNX op types this build imports and which backends run them. An op type is
// listed only when it imports, has shape inference and has a CPU kernel (or imports as another op).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/shape_infer.h"
#include "graph/onnx_import.h"
#include "runtime/cpu/kernels.h"
#if defined(KILN_HAVE_CUDA)
#include "runtime/cuda/gpu_kernels.h"
#endif

namespace kiln::cli {

int run_ops(const OpsOptions& o) {
  nlohmann::json all = nlohmann::json::array();
  std::vector<std::string> names;
  const auto functions = graph::function_op_types();
  for (const std::string& type : graph::importable_op_types()) {
    if (auto f = functions.find(type); f != functions.end()) {
      // Runs where every op of its body runs.
      auto runs_on = [&](auto&& has_kernel) {
        return std::all_of(f->second.begin(), f->second.end(), [&](const std::string& op) {
          const std::optional<OpKind> k = op_kind_from_name(op);
          return op == "Constant" || (k && has_kernel(*k));
        });
      };
      std::vector<std::string> backends;
      if (runs_on([](OpKind k) { return cpu::cpu_kernel(k) != nullptr; })) backends.push_back("cpu");
#if defined(KILN_HAVE_CUDA)
      if (runs_on([](OpKind k) { return gpu::gpu_kernel(k) != nullptr; })) backends.push_back("gpu");
#endif
      if (backends.empty() || backends[0] != "cpu") continue;
      names.push_back(type);
      all.push_back({{"op", type},
                     {"imports_as", fmt::format("function body: {}", fmt::join(f->second, ", "))},
                     {"backends", backends}});
      continue;
    }
    if (auto l = graph::lowered_op_types().find(type); l != graph::lowered_op_types().end()) {
      names.push_back(type);
      std::vector<std::string> backends{"cpu"};
#if defined(KILN_HAVE_CUDA)
      backends.push_back("gpu");
#endif
      all.push_back({{"op", type}, {"imports_as", l->second}, {"backends", backends}});
      continue;
    }
    std::optional<OpKind> kind = op_kind_from_name(type);
    std::string as = type == "Upsample" ? "Resize" : type == "Scatter" ? "ScatterElements" : "";
    if (!as.empty()) kind = op_kind_from_name(as);
    bool cpu = type == "Constant" || (kind && cpu::cpu_kernel(*kind) != nullptr);
    if (!cpu) continue;
    names.push_back(type);
    std::vector<std::string> backends = {"cpu"};
#if defined(KILN_HAVE_CUDA)
    if (type == "Constant" || (kind && gpu::gpu_kernel(*kind) != nullptr)) backends.push_back("gpu");
#endif
    all.push_back({{"op", type},
                   {"imports_as", type == "Constant" ? "constant value"
                                  : as.empty()       ? type
                                                     : as},
                   {"backends", backends}});
  }
  if (o.json) {
    fmt::print("{}\n", all.dump(1));
  } else {
    for (const std::string& n : names) fmt::print("{}\n", n);
  }
  return kExitOk;
}

}  // namespace kiln::cli
