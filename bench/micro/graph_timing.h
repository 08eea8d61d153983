// Times work the way the builder times tactics, for the stand-alone GPU probes
// (gpu_cudnn_matmul_bench.cpp, gpu_int8_gemm_bench.cpp): 20 launches captured in a CUDA graph, the
// graph replayed 50 times between two CUDA events. Needs only the CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace kiln::bench {

// Exits with the call's text and CUDA's message where a runtime call fails.
inline void check_or_exit(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// A non-blocking stream on the current GPU; false (having said so) where the machine has none.
inline bool probe_stream(cudaStream_t* s) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("no CUDA GPU\n");
    return false;
  }
  check_or_exit(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return true;
}

// Milliseconds per launch of `launch` on stream s. A launch that returns bool may refuse (false on
// its first, uncaptured call): then -1.
template <class F>
double graph_time_ms(cudaStream_t s, F&& launch) {
  if constexpr (std::is_same_v<decltype(launch()), bool>) {
    if (!launch()) return -1;
  } else {
    launch();
  }
  check_or_exit(cudaStreamSynchronize(s), "first launch");
  cudaGraph_t g = nullptr;
  check_or_exit(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < 20; ++i) launch();
  check_or_exit(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t x = nullptr;
  check_or_exit(cudaGraphInstantiate(&x, g, 0), "instantiate");
  check_or_exit(cudaGraphLaunch(x, s), "warm-up replay");
  cudaEvent_t e0, e1;
  check_or_exit(cudaEventCreate(&e0), "event");
  check_or_exit(cudaEventCreate(&e1), "event");
  check_or_exit(cudaEventRecord(e0, s), "record");
  for (int r = 0; r < 50; ++r) check_or_exit(cudaGraphLaunch(x, s), "replay");
  check_or_exit(cudaEventRecord(e1, s), "record");
  check_or_exit(cudaEventSynchronize(e1), "synchronize");
  float ms = 0;
  check_or_exit(cudaEventElapsedTime(&ms, e0, e1), "elapsed time");
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / 1000.0;
}

}  // namespace kiln::bench

// KILN_CUDA_CHECK(cudaMalloc(...)): exits naming the call where it fails.
#define KILN_CUDA_CHECK(x) ::kiln::bench::check_or_exit((x), #x)
