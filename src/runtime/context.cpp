// kiln::Context: the API over the plans of an engine. A fixed engine has one plan; a range engine
// one per bucket, of which the context runs the one its current shapes fall in. Every plan runs on
// a PlanRunner (runtime/plan_runner.h: the CPU's in cpu/cpu_runner.cpp, a GPU's in
// cuda/gpu_context.cpp), made when the context is, all sharing one activation arena sized for the
// largest plan (and on a GPU one set of streams and handles): set_input_shape only picks a plan,
// and runs allocate nothing.
#include <algorithm>
#include <cstring>
#include <new>

#include "core/shape_range.h"
#include "runtime/copy_corner.h"
#include "runtime/cpu/cpu_runner.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/cuda/gpu_context.h"
#include "runtime/engine_impl.h"

namespace kiln {

struct Context::State {
  const detail::EngineImpl* e = nullptr;
  std::vector<std::unique_ptr<detail::PlanRunner>> plans;  // per plan of the engine (EngineImpl::plan)
  size_t current = 0;
  std::vector<int64_t> sizes;                             // per range: the size the shapes have now
  std::vector<std::vector<int64_t>> in_shape, out_shape;  // the caller's shapes now
  struct Binding {
    const void* p = nullptr;
    bool device = false;
  };
  std::vector<Binding> in_bound, out_bound;
  std::vector<std::byte> cpu_arena;
  std::unique_ptr<cpu::ThreadPool> pool;
  std::shared_ptr<void> gpu_shared;  // the GPU plans' arena, streams and handles (cuda/gpu_context.cpp)

  detail::PlanRunner& run_plan() const { return *plans[current]; }
  // Records a binding and gives it to the running plan.
  void bind_input(size_t i, Binding b) {
    in_bound[i] = b;
    run_plan().bind_input(i, b.p, b.device);
  }
  void bind_output(size_t i, Binding b) {
    out_bound[i] = b;
    run_plan().bind_output(i, const_cast<void*>(b.p), b.device);
  }
  // An output's shape after the last run: the set one, or its run's where it depends on the data.
  const std::vector<int64_t>& run_shape(size_t i) const {
    const std::vector<int64_t>* actual = run_plan().run_output_shape(i);
    return actual ? *actual : out_shape[i];
  }
  size_t out_bytes(size_t i) const { return detail::byte_count(run_shape(i), e->outputs[i].dtype); }
};

bool Engine::is_gpu() const { return impl_->target != "cpu"; }

Context::Context(std::shared_ptr<const Engine> engine, const ContextOptions& options)
    : engine_(std::move(engine)), state_(std::make_unique<State>()) {
  const detail::EngineImpl& e = *engine_->impl_;
  State& s = *state_;
  s.e = &e;
  if (!engine_->is_gpu()) {
    try {
      s.cpu_arena.resize(e.max_arena_bytes());
    } catch (const std::bad_alloc&) {
      throw Error(e.origin + ": cannot allocate " + std::to_string(e.max_arena_bytes() >> 20) +
                  " MiB of memory for the activation arena");
    }
    s.pool = std::make_unique<cpu::ThreadPool>(options.cpu_threads);
  }
  for (size_t p = 0; p < e.plan_count(); ++p) {
    if (engine_->is_gpu())
      s.plans.push_back(gpu::make_gpu_runner(e.plan(p), options, &s.gpu_shared, e.max_arena_bytes()));
    else
      s.plans.push_back(detail::make_cpu_runner(e.plan(p), s.cpu_arena.data(), s.pool.get(), options));
  }
  s.current = e.plan_count() - 1;  // the engine's own plan: every range at its top
  s.sizes = e.top_sizes;
  for (const TensorInfo& t : e.inputs) s.in_shape.push_back(t.shape);
  for (const TensorInfo& t : e.outputs) s.out_shape.push_back(t.shape);
  s.in_bound.resize(e.inputs.size());
  s.out_bound.resize(e.outputs.size());
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

size_t find_io(const std::vector<TensorInfo>& list, std::string_view name, const char* what) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].name == name) return i;
  std::string names;
  for (const TensorInfo& t : list) names += (names.empty() ? "" : ", ") + t.name;
  throw Error(std::string("the engine has no ") + what + " named '" + std::string(name) + "' (its " + what +
              "s: " + names + ")");
}

void check_size(const TensorInfo& t, const std::vector<int64_t>& shape, size_t bytes, const char* what) {
  const size_t want = detail::byte_count(shape, t.dtype);
  if (bytes != want)
    throw Error(std::string(what) + " '" + t.name + "' expects " + std::string(dtype_name(t.dtype)) +
                shape_string(shape) + " = " + std::to_string(want) + " bytes, got " + std::to_string(bytes));
}

}  // namespace

