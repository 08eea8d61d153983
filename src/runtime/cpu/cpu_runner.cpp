#include "runtime/cpu/cpu_runner.h"

#include <chrono>
#include <cstring>
#include <string>

#include "runtime/copy_corner.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_budget.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/dynamic_shapes.h"
#include "runtime/engine_impl.h"

namespace kiln::detail {

namespace {

// Steps this small run on the calling thread alone: splitting them costs more than it saves (one
// OpenMP region, a library primitive made for several threads). LeNet-5 at batch 1 on 2 cores:
// its float pool took 3.8 us on 2 threads and 1.5 on 1, its int8 convolution (240,000
// multiply-adds) 7.2 and 6.3 us; the engine 24.6 us on 2 threads against 21.5 on 1.
constexpr int64_t kSerialProducts = int64_t{1} << 18;  // multiply-adds of a convolution or product
constexpr int64_t kSerialElements = int64_t{1} << 14;  // elements read and written by another op

}  // namespace

bool runs_on_one_thread(const EngineImpl& e, const StepRec& st) {
  auto numel = [&](int32_t id) {
    return id < 0 ? int64_t{0} : element_count(e.tensors[static_cast<size_t>(id)].shape);
  };
  if (st.outputs.empty() || st.inputs.empty() || st.inputs[0] < 0) return false;
  for (const std::vector<int32_t>* ids : {&st.inputs, &st.outputs})
    for (int32_t id : *ids)
      if (id >= 0)
        for (int64_t d : e.tensors[static_cast<size_t>(id)].shape)
          if (d < 0) return false;
  const int64_t out = numel(st.outputs[0]);
  switch (st.kind) {
    case OpKind::kConv:
    case OpKind::kFusedConv:
    case OpKind::kQConv:
    case OpKind::kNhwcConv:
    case OpKind::kNhwcQConv: {
      // W [M, C/group, kh, kw] (NhwcQConv's [M, kh, kw, C/group]): each output reads numel(W) / M.
      const int32_t w = st.inputs[st.kind == OpKind::kQConv || st.kind == OpKind::kNhwcQConv ? 3 : 1];
      const auto& ws = e.tensors[static_cast<size_t>(w)].shape;
      return !ws.empty() && ws[0] > 0 && out * (numel(w) / ws[0]) < kSerialProducts;
    }
    case OpKind::kGemm:
    case OpKind::kFusedGemm: {
      // B [K, N] or [N, K] (transB): K = numel(B) / N either way; A may be transposed.
      const auto& ys = e.tensors[static_cast<size_t>(st.outputs[0])].shape;
      const int64_t n = ys.empty() ? 1 : ys.back();
      return st.inputs.size() > 1 && n > 0 && out * (numel(st.inputs[1]) / n) < kSerialProducts;
    }
    case OpKind::kMatMul:
    case OpKind::kFusedMatMul:
    case OpKind::kQMatMul: {
      const auto& xs = e.tensors[static_cast<size_t>(st.inputs[0])].shape;  // [..., rows, K]
      return !xs.empty() && out * xs.back() < kSerialProducts;
    }
    default: {
      int64_t n = 0;
      for (int32_t id : st.inputs) n += numel(id);
      for (int32_t id : st.outputs) n += numel(id);
      return n < kSerialElements;
    }
  }
}

namespace {

class CpuRunner final : public PlanRunner {
 public:
  CpuRunner(const EngineImpl& e, std::byte* arena, cpu::ThreadPool* pool, const ContextOptions& o)
      : e_(e), arena_(arena), pool_(pool), dyn_(e) {
    profile_ = o.profile;
    step_ms_.assign(e.steps.size(), 0.0);
    for (const StepRec& st : e.steps) serial_.push_back(runs_on_one_thread(e, st));
    state_.resize(e.steps.size());
    std::vector<std::string> missing;
    for (const StepRec& st : e.steps) {
      cpu::CpuKernel k = cpu::cpu_kernel(st.kind);
      if (!k) missing.push_back(std::string(op_name(st.kind)) + " (step '" + st.name + "')");
      kernels_.push_back(k);
    }
    if (!missing.empty()) {
      std::string m = e.origin + ": the CPU backend has no kernel for:";
      for (const auto& x : missing) m += "\n  - " + x;
      throw Error(m);
    }
    data_.resize(e.tensors.size(), nullptr);
    for (size_t i = 0; i < e.tensors.size(); ++i) {
      const TensorRec& t = e.tensors[i];
      if (t.kind == TensorKind::kWeight) data_[i] = const_cast<uint8_t*>(e.weight_data(t));
      if (t.kind == TensorKind::kActivation || t.kind == TensorKind::kOutput) data_[i] = arena_ + t.offset;
    }
    resolve_views();
    for (const StepRec& st : e.steps) {
      auto view_of = [&](int32_t id) {
        if (id < 0) return absent_tensor();
        // dyn_'s storage: a tensor of data-dependent shape has the run's shape when its step runs.
        return TensorView{e.tensors[static_cast<size_t>(id)].dtype, dyn_.shape(id), nullptr, true};
      };
      std::vector<TensorView> ins, outs;
      for (int32_t i : st.inputs) ins.push_back(view_of(i));
      for (int32_t o : st.outputs) outs.push_back(view_of(o));
      step_in_.push_back(std::move(ins));
      step_out_.push_back(std::move(outs));
    }
    bound_in_.assign(e.input_ids.size(), nullptr);
    bound_out_.assign(e.output_ids.size(), nullptr);
    in_pad_.resize(e.input_ids.size());
    out_compact_.resize(e.output_ids.size());
    for (const TensorInfo& t : e.inputs) in_shape_.push_back(t.shape);
    for (const TensorInfo& t : e.outputs) out_shape_.push_back(t.shape);
  }

