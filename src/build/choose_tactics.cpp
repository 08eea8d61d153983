// Kernel choice for GPU engines: every node whose GPU kernel has several implementations (cuDNN
// algorithms, cuBLASLt heuristics) is run with each on this GPU, on buffers of its real shapes
// (constants hold their real values, other inputs kiln bench's kind of data), and the fastest is
// written into the engine. Timings are keyed by GPU name, op, attributes and tensor types, and kept
// in the timing cache file when one is given, so a rebuild measures nothing it measured before and
// picks the same kernels. The candidates of all nodes are listed first, on several threads with a
// stream and handles each (listing can take seconds of CPU work per node); the timing runs one
// node at a time on one stream, so that candidates are not measured while others run. Where another
// candidate comes close to the fastest alone, the whole engine decides (close_calls.h).
//
// The timing cache (format 2) has two parts: "layers", each key's timing alone (the fastest
// tactic, its time, and its rivals where it is a close call), valid in any engine; and "engines",
// the verdicts of the close calls, per engine (engine_key: every node's key, in order), since a
// verdict holds only for the engine it was timed in: an --int8 engine is float32 around its INT8
// layers, a --best engine float16. A call left undecided (budget spent, a failure) keeps the choice
// made alone and is stored as such, so that a build with the cache times nothing.
#include "build/choose_tactics.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <thread>

#include "core/attrs_codec.h"
#include "build/stopwatch.h"

#if defined(KILN_HAVE_CUDA)
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "build/sample_inputs.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/gpu_kernels.h"
#endif

