// Kiln runtime API: load an engine file, check it, run it.
//
//   auto engine = kiln::Engine::load("model.kiln");          // throws kiln::Error if damaged/foreign
//   auto ctx = engine->create_context();                      // one per thread
//   ctx->set_input("input", image.data(), image.size() * sizeof(float));
//   ctx->run();
//   std::span<const std::byte> logits = ctx->output("logits");
//
// An Engine is immutable after load and may be shared by any number of threads. A Context holds the
// activation memory of one inference at a time; use one Context per thread.
//
// GPU engines (built with `kiln optimize --device gpu`, target "sm_XX") run on the current CUDA
// device of the thread that creates the context. The engine's weights are uploaded once, on the
// first context of each device, and shared by all its contexts. A GPU context allocates all its
// device memory when it is created (activation arena, workspace, input/output staging), so that
//   ctx->set_input_device("input", d_image, bytes);            // zero copy: the caller's device memory
//   ctx->set_output_device("logits", d_logits, bytes);
//   ctx->enqueue(stream);                                      // asynchronous; allocates nothing
// only enqueues work on the caller's stream. Inputs and outputs set with set_input / set_output
// (host memory) go through pinned staging buffers of the context.
#pragma once

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/types.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; this header does not need CUDA's

namespace kiln {

namespace detail {
struct EngineImpl;
}

class Context;

struct ContextOptions {
  int cpu_threads = 0;      // CPU engines: worker threads (0: all cores), within set_cpu_thread_budget
  bool cuda_graph = false;  // GPU engines: after a first direct run, record the steps once as a CUDA graph
                            // and replay it (re-recorded when device bindings change)
  bool profile = false;     // time every step (GPU: CUDA events; no graph); see Context::step_times
  // GPU engines: run a small network (batch <= 8, a chain of supported layers whose activations fit in
  // shared memory) as one kernel instead of its steps; see EngineSummary::whole_network. Not while
  // profiling. Off by default: on an H200 the kernel is slower than the steps for LeNet-5 at batch 1
  // (0.048 against 0.034 ms; bench/RESULTS.md).
  bool whole_network = false;
  // GPU engines: run steps that need nothing from the steps just before them (ResNet's downsample
  // convolutions) on a second stream beside those, where the builder's memory plan keeps their
  // bytes apart. Not while profiling.
  bool side_stream = true;
  // GPU engines: pinned host buffers for the inputs and outputs given in host memory (set_input,
  // set_output, output()). Off: every input must be bound to device memory (set_input_device), an
  // output is read on the device (set_output_device, or output_device() for the context's own
  // memory), and the context allocates no pinned host memory and no device copy of the inputs: for
  // engines whose inputs and outputs never leave the GPU, where that memory would be large (the builder's calibration
  // engine, which outputs every calibrated tensor) or scarce (a Jetson's memory is the GPU's).
  bool host_staging = true;
  // GPU engines: the most device memory the context may allocate (its arena, workspaces, weights if
  // it is the first to upload them, device copies of the inputs; all plans of a range engine
  // together), in bytes; 0: no limit. Pinned host staging is counted only where it is mapped (mapped_io). A context
  // that would need more is not made: the error names what did not fit. For boards whose GPU shares the CPU's memory.
  size_t memory_limit = 0;
  // GPU engines with host_staging: whether kernels read the inputs and write the outputs given in
  // host memory in mapped pinned staging, instead of through copies to and from device memory.
  // kAuto: on a GPU that shares the CPU's memory (a Jetson; cudaDevAttrIntegrated), where those
  // copies would only move bytes within the same memory. Mapped, the context's staging is charged
  // to memory_limit and it allocates no device copy of the inputs; the CPU copies host inputs into
  // the staging when the run is enqueued (after the previous run has finished with it) and outputs
  // out of it, so set_input's and set_output's meaning is unchanged. kOn also uses a caller buffer
  // that is itself pinned or managed (cudaHostAlloc, cudaHostRegister, cudaMallocManaged) and
  // 256-byte aligned in place, with no copy at all: it is then read and written when the kernels
  // run, so it must stay unchanged until the run ends (run() returns, or enqueue's stream reaches
  // the end). Context::mapped_io says whether a context maps.
  enum class MappedIo { kAuto, kOn, kOff };
  MappedIo mapped_io = MappedIo::kAuto;
};

// One step's time in the runs since profiling started (Context::step_times).
struct StepTime {
  std::string op, name;
  double total_ms = 0;
  int runs = 0;
};

// What `kiln inspect` shows about one step of an engine.
struct StepInfo {
  std::string op;                   // ONNX op type, e.g. "Conv"
  std::string name;                 // node name(s) it came from
  std::string attrs;                // attributes that differ from their defaults
  std::vector<std::string> inputs;  // tensor names ("" for an omitted optional input)
  std::vector<std::string> outputs;
  int tactic = -1;  // GPU engines: the implementation chosen by timing (-1: default)
  // GPU engines: the step runs on a context's side stream, after main-stream step side_after (-1:
  // at the start), unless ContextOptions::side_stream is off. -2: on the main stream.
  int side_after = -2;
};

// A tensor that shares another's memory (`kiln inspect`: "view of BASE at +OFFSET bytes"): the
// builder gave it no memory and no step of its own, e.g. the output of a Reshape, a slice of a
// Concat's output that its producer writes in place, or an output of a Split.
struct ViewInfo {
  std::string name, base;
  size_t offset = 0;  // bytes from the start of base
  size_t bytes = 0;
};

// A dimension of the inputs that takes any size in [lo, hi] (a range engine, built with
// `kiln optimize --batch 1..64` or `--shape NAME=1..8x3x224x224`). The builder made one plan per
// bucket; a shape between buckets runs on the next bucket up, padded with zero rows when pad_rows.
struct ShapeRangeInfo {
  std::string name;  // "batch", or the model's name for the dimension ("sequence")
  int64_t lo = 1, hi = 1;
  std::vector<int64_t> buckets;  // ascending; the last is hi
  // The inputs that carry the dimension, and where.
  std::vector<std::pair<std::string, int>> inputs;
  // Each output's axis of rows (-1: none), when pad_rows.
  std::vector<std::pair<std::string, int>> outputs;
  // The rows along it are independent (no step mixes them): a size between buckets runs on the next
  // bucket, its inputs padded with zero rows and its outputs sliced. Otherwise only the buckets'
  // sizes run, and why_exact says which step mixes rows.
  bool pad_rows = false;
  std::string why_exact;
};

// One plan of a range engine: the size of every range it was built for.
struct BucketInfo {
  std::vector<int64_t> sizes;
  size_t steps = 0, arena_bytes = 0;
};

struct EngineSummary {
  uint32_t format_version = 0;
  std::string producer;  // the Kiln that built it, e.g. "kiln 0.1.0"
  std::string target;    // "cpu" or a GPU architecture such as "sm_90"
  // GPU engines: the libraries built with (CUDART_VERSION 13000, cuDNN 91900, cuBLASLt 130100); a
  // machine with another CUDA major, cuDNN major.minor or cuBLASLt major refuses the engine.
  int cuda_version = 0, cudnn_version = 0, cublaslt_version = 0;
  // GPU engines built with `kiln optimize --target-arch`: the compute capability whose kernels alone
  // they use (87 for sm_87); 0: the target's own.
  int kernel_arch = 0;
  std::string model_name;
  size_t weight_bytes = 0;      // constant data
  size_t arena_bytes = 0;       // activation memory of one Context (planned: tensors share memory)
  size_t activation_bytes = 0;  // sum of all activation sizes, without sharing (views counted in their base)
  size_t peak_live_bytes = 0;   // most activation bytes live at once: the lower bound of any arena
  size_t file_bytes = 0;
  std::vector<StepInfo> steps;
  std::vector<ViewInfo> views;
  // Range engines: the ranges and every bucket's plan (steps and views above are the largest's).
  std::vector<ShapeRangeInfo> ranges;
  std::vector<BucketInfo> buckets;
  // Outputs whose size depends on the data (after NonZero or NonMaxSuppression): their shape in
  // outputs() is an upper bound, Context::output_shape gives a run's.
  std::vector<std::string> bounded_outputs;
  // GPU engines: whether the whole-network kernel can run the engine on a GPU of its target, e.g.
  // "7 layers in one kernel, 9.2 KiB of shared memory per sample", or "not used: <why>". CPU: empty.
  std::string whole_network;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Reads and verifies an engine file: magic, format version, checksum, table of contents, and that
  // every step's recorded shapes are what its op computes. Throws kiln::Error saying what is wrong.
  static std::shared_ptr<const Engine> load(const std::filesystem::path& path);
  // Same, from bytes in memory (copied). `origin` names the engine in error messages.
  static std::shared_ptr<const Engine> from_bytes(std::span<const uint8_t> bytes, std::string_view origin = "engine");

