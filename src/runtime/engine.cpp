#include <algorithm>
#include <fstream>

#include "core/attrs_codec.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/whole_net_plan.h"
#include "runtime/dynamic_shapes.h"
#include "runtime/engine_format.h"
#include "runtime/engine_impl.h"
#include "runtime/side_steps.h"

namespace kiln {

namespace {
constexpr uint64_t kMaxEngineBytes = uint64_t{1} << 40;
}

uint32_t engine_format_version() { return format::kVersion; }
std::string_view kiln_version() { return "0.1.0"; }

Engine::Engine(std::shared_ptr<detail::EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::shared_ptr<const Engine> Engine::load(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error(path.string() + ": cannot open the engine file (does it exist, is it readable?)");
  auto size = static_cast<uint64_t>(f.tellg());
  if (size > kMaxEngineBytes) throw Error(path.string() + ": file is too large to be an engine");
  std::vector<uint8_t> bytes(size);
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
    throw Error(path.string() + ": cannot read the engine file");
  return std::shared_ptr<const Engine>(new Engine(detail::parse_engine(std::move(bytes), path.string())));
}

std::shared_ptr<const Engine> Engine::from_bytes(std::span<const uint8_t> bytes, std::string_view origin) {
  return std::shared_ptr<const Engine>(
      new Engine(detail::parse_engine(std::vector<uint8_t>(bytes.begin(), bytes.end()), std::string(origin))));
}

const std::vector<TensorInfo>& Engine::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Engine::outputs() const { return impl_->outputs; }
const std::vector<ShapeRangeInfo>& Engine::ranges() const { return impl_->ranges; }

EngineSummary Engine::summary() const {
  const detail::EngineImpl& e = *impl_;
  EngineSummary s;
  s.format_version = e.format_version;
  s.producer = e.producer;
  s.target = e.target;
  s.cuda_version = e.cuda_version;
  s.cudnn_version = e.cudnn_version;
  s.cublaslt_version = e.cublaslt_version;
  s.kernel_arch = e.kernel_arch;
  s.model_name = e.model_name;
  s.weight_bytes = e.weights_bytes;
  s.arena_bytes = e.arena_bytes;
  s.file_bytes = e.file.size();
  auto own_memory = [&](size_t t) {
    const detail::TensorRec& r = e.tensors[t];
    return r.base == -1 && (r.kind == detail::TensorKind::kActivation || r.kind == detail::TensorKind::kOutput);
  };
  for (size_t t = 0; t < e.tensors.size(); ++t)
    if (own_memory(t)) s.activation_bytes += e.tensors[t].bytes;
  // Peak of live bytes: each activation lives from the first step that writes it (or a view of it) to
  // its last reader (outputs to the end). No arena can be smaller.
  std::vector<int64_t> delta(e.steps.size() + 2, 0);
  std::vector<int> first(e.tensors.size(), -1), last(e.tensors.size(), -1);
  auto root = [&](int32_t t) {
    return static_cast<size_t>(e.tensors[static_cast<size_t>(t)].base == -1 ? t
                                                                            : e.tensors[static_cast<size_t>(t)].base);
  };
  for (size_t k = 0; k < e.steps.size(); ++k) {
    for (int32_t o : e.steps[k].outputs) {
      const size_t r = root(o);
      if (first[r] < 0) first[r] = int(k);
      last[r] = int(k);
    }
    for (int32_t i : e.steps[k].inputs)
      if (i >= 0) last[root(i)] = int(k);
  }
  for (size_t t = 0; t < e.tensors.size(); ++t) {
    if (first[t] < 0 || !own_memory(t)) continue;
    const detail::TensorRec& r = e.tensors[t];
    const int end = r.kind == detail::TensorKind::kOutput ? int(e.steps.size()) : last[t];
    delta[static_cast<size_t>(first[t])] += static_cast<int64_t>(r.bytes);
    delta[static_cast<size_t>(end) + 1] -= static_cast<int64_t>(r.bytes);
  }
  int64_t live = 0;
  for (int64_t d : delta) s.peak_live_bytes = std::max<size_t>(s.peak_live_bytes, static_cast<size_t>(live += d));
  auto name_of = [&](int32_t i) { return i < 0 ? std::string() : e.tensors[static_cast<size_t>(i)].name; };
  for (const detail::StepRec& st : e.steps) {
    StepInfo info{std::string(op_name(st.kind)), st.name, describe_attrs(st.attrs), {}, {}, st.tactic};
    for (int32_t i : st.inputs) info.inputs.push_back(name_of(i));
    for (int32_t o : st.outputs) info.outputs.push_back(name_of(o));
    s.steps.push_back(std::move(info));
  }
  for (int32_t v : e.view_ids) {
    const detail::TensorRec& t = e.tensors[static_cast<size_t>(v)];
    s.views.push_back({t.name, e.tensors[static_cast<size_t>(t.base)].name, t.offset, t.bytes});
  }
  s.ranges = e.ranges;
  if (!e.ranges.empty())
    for (size_t b = 0; b < e.plan_count(); ++b)
      s.buckets.push_back({e.plan_sizes(b), e.plan(b).steps.size(), e.plan(b).arena_bytes});
  const detail::DynamicShapes dyn(e);
  for (size_t i = 0; i < e.output_ids.size(); ++i)
    if (dyn.is_dynamic(e.output_ids[i])) s.bounded_outputs.push_back(e.outputs[i].name);
  if (is_gpu()) {
    s.whole_network =
        gpu::plan_whole_network(e, std::min(gpu::max_block_smem_of(gpu::parse_arch(e.target)),
                                            e.kernel_arch ? gpu::max_block_smem_of(e.kernel_arch) : SIZE_MAX))
            .describe();
    if (!dyn.any())  // a GPU context runs data-dependent engines on one stream
      for (const detail::SideStep& x : detail::engine_side_steps(e))
        s.steps[static_cast<size_t>(x.step)].side_after = x.fork;
  }
  return s;
}

}  // namespace kiln
