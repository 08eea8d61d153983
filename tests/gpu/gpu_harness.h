// The device side of the op tests (the host side, tensors and tolerances, is tests/ops/op_harness.h):
// device buffers with guard bytes, and check_op(), which runs one op through shape inference, the
// CPU kernel (the reference) and the GPU kernel, and compares the outputs.
//
// The GPU run: inputs copied to device buffers; outputs POISONED with 0xFF bytes (NaN for floats,
// -1 for integers, an invalid byte for bools) so that unwritten elements show; each buffer sits
// between 256-byte guard zones that must still hold 0xFF afterwards (no write out of bounds).
// Optionally every buffer is shifted by one element (misaligned: the kernels' scalar paths), or the
// kernel is recorded by CUDA stream capture and replayed as a graph: capture fails if the kernel
// synchronizes or allocates, which GPU kernels must never do.
//
// Without a GPU every test skips (KILN_SKIP_WITHOUT_GPU) with the CUDA runtime's reason.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "ops/op_case.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu_test {

using namespace ::kiln::optest;    // NOLINT: the host side, shared with tests/ops
using ::kiln::optest::HostTensor;  // not kiln::HostTensor (graph/tensor_file.h), which some tests see too

// The GPU's INT8 kernels share Kiln's epilogue (runtime/qfused_math.h) bit for bit, so their CPU
// reference is that epilogue too: oneDNN's own (runtime/cpu/onednn.h) rounds in another order.
inline const bool kInt8ReferenceIsKilns = [] {
  cpu::onednn::set_int8_epilogue_in_library(false);
  return true;
}();

inline std::string no_gpu_reason() {
  try {
    gpu::gpu_target();
    return "gpu_available() is false";
  } catch (const Error& e) {
    return e.what();
  }
}

#define KILN_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                  \
    if (!::kiln::gpu::gpu_available())                                                  \
      GTEST_SKIP() << "needs a CUDA GPU (" << ::kiln::gpu_test::no_gpu_reason()         \
                   << "); GPU tests run on the GPU machine through bench/gpu_tests.sh"; \
  } while (0)

// Whether the GPU runs sm_90a code (compute capability 9.0), where Kiln's tensor-core kernels have
// wgmma forms too (built with CUDA 12 and later), and no other architecture limits the kernels
// (KILN_TARGET_ARCH=sm_87 runs every GPU test with only the kernels of sm_87: gpu::kernel_arch_limit).
inline bool hopper() {
  int device = 0, major = 0, minor = 0;
  if (const int limit = gpu::kernel_arch_limit(); limit != 0 && limit != 90) return false;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
         minor == 0;
}

// The shared memory a block may opt into on the current device, within the architecture limit.
inline int block_smem() {
  int device = 0, smem = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  const int limit = gpu::kernel_arch_limit();
  return limit == 0 ? smem : std::min(smem, static_cast<int>(gpu::max_block_smem_of(limit)));
}

#define KILN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// ---- device buffers ----------------------------------------------------------------------------
inline constexpr size_t kGuard = 256;  // keeps the data 256-byte aligned unless misaligned on purpose

