// GPU execution of an engine. Everything is allocated when the context is created: the activation
// arena (laid out by the builder's memory plan), the largest workspace any step asks for, device
// buffers and pinned host staging for inputs and outputs bound to host memory, and one error flag
// per step. enqueue() then only patches the bound input/output pointers into the step views and
// enqueues copies and kernels on the caller's stream. With ContextOptions::cuda_graph the steps
// are recorded once (after a first direct run, which lets libraries finish their lazy setup) and
// replayed with one cudaGraphLaunch; a change of device bindings records them again. The engine's
// views follow their base (a view of an output bound with set_output_device lies in the caller's
// buffer), so they are resolved again after each binding, before the steps see them; the graph's key
// (the bound pointers) then covers them too. An engine that whole_net_plan.h accepts runs as one
// kernel instead of its steps (ContextOptions::whole_network), recorded into the graph the same way;
// profiling always runs the steps, which it times one by one. Steps that runtime/side_steps.h puts
// beside the others run on a second stream of the context's (with their own cuDNN handle and
// workspace): each waits for an event recorded after its fork step, and the main-stream steps that
// need it wait for an event recorded after it; the graph records that as a fork and a join.
// A range engine's plans (one runner each) share the arena, streams, handles and workspaces.
// An engine with data-dependent shapes (runtime/dynamic_shapes.h) runs its steps directly: after
// each NonZero or NonMaxSuppression the runner reads the count back (one wait) and infers the
// shapes of the steps after it on the host, so no graph, side stream or whole-network kernel. The
// shape arithmetic after them runs on the host (host steps, uploaded where device steps read it),
// and a value only the device computes that a shape needs (an If's condition) is read back.
#include "runtime/cuda/gpu_context.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/dynamic_shapes.h"
#include "runtime/engine_impl.h"
#include "runtime/side_steps.h"

#if defined(KILN_HAVE_CUDA)
#include "runtime/copy_corner.h"
#include "runtime/cuda/context_memory.h"
#include "runtime/cuda/copy_corner.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/whole_net.h"

namespace kiln::gpu {

namespace {

using detail::EngineImpl;
using detail::StepRec;
using detail::TensorKind;
using detail::TensorRec;

std::string arch_of_current_device(int* device) {
  check_cuda(cudaGetDevice(device), "no usable CUDA device");
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, *device), "reading the GPU");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, *device), "reading the GPU");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

struct Step {
  const StepRec* rec = nullptr;
  const GpuKernelEntry* entry = nullptr;
  std::vector<TensorView> in, out;
  std::vector<const void*> host_in;
  std::unique_ptr<StepState> state;
  int side = -1;  // its index among the side steps, or -1: on the main stream
  int wait = -1;  // main stream: the last side step to wait for before it (-1: none)
};

// A host output copy done by the stream (cudaLaunchHostFunc) once the data is in staging.
struct HostCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

void CUDART_CB run_host_copy(void* p) {
  const auto* c = static_cast<const HostCopy*>(p);
  std::memcpy(c->dst, c->src, c->bytes);
}

class GpuContextImpl final : public detail::PlanRunner {
 public:
  // Whatever the setup made before it threw (streams, events, handles) is released: the destructor
  // does not run for a constructor that throws.
  GpuContextImpl(const EngineImpl& e, const ContextOptions& o, std::shared_ptr<void>* shared, size_t arena_bytes)
      : e_(e),
        opt_(o),
        // The plans of a range engine's context share its budget, made with its first plan.
        budget_(*shared ? static_cast<GpuShared*>(shared->get())->budget
                        : new_budget(o.memory_limit, "ContextOptions::memory_limit")),
        dyn_(e) {
    // Exactly the kernels the engine was timed with: its limit, or none (whatever the thread's).
    const KernelArchScope limit(e.kernel_arch, KernelArchScope::kExactly);
    const MemoryBudgetScope memory(budget_);
    try {
      set_up(shared, arena_bytes);
    } catch (...) {
      release();
      throw;
    }
  }

  ~GpuContextImpl() override { release(); }

