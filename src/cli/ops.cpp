// kiln ops: the ONNX op types this build imports and which backends run them. An op type is
// listed only when it imports, has shape inference and has a CPU kernel (or imports as another op).
#include <fmt/format.h>

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
  for (const std::string& type : graph::importable_op_types()) {
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
