// kiln::Context: the API, and CPU execution of an engine (GPU engines go to gpu::GpuContext, in
// runtime/cuda/gpu_context.cpp). A CPU Context owns one activation arena, laid out by the
// builder's memory plan (tensors with disjoint lifetimes share bytes), and resolves every step's
// tensor views once; run() only patches the caller-bound input/output pointers (and the engine's
// views, which follow their base: a view of an output lies in the caller's buffer when it is bound)
// and calls the kernels in order.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/cuda/gpu_context.h"
#include <chrono>
#include "runtime/engine_impl.h"

namespace kiln {

using detail::TensorKind;

struct Context::State {
  const detail::EngineImpl* e = nullptr;
  std::vector<std::byte> arena;
  std::vector<void*> data;            // per tensor: where its bytes are for the current run
  std::vector<const void*> bound_in;  // per engine input: caller memory (null: not set)
  std::vector<void*> bound_out;       // per engine output: caller memory (null: in the arena)
  std::vector<std::vector<TensorView>> step_in, step_out;
  std::vector<cpu::CpuKernel> kernels;
  std::unique_ptr<cpu::ThreadPool> pool;
  std::unique_ptr<gpu::GpuContext> gpu;  // set for GPU engines; the rest is then unused
  bool profile = false;
  std::vector<double> step_ms;
  int profiled_runs = 0;