 private:
  // The constructor's work (the context's memory, streams, handles and step views).
  void set_up(std::shared_ptr<void>* shared, size_t arena_bytes) {
    const EngineImpl& e = e_;
    if (!gpu_available()) {
      try {
        gpu_target();  // throws "no CUDA device: <CUDA's reason>"
      } catch (const Error& err) {
        throw Error(e.origin + ": the engine targets " + describe_arch(e.target) + " but there is " + err.what() +
                    "; on a machine without a GPU, build a CPU engine: `kiln optimize MODEL.onnx --device cpu`");
      }
    }
    const std::string arch = arch_of_current_device(&device_);
    const std::string mismatch =
        engine_mismatch(e.target, {e.cuda_version, e.cudnn_version, e.cublaslt_version}, arch, library_versions());
    if (!mismatch.empty())
      throw Error(e.origin + ": " + mismatch + ". An engine holds kernels and tactics for one GPU and its libraries: " +
                  "rebuild it on this machine from its model, `kiln optimize MODEL.onnx --device gpu` with the " +
                  "flags it was built with (`kiln inspect` lists them)");
    std::vector<std::string> missing;
    for (const StepRec& st : e.steps) {
      Step s;
      s.rec = &st;
      s.entry = gpu_kernel_entry(st.kind);
      if (!s.entry) missing.push_back(std::string(op_name(st.kind)) + " (step '" + st.name + "')");
      steps_.push_back(std::move(s));
    }
    if (!missing.empty()) {
      std::string m = e.origin + ": the GPU backend has no kernel for:";
      for (const auto& x : missing) m += "\n  - " + x;
      throw Error(m + "\nrun this model with --device cpu");
    }
    weights_ = device_weights(e, device_);
    if (!*shared) {
      auto made = std::make_shared<GpuShared>();
      made->budget = budget_;
      made->arena = device_alloc(std::max<size_t>(arena_bytes, e.arena_bytes), "the activation arena");
      *shared = made;
    }
    shared_ = std::static_pointer_cast<GpuShared>(*shared);
    arena_ = shared_->arena;
    check_cuda(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming), "cudaEventCreate");

    // Where each tensor lives, as far as it is known now (inputs and outputs are patched per run).
    data_.assign(e.tensors.size(), nullptr);
    for (size_t i = 0; i < e.tensors.size(); ++i) {
      const TensorRec& t = e.tensors[i];
      if (t.kind == TensorKind::kWeight) data_[i] = static_cast<uint8_t*>(weights_.get()) + t.offset;
      if (t.kind == TensorKind::kActivation || t.kind == TensorKind::kOutput)
        data_[i] = static_cast<uint8_t*>(arena_.get()) + t.offset;
    }
    resolve_views();
    if (opt_.whole_network && !opt_.profile && !dyn_.any()) {
      size_t smem = whole_net_max_smem(device_);
      if (const int limit = kernel_arch_limit(); limit != 0) smem = std::min(smem, max_block_smem_of(limit));
      WholeNetPlan plan = plan_whole_network(e, smem);
      if (plan.eligible()) whole_ = std::make_unique<WholeNet>(std::move(plan), data_);
    }
    // Staging: [inputs | outputs], each 256-byte aligned, pinned on the host and (inputs) on the device.
    size_t in_bytes = 0, out_bytes = 0;
    for (int32_t id : e.input_ids) {
      in_off_.push_back(in_bytes);
      in_bytes += align_up(e.tensors[static_cast<size_t>(id)].bytes);
    }
    for (int32_t id : e.output_ids) {
      out_off_.push_back(in_bytes + out_bytes);
      out_bytes += align_up(e.tensors[static_cast<size_t>(id)].bytes);
    }
    io_bytes_ = in_bytes + out_bytes;
    // Mapped: the kernels use the staging in place (on an integrated GPU, the same memory).
    mapped_ = opt_.host_staging && (opt_.mapped_io == ContextOptions::MappedIo::kOn ||
                                    (opt_.mapped_io == ContextOptions::MappedIo::kAuto && integrated_gpu(device_)));
    if (mapped_) {
      void* dev = nullptr;
      pinned_ = mapped_alloc(io_bytes_, "input/output staging", &dev);
      pinned_dev_ = static_cast<uint8_t*>(dev);
    } else if (opt_.host_staging) {
      pinned_ = pinned_alloc(io_bytes_, "input/output staging");
      device_in_ = device_alloc(in_bytes, "the inputs");
    }
    in_host_.assign(e.input_ids.size(), nullptr);
    in_dev_.assign(e.input_ids.size(), nullptr);
    in_alias_.assign(e.input_ids.size(), nullptr);
    out_host_.assign(e.output_ids.size(), nullptr);
    out_dev_.assign(e.output_ids.size(), nullptr);
    out_alias_.assign(e.output_ids.size(), nullptr);
    host_copies_.resize(e.output_ids.size());
    for (const TensorInfo& t : e.inputs) in_shape_.push_back(t.shape);
    for (const TensorInfo& t : e.outputs) out_shape_.push_back(t.shape);
    in_pad_.assign(e.inputs.size(), 0);
    out_slice_.assign(e.outputs.size(), 0);