namespace kiln::build {

#if defined(KILN_HAVE_CUDA)

namespace {

using gpu::check_cuda;

using gpu::DeviceBuffer;

// A test buffer or workspace of the builder (at least 256 bytes).
DeviceBuffer test_buffer(size_t bytes) {
  return DeviceBuffer(std::max<size_t>(bytes, 256), "choosing kernels: allocating a test buffer");
}

// kiln bench's kind of data (build/sample_inputs.h) for the tactics' inputs: a GPU runs kernels
// faster on zeros, float16 tensor-core kernels more so, which could favour one candidate over
// another. One block of sample values per dtype on the device, repeated over each buffer (device
// copies: generating every activation's values on the host would add seconds to a build).
class SampleData {
 public:
  void fill(void* dst, DataType dt, size_t bytes) {
    auto it = blocks_.find(dt);
    if (it == blocks_.end()) {
      const std::vector<uint8_t> v = sample_values(dt, kBlock / std::max<size_t>(1, dtype_size(dt)));
      DeviceBuffer b = test_buffer(v.size());
      check_cuda(cudaMemcpy(b.get(), v.data(), v.size(), cudaMemcpyHostToDevice), "choosing kernels: sample data");
      it = blocks_.emplace(dt, std::move(b)).first;
    }
    for (size_t off = 0; off < bytes; off += kBlock)
      check_cuda(cudaMemcpy(static_cast<uint8_t*>(dst) + off, it->second.get(), std::min(kBlock, bytes - off),
                            cudaMemcpyDeviceToDevice),
                 "choosing kernels: sample data");
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 22;  // 4 MiB, a multiple of every element size
  std::map<DataType, DeviceBuffer> blocks_;
};

// Part of every timing-cache key: raised when a kernel's list of candidates grows (2: the streaming
// 1x1 kernel's tiles 2103-2107; 3: the wgmma tiles 2003-2006 and 2108-2113; 4: the 3x3 window
// kernel's 2200; 5: NhwcConv's wgmma stem kernel 301; 6: the streaming 1x1 kernel on strided
// layers; 7: the implicit GEMM's split tiles 2007-2012; 8: Gemm's GEMV 64, and every tactic timed
// in a CUDA graph; 9: close calls decided in the engine; 10: close calls of long layers within
// kCloseLong), so that a cache written before does not hide the new candidates or calls.
constexpr int kCandidatesVersion = 10;

// The budget of the close calls' engine timings, in seconds of the build, and the part of it the
// calls of long layers may take (at batch 256 most of ResNet-50's layers have a rival within 1%,
// and only one call in ten changed the engine measurably: session 24). 8 s made every GPU build
// of the model sweep take 8 s more, each rebuild with a timing cache too (bench/RESULTS.md).
constexpr double kCloseCallSeconds = 4;
constexpr double kLongCallSeconds = 2;
// Each engine a close call times is written and loaded anew, its weights copied to the GPU: above
// this many bytes of weights (VGG's 530 MB took 1.2 s to write) the calls cannot pay for themselves.
constexpr size_t kCloseCallMaxWeights = size_t{128} << 20;

size_t weight_bytes(const graph::Graph& g) {
  size_t bytes = 0;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) bytes += g.values[v].data->size();
  return bytes;
}

std::string device_name() {
  int dev = 0;
  cudaDeviceProp prop{};
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  // --target-arch: another list of candidates (no sm_90a tiles), timed apart from the device's own.
  // --memory-limit: tactics whose workspace does not fit are not timed, so the verdicts differ too.
  const int limit = gpu::kernel_arch_limit();
  const size_t memory = gpu::budget_limit(gpu::current_budget());
  return fmt::format("{} cudnn {} candidates {}{}{}", prop.name, cudnnGetVersion(), kCandidatesVersion,
                     limit != 0 ? fmt::format(" kernels sm_{}", limit) : "",
                     memory != 0 ? fmt::format(" memory {}", memory) : "");
}

std::string node_key(const graph::Graph& g, const graph::Node& n) {
  std::string k = std::string(op_name(n.kind));
  const std::vector<uint8_t> a = encode_attrs(n.attrs);
  k += fmt::format(" attrs:{:016x}", XXH64(a.data(), a.size(), 0));
  for (const auto* list : {&n.inputs, &n.outputs}) {
    k += " |";
    for (graph::ValueId v : *list) {
      if (v == graph::kNoValue) {
        k += " -";
        continue;
      }
      const graph::Value& val = g.value(v);
      k += fmt::format(" {}{}{}", dtype_name(val.dtype), shape_string(val.shape), val.is_constant() ? "c" : "");
    }
  }
  return k;
}

// The engine a close call's verdict holds for: the device and every node's key and inputs, in order.
std::string engine_key(const std::string& device, const graph::Graph& g) {
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  for (const graph::Node& n : g.nodes) {
    const std::string k = node_key(g, n);
    XXH64_update(h, k.data(), k.size() + 1);  // with the terminating 0, so that keys do not run together
    XXH64_update(h, n.inputs.data(), n.inputs.size() * sizeof(graph::ValueId));
  }
  const uint64_t hash = XXH64_digest(h);
  XXH64_freeState(h);
  return fmt::format("{} | engine {:016x} of {} nodes", device, hash, g.nodes.size());
}

// Device buffers of one node's shapes: constants hold their values, the other inputs kiln bench's
// kind of data (zeros where samples is null: listing candidates reads no data), outputs zeros.
struct NodeBuffers {
  std::vector<DeviceBuffer> bufs;
  std::vector<TensorView> in, out;
  std::vector<const void*> host_in;

  NodeBuffers(const graph::Graph& g, const graph::Node& n, SampleData* samples) {
    auto make = [&](graph::ValueId v, bool is_out) {
      if (v == graph::kNoValue) return absent_tensor();
      const graph::Value& val = g.value(v);
      TensorView view = val.view();
      bufs.push_back(test_buffer(view.bytes()));
      void* const data = bufs.back().get();
      if (!is_out && val.is_constant())
        check_cuda(cudaMemcpy(data, val.data->data(), val.data->size(), cudaMemcpyHostToDevice), "upload");
      else if (!is_out && samples)
        samples->fill(data, view.dtype, view.bytes());
      else
        check_cuda(cudaMemset(data, 0, view.bytes()), "cudaMemset");
      view.data = data;
      return view;
    };
    for (graph::ValueId v : n.inputs) {
      in.push_back(make(v, false));
      host_in.push_back(v != graph::kNoValue && g.value(v).is_constant() ? g.value(v).data->data() : nullptr);
    }
    for (graph::ValueId v : n.outputs) out.push_back(make(v, true));
    // The fills ran on the legacy stream, which the non-blocking streams the kernels run on do not
    // wait for.
    check_cuda(cudaDeviceSynchronize(), "choosing kernels: filling the test buffers");
  }
};

// A stream and library handles of one thread.
struct Handles {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
  DeviceBuffer error = test_buffer(sizeof(int));