  void bind_input(size_t i, const void* p, bool) override { bound_in_[i] = p; }
  void bind_output(size_t i, void* p, bool) override { bound_out_[i] = p; }

  void set_io_shapes(const std::vector<std::vector<int64_t>>& in,
                     const std::vector<std::vector<int64_t>>& out) override {
    in_shape_ = in;
    out_shape_ = out;
    for (size_t i = 0; i < in.size(); ++i) {
      const TensorInfo& t = e_.inputs[i];
      if (in[i] == t.shape) {
        in_pad_[i].clear();
        continue;
      }
      in_pad_[i].assign(t.bytes(), std::byte{0});  // zero rows the runs never write
    }
    for (size_t i = 0; i < out.size(); ++i) {
      const TensorInfo& t = e_.outputs[i];
      if (out[i] == t.shape)
        out_compact_[i].clear();
      else
        out_compact_[i].assign(byte_count(out[i], t.dtype), std::byte{0});
    }
  }

  void enqueue(CUstream_st*) override { run(); }

  void run() override {
    const EngineImpl& e = e_;
    for (size_t i = 0; i < e.input_ids.size(); ++i) {
      const TensorRec& t = e.tensors[static_cast<size_t>(e.input_ids[i])];
      const size_t bytes = byte_count(in_shape_[i], t.dtype);
      if (!bound_in_[i] && bytes > 0) throw Error("input '" + t.name + "' was not set (Context::set_input)");
      void* p = const_cast<void*>(bound_in_[i]);
      if (!in_pad_[i].empty()) {
        copy_corner(bound_in_[i], in_shape_[i], in_pad_[i].data(), t.shape, dtype_size(t.dtype), false);
        p = in_pad_[i].data();
      }
      data_[static_cast<size_t>(e.input_ids[i])] = p;
    }
    for (size_t i = 0; i < e.output_ids.size(); ++i) {
      auto id = static_cast<size_t>(e.output_ids[i]);
      const bool sliced = !out_compact_[i].empty();
      data_[id] = bound_out_[i] && !sliced ? bound_out_[i] : arena_ + e.tensors[id].offset;
    }
    resolve_views();
    // This run's threads: its share of the process's budget while other contexts run too.
    const cpu::ThreadGrant grant(cpu::ThreadBudget::process(), pool_->size());
    pool_->set_team(grant.threads());
    cpu::KernelEnv env{pool_};
    for (size_t k = 0; k < e.steps.size(); ++k) {
      const StepRec& st = e.steps[k];
      for (size_t j = 0; j < st.inputs.size(); ++j)
        if (st.inputs[j] >= 0) step_in_[k][j].data = data_[static_cast<size_t>(st.inputs[j])];
      for (size_t j = 0; j < st.outputs.size(); ++j) step_out_[k][j].data = data_[static_cast<size_t>(st.outputs[j])];
      const auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      for (int32_t t : dyn_.read_before(k)) copy_value(data_[static_cast<size_t>(t)], dyn_.host_buffer(t), t);
      dyn_.prepare(k);
      if (dyn_.on_host(k)) {  // evaluated by prepare(): its values into the buffers that are read
        for (int32_t o : st.outputs)
          if (dyn_.device_needs(o)) copy_value(dyn_.host_value(o), data_[static_cast<size_t>(o)], o);
        continue;
      }
      env.state = &state_[k];
      env.pool = serial_[k] ? nullptr : pool_;
      try {
        kernels_[k](st.kind, st.attrs, step_in_[k], step_out_[k], env);
      } catch (const Error& err) {
        throw Error(step_name(st) + " failed: " + err.what());
      }
      if (dyn_.is_source(k)) dyn_.set_extent(k, *step_out_[k][1].as<int64_t>());
      if (profile_)
        step_ms_[k] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    profiled_runs_ += profile_;
    // Outputs between buckets: their leading corner, into the caller's buffer or the runner's own.
    for (size_t i = 0; i < e.output_ids.size(); ++i) {
      if (out_compact_[i].empty()) continue;
      const TensorInfo& t = e.outputs[i];
      void* dst = bound_out_[i] ? bound_out_[i] : out_compact_[i].data();
      copy_corner(data_[static_cast<size_t>(e.output_ids[i])], t.shape, dst, out_shape_[i], dtype_size(t.dtype), false);
    }
  }

  void check() override {}

  // Tensor t's bytes at its shape now, from one buffer to another.
  void copy_value(const void* from, void* to, int32_t t) {
    const size_t bytes = byte_count(dyn_.shape(t), e_.tensors[static_cast<size_t>(t)].dtype);
    if (bytes > 0 && from != to) std::memcpy(to, from, bytes);
  }

  const std::vector<int64_t>* run_output_shape(size_t i) const override { return dyn_.run_shape(e_.output_ids[i]); }

  const std::byte* host_output(size_t i) const override {
    if (bound_out_[i]) return static_cast<const std::byte*>(bound_out_[i]);
    if (!out_compact_[i].empty()) return out_compact_[i].data();
    return arena_ + e_.tensors[static_cast<size_t>(e_.output_ids[i])].offset;
  }

  const void* device_output(size_t) const override {
    throw Error("output_device: this is a CPU engine (target 'cpu'); use output");
  }

  std::vector<StepTime> step_times() override {
    std::vector<StepTime> r;
    for (size_t k = 0; k < e_.steps.size(); ++k)
      r.push_back({std::string(op_name(e_.steps[k].kind)), e_.steps[k].name, step_ms_[k], profiled_runs_});
    return r;
  }

 private:
  // Views lie at a fixed offset in their base, wherever the base is for this run.
  void resolve_views() {
    for (int32_t v : e_.view_ids) {
      const TensorRec& t = e_.tensors[static_cast<size_t>(v)];
      data_[static_cast<size_t>(v)] = static_cast<std::byte*>(data_[static_cast<size_t>(t.base)]) + t.offset;
    }
  }

  const EngineImpl& e_;
  std::byte* arena_;
  cpu::ThreadPool* pool_;
  std::vector<void*> data_;                                 // per tensor: where its bytes are for the current run
  std::vector<const void*> bound_in_;                       // per engine input: caller memory (null: not set)
  std::vector<void*> bound_out_;                            // per engine output: caller memory (null: the runner's)
  std::vector<std::vector<int64_t>> in_shape_, out_shape_;  // the caller's shapes
  std::vector<std::vector<std::byte>> in_pad_;              // per input: the plan-shaped copy, when padded
  std::vector<std::vector<std::byte>> out_compact_;         // per output: its corner, when sliced
  std::vector<std::vector<TensorView>> step_in_, step_out_;
  std::vector<cpu::CpuKernel> kernels_;
  std::vector<std::shared_ptr<void>> state_;  // per step: what its kernel keeps across runs
  std::vector<char> serial_;                  // per step: small enough to run on one thread
  DynamicShapes dyn_;  // the tensors' shapes this run (some depend on the data)
  bool profile_ = false;
  std::vector<double> step_ms_;
  int profiled_runs_ = 0;
};

}  // namespace

std::unique_ptr<PlanRunner> make_cpu_runner(const EngineImpl& e, std::byte* arena, cpu::ThreadPool* pool,
                                            const ContextOptions& options) {
  return std::make_unique<CpuRunner>(e, arena, pool, options);
}

}  // namespace kiln::detail
