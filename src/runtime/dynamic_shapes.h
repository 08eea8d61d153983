// The shapes of one plan's tensors during a run, where some depend on the data (decision 56). A
// data-dependent op (NonZero, NonMaxSuppression: OpTrait kDataDependent) has its output 0 planned
// at an upper bound and writes the actual extent into output 1; every step that reads a tensor of
// data-dependent shape has its output shapes inferred again, at run time, from the actual shapes of
// its inputs (the same infer_shapes the loader runs), and so has every step whose shapes follow its
// inputs' values (SelectBranch, an If's outputs: OpTrait kShapeFromData). Data are packed at the
// actual shape at the start of the bound's buffer, so nothing moves or is allocated.
//
// Shapes as values: the small integer values computed from such shapes (Shape, then Gather,
// Concat, ReduceMin, Equal... down to a Reshape's shape or a TopK's K) are evaluated here, on the
// host, with the CPU kernels (host steps): the runner copies their results into the steps'
// buffers instead of running them, and inference of the steps after them reads them. A value the
// inference needs that only a device step computes (an If's condition on the data) is read back
// before its first reader. Internal to the runtime.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "runtime/engine_impl.h"

namespace kiln::detail {

class DynamicShapes {
 public:
  // Throws kiln::Error for an engine whose data-dependent tensors are views or have views (the
  // builder never makes one: their offsets would hold at the bound only).
  explicit DynamicShapes(const EngineImpl& e);

  bool any() const { return any_; }
  bool is_source(size_t step) const { return source_[step] != 0; }        // writes an extent
  bool is_dependent(size_t step) const { return dependent_[step] != 0; }  // inferred again each run
  // The step reads values computed at run time where its shape inference reads values (a Reshape's
  // shape, a Slice's starts): what a kernel made of them before may not hold.
  bool reads_values(size_t step) const { return reads_values_[step] != 0; }
  bool is_dynamic(int32_t tensor) const { return tensor >= 0 && dynamic_[static_cast<size_t>(tensor)] != 0; }
  // The tensor's shape now: the recorded one, or its actual one for this run. The storage stays put,
  // so a view made with it follows every change.
  const std::vector<int64_t>& shape(int32_t tensor) const { return shapes_[static_cast<size_t>(tensor)]; }
  // The tensor's shape in this run if it depends on the data, else null (its shape is the plan's).
  const std::vector<int64_t>* run_shape(int32_t tensor) const { return is_dynamic(tensor) ? &shape(tensor) : nullptr; }
  // The step is evaluated on the host by prepare(): the runner copies its outputs' host values
  // (at their shapes now) into their buffers instead of running it; only the outputs that a device
  // step or the caller reads need the copy (device_needs).
  bool on_host(size_t step) const { return on_host_[step] != 0; }
  bool device_needs(int32_t tensor) const { return device_needs_[static_cast<size_t>(tensor)] != 0; }
  // The tensor's value on the host during a run (a weight, a host step's output, a value read
  // back), else null; before the first run, a host step's value at the bound. The pointer stays
  // put, so a kernel's host-copy table can hold it.
  const void* host_value(int32_t tensor) const;
  // The tensors whose values the runner copies into host_buffer() before step `step` runs (each
  // before its first reader that needs it), at their shapes now.
  std::span<const int32_t> read_before(size_t step) const { return read_before_[step]; }
  void* host_buffer(int32_t tensor) { return host_[static_cast<size_t>(tensor)].data(); }

  // Before step `step` runs: a dependent step's output shapes inferred from its inputs' shapes (and
  // host values) now, checked against the plan's buffers; a source's output 0 back at its bound
  // (its kernel packs up to it); a host step evaluated. Returns whether any output's shape changed.
  bool prepare(size_t step);
  // After source step `step` ran: its extent (read from output 1), checked against the bound.
  void set_extent(size_t step, int64_t extent);

 private:
  bool infer(size_t step);
  void evaluate(size_t step);
  TensorView input_view(int32_t tensor) const;

  const EngineImpl& e_;
  bool any_ = false;
  std::vector<char> source_, dependent_, reads_values_, dynamic_, on_host_, device_needs_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<uint8_t>> host_;  // per tensor: its host value's storage (bound bytes), or empty
  std::vector<std::vector<int32_t>> read_before_;
};

}  // namespace kiln::detail