  Handles() try {
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    gpu::check_cudnn(cudnnCreate(&cudnn), "cudnnCreate");
    gpu::check_cudnn(cudnnSetStream(cudnn, stream), "cudnnSetStream");
    gpu::check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
  } catch (...) {
    release();
    throw;
  }
  ~Handles() { release(); }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;

  void release() {
    if (lt) cublasLtDestroy(lt);
    if (cudnn) cudnnDestroy(cudnn);
    if (stream) cudaStreamDestroy(stream);
  }

  gpu::GpuEnv env(const NodeBuffers& b) const {
    gpu::GpuEnv e;
    e.stream = stream;
    e.cudnn = cudnn;
    e.cublaslt = lt;
    e.error = error.as<int>();
    e.host_in = b.host_in;
    return e;
  }
};

// Half the cores, at most 8: each node's listing may run up to 6 threads of its own (runtime/cuda/quant/conv/cudnn_graph.cu).
size_t listing_threads(size_t nodes) {
  return std::min<size_t>(nodes, std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u));
}

// One node's candidate tactics.
struct Listed {
  bool done = false;  // false: not listed (an error, or no thread had handles): the timing loop lists it
  std::vector<int32_t> tactics;
  double seconds = 0;
};

// Lists the candidates of g.nodes[k] for every k in `nodes`, on several threads at once, each with
// its own stream and handles: a node's list can take seconds to make (cuDNN builds its fused INT8
// graphs and finalizes their plans), mostly CPU work, so that nodes listed one after another left
// most of the machine's cores idle.
std::map<size_t, Listed> list_candidates(const graph::Graph& g, const std::vector<size_t>& nodes) {
  std::map<size_t, Listed> listed;
  for (size_t k : nodes) listed[k];
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const int arch_limit = gpu::kernel_arch_limit();
  const gpu::BudgetRef budget = gpu::current_budget();
  std::atomic<size_t> next{0};
  auto work = [&] {
    const gpu::KernelArchScope limit(arch_limit);  // the builder's thread's, on every listing thread
    const gpu::MemoryBudgetScope memory(budget);
    try {
      check_cuda(cudaSetDevice(device), "cudaSetDevice");
      Handles h;
      for (size_t i; (i = next++) < nodes.size();) {
        Listed& l = listed.at(nodes[i]);
        const Stopwatch timer;
        // An error (out of memory with several nodes' buffers at once, say) leaves the node to the
        // timing loop, which lists it alone and reports a real error where it did before.
        try {
          const graph::Node& n = g.nodes[nodes[i]];
          const NodeBuffers b(g, n, nullptr);
          gpu::GpuEnv env = h.env(b);
          l.tactics = gpu::gpu_kernel_entry(n.kind)->tactics(n.kind, n.attrs, b.in, b.out, env);
          l.seconds = timer.seconds();
          l.done = true;
        } catch (...) {
          (void)cudaGetLastError();
        }
      }
    } catch (...) {  // no handles on this thread: the others, or the timing loop, list its nodes
    }
  };
  std::vector<std::thread> pool;
  try {
    for (size_t t = 1; t < listing_threads(nodes.size()); ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {  // fewer threads, then
  }
  work();
  for (std::thread& t : pool) t.join();
  return listed;
}

// The launches of one timing, captured into a CUDA graph as the engine runs them (--cuda-graph):
// a graph leaves out the host's launch cost, which at batch 1 is as long as a kernel (ResNet-50's
// layers take 4 to 10 us), so that timing stream launches measured mostly the host and the
// choice among Kiln's tiles came out differently from build to build. Back to back in one graph,
// a dependent-launched kernel overlaps the one before it as it does in the engine. Null where the
// kernel cannot be captured; the capture is always ended, whatever the kernel throws.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

void capture_launches(const gpu::GpuKernelEntry& entry, const graph::Node& n, std::span<const TensorView> in,
                      std::span<const TensorView> out, gpu::GpuEnv& env, cudaStream_t stream, int launches,
                      GraphExec& g) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  bool ok = true;
  try {
    for (int i = 0; i < launches; ++i) entry.fn(n.kind, n.attrs, in, out, env);
  } catch (...) {
    ok = false;
  }
  cudaGraph_t graph = nullptr;
  ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok;
  ok = ok && cudaGraphInstantiate(&g.exec, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!ok) {
    (void)cudaGetLastError();
    if (g.exec) cudaGraphExecDestroy(g.exec);
    g.exec = nullptr;
  }
}

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    check_cuda(cudaEventCreate(&a), "cudaEventCreate");
    check_cuda(cudaEventCreate(&b), "cudaEventCreate");
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

// A kernel longer than this (ms per launch) is timed in one round of ten launches.
constexpr double kOneRoundMs = 0.25;
// A candidate whose launch takes more than kGiveUpFactor times the best candidate's so far is not
// timed further. Its first launch (which also makes its state: cuDNN's plans, say) and, where that
// was slow, a second launch alone decide: cuDNN lists candidates for depthwise float32 layers that
// run over a thousand times slower than the best, and ten of their launches took seconds.
constexpr double kGiveUpFactor = 10;
// A kernel longer than this (ms per launch) is timed by one launch: launch overhead is noise at
// that length, and so no candidate costs more than a fraction of a second of the build.
constexpr double kOneLaunchMs = 20;

// The time of one stream launch, in milliseconds.
double time_one_launch(const gpu::GpuKernelEntry& entry, const graph::Node& n, std::span<const TensorView> in,
                       std::span<const TensorView> out, gpu::GpuEnv& env, cudaStream_t stream, const Events& ev) {
  check_cuda(cudaEventRecord(ev.a, stream), "cudaEventRecord");
  entry.fn(n.kind, n.attrs, in, out, env);
  check_cuda(cudaEventRecord(ev.b, stream), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(ev.b), "timing a kernel");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, ev.a, ev.b), "cudaEventElapsedTime");
  return ms;
}