class DeviceBuffer {
 public:
  // `shift` bytes past the guard: 0, or one element to misalign the data on purpose.
  DeviceBuffer(size_t bytes, size_t shift) : bytes_(bytes), shift_(shift), total_(bytes + shift + 2 * kGuard) {
    if (cudaMalloc(&base_, total_) != cudaSuccess) throw Error("cudaMalloc failed");
    if (cudaMemset(base_, 0xFF, total_) != cudaSuccess) throw Error("cudaMemset failed");
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return static_cast<uint8_t*>(base_) + kGuard + shift_; }
  void upload(const std::vector<uint8_t>& b) {
    if (!b.empty() && cudaMemcpy(data(), b.data(), b.size(), cudaMemcpyHostToDevice) != cudaSuccess)
      throw Error("cudaMemcpy to device failed");
  }
  // The data bytes; sets *guards_ok to whether every byte around them is still 0xFF.
  std::vector<uint8_t> download(bool* guards_ok) const {
    std::vector<uint8_t> all(total_);
    if (cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw Error("cudaMemcpy to host failed");
    const size_t begin = kGuard + shift_, end = begin + bytes_;
    *guards_ok = true;
    for (size_t i = 0; i < total_; ++i)
      if ((i < begin || i >= end) && all[i] != 0xFF) *guards_ok = false;
    return {all.begin() + static_cast<std::ptrdiff_t>(begin), all.begin() + static_cast<std::ptrdiff_t>(end)};
  }

 private:
  void* base_ = nullptr;
  size_t bytes_, shift_, total_;
};

class Stream {
 public:
  Stream() {
    if (cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking) != cudaSuccess) throw Error("cudaStreamCreate failed");
  }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// ---- running and comparing -----------------------------------------------------------------------

enum class GpuMode {
  kDirect,      // launch on a stream, synchronize
  kMisaligned,  // every buffer shifted by one element
  kCaptured,    // recorded by stream capture, replayed as a CUDA graph
};

inline const char* mode_name(GpuMode m) {
  switch (m) {
    case GpuMode::kDirect: return "direct";
    case GpuMode::kMisaligned: return "misaligned";
    case GpuMode::kCaptured: return "captured";
  }
  return "?";
}

// What a Context gives its kernels: cuDNN and cuBLASLt handles, a workspace (grown on demand),
// and a device error flag. One per test process; run_gpu throws kiln::Error with the kernel's
// GpuError message (as a Context would) when the flag is set after a run.
class GpuResources {
 public:
  static GpuResources& get() {
    static GpuResources r;
    return r;
  }
  gpu::GpuEnv env(cudaStream_t stream, const std::vector<const void*>& host_in, std::unique_ptr<gpu::StepState>* state,
                  size_t workspace = 0) {
    if (workspace > ws_bytes_) {
      if (ws_) cudaFree(ws_);
      ws_ = nullptr;
      gpu::check_cuda(cudaMalloc(&ws_, workspace), "allocating the workspace");
      ws_bytes_ = workspace;
    }
    gpu::check_cudnn(cudnnSetStream(cudnn_, stream), "cudnnSetStream");
    gpu::check_cuda(cudaMemset(error_, 0, sizeof(int)), "clearing the error flag");
    gpu::GpuEnv e;
    e.stream = stream;
    e.cudnn = cudnn_;
    e.cublaslt = lt_;
    e.workspace = ws_;
    e.workspace_bytes = ws_bytes_;
    e.error = error_;
    e.host_in = host_in;
    e.state = state;
    return e;
  }
  void throw_if_device_error() {
    int code = 0;
    gpu::check_cuda(cudaMemcpy(&code, error_, sizeof(int), cudaMemcpyDeviceToHost), "reading the error flag");
    if (code != 0) throw Error(gpu::gpu_error_message(code));
  }

 private:
  GpuResources() {
    gpu::check_cudnn(cudnnCreate(&cudnn_), "cudnnCreate");
    gpu::check_cublas(cublasLtCreate(&lt_), "cublasLtCreate");
    gpu::check_cuda(cudaMalloc(reinterpret_cast<void**>(&error_), sizeof(int)), "allocating the error flag");
  }
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  int* error_ = nullptr;
};

inline constexpr size_t kModeShift = ~size_t{0};

struct GpuRunOptions {
  int32_t tactic = -1;        // env.tactic (-1: the kernel's default choice)
  size_t shift = kModeShift;  // every buffer this many bytes past a 256-byte boundary; default: the mode's
  int direct_runs = 1;        // kDirect: run the kernel this often (later runs reuse the step state)
};

// Runs the GPU kernel; guard and poison problems are reported as test failures.
inline std::vector<HostTensor> run_gpu(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins,
                                       const std::vector<OutputType>& types, GpuMode mode,
                                       const GpuRunOptions& options = {}) {
  std::vector<HostTensor> outs = empty_outputs(types, 0xFF);
  std::vector<std::unique_ptr<DeviceBuffer>> in_bufs, out_bufs;
  std::vector<TensorView> iv, ov;
  auto shift_of = [&](DT dt) {
    if (options.shift != kModeShift) return options.shift;
    return mode == GpuMode::kMisaligned ? dtype_size(dt) : size_t{0};
  };
  for (const HostTensor& t : ins) {
    if (!t.exists) {
      iv.push_back(t.view(nullptr));
      continue;
    }
    in_bufs.push_back(std::make_unique<DeviceBuffer>(t.bytes.size(), shift_of(t.dtype)));
    in_bufs.back()->upload(t.bytes);
    iv.push_back(t.view(in_bufs.back()->data()));
  }
  for (const HostTensor& t : outs) {
    out_bufs.push_back(std::make_unique<DeviceBuffer>(t.bytes.size(), shift_of(t.dtype)));
    ov.push_back(t.view(out_bufs.back()->data()));
  }
  // The poison memsets and the pageable uploads ran on the legacy default stream, which a
  // non-blocking stream does not wait for (and a pageable cudaMemcpy may return before its DMA
  // lands): finish them before the kernel runs.
  gpu::check_cuda(cudaDeviceSynchronize(), "uploading the inputs");
  Stream stream;
  GpuResources& res = GpuResources::get();
  // Host copies of the inputs that are build-time constants in an engine (the op's const_inputs):
  // what a Context gives its kernels in env.host_in (and, for an op whose shapes follow its
  // inputs' values, every input: the context reads them back first).
  std::vector<const void*> host_in(ins.size(), nullptr);
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i].exists && ((i < 32 && (op_info(kind).const_inputs >> i & 1u)) || has_trait(kind, kShapeFromData)))
      host_in[i] = ins[i].bytes.data();
  std::unique_ptr<gpu::StepState> state;
  gpu::GpuEnv env = res.env(stream.get(), host_in, &state);
  env.tactic = options.tactic;
  const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(kind);
  if (!entry) throw Error(std::string(op_name(kind)) + " has no GPU kernel");
  if (entry->workspace) {
    const size_t need = entry->workspace(kind, attrs, iv, ov, env);
    env = res.env(stream.get(), host_in, &state, need);
    env.tactic = options.tactic;
  }
  gpu::GpuKernel k = entry->fn;
  if (mode == GpuMode::kCaptured) {
    if (cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal) != cudaSuccess)
      throw Error("cudaStreamBeginCapture failed");
    try {
      k(kind, attrs, iv, ov, env);
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream.get(), &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
    if (end != cudaSuccess)
      throw Error(std::string("stream capture failed (the kernel synchronized or allocated?): ") +
                  cudaGetErrorString(end));
    cudaGraphExec_t exec = nullptr;
    gpu::check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    gpu::check_cuda(cudaGraphLaunch(exec, stream.get()), "cudaGraphLaunch");
    gpu::check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else {
    for (int run = 0; run < options.direct_runs; ++run) k(kind, attrs, iv, ov, env);
    gpu::check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  }
  res.throw_if_device_error();
  gpu::check_cuda(cudaGetLastError(), "after the kernel");
  for (size_t i = 0; i < outs.size(); ++i) {
    bool guards_ok = false;
    outs[i].bytes = out_bufs[i]->download(&guards_ok);
    EXPECT_TRUE(guards_ok) << "output " << i << ": bytes outside the tensor were written";
  }
  pack_data_dependent(kind, outs);
  return outs;
}