void Context::set_input_shape(std::string_view name, std::span<const int64_t> dims_in) {
  State& s = *state_;
  const detail::EngineImpl& e = *s.e;
  const size_t i = find_io(e.inputs, name, "input");
  const TensorInfo& t = e.inputs[i];
  const std::vector<int64_t> dims(dims_in.begin(), dims_in.end());
  if (dims.size() != t.shape.size())
    throw Error("input '" + t.name + "': shape " + shape_string(dims) + " has rank " + std::to_string(dims.size()) +
                ", the engine's " + shape_string(t.shape) + " has rank " + std::to_string(t.shape.size()));
  std::vector<int64_t> sizes = s.sizes;
  std::vector<char> ranged(dims.size(), 0), given(e.ranges.size(), 0);
  for (size_t k = 0; k < e.ranges.size(); ++k) {
    const ShapeRangeInfo& r = e.ranges[k];
    for (const auto& [in, axis] : r.inputs) {
      if (in != t.name) continue;
      const int64_t n = dims[static_cast<size_t>(axis)];
      const std::string what = "input '" + t.name + "' dimension " + std::to_string(axis) + " ('" + r.name + "')";
      if (n < r.lo || n > r.hi)
        throw Error(what + " is " + std::to_string(n) + ", outside the engine's range " + std::to_string(r.lo) + ".." +
                    std::to_string(r.hi));
      if (given[k] && sizes[k] != n)
        throw Error(what + " is " + std::to_string(n) + " but another of its dimensions in range '" + r.name + "' is " +
                    std::to_string(sizes[k]));
      given[k] = 1;
      sizes[k] = n;
      ranged[static_cast<size_t>(axis)] = 1;
    }
  }
  for (size_t a = 0; a < dims.size(); ++a)
    if (!ranged[a] && dims[a] != t.shape[a])
      throw Error("input '" + t.name + "': shape " + shape_string(dims) + " differs from the engine's " +
                  shape_string(t.shape) + " on dimension " + std::to_string(a) +
                  (e.ranges.empty() ? ", and the engine has one fixed shape (build it with a range: kiln optimize "
                                      "--batch LO..HI or --shape NAME=LO..HIx...)"
                                    : ", which has no range in this engine"));
  if (sizes == s.sizes) return;
  // The bucket: per range, the smallest size built that holds the shape.
  std::vector<int64_t> bucket(e.ranges.size());
  for (size_t k = 0; k < e.ranges.size(); ++k) {
    const ShapeRangeInfo& r = e.ranges[k];
    const DimRange range{r.lo, r.hi};
    bucket[k] = r.buckets[bucket_for(r.buckets, range, sizes[k], "range '" + r.name + "'")];
    if (bucket[k] != sizes[k] && !r.pad_rows)
      throw Error("input '" + t.name + "': range '" + r.name + "' runs only at the sizes the engine was built for (" +
                  buckets_string(r.buckets) + "), and " + std::to_string(sizes[k]) +
                  " is not one: padding to the next is not proven safe (" + r.why_exact +
                  "). Rebuild with --buckets listing the sizes you run");
  }
  size_t plan = 0;  // the loader checked that every combination has a plan
  while (plan < e.plan_count() && e.plan_sizes(plan) != bucket) ++plan;
  if (plan == e.plan_count()) throw Error(e.origin + ": no plan for bucket [" + buckets_string(bucket) + "]");
  const detail::EngineImpl& p = e.plan(plan);
  std::vector<std::vector<int64_t>> in_shape, out_shape;
  for (const TensorInfo& x : e.inputs) in_shape.push_back(x.shape);
  for (const TensorInfo& x : p.outputs) out_shape.push_back(x.shape);
  for (size_t k = 0; k < e.ranges.size(); ++k) {
    for (const auto& [in, axis] : e.ranges[k].inputs)
      in_shape[find_io(e.inputs, in, "input")][static_cast<size_t>(axis)] = sizes[k];
    for (const auto& [out, axis] : e.ranges[k].outputs)
      if (axis >= 0) out_shape[find_io(e.outputs, out, "output")][static_cast<size_t>(axis)] = sizes[k];
  }
  // The runners pad into and slice out of the plan's tensors: never past them.
  auto within = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() != b.size()) return false;
    for (size_t d = 0; d < a.size(); ++d)
      if (a[d] > b[d]) return false;
    return true;
  };
  for (size_t j = 0; j < in_shape.size(); ++j)
    if (!within(in_shape[j], p.inputs[j].shape))
      throw Error(e.origin + ": input '" + p.inputs[j].name + "' does not fit its plan");
  for (size_t j = 0; j < out_shape.size(); ++j)
    if (!within(out_shape[j], p.outputs[j].shape))
      throw Error(e.origin + ": output '" + p.outputs[j].name + "' does not fit its plan");
  s.plans[plan]->set_io_shapes(in_shape, out_shape);
  // Buffers bound at another shape no longer fit: bind them again.
  for (size_t j = 0; j < in_shape.size(); ++j)
    if (in_shape[j] != s.in_shape[j]) s.in_bound[j] = {};
  for (size_t j = 0; j < out_shape.size(); ++j)
    if (out_shape[j] != s.out_shape[j]) s.out_bound[j] = {};
  s.in_shape = std::move(in_shape);
  s.out_shape = std::move(out_shape);
  s.sizes = std::move(sizes);
  s.current = plan;
  // The plan takes the bindings that still fit, and clears the others (as device memory: a null
  // binding needs no host staging).
  for (size_t j = 0; j < s.in_bound.size(); ++j)
    s.bind_input(j, {s.in_bound[j].p, s.in_bound[j].device || !s.in_bound[j].p});
  for (size_t j = 0; j < s.out_bound.size(); ++j)
    s.bind_output(j, {s.out_bound[j].p, s.out_bound[j].device || !s.out_bound[j].p});
}

