// What the GPU microbenchmarks share (gpu_kernels_bench.cpp, gpu_fc_bench.cpp, gpu_graph_bench.cpp: one
// binary, bench/gpu_bench.sh runs it): device buffers, the process's stream, handles and events, random
// inputs, the device-to-device copy that serves as the memory-bandwidth ceiling, and two ways to time work
// on the stream: Resources::time (events around the work, as the kernel benchmarks always did) and
// HeldTimer (GPU time only: a wait kernel holds the stream while the host enqueues, so launch costs on the
// host stay out of the window; for work whose kernels are as short as their launches).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "kiln/types.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu::bench {

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) {
      p = nullptr;
      cudaGetLastError();  // clear the allocation error
    }
  }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

// Handles, a stream and two events shared by every benchmark of the process.
struct Resources {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
  int* error = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  Resources() {
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cudnn(cudnnCreate(&cudnn), "cudnnCreate");
    check_cudnn(cudnnSetStream(cudnn, stream), "cudnnSetStream");
    check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&error), sizeof(int)), "cudaMalloc");
    check_cuda(cudaMemset(error, 0, sizeof(int)), "cudaMemset");
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  }
  static Resources& get() {
    static Resources r;
    return r;
  }
  // A kernel environment on these handles whose step state lives in `step`.
  GpuEnv env(std::unique_ptr<StepState>* step) const {
    GpuEnv e;
    e.stream = stream;
    e.cudnn = cudnn;
    e.cublaslt = lt;
    e.error = error;
    e.state = step;
    return e;
  }
  // Seconds between an event before and one after the work `launch` enqueues on `stream`.
  template <class Fn>
  double time(Fn&& launch) {
    check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
    launch();
    check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms * 1e-3;
  }
};

// Points env at `tactic` and at a workspace of the size the entry asks for with `in` (shapes; data
// may be null), which the returned buffer holds; the caller makes the warm-up call.
inline std::unique_ptr<DeviceMem> set_tactic(const GpuKernelEntry& entry, OpKind kind, const Attrs& attrs,
                                             std::span<const TensorView> in, std::span<const TensorView> out,
                                             GpuEnv& env, int32_t tactic) {
  env.tactic = tactic;
  env.workspace = nullptr;
  env.workspace_bytes = 0;
  const size_t need = entry.workspace ? entry.workspace(kind, attrs, in, out, env) : 0;
  auto ws = std::make_unique<DeviceMem>(need);
  env.workspace = ws->p;
  env.workspace_bytes = need;
  return ws;
}

// Enqueues a kernel that keeps `stream` busy for `seconds` (gpu_hold.cu).
void hold_stream(cudaStream_t stream, double seconds);

// GPU seconds of the work `enqueue` puts on the stream, without the host's time to enqueue it: a wait
// kernel holds the stream, the start event, the work and the stop event are enqueued behind it, and the
// GPU runs them back to back once it ends. The hold lasts four times the host's last enqueue time (at
// least 50 us); a window where the host took more than half the hold is measured again with the longer
// hold (the GPU may have waited for the host there). One timer per benchmark.
class HeldTimer {
 public:
  // *host_seconds (if given): the host's wall time to run `enqueue`.
  template <class Fn>
  double operator()(Fn&& enqueue, double* host_seconds = nullptr) {
    Resources& r = Resources::get();
    for (;;) {
      hold_stream(r.stream, hold_s_);
      check_cuda(cudaEventRecord(r.start, r.stream), "cudaEventRecord");
      const auto t0 = std::chrono::steady_clock::now();
      enqueue();
      const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      check_cuda(cudaEventRecord(r.stop, r.stream), "cudaEventRecord");
      check_cuda(cudaEventSynchronize(r.stop), "cudaEventSynchronize");
      if (host_seconds) *host_seconds = host;
      const bool held_long_enough = host <= 0.5 * hold_s_;
      hold_s_ = std::max(kMinHold, 4 * host);  // also shrinks, so that one slow enqueue does not stay costly
      if (held_long_enough) {
        float ms = 0;
        check_cuda(cudaEventElapsedTime(&ms, r.start, r.stop), "cudaEventElapsedTime");
        return ms * 1e-3;
      }
      if (hold_s_ > 1.0) throw Error("HeldTimer: enqueueing took " + std::to_string(host) + " s; does it synchronize?");
    }
  }

 private:
  static constexpr double kMinHold = 50e-6;
  double hold_s_ = kMinHold;
};

// One input: random values of its element type (float32 or float16 in [-1, 1], 8-bit types in
// 0 .. 15), or the given integers (a constant input, such as ReduceMean's axes, which kernels
// read from its host copy), or none (an omitted optional input).
struct Input {
  DataType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> constant = {};  // the tensor's bytes (a scalar: its value's bits), host-known
  bool absent = false;                 // an omitted optional input
};

inline std::unique_ptr<DeviceMem> upload(const Input& in, uint32_t seed) {
  const int64_t n = TensorView{in.dtype, in.shape}.numel();
  auto mem = std::make_unique<DeviceMem>(static_cast<size_t>(n) * dtype_size(in.dtype));
  if (!mem->p) return mem;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(in.dtype));
  if (!in.constant.empty()) {
    std::memcpy(bytes.data(), in.constant.data(), bytes.size());
  } else {
    // 2^20 random values, repeated: large tensors upload without a long wait on the host.
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const size_t es = dtype_size(in.dtype), block = std::min<size_t>(bytes.size(), (size_t{1} << 20) * es);
    for (size_t at = 0; at < block; at += es) {
      if (in.dtype == DataType::kFloat16) {
        const Half h(u(rng));
        std::memcpy(bytes.data() + at, &h, 2);
      } else if (es == 4) {
        const float f = u(rng);
        std::memcpy(bytes.data() + at, &f, 4);
      } else {  // 8-bit types: small values, 0 .. 15
        bytes[at] = static_cast<uint8_t>(rng() % 16);
      }
    }
    for (size_t at = block; at < bytes.size(); at += block)
      std::memcpy(bytes.data() + at, bytes.data(), std::min(block, bytes.size() - at));
  }
  check_cuda(cudaMemcpy(mem->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload");
  return mem;
}

// GB/s of a cudaMemcpyAsync device to device that moves `bytes` (reads and writes bytes / 2
// each), timed as the ops are: one copy per pair of events, the mean of 20 after a warm-up.
// Measured once per size.
inline double copy_gbps(size_t bytes) {
  static std::map<size_t, double> measured;
  if (auto it = measured.find(bytes); it != measured.end()) return it->second;
  Resources& r = Resources::get();
  const size_t half = bytes / 2;
  DeviceMem a(half), b(half);
  if (!a.p || !b.p) return 0;
  auto copy = [&] { check_cuda(cudaMemcpyAsync(b.p, a.p, half, cudaMemcpyDeviceToDevice, r.stream), "copy"); };
  r.time(copy);
  double total = 0;
  constexpr int kRuns = 20;
  for (int i = 0; i < kRuns; ++i) total += r.time(copy);
  return measured[bytes] = static_cast<double>(2 * half) * kRuns / total * 1e-9;
}

}  // namespace kiln::gpu::bench