  // Inputs and outputs. A range engine gives their shapes at the top of every range (where a new
  // Context starts); ranges() says which dimensions may be smaller.
  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  // Range engines: the dimensions that take a range of sizes (Context::set_input_shape). Empty for
  // an engine of one fixed shape.
  const std::vector<ShapeRangeInfo>& ranges() const;
  EngineSummary summary() const;

  // A context to run the engine; `threads` CPU threads (0: all cores). For a GPU engine this
  // checks that the current device is the architecture it was built for, uploads the weights if
  // this is the device's first context, and allocates the context's device memory; errors (no GPU,
  // another architecture, out of memory, an op without a GPU kernel) are thrown as kiln::Error.
  std::unique_ptr<Context> create_context(int threads = 0) const;
  std::unique_ptr<Context> create_context(const ContextOptions& options) const;
  // True for engines built for a GPU (target "sm_XX").
  bool is_gpu() const;

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

 private:
  explicit Engine(std::shared_ptr<detail::EngineImpl> impl);
  std::shared_ptr<detail::EngineImpl> impl_;
  friend class Context;
};

class Context {
 public:
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Range engines: the shape of an input for the next runs, any size in range on its ranged
  // dimensions (Engine::ranges), the engine's elsewhere. Inputs sharing a dimension follow: giving
  // input_ids 1x100 makes attention_mask 1x100 too. The outputs' shapes follow (output_shape). The
  // context runs the smallest bucket that holds the shape. Throws kiln::Error naming the input,
  // the dimension and its range for a shape out of range, and on a fixed engine for any shape but
  // its own. Not while an enqueued run is in flight on another stream.
  void set_input_shape(std::string_view name, std::span<const int64_t> dims);
  void set_input_shape(std::string_view name, std::initializer_list<int64_t> dims) {
    set_input_shape(name, std::span<const int64_t>(dims.begin(), dims.size()));
  }
  // The current shape of an input or output (the engine's, until set_input_shape changes it). An
  // output whose size depends on the data (after NonZero or NonMaxSuppression) has the engine's
  // shape as its upper bound; output_shape gives its actual shape after run() (GPU enqueue: once
  // the stream finished), and output() that many bytes.
  std::vector<int64_t> input_shape(std::string_view name) const;
  std::vector<int64_t> output_shape(std::string_view name) const;
  // The sizes of the bucket the current shapes run on (one per Engine::ranges()); empty for a fixed engine.
  std::vector<int64_t> bucket() const;