  // Views lie at a fixed offset in their base, wherever the base is for this run.
  void resolve_views() {
    for (int32_t v : e->view_ids) {
      const detail::TensorRec& t = e->tensors[static_cast<size_t>(v)];
      data[static_cast<size_t>(v)] = static_cast<std::byte*>(data[static_cast<size_t>(t.base)]) + t.offset;
    }
  }
};

bool Engine::is_gpu() const { return impl_->target != "cpu"; }

Context::Context(std::shared_ptr<const Engine> engine, const ContextOptions& options)
    : engine_(std::move(engine)), state_(std::make_unique<State>()) {
  const detail::EngineImpl& e = *engine_->impl_;
  State& s = *state_;
  s.e = &e;
  s.bound_in.assign(e.input_ids.size(), nullptr);
  s.bound_out.assign(e.output_ids.size(), nullptr);
  if (engine_->is_gpu()) {
    s.gpu = gpu::GpuContext::create(e, options);
    return;
  }
  s.profile = options.profile;
  s.step_ms.assign(e.steps.size(), 0.0);
  std::vector<std::string> missing;
  for (const detail::StepRec& st : e.steps) {
    cpu::CpuKernel k = cpu::cpu_kernel(st.kind);
    if (!k) missing.push_back(std::string(op_name(st.kind)) + " (step '" + st.name + "')");
    s.kernels.push_back(k);
  }
  if (!missing.empty()) {
    std::string m = e.origin + ": the CPU backend has no kernel for:";
    for (const auto& x : missing) m += "\n  - " + x;
    throw Error(m);
  }
  s.arena.resize(e.arena_bytes);
  s.data.resize(e.tensors.size(), nullptr);
  for (size_t i = 0; i < e.tensors.size(); ++i) {
    const detail::TensorRec& t = e.tensors[i];
    if (t.kind == TensorKind::kWeight) s.data[i] = const_cast<uint8_t*>(e.weight_data(t));
    if (t.kind == TensorKind::kActivation || t.kind == TensorKind::kOutput) s.data[i] = s.arena.data() + t.offset;
  }
  s.resolve_views();
  for (const detail::StepRec& st : e.steps) {
    auto view_of = [&](int32_t id) {
      if (id < 0) return absent_tensor();
      const detail::TensorRec& t = e.tensors[static_cast<size_t>(id)];
      return TensorView{t.dtype, t.shape, nullptr, true};
    };
    std::vector<TensorView> ins, outs;
    for (int32_t i : st.inputs) ins.push_back(view_of(i));
    for (int32_t o : st.outputs) outs.push_back(view_of(o));
    s.step_in.push_back(std::move(ins));
    s.step_out.push_back(std::move(outs));
  }
  s.pool = std::make_unique<cpu::ThreadPool>(options.cpu_threads);
}

Context::~Context() = default;

std::unique_ptr<Context> Engine::create_context(int threads) const {
  ContextOptions o;
  o.cpu_threads = threads;
  return create_context(o);
}

std::unique_ptr<Context> Engine::create_context(const ContextOptions& options) const {
  // Engines are only handed out as shared_ptr<const Engine> (load/from_bytes), so this is safe.
  return std::unique_ptr<Context>(new Context(shared_from_this(), options));
}

namespace {
template <class Ids>
size_t find_io(const detail::EngineImpl& e, const Ids& ids, std::string_view name, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (e.tensors[static_cast<size_t>(ids[i])].name == name) return i;
  std::string names;
  for (int32_t id : ids) names += (names.empty() ? "" : ", ") + e.tensors[static_cast<size_t>(id)].name;
  throw Error(std::string("the engine has no ") + what + " named '" + std::string(name) + "' (its " + what +
              "s: " + names + ")");
}

void check_size(const detail::TensorRec& t, size_t bytes, const char* what) {
  if (bytes != t.bytes)
    throw Error(std::string(what) + " '" + t.name + "' expects " + std::string(dtype_name(t.dtype)) +
                shape_string(t.shape) + " = " + std::to_string(t.bytes) + " bytes, got " + std::to_string(bytes));
}
}  // namespace

void Context::set_input(std::string_view name, const void* data, size_t bytes) {
  const detail::EngineImpl& e = *state_->e;
  size_t i = find_io(e, e.input_ids, name, "input");
  check_size(e.tensors[static_cast<size_t>(e.input_ids[i])], bytes, "input");
  state_->bound_in[i] = data;
  if (state_->gpu) state_->gpu->bind_input(i, data, false);
}

void Context::set_input_device(std::string_view name, const void* data, size_t bytes) {
  const detail::EngineImpl& e = *state_->e;
  if (!state_->gpu) throw Error("set_input_device: this is a CPU engine (target 'cpu'); use set_input");
  size_t i = find_io(e, e.input_ids, name, "input");
  check_size(e.tensors[static_cast<size_t>(e.input_ids[i])], bytes, "input");
  state_->gpu->bind_input(i, data, true);
}

void Context::set_output_device(std::string_view name, void* data, size_t bytes) {
  const detail::EngineImpl& e = *state_->e;
  if (!state_->gpu) throw Error("set_output_device: this is a CPU engine (target 'cpu'); use set_output");
  size_t i = find_io(e, e.output_ids, name, "output");
  check_size(e.tensors[static_cast<size_t>(e.output_ids[i])], bytes, "output");
  state_->gpu->bind_output(i, data, true);
}

void Context::enqueue(CUstream_st* stream) {
  if (state_->gpu)
    state_->gpu->enqueue(stream);
  else
    run();
}

void Context::check() {
  if (state_->gpu) state_->gpu->check();
}

std::vector<StepTime> Context::step_times() const {
  if (state_->gpu) return state_->gpu->step_times();
  const detail::EngineImpl& e = *state_->e;
  std::vector<StepTime> r;
  for (size_t k = 0; k < e.steps.size(); ++k)
    r.push_back({std::string(op_name(e.steps[k].kind)), e.steps[k].name, state_->step_ms[k], state_->profiled_runs});
  return r;
}

const void* Context::output_device(std::string_view name) const {
  const detail::EngineImpl& e = *state_->e;
  if (!state_->gpu) throw Error("output_device: this is a CPU engine (target 'cpu'); use output");
  return state_->gpu->device_output(find_io(e, e.output_ids, name, "output"));
}

bool Context::whole_network() const { return state_->gpu && state_->gpu->whole_network(); }
size_t Context::side_steps() const { return state_->gpu ? state_->gpu->side_steps() : 0; }

void Context::set_output(std::string_view name, void* data, size_t bytes) {
  const detail::EngineImpl& e = *state_->e;
  size_t i = find_io(e, e.output_ids, name, "output");
  check_size(e.tensors[static_cast<size_t>(e.output_ids[i])], bytes, "output");
  state_->bound_out[i] = data;
  if (state_->gpu) state_->gpu->bind_output(i, data, false);
}

void Context::run() {
  State& s = *state_;
  if (s.gpu) return s.gpu->run();
  const detail::EngineImpl& e = *s.e;
  for (size_t i = 0; i < e.input_ids.size(); ++i) {
    if (!s.bound_in[i] && e.tensors[static_cast<size_t>(e.input_ids[i])].bytes > 0)
      throw Error("input '" + e.inputs[i].name + "' was not set (Context::set_input)");
    s.data[static_cast<size_t>(e.input_ids[i])] = const_cast<void*>(s.bound_in[i]);
  }
  for (size_t i = 0; i < e.output_ids.size(); ++i) {
    auto id = static_cast<size_t>(e.output_ids[i]);
    s.data[id] = s.bound_out[i] ? s.bound_out[i] : s.arena.data() + e.tensors[id].offset;
  }
  s.resolve_views();
  cpu::KernelEnv env{s.pool.get()};
  for (size_t k = 0; k < e.steps.size(); ++k) {
    const detail::StepRec& st = e.steps[k];
    for (size_t j = 0; j < st.inputs.size(); ++j)
      if (st.inputs[j] >= 0) s.step_in[k][j].data = s.data[static_cast<size_t>(st.inputs[j])];
    for (size_t j = 0; j < st.outputs.size(); ++j) s.step_out[k][j].data = s.data[static_cast<size_t>(st.outputs[j])];
    const auto t0 = s.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    try {
      s.kernels[k](st.kind, st.attrs, s.step_in[k], s.step_out[k], env);
    } catch (const Error& err) {
      throw Error("step '" + st.name + "' (" + std::string(op_name(st.kind)) + ") failed: " + err.what());
    }
    if (s.profile)
      s.step_ms[k] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  s.profiled_runs += s.profile;
}

std::span<const std::byte> Context::output(std::string_view name) const {
  const detail::EngineImpl& e = *state_->e;
  size_t i = find_io(e, e.output_ids, name, "output");
  const detail::TensorRec& t = e.tensors[static_cast<size_t>(e.output_ids[i])];
  if (state_->gpu) {
    const std::byte* p = state_->gpu->host_output(i);
    if (!p && t.bytes == 0) return {};
    if (!p)
      throw Error("output '" + t.name +
                  "' is bound to device memory (set_output_device); read it there (output_device gives where)");
    return {p, t.bytes};
  }
  const void* p = state_->bound_out[i] ? state_->bound_out[i] : state_->arena.data() + t.offset;
  return {static_cast<const std::byte*>(p), t.bytes};
}

}  // namespace kiln