// Median-free but robust enough: the best of *rounds rounds of kLaunches launches each, in
// milliseconds per launch: one graph launch each where `in_graph` (false if the kernel could not be
// captured: the caller then times every candidate of the node with stream launches, so that they
// compare alike), else stream launches. *rounds 0: decided here, 1 for a kernel over kOneRoundMs,
// else 3; the caller passes it on to the node's other candidates, so that they compare alike (the
// best of three rounds is a little lower than one round).
// best_ms: the fastest candidate of the node so far (1e30: none); a candidate over kGiveUpFactor
// times that, or over kOneLaunchMs, is timed by one launch and *cut_short set.
// *setup_s: the seconds of the first launch, which makes the step's state (cuDNN's plans, say).
double time_tactic(const gpu::GpuKernelEntry& entry, const graph::Node& n, std::span<const TensorView> in,
                   std::span<const TensorView> out, gpu::GpuEnv env, cudaStream_t stream, double best_ms,
                   double* setup_s, bool* in_graph, int* rounds, bool* cut_short) {
  constexpr int kLaunches = 10;
  const Events ev;
  double best = 1e30;
  const Stopwatch timer;
  entry.fn(n.kind, n.attrs, in, out, env);  // warm-up (and per-step state)
  check_cuda(cudaStreamSynchronize(stream), "the first launch of a kernel");
  *setup_s = timer.seconds();
  *cut_short = false;
  const double limit_ms = std::min(kOneLaunchMs, kGiveUpFactor * best_ms);
  if (*setup_s * 1e3 > limit_ms) {  // slow, or slow to set up: a second launch tells which
    const double ms = time_one_launch(entry, n, in, out, env, stream, ev);
    if (ms > limit_ms) {
      *cut_short = true;
      return ms;
    }
  }
  GraphExec g;
  if (*in_graph) {
    capture_launches(entry, n, in, out, env, stream, kLaunches, g);
    if (!g.exec) {
      *in_graph = false;
      return best;
    }
  }
  // The first graph launch uploads the graph; timed too, it says whether the kernel is long. A
  // long one is timed in one round: ten launches of it take milliseconds, and three rounds doubled
  // the time a float32 build at batch 256 spent timing (its convolutions take 0.3-3 ms).
  if (g.exec) {
    check_cuda(cudaEventRecord(ev.a, stream), "cudaEventRecord");
    check_cuda(cudaGraphLaunch(g.exec, stream), "a captured kernel");
    check_cuda(cudaEventRecord(ev.b, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(ev.b), "timing a kernel");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, ev.a, ev.b), "cudaEventElapsedTime");
    if (*rounds == 0) *rounds = ms / kLaunches > kOneRoundMs ? 1 : 3;
  }
  const int n_rounds = g.exec ? *rounds : 3;
  for (int round = 0; round < n_rounds; ++round) {
    check_cuda(cudaEventRecord(ev.a, stream), "cudaEventRecord");
    if (g.exec)
      check_cuda(cudaGraphLaunch(g.exec, stream), "a captured kernel");
    else
      for (int i = 0; i < kLaunches; ++i) entry.fn(n.kind, n.attrs, in, out, env);
    check_cuda(cudaEventRecord(ev.b, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(ev.b), "timing a kernel");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, ev.a, ev.b), "cudaEventElapsedTime");
    best = std::min(best, static_cast<double>(ms) / kLaunches);
  }
  return best;
}