    if (!opt_.profile && !whole_ && opt_.side_stream && !dyn_.any()) plan_side_steps();
    if (dyn_.any()) {
      extents_ = pinned_alloc(steps_.size() * sizeof(int64_t), "the data-dependent extents");
      // Pinned slots for the host steps' values that device steps read, so that their uploads
      // are asynchronous. A slot is rewritten only after the run has waited for the GPU once
      // (every host step comes after a read-back), so the previous run's upload has landed.
      size_t bytes = 0;
      host_slot_.assign(e.tensors.size(), SIZE_MAX);
      for (size_t k = 0; k < e.steps.size(); ++k)
        if (dyn_.on_host(k))
          for (int32_t o : e.steps[k].outputs)
            if (dyn_.device_needs(o)) {
              host_slot_[static_cast<size_t>(o)] = bytes;
              bytes += align_up(e.tensors[static_cast<size_t>(o)].bytes);
            }
      if (bytes > 0) host_stage_ = pinned_alloc(bytes, "the host steps' values");
    }

    errors_ = device_alloc(std::max<size_t>(1, steps_.size()) * sizeof(int), "error flags");
    check_cuda(cudaMemset(errors_.get(), 0, std::max<size_t>(1, steps_.size()) * sizeof(int)), "cudaMemset");

