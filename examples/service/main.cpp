// A multi-threaded service around one engine: the engine (and, on a GPU, its weights) is loaded
// once and shared; each worker thread owns a Context and, on a GPU, its own CUDA stream. Workers
// take request numbers from a shared counter, fill the inputs (request r gets the values
// sin(r + i)), run, and check that the output is what a single context computed for that request:
// contexts must not disturb each other.
//
//   kiln_service MODEL.kiln [THREADS=4] [REQUESTS=200]
#include <kiln/engine.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

// Request r's inputs: float tensors get sin(r + i), others zeros.
std::vector<std::vector<std::byte>> request_inputs(const kiln::Engine& e, int r) {
  std::vector<std::vector<std::byte>> ins;
  for (const kiln::TensorInfo& t : e.inputs()) {
    ins.emplace_back(t.bytes());
    if (t.dtype == kiln::DataType::kFloat32)
      for (size_t i = 0; i < static_cast<size_t>(t.numel()); ++i) {
        const float v = std::sin(static_cast<float>(r) + static_cast<float>(i));
        std::memcpy(ins.back().data() + 4 * i, &v, 4);
      }
  }
  return ins;
}

// Runs request r on ctx (on `stream` for GPU engines) and returns the first output's bytes.
std::vector<std::byte> serve(const kiln::Engine& e, kiln::Context& ctx, CUstream_st* stream, int r) {
  const auto ins = request_inputs(e, r);
  for (size_t i = 0; i < ins.size(); ++i) ctx.set_input(e.inputs()[i].name, ins[i].data(), ins[i].size());
  const kiln::TensorInfo& out = e.outputs()[0];
  std::vector<std::byte> y(out.bytes());
  ctx.set_output(out.name, y.data(), y.size());
  if (e.is_gpu()) {
#if defined(KILN_HAVE_CUDA)
    ctx.enqueue(stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) throw kiln::Error("the GPU failed");
    ctx.check();
#endif
  } else {
    ctx.run();
  }
  return y;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.kiln [THREADS] [REQUESTS]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::stoi(argv[2]) : 4;
  const int requests = argc > 3 ? std::stoi(argv[3]) : 200;
  try {
    std::shared_ptr<const kiln::Engine> engine = kiln::Engine::load(argv[1]);
    // The expected answers, from one context, before the workers start.
    std::vector<std::vector<std::byte>> expected;
    {
      auto ctx = engine->create_context(1);
      for (int r = 0; r < requests; ++r) expected.push_back(serve(*engine, *ctx, nullptr, r));
    }
    std::atomic<int> next{0}, wrong{0};
    std::vector<std::string> errors(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::vector<std::jthread> workers;
      for (int w = 0; w < threads; ++w)
        workers.emplace_back([&, w] {
          try {
            kiln::ContextOptions o;
            o.cpu_threads = 1;
            auto ctx = engine->create_context(o);
            CUstream_st* stream = nullptr;
#if defined(KILN_HAVE_CUDA)
            if (engine->is_gpu() && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
              throw kiln::Error("cannot create a CUDA stream");
#endif
            for (int r; (r = next++) < requests;)
              if (serve(*engine, *ctx, stream, r) != expected[static_cast<size_t>(r)]) ++wrong;
#if defined(KILN_HAVE_CUDA)
            if (stream) cudaStreamDestroy(stream);
#endif
          } catch (const kiln::Error& e) {
            errors[static_cast<size_t>(w)] = e.what();
          }
        });
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const std::string& e : errors)
      if (!e.empty()) throw kiln::Error(e);
    std::printf("%d requests on %d threads (%s engine): %.1f requests/s, %d wrong answers\n", requests, threads,
                engine->is_gpu() ? "GPU" : "CPU", requests / s, wrong.load());
    return wrong == 0 ? 0 : 1;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
