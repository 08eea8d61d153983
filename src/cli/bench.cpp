// kiln bench: latency and throughput of an engine, reported like trtexec.
//
// GPU engines: each stream has its own context (the engine and its weights are shared) and its own
// host thread. Every inference is bracketed by CUDA events: input copy (pinned host -> device),
// compute (Context::enqueue on device buffers), output copy; latency is the sum as the GPU saw it,
// throughput counts finished inferences over the wall-clock window. Up to kInFlight inferences are
// queued per stream, so the host never waits for one inference before enqueueing the next.
// CPU engines: run() in a loop (one context per stream, each on its own thread).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "build/sample_inputs.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "graph/onnx_import.h"

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  double h2d = 0, compute = 0, d2h = 0, latency = 0, enqueue = 0;  // milliseconds
};

struct Stats {
  double min = 0, mean = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5))]; };
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.median = pct(50);
  s.p90 = pct(90);
  s.p95 = pct(95);
  s.p99 = pct(99);
  return s;
}

nlohmann::json to_json(const Stats& s) {
  return {{"min", s.min}, {"mean", s.mean}, {"median", s.median}, {"p90", s.p90},
          {"p95", s.p95}, {"p99", s.p99},   {"max", s.max}};
}

struct Plan {
  int warmup = 0, iterations = 0;
  double duration_s = 0;
  bool transfers = true;
};

struct StreamResult {
  std::vector<Sample> samples;
  double window_s = 0;          // wall time of the measured loop (after warm-up)
  bool mapped_io = false;       // GPU: host inputs and outputs used in place (no copies timed)
  bool whole_network = false;   // GPU: the context ran the whole-network kernel
  size_t side_steps = 0;        // GPU: steps on the context's side stream
  std::vector<int64_t> bucket;  // range engines: the plan the shapes ran on
};

using Shapes = std::map<std::string, std::vector<int64_t>>;

// A context's inputs: at the shapes asked for (a range engine's), sample data (build/sample_inputs.h).
std::vector<std::vector<uint8_t>> shaped_inputs(const Engine& e, Context& ctx, const Shapes& shapes) {
  for (const auto& [name, dims] : shapes) ctx.set_input_shape(name, dims);
  return build::sample_inputs(current_inputs(e, ctx));
}

// One stream's loop: warm-up, then at least `iterations` inferences and `duration_s` seconds.
StreamResult cpu_loop(const Engine& e, const Plan& p, int threads, const Shapes& shapes) {
  std::unique_ptr<Context> ctx = e.create_context(threads);
  const auto ins = shaped_inputs(e, *ctx, shapes);
  for (size_t i = 0; i < ins.size(); ++i) ctx->set_input(e.inputs()[i].name, ins[i].data(), ins[i].size());
  for (int i = 0; i < p.warmup; ++i) ctx->run();
  std::vector<Sample> out;
  const auto start = Clock::now();
  while (static_cast<int>(out.size()) < p.iterations ||
         std::chrono::duration<double>(Clock::now() - start).count() < p.duration_s) {
    const auto t0 = Clock::now();
    ctx->run();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    out.push_back({0, ms, 0, ms, ms});
  }
  return {std::move(out), std::chrono::duration<double>(Clock::now() - start).count(), false, false, 0, ctx->bucket()};
}

#if defined(KILN_HAVE_CUDA)
void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string("kiln bench: ") + what + ": " + cudaGetErrorString(err));
}

constexpr int kInFlight = 8;