    // Step views, host copies of constant inputs, and the largest workspace any step asks for.
    size_t workspace = 0, side_workspace = 0;
    for (size_t k = 0; k < steps_.size(); ++k) {
      Step& s = steps_[k];
      auto view_of = [&](int32_t id) {
        if (id < 0) return absent_tensor();
        // dyn_'s storage: a tensor of data-dependent shape has the run's shape when its step runs.
        return TensorView{e.tensors[static_cast<size_t>(id)].dtype, dyn_.shape(id), data_[static_cast<size_t>(id)],
                          true};
      };
      for (int32_t i : s.rec->inputs) {
        s.in.push_back(view_of(i));
        s.host_in.push_back(dyn_.host_value(i));  // a weight's, or a value the host computes or reads back
      }
      for (int32_t o : s.rec->outputs) s.out.push_back(view_of(o));
      if (s.entry->workspace) {
        GpuEnv env = env_for(k, shared_->own);
        try {
          size_t& w = s.side >= 0 ? side_workspace : workspace;
          w = std::max(w, s.entry->workspace(s.rec->kind, s.rec->attrs, s.in, s.out, env));
        } catch (const Error& err) {
          throw Error(step_name(k) + ": " + err.what());
        }
      }
    }
    shared_->grow_workspaces(workspace, side_workspace);
    if (opt_.profile) {
      events_.resize(steps_.size() + 1);
      for (cudaEvent_t& ev : events_) check_cuda(cudaEventCreate(&ev), "cudaEventCreate");
      step_ms_.assign(steps_.size(), 0.0);
    }
  }

  // Frees what was made, in any state of set_up(): every handle starts null.
  void release() noexcept {
    if (shared_) cudaStreamSynchronize(shared_->own);
    if (exec_) cudaGraphExecDestroy(exec_);
    for (cudaEvent_t ev : events_) cudaEventDestroy(ev);
    for (cudaEvent_t ev : fork_events_) cudaEventDestroy(ev);
    for (cudaEvent_t ev : side_events_) cudaEventDestroy(ev);
    if (staged_) cudaEventDestroy(staged_);
  }

 public:
  // What need_staging tells a caller to do with an output.
  static constexpr const char* kOutputOnDevice = "bind it with set_output_device, or read it with output_device";

  void bind_input(size_t i, const void* p, bool device) override {
    if (!device) need_staging("input", e_.input_ids[i], "bind it with set_input_device");
    in_host_[i] = device ? nullptr : p;
    in_dev_[i] = device ? p : nullptr;
    in_alias_[i] = in_place(p, device);
  }
  void bind_output(size_t i, void* p, bool device) override {
    if (!device) need_staging("output", e_.output_ids[i], kOutputOnDevice);
    out_host_[i] = device ? nullptr : p;
    out_dev_[i] = device ? p : nullptr;
    out_alias_[i] = in_place(p, device);
  }

  // Range engines between buckets: inputs padded into the plan's shapes (host inputs in pinned
  // staging, whose rows beyond them are zeroed here once; device inputs by a kernel into a buffer of
  // the runner's), outputs sliced by a kernel into the caller's device memory or a buffer of the
  // runner's, from which host staging copies them. That buffer is laid out like the staging:
  // [inputs | outputs] at in_off_ and out_off_.
  void set_io_shapes(const std::vector<std::vector<int64_t>>& in,
                     const std::vector<std::vector<int64_t>>& out) override {
    bool any = false;
    for (size_t i = 0; i < in.size(); ++i) any |= in[i] != e_.inputs[i].shape;
    for (size_t i = 0; i < out.size(); ++i) any |= out[i] != e_.outputs[i].shape;
    if (any && !pad_dev_) {
      const MemoryBudgetScope memory(budget_);
      pad_dev_ = device_alloc(io_bytes_, "padding the inputs and slicing the outputs");
    }
    if (opt_.host_staging && pinned_) {
      check_cuda(cudaEventSynchronize(staged_), "waiting for the previous input copy");
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i] != e_.inputs[i].shape && in[i] != in_shape_[i])
          std::memset(static_cast<uint8_t*>(pinned_.get()) + in_off_[i], 0, e_.inputs[i].bytes());
    }
    for (size_t i = 0; i < in.size(); ++i) in_pad_[i] = in[i] != e_.inputs[i].shape;
    for (size_t i = 0; i < out.size(); ++i) out_slice_[i] = out[i] != e_.outputs[i].shape;
    in_shape_ = in;
    out_shape_ = out;
  }

  void enqueue(CUstream_st* stream) override {
    const KernelArchScope limit(e_.kernel_arch, KernelArchScope::kExactly);  // the kernels it was built with
    const MemoryBudgetScope memory(budget_);
    enqueued_ = false;  // until this run's pointers are all in place
    if (dyn_.any()) {
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      check_cuda(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
      if (capturing != cudaStreamCaptureStatusNone)
        throw Error(e_.origin +
                    ": this engine's shapes depend on the data (NonZero, NonMaxSuppression), so a run "
                    "waits for the GPU and cannot be recorded into a CUDA graph; enqueue it outside the capture");
    }
    flush_profile();
    // Inputs: the caller's device memory, or host memory through staging.
    bool staging = false;
    for (size_t i = 0; i < e_.input_ids.size(); ++i) {
      const auto id = static_cast<size_t>(e_.input_ids[i]);
      const TensorRec& t = e_.tensors[id];
      if (in_dev_[i] && in_pad_[i]) {
        data_[id] = static_cast<uint8_t*>(pad_dev_.get()) + in_off_[i];
        copy_corner_device(in_dev_[i], in_shape_[i], data_[id], t.shape, dtype_size(t.dtype), stream);
      } else if (in_dev_[i]) {
        data_[id] = const_cast<void*>(in_dev_[i]);
      } else if (in_alias_[i] && !in_pad_[i]) {
        data_[id] = const_cast<void*>(in_alias_[i]);  // caller memory the kernels reach in place
      } else if (in_host_[i] || t.bytes == 0) {
        if (mapped_)
          data_[id] = pinned_dev_ + in_off_[i];
        else
          data_[id] = device_in_ ? static_cast<uint8_t*>(device_in_.get()) + in_off_[i] : nullptr;
        staging |= t.bytes > 0;
      } else {
        throw Error("input '" + t.name + "' was not set (Context::set_input or set_input_device)");
      }
    }
    // Outputs: the caller's device memory; mapped, the caller's pinned memory or the staging; else
    // the context's (then copied to host staging, if any). Sliced ones land there from the arena.
    for (size_t i = 0; i < e_.output_ids.size(); ++i) {
      const auto id = static_cast<size_t>(e_.output_ids[i]);
      if (out_slice_[i])
        data_[id] = static_cast<uint8_t*>(arena_.get()) + e_.tensors[id].offset;
      else if (out_dev_[i])
        data_[id] = out_dev_[i];
      else if (mapped_)
        data_[id] = out_alias_[i] ? out_alias_[i] : pinned_dev_ + out_off_[i];
      else
        data_[id] = static_cast<uint8_t*>(arena_.get()) + e_.tensors[id].offset;
    }
    resolve_views();
    if (staging) {
      // The previous run's staging copy (mapped: the previous run) must have left the buffer
      // before it is overwritten.
      check_cuda(cudaEventSynchronize(staged_), "waiting for the previous input copy");
      for (size_t i = 0; i < e_.input_ids.size(); ++i) {
        const TensorRec& t = e_.tensors[static_cast<size_t>(e_.input_ids[i])];
        if (in_dev_[i] || t.bytes == 0 || (in_alias_[i] && !in_pad_[i])) continue;
        uint8_t* pin = static_cast<uint8_t*>(pinned_.get()) + in_off_[i];
        if (in_pad_[i])  // the rows beyond the caller's are zero since set_io_shapes
          detail::copy_corner(in_host_[i], in_shape_[i], pin, t.shape, dtype_size(t.dtype), false);
        else
          std::memcpy(pin, in_host_[i], t.bytes);
        if (mapped_) continue;  // the kernels read it there
        check_cuda(cudaMemcpyAsync(static_cast<uint8_t*>(device_in_.get()) + in_off_[i], pin, t.bytes,
                                   cudaMemcpyHostToDevice, stream),
                   "copying input '" + t.name + "' to the GPU");
      }
      if (!mapped_) check_cuda(cudaEventRecord(staged_, stream), "cudaEventRecord");
    }
    patch_views();

    if (opt_.profile)
      run_steps(stream, true);
    else if (opt_.cuda_graph && !dyn_.any())  // a graph would replay one run's shapes
      launch_graph(stream);
    else
      run_program(stream);

    // Outputs between buckets: their leading corner, into the caller's device memory or the runner's.
    for (size_t i = 0; i < e_.output_ids.size(); ++i) {
      if (!out_slice_[i]) continue;
      const TensorRec& t = e_.tensors[static_cast<size_t>(e_.output_ids[i])];
      copy_corner_device(data_[static_cast<size_t>(e_.output_ids[i])], t.shape, sliced_output(i), out_shape_[i],
                         dtype_size(t.dtype), stream);
    }
    // Outputs not bound to device memory: to pinned staging, then (if bound) the caller's buffer.
    // Without staging they stay in the context's memory (device_output).
    for (size_t i = 0; i < e_.output_ids.size() && opt_.host_staging; ++i) {
      if (out_dev_[i]) continue;
      const auto id = static_cast<size_t>(e_.output_ids[i]);
      const TensorRec& t = e_.tensors[id];
      const std::vector<int64_t>* run = dyn_.run_shape(e_.output_ids[i]);
      const size_t bytes = detail::byte_count(run ? *run : out_shape_[i], t.dtype);
      if (bytes == 0) continue;
      uint8_t* pin = static_cast<uint8_t*>(pinned_.get()) + out_off_[i];
      if (!mapped_)  // mapped, the kernels wrote the staging (or the caller's buffer) in place
        check_cuda(
            cudaMemcpyAsync(pin, out_slice_[i] ? sliced_output(i) : data_[id], bytes, cudaMemcpyDeviceToHost, stream),
            "copying output '" + t.name + "' from the GPU");
      if (out_host_[i] && !out_alias_[i]) {
        host_copies_[i] = {out_host_[i], pin, bytes};
        check_cuda(cudaLaunchHostFunc(stream, run_host_copy, &host_copies_[i]), "cudaLaunchHostFunc");
      }
    }
    // Mapped: the next run rewrites the staging once this one has finished with it.
    if (mapped_ && staging) check_cuda(cudaEventRecord(staged_, stream), "cudaEventRecord");
    profile_pending_ = opt_.profile;
    enqueued_ = true;
  }

  void run() override {
    enqueue(shared_->own);
    check_cuda(cudaStreamSynchronize(shared_->own), "running the engine on the GPU");
    check();
  }

  void check() override {
    std::vector<int> flags(steps_.size(), 0);
    if (flags.empty()) return;
    check_cuda(cudaMemcpy(flags.data(), errors_.get(), flags.size() * sizeof(int), cudaMemcpyDeviceToHost),
               "reading the steps' error flags");
    for (size_t k = 0; k < flags.size(); ++k) {
      if (flags[k] == 0) continue;
      check_cuda(cudaMemset(errors_.get(), 0, flags.size() * sizeof(int)), "clearing the error flags");
      throw Error(step_name(k) + " failed: " + gpu_error_message(flags[k]));
    }
  }

  const std::byte* host_output(size_t i) const override {
    if (out_dev_[i]) return nullptr;
    need_staging("output", e_.output_ids[i], kOutputOnDevice);
    if (out_host_[i]) return static_cast<const std::byte*>(out_host_[i]);
    return static_cast<const std::byte*>(pinned_.get()) + out_off_[i];
  }

  const void* device_output(size_t i) const override {
    const auto id = static_cast<size_t>(e_.output_ids[i]);
    if (!enqueued_)
      throw Error("output '" + e_.tensors[id].name + "': output_device is known after the first run (run or enqueue)");
    return out_slice_[i] ? sliced_output(i) : data_[id];
  }

  bool whole_network() const override { return whole_ != nullptr; }

  const std::vector<int64_t>* run_output_shape(size_t i) const override { return dyn_.run_shape(e_.output_ids[i]); }

  size_t side_steps() const override { return side_events_.size(); }

  bool mapped_io() const override { return mapped_; }

  std::vector<StepTime> step_times() override {
    flush_profile();
    std::vector<StepTime> r;
    for (size_t k = 0; k < steps_.size(); ++k)
      r.push_back({std::string(op_name(steps_[k].rec->kind)), steps_[k].rec->name, opt_.profile ? step_ms_[k] : 0.0,
                   profiled_runs_});
    return r;
  }

 private:
  // Throws unless the context has host staging for tensor `id`, an input or output not bound to
  // device memory.
  void need_staging(const char* what, int32_t id, const char* instead) const {
    if (opt_.host_staging) return;
    throw Error(std::string(what) + " '" + e_.tensors[static_cast<size_t>(id)].name +
                "' is not bound to device memory, and this context has no host staging "
                "(ContextOptions::host_staging is off): " +
                instead);
  }

  // Where the kernels reach caller host buffer p in place (ContextOptions::MappedIo::kOn only: in
  // place, the caller's bytes are read when the kernels run, not when the run is enqueued): a
  // pinned or managed buffer aligned as the staging is; else null (copied through the staging).
  void* in_place(const void* p, bool device) const {
    if (!mapped_ || device || opt_.mapped_io != ContextOptions::MappedIo::kOn) return nullptr;
    if (reinterpret_cast<uintptr_t>(p) % kAlign != 0) return nullptr;
    return device_alias(p);
  }

  // Where output i is sliced to between buckets: the caller's device memory, or the runner's.
  void* sliced_output(size_t i) const {
    if (out_dev_[i]) return out_dev_[i];
    if (mapped_) return out_alias_[i] ? out_alias_[i] : pinned_dev_ + out_off_[i];
    return static_cast<uint8_t*>(pad_dev_.get()) + out_off_[i];
  }

  std::string step_name(size_t k) const { return detail::step_name(*steps_[k].rec); }

  GpuEnv env_for(size_t k, cudaStream_t stream) {
    Step& s = steps_[k];
    GpuEnv env;
    const bool side = s.side >= 0;
    const GpuShared& g = *shared_;
    env.stream = side ? g.side : stream;
    env.cudnn = side ? g.cudnn_side : g.cudnn;
    env.cublaslt = g.lt;
    env.workspace = side ? g.side_workspace.get() : g.workspace.get();
    env.workspace_bytes = side ? g.side_workspace_bytes : g.workspace_bytes;
    env.error = static_cast<int*>(errors_.get()) + k;
    env.host_in = s.host_in;
    env.tactic = s.rec->tactic;
    env.state = &s.state;
    return env;
  }

  void resolve_views() {
    for (int32_t v : e_.view_ids) {
      const TensorRec& t = e_.tensors[static_cast<size_t>(v)];
      data_[static_cast<size_t>(v)] = static_cast<uint8_t*>(data_[static_cast<size_t>(t.base)]) + t.offset;
    }
  }

  void patch_views() {
    for (Step& s : steps_) {
      for (size_t j = 0; j < s.rec->inputs.size(); ++j)
        if (s.rec->inputs[j] >= 0) s.in[j].data = data_[static_cast<size_t>(s.rec->inputs[j])];
      for (size_t j = 0; j < s.rec->outputs.size(); ++j) s.out[j].data = data_[static_cast<size_t>(s.rec->outputs[j])];
    }
  }

  void run_steps(cudaStream_t stream, bool timed) {
    check_cudnn(cudnnSetStream(shared_->cudnn, stream), "cudnnSetStream");
    if (timed) check_cuda(cudaEventRecord(events_[0], stream), "cudaEventRecord");
    record_fork(0, stream);
    int joined = -1;  // side steps [0, joined] are joined into `stream`
    try {
      for (size_t k = 0; k < steps_.size(); ++k) {
        Step& s = steps_[k];
        if (s.side >= 0)
          check_cuda(cudaStreamWaitEvent(shared_->side, fork_events_[static_cast<size_t>(side_fork_[s.side])]),
                     "cudaStreamWaitEvent");
        if (s.wait > joined) {
          check_cuda(cudaStreamWaitEvent(stream, side_events_[static_cast<size_t>(s.wait)]), "cudaStreamWaitEvent");
          joined = s.wait;
        }
        if (!dyn_.read_before(k).empty()) read_values(k, stream);
        // A step after a data-dependent one runs at this run's shapes, with descriptors made for them.
        if (dyn_.prepare(k) || dyn_.reads_values(k)) s.state.reset();
        if (dyn_.on_host(k)) {
          upload_host_values(k, stream);
        } else {
          GpuEnv env = env_for(k, stream);
          try {
            s.entry->fn(s.rec->kind, s.rec->attrs, s.in, s.out, env);
          } catch (const Error& err) {
            throw Error(step_name(k) + " failed: " + err.what());
          }
        }
        if (dyn_.is_source(k)) read_extent(k, stream);
        if (s.side >= 0)
          check_cuda(cudaEventRecord(side_events_[static_cast<size_t>(s.side)], shared_->side), "cudaEventRecord");
        record_fork(k + 1, stream);
        if (timed) check_cuda(cudaEventRecord(events_[k + 1], stream), "cudaEventRecord");
      }
    } catch (...) {
      join_side_stream(stream);  // the caller's next work must not meet side steps still running
      throw;
    }
    const int sides = static_cast<int>(side_events_.size());
    if (joined < sides - 1)  // side steps no main step waited for: a captured graph must join them
      check_cuda(cudaStreamWaitEvent(stream, side_events_.back()), "cudaStreamWaitEvent");
  }

  // After data-dependent step k: its extent, which the steps after it need on the host (one wait).
  void read_extent(size_t k, cudaStream_t stream) {
    int64_t* host = static_cast<int64_t*>(extents_.get()) + k;
    check_cuda(cudaMemcpyAsync(host, steps_[k].out.at(1).data, sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
               "reading " + step_name(k) + "'s count");
    check_cuda(cudaStreamSynchronize(stream), "running " + step_name(k));
    check();  // a step that failed wrote no count
    dyn_.set_extent(k, *host);
  }

  // Before step k: the values its shape inference needs that device steps computed (one wait).
  void read_values(size_t k, cudaStream_t stream) {
    check_cuda(cudaStreamSynchronize(stream), "running the steps before " + step_name(k));
    check();
    for (int32_t t : dyn_.read_before(k)) {
      const size_t bytes = detail::byte_count(dyn_.shape(t), e_.tensors[static_cast<size_t>(t)].dtype);
      if (bytes > 0)  // into pageable memory: returns when the copy is done
        check_cuda(cudaMemcpy(dyn_.host_buffer(t), data_[static_cast<size_t>(t)], bytes, cudaMemcpyDeviceToHost),
                   "reading back '" + e_.tensors[static_cast<size_t>(t)].name + "' for " + step_name(k));
    }
  }

  // Host step k (evaluated by dyn_.prepare): its values that device steps read, uploaded.
  void upload_host_values(size_t k, cudaStream_t stream) {
    for (int32_t o : steps_[k].rec->outputs) {
      const size_t slot = host_slot_[static_cast<size_t>(o)];
      if (slot == SIZE_MAX) continue;
      const size_t bytes = detail::byte_count(dyn_.shape(o), e_.tensors[static_cast<size_t>(o)].dtype);
      if (bytes == 0) continue;
      uint8_t* pin = static_cast<uint8_t*>(host_stage_.get()) + slot;
      std::memcpy(pin, dyn_.host_value(o), bytes);
      check_cuda(cudaMemcpyAsync(data_[static_cast<size_t>(o)], pin, bytes, cudaMemcpyHostToDevice, stream),
                 "uploading " + step_name(k) + "'s value");
    }
  }

  // Records the fork event of fork point f (0: the run's start, k + 1: after step k), if a side step
  // starts there.
  void record_fork(size_t f, cudaStream_t stream) {
    if (!fork_slot_.empty() && fork_slot_[f] >= 0)
      check_cuda(cudaEventRecord(fork_events_[static_cast<size_t>(fork_slot_[f])], stream), "cudaEventRecord");
  }

  // Makes `stream` wait for everything enqueued on the side stream (after a failed step).
  void join_side_stream(cudaStream_t stream) {
    if (side_events_.empty()) return;
    cudaEventRecord(side_events_.back(), shared_->side);
    cudaStreamWaitEvent(stream, side_events_.back());
  }

  // Which steps run on the side stream (runtime/side_steps.h), checked against the arena's bytes.
  void plan_side_steps() {
    std::vector<int> waits;
    const std::vector<detail::SideStep> sides = detail::engine_side_steps(e_, &waits);
    if (sides.empty()) return;
    shared_->need_side();
    fork_slot_.assign(steps_.size() + 1, -1);
    auto new_event = [](std::vector<cudaEvent_t>& v) {
      v.push_back(nullptr);
      check_cuda(cudaEventCreateWithFlags(&v.back(), cudaEventDisableTiming), "cudaEventCreate");
      return static_cast<int>(v.size()) - 1;
    };
    for (size_t k = 0; k < steps_.size(); ++k) steps_[k].wait = waits[k];
    for (size_t i = 0; i < sides.size(); ++i) {
      const detail::SideStep& x = sides[i];
      steps_[static_cast<size_t>(x.step)].side = static_cast<int>(i);
      new_event(side_events_);
      int& slot = fork_slot_[static_cast<size_t>(x.fork + 1)];
      if (slot < 0) slot = new_event(fork_events_);
      side_fork_.push_back(slot);
    }
  }

  // The engine's work without profiling: the whole-network kernel, or the steps.
  void run_program(cudaStream_t stream) {
    if (whole_)
      whole_->launch(data_[static_cast<size_t>(e_.input_ids[0])], data_[static_cast<size_t>(e_.output_ids[0])], stream);
    else
      run_steps(stream, false);
  }

  // Graph replay; (re)records when there is no graph yet or the device bindings changed.
  void launch_graph(cudaStream_t stream) {
    std::vector<const void*> key;
    for (size_t i = 0; i < e_.input_ids.size(); ++i) key.push_back(data_[static_cast<size_t>(e_.input_ids[i])]);
    for (size_t i = 0; i < e_.output_ids.size(); ++i) key.push_back(data_[static_cast<size_t>(e_.output_ids[i])]);
    if (!exec_ || key != graph_key_) {
      if (direct_runs_ == 0) {  // first run: direct, so that libraries finish their lazy setup
        ++direct_runs_;
        run_program(stream);
        return;
      }
      if (exec_) cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
      cudaGraph_t graph = nullptr;
      check_cuda(cudaStreamBeginCapture(shared_->capture, cudaStreamCaptureModeThreadLocal), "recording a CUDA graph");
      try {
        run_program(shared_->capture);
      } catch (...) {
        cudaStreamEndCapture(shared_->capture, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      check_cuda(cudaStreamEndCapture(shared_->capture, &graph), "recording a CUDA graph");
      const cudaError_t err = cudaGraphInstantiate(&exec_, graph, 0);
      cudaGraphDestroy(graph);
      check_cuda(err, "instantiating the CUDA graph");
      graph_key_ = key;
    }
    check_cuda(cudaGraphLaunch(exec_, stream), "launching the CUDA graph");
  }

  void flush_profile() {
    if (!profile_pending_) return;
    profile_pending_ = false;
    check_cuda(cudaEventSynchronize(events_.back()), "profiling");
    for (size_t k = 0; k < steps_.size(); ++k) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, events_[k], events_[k + 1]), "profiling");
      step_ms_[k] += ms;
    }
    ++profiled_runs_;
  }

  const EngineImpl& e_;
  ContextOptions opt_;
  int device_ = 0;
  std::vector<Step> steps_;
  std::unique_ptr<WholeNet> whole_;  // set when the engine runs as one kernel
  // The context's memory (ContextOptions::memory_limit), a budget inside the creating thread's,
  // made the thread's wherever the context allocates.
  BudgetRef budget_;
  std::shared_ptr<GpuShared> shared_;  // the context's streams, handles, arena and workspaces
  std::shared_ptr<void> weights_, arena_, device_in_, pinned_, errors_;
  detail::DynamicShapes dyn_;         // the tensors' shapes this run (some depend on the data)
  std::shared_ptr<void> extents_;     // pinned: per step, the count a data-dependent one read back
  std::shared_ptr<void> host_stage_;  // pinned: the host steps' values that device steps read
  std::vector<size_t> host_slot_;     // per tensor: its slot in host_stage_, or SIZE_MAX
  // Side steps (on shared_->side): an event after each, and one per fork point (the run's start or
  // a step) where a side step starts.
  std::vector<cudaEvent_t> side_events_, fork_events_;
  std::vector<int> side_fork_;  // per side step: its fork event's slot
  std::vector<int> fork_slot_;  // per fork point (0: the start, k + 1: after step k): its event's slot, or -1
  cudaEvent_t staged_ = nullptr;
  std::vector<void*> data_;
  std::vector<size_t> in_off_, out_off_;  // staging: [inputs | outputs], each 256-byte aligned
  size_t io_bytes_ = 0;                   // the whole of it
  std::vector<const void*> in_host_, in_dev_;
  std::vector<void*> out_host_, out_dev_;
  // Mapped (ContextOptions::mapped_io): pinned_ is mapped, at pinned_dev_ on the device, and the
  // *_alias_ are the device addresses of caller host buffers that are pinned or managed (else null).
  bool mapped_ = false;
  uint8_t* pinned_dev_ = nullptr;
  std::vector<const void*> in_alias_;
  std::vector<void*> out_alias_;
  std::vector<HostCopy> host_copies_;
  // The caller's shapes (the plan's, or smaller between buckets), and which inputs are padded and
  // outputs sliced; pad_dev_: the device buffers for that, laid out as the staging is.
  std::vector<std::vector<int64_t>> in_shape_, out_shape_;
  std::vector<char> in_pad_, out_slice_;
  std::shared_ptr<void> pad_dev_;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<const void*> graph_key_;
  int direct_runs_ = 0;
  std::vector<cudaEvent_t> events_;
  std::vector<double> step_ms_;
  int profiled_runs_ = 0;
  bool profile_pending_ = false;
  bool enqueued_ = false;  // an enqueue has set data_ (device_output)
};

}  // namespace

std::unique_ptr<detail::PlanRunner> make_gpu_runner(const detail::EngineImpl& e, const ContextOptions& options,
                                                    std::shared_ptr<void>* shared, size_t arena_bytes) {
  return std::make_unique<GpuContextImpl>(e, options, shared, arena_bytes);
}

}  // namespace kiln::gpu

#else  // a CPU-only build

namespace kiln::gpu {

std::unique_ptr<detail::PlanRunner> make_gpu_runner(const detail::EngineImpl& e, const ContextOptions&,
                                                    std::shared_ptr<void>*, size_t) {
  throw Error(e.origin + ": the engine targets " + describe_arch(e.target) +
              " but this Kiln was built without CUDA (KILN_CUDA=OFF); rebuild Kiln with the CUDA toolkit or the "
              "engine with --device cpu");
}

}  // namespace kiln::gpu

#endif
