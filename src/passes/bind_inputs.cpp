// bind-inputs: fixes every input's shape (symbolic leading dims take --batch, others come from
// --shape) and turns inputs with given values (--const, or what `kiln run` was given for
// shape-determining inputs) into constants. A symbolic dimension the model names ("sequence")
// takes the size a --shape gave it on another input, so that BERT's attention_mask follows its
// input_ids.
#include <algorithm>
#include <map>

#include "passes/pass.h"

namespace kiln::passes {

namespace {

std::string dims_hint(const graph::Value& v) {
  std::string s;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (i) s += "x";
    s += v.shape[i] >= 0 ? std::to_string(v.shape[i]) : (i < v.dim_params.size() ? v.dim_params[i] : "?");
  }
  return s;
}

}  // namespace

PassResult bind_inputs(graph::Graph& g, const BuildOptions& o) {
  PassResult r;
  for (const auto& [name, t] : o.constant_inputs) {
    (void)t;
    graph::ValueId id = g.find(name);
    if (id == graph::kNoValue || std::find(g.inputs.begin(), g.inputs.end(), id) == g.inputs.end())
      throw Error("--const " + name + ": the model has no input of that name");
  }
  for (const auto& [name, shape] : o.input_shapes) {
    graph::ValueId id = g.find(name);
    if (id == graph::kNoValue || std::find(g.inputs.begin(), g.inputs.end(), id) == g.inputs.end())
      throw Error("--shape " + name + ": the model has no input of that name");
  }
  // Named symbolic dimensions, sized by the shapes given.
  std::map<std::string, std::pair<int64_t, std::string>> named;  // name -> size, the input that gave it
  for (const auto& [name, shape] : o.input_shapes) {
    const graph::Value& v = g.value(g.find(name));
    if (!v.has_shape || v.shape.size() != shape.size()) continue;  // reported below
    for (size_t i = 0; i < shape.size(); ++i) {
      if (v.shape[i] >= 0 || i >= v.dim_params.size() || v.dim_params[i].empty()) continue;
      auto [it, added] = named.emplace(v.dim_params[i], std::pair{shape[i], name});
      if (!added && it->second.first != shape[i])
        throw Error("--shape " + name + " gives dimension '" + v.dim_params[i] + "' size " + std::to_string(shape[i]) +
                    " but --shape " + it->second.second + " gives it " + std::to_string(it->second.first));
    }
  }
  std::vector<graph::ValueId> kept;
  for (graph::ValueId id : g.inputs) {
    graph::Value& v = g.value(id);
    auto frozen = o.constant_inputs.find(v.name);
    auto given = o.input_shapes.find(v.name);
    std::vector<int64_t> want = v.shape;
    if (frozen != o.constant_inputs.end()) {
      want = frozen->second.shape;
    } else if (given != o.input_shapes.end()) {
      want = given->second;
    } else if (v.has_shape) {
      for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] >= 0) continue;
        auto size = i < v.dim_params.size() ? named.find(v.dim_params[i]) : named.end();
        if (size != named.end()) {
          want[i] = size->second.first;
          continue;
        }
        if (i == 0) {
          want[i] = o.batch;
          continue;
        }
        throw Error("input '" + v.name + "' has shape " + dims_hint(v) + ": dimension " + std::to_string(i) +
                    " is symbolic; give the full shape with --shape " + v.name + "=" + "1x...");
      }
    } else {
      throw Error("input '" + v.name + "' has no shape in the model; give one with --shape " + v.name + "=DxDxD");
    }
    if (v.has_shape) {
      bool ok = want.size() == v.shape.size();
      for (size_t i = 0; ok && i < want.size(); ++i) ok = v.shape[i] < 0 || v.shape[i] == want[i];
      if (!ok)
        throw Error("input '" + v.name + "' has shape " + dims_hint(v) + " in the model, but " + shape_string(want) +
                    " was given");
    }
    if (frozen != o.constant_inputs.end()) {
      if (frozen->second.dtype != v.dtype)
        throw Error("input '" + v.name + "' is " + std::string(dtype_name(v.dtype)) +
                    " in the model, but the value given is " + std::string(dtype_name(frozen->second.dtype)));
      v.data = std::make_shared<const std::vector<uint8_t>>(frozen->second.data);
      r.detail += (r.detail.empty() ? "" : ", ") + v.name + " frozen";
      ++r.changes;
    } else {
      kept.push_back(id);
    }
    if (v.shape != want) ++r.changes;
    v.shape = want;
    v.has_shape = true;
    v.dim_params.clear();
  }
  g.inputs = kept;
  return r;
}

}  // namespace kiln::passes
