// Timing whole engines (engine_timing.h).
//
// A GPU engine is timed on device buffers (set_input_device / set_output_device) with CUDA events
// around Context::enqueue, as `kiln bench --no-transfers` does: timing Context::run() included
// copying the inputs from pageable host memory (ResNet-50 at batch 256: 154 MB, about 25 ms), whose
// noise outweighed the 1 ms difference between the engines and once kept the slower one.
#include "build/engine_timing.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "build/sample_inputs.h"
#include "build/stopwatch.h"
#include "kiln/engine.h"

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "build/device_buffers.h"
#endif

namespace kiln::build {

namespace {

#if defined(KILN_HAVE_CUDA)
void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("timing the candidate engine: ") + what + ": " + cudaGetErrorString(e));
}

// Device memory, events and a stream, freed on every path out.
struct GpuTiming {
  DeviceBuffers buffers;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~GpuTiming() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }
  // Device memory holding `data`, or zeros where it is null.
  void* alloc(size_t bytes, const void* data = nullptr) {
    void* p = buffers.alloc(bytes, "timing the candidate engine: cudaMalloc");
    cuda_ok(data ? cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice) : cudaMemset(p, 0, bytes), "filling a buffer");
    return p;
  }
};
#endif

}  // namespace

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct TimedEngine::Impl {
  std::shared_ptr<const Engine> engine;
#if defined(KILN_HAVE_CUDA)
  GpuTiming gpu;  // before the context, which is destroyed first
#endif
  std::unique_ptr<Context> ctx;
  // The inputs a CPU context reads from (Context::set_input keeps the pointer, not a copy).
  std::vector<std::vector<uint8_t>> inputs;
  bool on_gpu = false;
};

TimedEngine::TimedEngine(std::span<const uint8_t> engine) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.engine = Engine::from_bytes(engine, "candidate engine");
  ContextOptions options;
  options.cuda_graph = true;
  m.ctx = m.engine->create_context(options);
  // kiln bench's inputs: a GPU runs the same network faster on zeros, more so in float16.
  std::vector<std::vector<uint8_t>> in = sample_inputs(*m.engine);
  const Engine& e = *m.engine;
#if defined(KILN_HAVE_CUDA)
  m.on_gpu = e.summary().target != "cpu";
  if (m.on_gpu) {
    GpuTiming& t = m.gpu;
    for (size_t k = 0; k < in.size(); ++k)
      m.ctx->set_input_device(e.inputs()[k].name, t.alloc(in[k].size(), in[k].data()), in[k].size());
    for (const TensorInfo& o : e.outputs()) m.ctx->set_output_device(o.name, t.alloc(o.bytes()), o.bytes());
    cuda_ok(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaEventCreate(&t.start), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&t.stop), "cudaEventCreate");
    for (int i = 0; i < 3; ++i) m.ctx->enqueue(t.stream);  // the first runs also record the CUDA graph
    cuda_ok(cudaStreamSynchronize(t.stream), "running the engine");
    m.ctx->check();
    return;
  }
#endif
  m.inputs = std::move(in);
  for (size_t k = 0; k < m.inputs.size(); ++k)
    m.ctx->set_input(e.inputs()[k].name, m.inputs[k].data(), m.inputs[k].size());
  for (int i = 0; i < 3; ++i) m.ctx->run();
}

TimedEngine::~TimedEngine() = default;

double TimedEngine::median_ms(int runs) {
  Impl& m = *impl_;
  std::vector<double> ms;
#if defined(KILN_HAVE_CUDA)
  if (m.on_gpu) {
    GpuTiming& t = m.gpu;
    for (int i = 0; i < runs; ++i) {
      cuda_ok(cudaEventRecord(t.start, t.stream), "cudaEventRecord");
      m.ctx->enqueue(t.stream);
      cuda_ok(cudaEventRecord(t.stop, t.stream), "cudaEventRecord");
      cuda_ok(cudaEventSynchronize(t.stop), "running the engine");
      float e = 0;
      cuda_ok(cudaEventElapsedTime(&e, t.start, t.stop), "cudaEventElapsedTime");
      ms.push_back(e);
    }
    m.ctx->check();
    return median(std::move(ms));
  }
#endif
  for (int i = 0; i < runs; ++i) {
    const Stopwatch timer;
    m.ctx->run();
    ms.push_back(timer.ms());
  }
  return median(std::move(ms));
}

double median_run_ms(std::span<const uint8_t> engine, int runs) { return TimedEngine(engine).median_ms(runs); }

}  // namespace kiln::build
