#include "runtime/dynamic_shapes.h"

#include <algorithm>

#include "core/shape_infer.h"
#include "runtime/copy_corner.h"
#include "runtime/cpu/kernels.h"

namespace kiln::detail {

namespace {

// A host step's outputs are shape-sized values: this many bytes each, at most.
constexpr uint64_t kHostValueBytes = 4096;

// Input `slot` of a step of kind k is a value its shape inference reads.
bool shape_input(OpKind k, size_t slot) {
  return (slot < 32 && (op_info(k).const_inputs >> slot & 1u)) || (has_trait(k, kShapeFromData) && slot == 0);
}

}  // namespace

DynamicShapes::DynamicShapes(const EngineImpl& e) : e_(e) {
  const size_t n = e.steps.size(), nt = e.tensors.size();
  source_.assign(n, 0);
  dependent_.assign(n, 0);
  reads_values_.assign(n, 0);
  on_host_.assign(n, 0);
  read_before_.resize(n);
  dynamic_.assign(nt, 0);
  device_needs_.assign(nt, 0);
  host_.resize(nt);
  for (size_t k = 0; k < n; ++k) {
    const StepRec& st = e.steps[k];
    for (int32_t i : st.inputs) dependent_[k] |= is_dynamic(i);
    dependent_[k] |= has_trait(st.kind, kShapeFromData);
    source_[k] = has_trait(st.kind, kDataDependent);
    for (size_t j = 0; j < st.outputs.size(); ++j)
      if (dependent_[k] || (source_[k] && j == 0)) dynamic_[static_cast<size_t>(st.outputs[j])] = 1;
    any_ |= source_[k] || has_trait(st.kind, kShapeFromData);
  }
  for (size_t t = 0; t < nt; ++t) {
    const TensorRec& r = e.tensors[t];
    if (r.base >= 0 && (dynamic_[t] || dynamic_[static_cast<size_t>(r.base)]))
      throw Error(e.origin + ": tensor '" + r.name +
                  "' is a view of data-dependent shape, which Kiln never builds; "
                  "the engine file is damaged, rebuild it");
  }
  for (const TensorRec& r : e.tensors) shapes_.push_back(r.shape);
  if (!any_) return;

  // Host steps: dynamic, small, and reading only values the host has (Shape and Size read only
  // their input's shape).
  auto host_known = [&](int32_t t) {
    return t < 0 || e.tensors[static_cast<size_t>(t)].kind == TensorKind::kWeight ||
           !host_[static_cast<size_t>(t)].empty();
  };
  for (size_t k = 0; k < n; ++k) {
    const StepRec& st = e.steps[k];
    // Not SelectBranch: the builder and the loader leave its outputs without values at the bound.
    bool host = dependent_[k] && !source_[k] && !has_trait(st.kind, kShapeFromData) &&
                cpu::cpu_kernel(st.kind) != nullptr && !st.outputs.empty();
    for (size_t j = 0; host && j < st.inputs.size(); ++j)
      host = host_known(st.inputs[j]) || ((st.kind == OpKind::kShape || st.kind == OpKind::kSize) && j == 0);
    for (int32_t o : st.outputs) {
      const TensorRec& t = e.tensors[static_cast<size_t>(o)];
      host = host && t.bytes <= kHostValueBytes && t.base < 0 && t.kind != TensorKind::kInput;
    }
    if (!host) continue;
    on_host_[k] = 1;
    for (int32_t o : st.outputs)
      host_[static_cast<size_t>(o)].resize(std::max<uint64_t>(1, e.tensors[static_cast<size_t>(o)].bytes));
  }
  // Values that inference needs but only a device step computes: read back before the first reader.
  for (size_t k = 0; k < n; ++k) {
    const StepRec& st = e.steps[k];
    if (!dependent_[k]) continue;
    for (size_t j = 0; j < st.inputs.size(); ++j) {
      const int32_t t = st.inputs[j];
      if (!shape_input(st.kind, j) || t < 0 || e.tensors[static_cast<size_t>(t)].kind == TensorKind::kWeight) continue;
      reads_values_[k] = 1;
      if (host_known(t)) continue;
      host_[static_cast<size_t>(t)].resize(std::max<uint64_t>(1, e.tensors[static_cast<size_t>(t)].bytes));
      read_before_[k].push_back(t);
    }
  }
  for (size_t k = 0; k < n; ++k)
    if (!on_host_[k])
      for (int32_t i : e.steps[k].inputs)
        if (i >= 0) device_needs_[static_cast<size_t>(i)] = 1;
  for (int32_t o : e.output_ids) device_needs_[static_cast<size_t>(o)] = 1;
  // The host values at the bound until a run computes them: what a GPU kernel sizes its workspace
  // by (TopK's K) when the context is made.
  for (size_t k = 0; k < n; ++k)
    if (on_host_[k]) evaluate(k);
}

const void* DynamicShapes::host_value(int32_t tensor) const {
  if (tensor < 0) return nullptr;
  const TensorRec& t = e_.tensors[static_cast<size_t>(tensor)];
  if (t.kind == TensorKind::kWeight) return e_.weight_data(t);
  const std::vector<uint8_t>& h = host_[static_cast<size_t>(tensor)];
  return h.empty() ? nullptr : h.data();
}

void DynamicShapes::set_extent(size_t step, int64_t extent) {
  const StepRec& st = e_.steps[step];
  const auto out = static_cast<size_t>(st.outputs.at(0));
  const auto axis = static_cast<size_t>(data_dependent_axis(st.kind));
  const int64_t bound = e_.tensors[out].shape.at(axis);
  if (extent < 0 || extent > bound)
    throw Error(step_name(st) + " reports " + std::to_string(extent) + " results, outside its bound 0.." +
                std::to_string(bound));
  shapes_[out][axis] = extent;
}

bool DynamicShapes::prepare(size_t step) {
  bool changed = false;
  if (dependent_[step]) {
    changed = infer(step);
  } else if (source_[step]) {
    const auto out = static_cast<size_t>(e_.steps[step].outputs.at(0));
    changed = shapes_[out] != e_.tensors[out].shape;
    std::copy(e_.tensors[out].shape.begin(), e_.tensors[out].shape.end(), shapes_[out].begin());
  }
  if (on_host_[step]) evaluate(step);
  return changed;
}

TensorView DynamicShapes::input_view(int32_t tensor) const {
  if (tensor < 0) return absent_tensor();
  static const int64_t kNothing = 0;  // data for a value without elements
  const void* h = host_value(tensor);
  if (h && element_count(shape(tensor)) == 0) h = &kNothing;
  return TensorView{e_.tensors[static_cast<size_t>(tensor)].dtype, shape(tensor), const_cast<void*>(h), true};
}

bool DynamicShapes::infer(size_t step) {
  const StepRec& st = e_.steps[step];
  std::vector<TensorView> ins;
  for (int32_t i : st.inputs) ins.push_back(input_view(i));
  std::vector<OutputType> types;
  try {
    types = infer_shapes(st.kind, st.attrs, ins, st.outputs.size());
  } catch (const Error& err) {
    throw Error(step_name(st) + " cannot run at this run's shapes: " + err.what());
  }
  bool changed = false;
  for (size_t j = 0; j < st.outputs.size(); ++j) {
    const auto o = static_cast<size_t>(st.outputs[j]);
    const TensorRec& t = e_.tensors[o];
    const std::vector<int64_t>& s = types[j].shape;
    bool fits = types[j].dtype == t.dtype && s.size() == t.shape.size();
    for (size_t d = 0; fits && d < s.size(); ++d) fits = s[d] <= t.shape[d];
    if (!fits)
      throw Error(step_name(st) + ": output '" + t.name + "' would be " + std::string(dtype_name(types[j].dtype)) +
                  shape_string(s) + " at this run's shapes, beyond the bound it was planned at (" +
                  std::string(dtype_name(t.dtype)) + shape_string(t.shape) + ")");
    if (s != shapes_[o]) {
      std::copy(s.begin(), s.end(), shapes_[o].begin());
      changed = true;
    }
  }
  return changed;
}

void DynamicShapes::evaluate(size_t step) {
  const StepRec& st = e_.steps[step];
  std::vector<TensorView> ins, outs;
  for (int32_t i : st.inputs) ins.push_back(input_view(i));
  for (int32_t o : st.outputs) {
    TensorView v = input_view(o);
    v.data = host_buffer(o);
    outs.push_back(v);
  }
  cpu::KernelEnv env{};
  try {
    cpu::cpu_kernel(st.kind)(st.kind, st.attrs, ins, outs, env);
  } catch (const Error& err) {
    throw Error(step_name(st) + " failed: " + err.what());
  }
}

}  // namespace kiln::detail