// Infers the outputs, runs CPU and GPU, compares every output with tol(reference). `label` is added
// to failure messages.
inline void check_op_with(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins, size_t n_out,
                          const ToleranceFn& tol, GpuMode mode, const GpuRunOptions& options = {},
                          const std::string& label = "") {
  const std::string what = describe(kind, ins) + " " + mode_name(mode) + label;
  std::vector<OutputType> types;
  try {
    types = infer_shapes(kind, attrs, infer_views(kind, ins), n_out);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": shape inference threw (a bad test case): " << e.what();
    return;
  }
  const std::vector<HostTensor> want = run_cpu(kind, attrs, ins, types);
  std::vector<HostTensor> got;
  try {
    got = run_gpu(kind, attrs, ins, types, mode, options);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": GPU kernel threw: " << e.what();
    return;
  }
  for (size_t i = 0; i < want.size(); ++i)
    expect_match(got[i], want[i], tol(want[i]), what + " output " + std::to_string(i));
}

// The tactics the kernel's entry offers for these inputs (empty without a tactics function).
inline std::vector<int32_t> tactics_of(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins,
                                       size_t n_out = 1) {
  std::vector<TensorView> iv = infer_views(kind, ins), ov;
  const std::vector<HostTensor> outs = empty_outputs(infer_shapes(kind, attrs, iv, n_out), 0);
  for (const HostTensor& t : outs) ov.push_back(t.view(nullptr));
  const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(kind);
  if (!entry || !entry->tactics) return {};
  Stream stream;
  const std::vector<const void*> host_in(ins.size(), nullptr);
  gpu::GpuEnv env = GpuResources::get().env(stream.get(), host_in, nullptr);
  return entry->tactics(kind, attrs, iv, ov, env);
}

// One run of an op case (tests/ops/op_case.h) with its tolerance; `tactic` -1 takes the case's.
inline void check_run(const OpCase& c, const OpRun& r, GpuMode mode, int32_t tactic = -1, size_t shift = kModeShift) {
  const int32_t t = tactic >= 0 ? tactic : c.tactic;
  std::string label = t >= 0 ? " tactic " + std::to_string(t) : "";
  if (shift != kModeShift) label += " shifted by " + std::to_string(shift) + " bytes";
  const ToleranceFn exact = [](const HostTensor&) { return Tolerance{}; };
  check_op_with(c.kind, r.attrs, r.in, r.n_out, r.tol ? r.tol : exact, mode, GpuRunOptions{t, shift, c.direct_runs},
                label);
}

// The GPU kernel alone (no shape inference: `types` are the outputs) must throw a kiln::Error whose
// message contains `needle`; by default the CUDA backend's name, as for an element type it does
// not take.
inline void expect_cuda_backend_error(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins,
                                      const std::vector<OutputType>& types,
                                      const std::string& needle = "CUDA backend") {
  try {
    (void)run_gpu(kind, attrs, ins, types, GpuMode::kDirect);
    ADD_FAILURE() << describe(kind, ins) << " should throw (" << needle << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The same with the per-dtype tolerance of an accuracy class.
inline void check_op(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins, size_t n_out, Accuracy acc,
                     GpuMode mode = GpuMode::kDirect) {
  check_op_with(
      kind, attrs, ins, n_out, [acc](const HostTensor& w) { return tolerance_for(w.dtype, acc); }, mode);
}

}  // namespace kiln::gpu_test
