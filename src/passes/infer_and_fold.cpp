// infer-and-fold: walks the nodes in order, infers each node's output types and shapes, and
// evaluates (folds) every node whose inputs are all constant with the CPU reference kernels. Shape
// and Size only need their input's shape, so they always fold. Folding a node whose output is much
// larger than its inputs (ConstantOfShape of a big shape) is skipped so the engine stays small.
// DequantizeLinear is left for fuse-qdq, which needs the quantized weights it reads.
#include <set>

#include "core/shape_infer.h"
#include "passes/pass.h"
#include "runtime/cpu/kernels.h"

namespace kiln::passes {

namespace {

constexpr size_t kFoldGrowthLimit = size_t{1} << 20;  // bytes an expanding fold may produce

std::vector<uint8_t> shape_value(const std::vector<int64_t>& dims) {
  std::vector<uint8_t> b(dims.size() * 8);
  if (!b.empty()) std::memcpy(b.data(), dims.data(), b.size());
  return b;
}

// Folds Shape and Size from the input's static shape.
bool fold_shape_op(graph::Graph& g, const graph::Node& n) {
  // A node whose outputs are all unused ("") has none: it is dead, and remove-dead-nodes drops it.
  if ((n.kind != OpKind::kSize && n.kind != OpKind::kShape) || n.outputs.empty()) return false;
  const graph::Value& in = g.value(n.inputs[0]);
  graph::Value& out = g.value(n.outputs[0]);
  if (n.kind == OpKind::kSize) {
    out.data = std::make_shared<const std::vector<uint8_t>>(shape_value({in.view().numel()}));
    return true;
  }
  const auto& a = std::get<ShapeAttrs>(n.attrs);
  auto r = static_cast<int64_t>(in.shape.size());
  auto clamp = [&](int64_t x) { return std::clamp(x < 0 ? x + r : x, int64_t{0}, r); };
  int64_t s = clamp(a.start), e = clamp(a.end);
  std::vector<int64_t> dims;
  for (int64_t i = s; i < e; ++i) dims.push_back(in.shape[static_cast<size_t>(i)]);
  out.data = std::make_shared<const std::vector<uint8_t>>(shape_value(dims));
  return true;
}

}  // namespace

std::vector<std::string> shape_determining_inputs(const graph::Graph& g) {
  std::vector<int> producer = g.producers();
  std::set<graph::ValueId> need;
  std::vector<graph::ValueId> work;
  for (const graph::Node& n : g.nodes) {
    uint32_t mask = op_info(n.kind).const_inputs;
    for (size_t i = 0; i < n.inputs.size() && i < 32; ++i)
      if ((mask >> i & 1u) && n.inputs[i] != graph::kNoValue) work.push_back(n.inputs[i]);
  }
  std::set<graph::ValueId> seen;
  while (!work.empty()) {
    graph::ValueId v = work.back();
    work.pop_back();
    if (!seen.insert(v).second || g.value(v).is_constant()) continue;
    int p = producer[static_cast<size_t>(v)];
    if (p < 0) {
      need.insert(v);
      continue;
    }
    const graph::Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.kind == OpKind::kShape || n.kind == OpKind::kSize) continue;  // only the input's shape matters
    for (graph::ValueId in : n.inputs)
      if (in != graph::kNoValue) work.push_back(in);
  }
  std::vector<std::string> names;
  for (graph::ValueId in : g.inputs)
    if (need.count(in)) names.push_back(g.value(in).name);
  return names;
}

PassResult infer_and_fold(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  std::vector<graph::Node> kept;
  cpu::KernelEnv env{};
  for (graph::Node& n : g.nodes) {
    std::string where = "node '" + n.name + "' (" + std::string(op_name(n.kind)) + ")";
    std::vector<TensorView> ins;
    bool all_const = true;
    size_t in_bytes = 0;
    for (graph::ValueId id : n.inputs) {
      if (id == graph::kNoValue) {
        ins.push_back(absent_tensor());
        continue;
      }
      const graph::Value& v = g.value(id);
      if (!v.shape_static()) throw Error(where + ": input '" + v.name + "' has no known shape");
      ins.push_back(v.view());
      all_const &= v.is_constant();
      in_bytes += v.is_constant() ? v.data->size() : 0;
    }
    if (n.kind == OpKind::kCastLike) std::get<CastAttrs>(n.attrs).to = ins.at(1).dtype;
    std::vector<OutputType> types;
    try {
      types = infer_shapes(n.kind, n.attrs, ins, n.outputs.size());
    } catch (const Error& e) {
      std::string msg = where + ": " + e.what();
      std::vector<std::string> frozen = shape_determining_inputs(g);
      if (std::string(e.what()).find("must be a constant") != std::string::npos && !frozen.empty()) {
        msg += ". It depends on the model input(s):";
        for (const std::string& f : frozen) msg += " " + f;
        msg += "; give their values at build time with --const NAME=FILE (.npy or .pb)";
      }
      throw Error(msg);
    }
    size_t out_bytes = 0;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == graph::kNoValue) continue;
      graph::Value& v = g.value(n.outputs[k]);
      v.dtype = types[k].dtype;
      v.shape = types[k].shape;
      v.has_shape = true;
      v.dim_params.clear();
      out_bytes += v.view().bytes();
    }
    if (fold_shape_op(g, n)) {
      ++r.changes;
      continue;
    }
    // DequantizeLinear of constant weights stays a node: fuse-qdq reads the integer weights and
    // their scales from it (and folds the ones it does not fuse).
    bool fold = all_const && cpu::cpu_kernel(n.kind) && n.kind != OpKind::kDequantizeLinear &&
                (out_bytes <= kFoldGrowthLimit || out_bytes <= in_bytes);
    if (!fold) {
      kept.push_back(std::move(n));
      continue;
    }
    // Evaluate the node now; unused optional outputs still need a buffer for the kernel.
    std::vector<std::vector<uint8_t>> bufs(n.outputs.size());
    std::vector<TensorView> outs;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      TensorView v{types[k].dtype, types[k].shape, nullptr, true};
      bufs[k].resize(v.bytes());
      v.data = bufs[k].data();
      outs.push_back(v);
    }
    try {
      cpu::cpu_kernel(n.kind)(n.kind, n.attrs, ins, outs, env);
    } catch (const Error& e) {
      throw Error(where + ": evaluating it on constant inputs failed: " + e.what());
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != graph::kNoValue)
        g.value(n.outputs[k]).data = std::make_shared<const std::vector<uint8_t>>(std::move(bufs[k]));
    ++r.changes;
  }
  r.detail = std::to_string(r.changes) + " node(s) folded into constants";
  g.nodes = std::move(kept);
  return r;
}

}  // namespace kiln::passes