std::vector<int64_t> Context::input_shape(std::string_view name) const {
  return state_->in_shape[find_io(state_->e->inputs, name, "input")];
}

std::vector<int64_t> Context::output_shape(std::string_view name) const {
  return state_->run_shape(find_io(state_->e->outputs, name, "output"));
}

std::vector<int64_t> Context::bucket() const {
  return state_->e->ranges.empty() ? std::vector<int64_t>{} : state_->e->plan_sizes(state_->current);
}

void Context::set_input(std::string_view name, const void* data, size_t bytes) {
  State& s = *state_;
  const size_t i = find_io(s.e->inputs, name, "input");
  check_size(s.e->inputs[i], s.in_shape[i], bytes, "input");
  s.bind_input(i, {data, false});
}

void Context::set_input_device(std::string_view name, const void* data, size_t bytes) {
  State& s = *state_;
  if (!engine_->is_gpu()) throw Error("set_input_device: this is a CPU engine (target 'cpu'); use set_input");
  const size_t i = find_io(s.e->inputs, name, "input");
  check_size(s.e->inputs[i], s.in_shape[i], bytes, "input");
  s.bind_input(i, {data, true});
}

void Context::set_output(std::string_view name, void* data, size_t bytes) {
  State& s = *state_;
  const size_t i = find_io(s.e->outputs, name, "output");
  check_size(s.e->outputs[i], s.out_shape[i], bytes, "output");
  s.bind_output(i, {data, false});
}

void Context::set_output_device(std::string_view name, void* data, size_t bytes) {
  State& s = *state_;
  if (!engine_->is_gpu()) throw Error("set_output_device: this is a CPU engine (target 'cpu'); use set_output");
  const size_t i = find_io(s.e->outputs, name, "output");
  check_size(s.e->outputs[i], s.out_shape[i], bytes, "output");
  s.bind_output(i, {data, true});
}

void Context::run() { state_->run_plan().run(); }
void Context::enqueue(CUstream_st* stream) { state_->run_plan().enqueue(stream); }
void Context::check() { state_->run_plan().check(); }
std::vector<StepTime> Context::step_times() const { return state_->run_plan().step_times(); }
bool Context::whole_network() const { return state_->run_plan().whole_network(); }
size_t Context::side_steps() const { return state_->run_plan().side_steps(); }
bool Context::mapped_io() const { return state_->run_plan().mapped_io(); }

const void* Context::output_device(std::string_view name) const {
  if (!engine_->is_gpu()) throw Error("output_device: this is a CPU engine (target 'cpu'); use output");
  return state_->run_plan().device_output(find_io(state_->e->outputs, name, "output"));
}

std::span<const std::byte> Context::output(std::string_view name) const {
  const State& s = *state_;
  const size_t i = find_io(s.e->outputs, name, "output");
  const size_t bytes = s.out_bytes(i);
  const std::byte* p = s.run_plan().host_output(i);
  if (!p && bytes == 0) return {};
  if (!p)
    throw Error("output '" + s.e->outputs[i].name +
                "' is bound to device memory (set_output_device); read it there (output_device gives where)");
  return {p, bytes};
}

}  // namespace kiln