StreamResult gpu_loop(const Engine& e, const Plan& p, const ContextOptions& co, const Shapes& shapes) {
  std::unique_ptr<Context> ctx = e.create_context(co);
  const auto ins = shaped_inputs(e, *ctx, shapes);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<void*> d_in, d_out, h_in, h_out;
  auto alloc = [&](size_t bytes, std::vector<void*>& dev, std::vector<void*>& host) {
    void* d = nullptr;
    void* h = nullptr;
    cuda_ok(cudaMalloc(&d, std::max<size_t>(bytes, 1)), "cudaMalloc");
    cuda_ok(cudaMallocHost(&h, std::max<size_t>(bytes, 1)), "cudaMallocHost");
    dev.push_back(d);
    host.push_back(h);
  };
  for (size_t i = 0; i < ins.size(); ++i) {
    alloc(ins[i].size(), d_in, h_in);
    std::memcpy(h_in[i], ins[i].data(), ins[i].size());
    cuda_ok(cudaMemcpy(d_in[i], h_in[i], ins[i].size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    ctx->set_input_device(e.inputs()[i].name, d_in[i], ins[i].size());
  }
  std::vector<size_t> out_bytes;
  for (const TensorInfo& t : e.outputs()) {
    out_bytes.push_back(TensorInfo{t.name, t.dtype, ctx->output_shape(t.name)}.bytes());
    alloc(out_bytes.back(), d_out, h_out);
    ctx->set_output_device(t.name, d_out.back(), out_bytes.back());
  }
  // Mapped: the kernels use the pinned host buffers in place, so nothing is copied.
  const bool mapped = ctx->mapped_io() && p.transfers;
  if (mapped) {
    for (size_t i = 0; i < ins.size(); ++i) ctx->set_input(e.inputs()[i].name, h_in[i], ins[i].size());
    for (size_t i = 0; i < out_bytes.size(); ++i) ctx->set_output(e.outputs()[i].name, h_out[i], out_bytes[i]);
  }
  struct Slot {
    cudaEvent_t ev[4]{};
    double enqueue_ms = 0;
    bool busy = false;
  };
  std::vector<Slot> slots(kInFlight);
  for (Slot& s : slots)
    for (cudaEvent_t& ev : s.ev) cuda_ok(cudaEventCreate(&ev), "cudaEventCreate");
  std::vector<Sample> out;
  auto collect = [&](Slot& s, bool keep) {
    if (!s.busy) return;
    cuda_ok(cudaEventSynchronize(s.ev[3]), "running the engine");
    float a = 0, b = 0, c = 0;
    cuda_ok(cudaEventElapsedTime(&a, s.ev[0], s.ev[1]), "cudaEventElapsedTime");
    cuda_ok(cudaEventElapsedTime(&b, s.ev[1], s.ev[2]), "cudaEventElapsedTime");
    cuda_ok(cudaEventElapsedTime(&c, s.ev[2], s.ev[3]), "cudaEventElapsedTime");
    if (keep) out.push_back({a, b, c, double(a) + b + c, s.enqueue_ms});
    s.busy = false;
  };
  auto one = [&](Slot& s) {
    cuda_ok(cudaEventRecord(s.ev[0], stream), "cudaEventRecord");
    if (p.transfers && !mapped)
      for (size_t i = 0; i < ins.size(); ++i)
        cuda_ok(cudaMemcpyAsync(d_in[i], h_in[i], ins[i].size(), cudaMemcpyHostToDevice, stream), "input copy");
    cuda_ok(cudaEventRecord(s.ev[1], stream), "cudaEventRecord");
    const auto t0 = Clock::now();
    ctx->enqueue(stream);
    s.enqueue_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    cuda_ok(cudaEventRecord(s.ev[2], stream), "cudaEventRecord");
    if (p.transfers && !mapped)
      for (size_t i = 0; i < e.outputs().size(); ++i)
        cuda_ok(cudaMemcpyAsync(h_out[i], d_out[i], out_bytes[i], cudaMemcpyDeviceToHost, stream), "output copy");
    cuda_ok(cudaEventRecord(s.ev[3], stream), "cudaEventRecord");
    s.busy = true;
  };
  // Warm-up (the first runs also record the CUDA graph with --cuda-graph).
  for (int i = 0; i < std::max(p.warmup, 2); ++i) {
    Slot& s = slots[static_cast<size_t>(i % kInFlight)];
    collect(s, false);
    one(s);
  }
  for (Slot& s : slots) collect(s, false);
  ctx->check();
  const auto start = Clock::now();
  size_t n = 0;
  while (static_cast<int>(n) < p.iterations ||
         std::chrono::duration<double>(Clock::now() - start).count() < p.duration_s) {
    Slot& s = slots[n % kInFlight];
    collect(s, true);
    one(s);
    ++n;
  }
  for (size_t i = 0; i < slots.size(); ++i) collect(slots[(n + i) % kInFlight], true);
  const double window_s = std::chrono::duration<double>(Clock::now() - start).count();
  ctx->check();
  for (Slot& s : slots)
    for (cudaEvent_t ev : s.ev) cudaEventDestroy(ev);
  for (void* d : d_in) cudaFree(d);
  for (void* d : d_out) cudaFree(d);
  for (void* h : h_in) cudaFreeHost(h);
  for (void* h : h_out) cudaFreeHost(h);
  cudaStreamDestroy(stream);
  return {std::move(out), window_s, mapped, ctx->whole_network(), ctx->side_steps(), ctx->bucket()};
}
#endif

std::string bar(double share, int width) {
  const int n = static_cast<int>(share * width + 0.5);
  std::string s;
  for (int i = 0; i < n; ++i) s += "\u2588";
  return s;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  std::filesystem::path model = o.model;
  std::shared_ptr<const Engine> engine;
  if (is_onnx(model)) {
    const build::BuildOptions bo = build_options(o.build);
    fmt::print("building {} for {} (batch {}{})\n", model.string(), bo.target,
               o.build.batch.empty() ? "1" : o.build.batch, o.build.fp16 ? ", fp16" : "");
    graph::Graph g = graph::import_onnx(model);
    build::BuildReport report;
    std::vector<uint8_t> bytes = build::build_engine(g, bo, &report);
    if (!report.precision_choice.empty()) fmt::print(stderr, "{}\n", report.precision_choice);
    engine = Engine::from_bytes(bytes, model.string());
  } else {
    engine = load_engine(model, o.build);
  }
  const Shapes shapes = is_onnx(model) ? Shapes{} : engine_input_shapes(*engine, o.build);
  if (o.streams < 1) throw Error("--streams must be at least 1");
  if (o.iterations < 1) throw Error("--iterations must be at least 1");
  const bool gpu = engine->is_gpu();
  int64_t batch = 1;
  if (!engine->inputs().empty() && !engine->inputs()[0].shape.empty()) batch = engine->inputs()[0].shape[0];
  if (!engine->inputs().empty() && shapes.count(engine->inputs()[0].name))
    batch = shapes.at(engine->inputs()[0].name).at(0);
  Plan plan{o.warmup, o.iterations, o.duration, !o.no_transfers};
  ContextOptions co;
  co.cuda_graph = o.cuda_graph;
  co.cpu_threads = o.threads;
  co.whole_network = o.whole_net;
  co.side_stream = !o.no_side_stream;
  co.mapped_io = o.mapped_io == "on"    ? ContextOptions::MappedIo::kOn
                 : o.mapped_io == "off" ? ContextOptions::MappedIo::kOff
                                        : ContextOptions::MappedIo::kAuto;

  // CPU contexts running at once share the cores (as kiln serve's instances do): each stream's
  // context gets cores / streams threads unless --threads says otherwise, so that the streams'
  // OpenMP teams together hold no more threads than there are cores.
  const int cores = cpu_thread_budget();  // the process's CPU threads (default: the cores it may use)
  const int cpu_threads = o.threads > 0 ? o.threads : std::max(1, cores / o.streams);
  std::vector<StreamResult> per_stream(static_cast<size_t>(o.streams));
  std::vector<std::string> errors(static_cast<size_t>(o.streams));
  const auto start = Clock::now();
  auto stream = [&](int s) {
    try {
#if defined(KILN_HAVE_CUDA)
      if (gpu) {
        per_stream[static_cast<size_t>(s)] = gpu_loop(*engine, plan, co, shapes);
        return;
      }
#endif
      per_stream[static_cast<size_t>(s)] = cpu_loop(*engine, plan, cpu_threads, shapes);
    } catch (const Error& e) {
      errors[static_cast<size_t>(s)] = e.what();
    }
  };
  if (o.streams == 1) {
    // On this thread: the one that built the engine (`kiln bench model.onnx`) and whose OpenMP team
    // the CPU kernels already use. A second thread's team would leave more OpenMP threads than
    // cores, and libgomp then stops spinning between parallel regions (LeNet-5 INT8 at batch 1:
    // 0.04 -> 0.08-0.10 ms).
    stream(0);
  } else {
    std::vector<std::jthread> workers;
    for (int s = 0; s < o.streams; ++s) workers.emplace_back(stream, s);
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);

  std::vector<double> lat, h2d, comp, d2h, enq;
  double window_s = 0;
  for (const StreamResult& r : per_stream) window_s = std::max(window_s, r.window_s);
  for (const StreamResult& r : per_stream)
    for (const Sample& s : r.samples) {
      lat.push_back(s.latency);
      h2d.push_back(s.h2d);
      comp.push_back(s.compute);
      d2h.push_back(s.d2h);
      enq.push_back(s.enqueue);
    }
  // Throughput: all inferences over the longest stream's measured window (warm-up excluded).
  const double n = static_cast<double>(lat.size());
  const Stats L = stats_of(lat), H = stats_of(h2d), C = stats_of(comp), D = stats_of(d2h), E = stats_of(enq);
  const double qps = n / std::max(window_s, 1e-9);

  const auto summary = engine->summary();
  fmt::print("engine        {} (target {}, batch {})\n", model.string(), summary.target, batch);
  if (!per_stream.empty() && !per_stream[0].bucket.empty()) {
    std::vector<std::string> ranges;
    for (size_t k = 0; k < engine->ranges().size(); ++k)
      ranges.push_back(fmt::format("{} {}", engine->ranges()[k].name, per_stream[0].bucket[k]));
    fmt::print("bucket        {} (range engine)\n", fmt::join(ranges, ", "));
  }
  const bool mapped = !per_stream.empty() && per_stream[0].mapped_io;
  fmt::print("run           {} stream(s){}, {} inferences in {:.2f} s{}{}\n", o.streams,
             gpu ? "" : fmt::format(" of {} CPU thread(s)", cpu_threads), lat.size(), window_s,
             o.cuda_graph ? ", CUDA graph" : "",
             gpu && o.no_transfers ? ", no transfers"
             : mapped              ? ", inputs and outputs in mapped host memory (no copies)"
                                   : "");
  const bool whole = !per_stream.empty() && per_stream[0].whole_network;
  const size_t side = per_stream.empty() ? 0 : per_stream[0].side_steps;
  if (gpu) {
    std::string how = "whole network: " + summary.whole_network;
    if (!whole && !o.whole_net) how = "step by step";
    if (!whole && side > 0) how += fmt::format(", {} on a side stream", side);
    if (!whole && o.whole_net)
      how = "step by step (whole network " +
            (summary.whole_network.starts_with("not used") ? summary.whole_network
                                                           : std::string("not used on this GPU")) +
            ")";
    fmt::print("kernels       {}\n", how);
  }
  fmt::print("throughput    {:.1f} inferences/s = {:.1f} samples/s\n", qps, qps * static_cast<double>(batch));
  fmt::print("latency  ms   min {:.4f}  mean {:.4f}  median {:.4f}  p90 {:.4f}  p95 {:.4f}  p99 {:.4f}  max {:.4f}\n",
             L.min, L.mean, L.median, L.p90, L.p95, L.p99, L.max);
  if (gpu) {
    fmt::print("GPU compute   mean {:.4f}  median {:.4f}  p99 {:.4f} ms\n", C.mean, C.median, C.p99);
    fmt::print("H2D / D2H     mean {:.4f} / {:.4f} ms\n", H.mean, D.mean);
  }
  fmt::print("enqueue       mean {:.4f}  median {:.4f} ms (host time of Context::{})\n", E.mean, E.median,
             gpu ? "enqueue" : "run");

  nlohmann::json j = {{"model", o.model},
                      {"target", summary.target},
                      {"batch", batch},
                      {"streams", o.streams},
                      {"cpu_threads_per_stream", gpu ? 0 : cpu_threads},
                      {"cuda_graph", o.cuda_graph},
                      {"whole_network", whole},
                      {"side_steps", side},
                      {"transfers", !o.no_transfers},
                      {"mapped_io", mapped},
                      {"inferences", lat.size()},
                      {"measured_s", window_s},
                      {"wall_s", wall_s},
                      {"throughput_inferences_per_s", qps},
                      {"throughput_samples_per_s", qps * static_cast<double>(batch)},
                      {"latency_ms", to_json(L)},
                      {"gpu_compute_ms", to_json(C)},
                      {"h2d_ms", to_json(H)},
                      {"d2h_ms", to_json(D)},
                      {"enqueue_ms", to_json(E)}};

  if (o.profile) {
    ContextOptions pc = co;
    pc.profile = true;
    pc.cuda_graph = false;
    std::unique_ptr<Context> ctx = engine->create_context(pc);
    const auto inputs = shaped_inputs(*engine, *ctx, shapes);
    for (size_t i = 0; i < inputs.size(); ++i)
      ctx->set_input(engine->inputs()[i].name, inputs[i].data(), inputs[i].size());
    ctx->run();  // warm-up, counted out below
    const auto first = ctx->step_times();
    const int runs = std::max(10, std::min(o.iterations, 100));
    for (int i = 0; i < runs; ++i) ctx->run();
    auto times = ctx->step_times();
    double total = 0;
    for (size_t k = 0; k < times.size(); ++k) {
      times[k].total_ms -= first[k].total_ms;
      total += times[k].total_ms;
    }
    fmt::print("\nper-layer profile ({} runs, per-step {} times; mean ms per run{})\n", runs,
               gpu ? "CUDA-event" : "wall-clock",
               whole ? "; the steps, which the whole-network kernel replaces in the runs above" : "");
    fmt::print("  {:>4}  {:<20} {:<36} {:>6} {:>9} {:>6}\n", "step", "op", "name", "tactic", "ms", "share");
    nlohmann::json layers = nlohmann::json::array();
    for (size_t k = 0; k < times.size(); ++k) {
      const double ms = times[k].total_ms / runs, share = total > 0 ? times[k].total_ms / total : 0;
      std::string name = times[k].name.size() > 36 ? times[k].name.substr(0, 33) + "..." : times[k].name;
      // The tactic the builder chose (-1: the default: the op's only implementation, a CPU
      // engine, or no timing); steps and summary align. A range engine's summary lists its
      // largest plan: another bucket's tactics are not known here, and left blank.
      const bool top_plan = summary.buckets.empty() || ctx->bucket() == summary.buckets.back().sizes;
      const int tactic = top_plan && k < summary.steps.size() ? summary.steps[k].tactic : -1;
      fmt::print("  {:>4}  {:<20} {:<36} {:>6} {:>9.4f} {:>5.1f}% {}\n", k, times[k].op, name,
                 tactic < 0 ? "" : std::to_string(tactic), ms, share * 100, bar(share, 40));
      layers.push_back({{"step", k},
                        {"op", times[k].op},
                        {"name", times[k].name},
                        {"tactic", tactic},
                        {"ms", ms},
                        {"share", share}});
    }
    fmt::print("  total {:.4f} ms per run (steps timed one by one, so a little above the graph-free compute time)\n",
               total / runs);
    j["profile"] = {{"runs", runs}, {"total_ms", total / runs}, {"layers", layers}};
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    if (!(f << j.dump(2) << "\n")) throw Error(o.json + ": cannot write the JSON report");
    fmt::print("wrote {}\n", o.json);
  }
  return kExitOk;
}

}  // namespace kiln::cli