nlohmann::json rivals_json(const CloseCall& c) {
  nlohmann::json r = nlohmann::json::array();
  for (const auto& [tactic, ms] : c.rivals) r.push_back({tactic, ms});
  return r;
}

// The close call of a key timed by an earlier build (its "layers" entry in the timing cache).
CloseCall cached_call(const std::string& key, const nlohmann::json& entry) {
  CloseCall c;
  c.key = key;
  c.chosen = entry.at("tactic").get<int32_t>();
  c.chosen_ms = entry.at("ms").get<double>();
  for (const nlohmann::json& r : entry.at("rivals")) c.rivals.emplace_back(r.at(0).get<int32_t>(), r.at(1).get<double>());
  return c;
}

}  // namespace

std::vector<int32_t> choose_tactics(const graph::Graph& g, const BuildOptions& options, const EngineWriter& write) {
  std::vector<int32_t> tactics(g.nodes.size(), -1);
  if (options.target == "cpu") return tactics;
  const std::string device = device_name();
  nlohmann::json cache = nlohmann::json::object();  // "layers": timings alone, by key
  nlohmann::json engines = nlohmann::json::object();  // close calls' verdicts, by engine key, then key
  if (!options.timing_cache.empty()) {
    std::ifstream f(options.timing_cache);
    if (f && f.peek() != std::ifstream::traits_type::eof()) {  // an empty file: no entries yet
      try {
        nlohmann::json j = nlohmann::json::parse(f);
        const int format = j.value("format", 0);
        if (format == 2) {
          cache = j.at("layers");
          engines = j.at("engines");
          // Well formed, so that reading them below cannot fail.
          if (!cache.is_object() || !engines.is_object()) throw Error("\"layers\" and \"engines\" must be objects");
          for (const auto& [key, entry] : cache.items()) {
            (void)entry.at("tactic").get<int32_t>();
            if (entry.contains("rivals")) (void)cached_call(key, entry);
          }
          for (const auto& [id, calls] : engines.items()) {
            if (!calls.is_object()) throw Error("engine " + id + " is not an object");
            for (const auto& [key, verdict] : calls.items()) (void)verdict.at("tactic").get<int32_t>();
          }
        } else if (format == 1) {
          if (options.log)
            options.log(options.timing_cache + ": a timing cache of an older Kiln (format 1): measured again");
        } else {
          throw Error("unknown format");
        }
      } catch (const std::exception& e) {
        throw Error(options.timing_cache + ": not a Kiln timing cache (" + e.what() +
                    "); delete it or give another --timing-cache file");
      }
    }
  }
  const std::string engine = engine_key(device, g);
  nlohmann::json& verdicts = engines[engine];
  if (!verdicts.is_object()) verdicts = nlohmann::json::object();
  std::vector<size_t> todo;
  std::vector<std::string> keys;  // per node of todo
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(g.nodes[k].kind);
    if (entry && entry->tactics) {
      todo.push_back(k);
      keys.push_back(device + " | " + node_key(g, g.nodes[k]));
    }
  }
  if (todo.empty()) return tactics;

  // The nodes to measure, the first of each key (the others then find it in the cache), have their
  // candidates listed first, in parallel.
  std::vector<size_t> to_list;
  {
    std::set<std::string> seen;
    for (size_t t = 0; t < todo.size(); ++t)
      if (!cache.contains(keys[t]) && seen.insert(keys[t]).second) to_list.push_back(todo[t]);
  }
  const Stopwatch total;
  auto progress = [&](const char* stage, size_t done, size_t all, const std::string& step) {
    if (options.progress) options.progress(BuildProgress{stage, done, all, step});
  };
  if (!to_list.empty()) progress("listing kernel candidates", 0, to_list.size(), "");
  const std::map<size_t, Listed> listed = to_list.empty() ? std::map<size_t, Listed>{} : list_candidates(g, to_list);
  const double listing_s = total.seconds();
  const Handles handles;
  const cudaStream_t stream = handles.stream;
  SampleData samples;
  int measured = 0, cached = 0;
  double setup_total = 0;  // seconds in the candidates' first launches
  std::vector<CloseCall> calls;
  std::set<std::string> called;  // the keys of calls
  std::set<std::string> reused;  // the keys whose verdict in this engine came from the cache
  for (size_t t = 0; t < todo.size(); ++t) {
    const graph::Node& n = g.nodes[todo[t]];
    const gpu::GpuKernelEntry& entry = *gpu::gpu_kernel_entry(n.kind);
    progress("choosing kernels on the GPU", t, todo.size(), n.name + " (" + std::string(op_name(n.kind)) + ")");
    const std::string& key = keys[t];
    if (cache.contains(key)) {
      const nlohmann::json& layer = cache[key];
      tactics[todo[t]] = layer.at("tactic").get<int32_t>();
      ++cached;
      if (!layer.contains("rivals") || called.contains(key)) continue;
      if (verdicts.contains(key)) {
        tactics[todo[t]] = verdicts[key].at("tactic").get<int32_t>();
        reused.insert(key);
      } else if (write) {
        calls.push_back(cached_call(key, layer));
        called.insert(key);
      }
      continue;
    }
    const NodeBuffers b(g, n, &samples);
    gpu::GpuEnv env = handles.env(b);
    std::vector<int32_t> candidates;
    double list_s = 0;
    if (const auto l = listed.find(todo[t]); l != listed.end() && l->second.done) {
      candidates = l->second.tactics;
      list_s = l->second.seconds;
    } else {
      const Stopwatch listing;
      candidates = entry.tactics(n.kind, n.attrs, b.in, b.out, env);
      list_s = listing.seconds();
    }
    const Stopwatch timing;
    int32_t best = -1;
    double best_ms = 1e30, setup_s = 0;
    std::string report;
    std::vector<std::pair<int32_t, double>> timed;  // of the pass that counts
    // Every candidate in a graph; if one cannot be captured, all of them again as stream launches.
    bool in_graph = true;
    for (bool graphs : {true, false}) {
      if (!graphs && in_graph) break;
      best = -1;
      best_ms = 1e30;
      report = graphs ? "" : " (stream launches)";
      timed.clear();
      int rounds = 0;  // decided by the first candidate timed (time_tactic)
      for (int32_t tactic : candidates) {
        std::unique_ptr<gpu::StepState> state;
        env.tactic = tactic;
        env.state = &state;
        try {
          const size_t ws = entry.workspace ? entry.workspace(n.kind, n.attrs, b.in, b.out, env) : 0;
          const DeviceBuffer workspace = test_buffer(ws);
          env.workspace = workspace.get();
          env.workspace_bytes = ws;
          double first_s = 0;
          bool cut_short = false;
          const double ms =
              time_tactic(entry, n, b.in, b.out, env, stream, best_ms, &first_s, &in_graph, &rounds, &cut_short);
          setup_s += first_s;
          if (graphs && !in_graph) break;
          report += fmt::format(" {}:{:.4f}{}", tactic, ms, cut_short ? " (one launch)" : "");
          timed.emplace_back(tactic, ms);
          if (ms < best_ms) best_ms = ms, best = tactic;
        } catch (const gpu::MemoryLimitError&) {  // a workspace over --memory-limit: not timed
          (void)cudaGetLastError();
          report += fmt::format(" {}:over-memory-limit", tactic);
        } catch (const Error& e) {
          (void)cudaGetLastError();
          report += fmt::format(" {}:failed", tactic);
        }
      }
      env.state = nullptr;  // it pointed at the last candidate's state
    }
    tactics[todo[t]] = best;
    cache[key] = {{"tactic", best}, {"ms", best_ms}};
    if (CloseCall c = close_call(key, best, best_ms, std::move(timed)); !c.rivals.empty()) {
      cache[key]["rivals"] = rivals_json(c);
      verdicts.erase(key);  // timed again: so is the call
      called.insert(key);
      if (write) calls.push_back(std::move(c));
    }
    ++measured;
    setup_total += setup_s;
    if (options.log)
      options.log(fmt::format("tactic for '{}' ({}): {} of{} ({:.2f} s listing, {:.2f} s timing, of which {:.2f} s "
                              "first launches)",
                              n.name, op_name(n.kind), best, report, list_s, timing.seconds(), setup_s));
  }
  progress("choosing kernels on the GPU", todo.size(), todo.size(), "");
  const Stopwatch in_engine;
  const size_t weights = weight_bytes(g);
  const bool heavy = weights > kCloseCallMaxWeights;
  if (heavy && options.log && !calls.empty())
    options.log(fmt::format("close calls: {} left to the timings alone ({} MiB of weights: each engine timed "
                            "would copy them)",
                            calls.size(), weights >> 20));
  if (write && !calls.empty() && !heavy) {
    for (CloseCall& c : calls)
      for (size_t t = 0; t < todo.size(); ++t)
        if (keys[t] == c.key) c.nodes.push_back(todo[t]);
    progress("timing close calls in the engine", 0, calls.size(), "");
    decide_in_engine(calls, tactics, write, kCloseCallSeconds, kLongCallSeconds);
    progress("timing close calls in the engine", calls.size(), calls.size(), "");
    for (const CloseCall& c : calls) {
      verdicts[c.key] = {{"tactic", c.chosen}, {"verdict", c.verdict}};
      if (options.log)
        options.log(fmt::format("close call for '{}' and {} more: {}{}", g.nodes[c.nodes.front()].name,
                                c.nodes.size() - 1, c.verdict, c.decided ? "" : " (undecided: the choice alone kept)"));
    }
  }
  if (verdicts.empty()) engines.erase(engine);
  if (options.log)
    options.log(fmt::format("choose-tactics: {} nodes timed, {} from the timing cache, {:.1f} s ({:.1f} s listing "
                            "the candidates on {} threads, {:.1f} s in their first launches, "
                            "{:.1f} s timing {} close calls in the engine, {} decided before)",
                            measured, cached, total.seconds(), listing_s, listing_threads(to_list.size()),
                            setup_total, write ? in_engine.seconds() : 0.0, write ? calls.size() : 0, reused.size()));
  if (!options.timing_cache.empty()) {
    std::ofstream f(options.timing_cache);
    if (!(f << nlohmann::json{{"format", 2}, {"layers", cache}, {"engines", engines}}.dump(1) << "\n"))
      throw Error(options.timing_cache + ": cannot write the timing cache");
  }
  return tactics;
}

#else

std::vector<int32_t> choose_tactics(const graph::Graph& g, const BuildOptions& options, const EngineWriter&) {
  if (options.target != "cpu") throw Error("GPU engines need a Kiln built with CUDA");
  return std::vector<int32_t>(g.nodes.size(), -1);
}

#endif

}  // namespace kiln::build