  // Binds an input to caller host memory. CPU: read in place (range engines: copied when padded);
  // GPU: copied into the context's pinned staging buffer when run()/enqueue() is called, so it may
  // change right after. `bytes` must equal the input's size at its current shape; a wrong name or
  // size throws kiln::Error naming the input and what was expected.
  void set_input(std::string_view name, const void* data, size_t bytes);
  // Optionally binds an output to caller host memory; otherwise output() returns the context's own.
  // An output of data-dependent shape takes its bound's bytes and gets its run's data packed first.
  // GPU + enqueue: the buffer is filled when the stream reaches the end of the work.
  void set_output(std::string_view name, void* data, size_t bytes);
  // GPU engines only: bind caller device memory (on the context's device), used in place, zero copy.
  void set_input_device(std::string_view name, const void* device_data, size_t bytes);
  void set_output_device(std::string_view name, void* device_data, size_t bytes);
  // Runs the engine synchronously. Throws kiln::Error if an input is unbound or a kernel fails
  // (e.g. a Gather index out of range), naming the step.
  void run();
  // GPU: enqueues the whole inference on `stream` (a cudaStream_t; null: the legacy default stream)
  // and returns: no allocation, no host synchronization (except waiting for the previous run's
  // input staging copy if it has not happened yet). CPU engines run synchronously here. An engine
  // with data-dependent shapes waits for the stream after each NonZero or NonMaxSuppression (it
  // reads how many results there are) and runs its steps without a CUDA graph.
  // Data errors that only the device sees (an index out of range) are reported by check().
  void enqueue(CUstream_st* stream);
  // After the enqueued work finished: throws kiln::Error naming the first step that reported a
  // data error since the last check, and clears it.
  void check();
  // An output's bytes after run() (or after enqueue's stream finished): the bound host buffer if
  // set_output was used, else the context's own (GPU: its pinned staging buffer). Throws for
  // outputs bound to device memory, and on a GPU context without host staging for every output
  // (read those with output_device).
  std::span<const std::byte> output(std::string_view name) const;
  // GPU engines only: where an output lies in device memory after run() (or after enqueue's stream
  // finished), for reading it on the GPU without a copy: the buffer bound with set_output_device,
  // or the context's own memory, which the next run overwrites. Throws for CPU engines and before
  // the first run. Like every call on a context, not while another thread enqueues on it.
  const void* output_device(std::string_view name) const;
  // Profiling (ContextOptions::profile): each step's accumulated time since the context was created.
  std::vector<StepTime> step_times() const;
  // GPU engines: true when this context runs the engine as one whole-network kernel
  // (ContextOptions::whole_network and an engine it can run).
  bool whole_network() const;
  // GPU engines: how many steps this context runs on its side stream (ContextOptions::side_stream).
  size_t side_steps() const;
  // GPU engines: true when kernels use the host inputs and outputs in place (ContextOptions::mapped_io).
  bool mapped_io() const;

  const Engine& engine() const { return *engine_; }

 private:
  friend class Engine;
  struct State;
  Context(std::shared_ptr<const Engine> engine, const ContextOptions& options);
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<State> state_;
};

// The most CPU threads that this process's CPU contexts run at once, all contexts together
// (threads <= 0: the cores the process may run on; the default is KILN_CPU_THREAD_BUDGET from the
// environment where it is set, else the cores). A run gets its context's cpu_threads, at most the
// budget, when it runs alone; runs at the same time share the budget evenly, each keeping its share
// for that run, so that several contexts of all the cores each do not take turns on the same cores
// (docs/api.md).
void set_cpu_thread_budget(int threads);
int cpu_thread_budget();

// The format version this runtime reads and writes; the Kiln version string.
uint32_t engine_format_version();
std::string_view kiln_version();

}  // namespace kiln
