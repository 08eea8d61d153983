// Shared harness of the GPU op tests: host tensors with random or chosen values, device buffers
// with guard bytes, and check_op(), which runs one op through shape inference, the CPU kernel (the
// reference) and the GPU kernel, and compares the outputs.
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
#include "runtime/cpu/kernels.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu_test {

using DT = DataType;
using Shape = std::vector<int64_t>;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

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
// wgmma forms too (built with CUDA 12 and later).
inline bool hopper() {
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
         minor == 0;
}

#define KILN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

inline bool is_float(DT t) { return t == DT::kFloat32 || t == DT::kFloat64 || t == DT::kFloat16 || t == DT::kBFloat16; }

inline std::string shape_str(const Shape& s) { return shape_string(s); }

// ---- host tensors ------------------------------------------------------------------------------
struct HostTensor {
  DT dtype = DT::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;
  bool exists = true;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  TensorView view(void* data) const { return TensorView{dtype, shape, data, exists}; }
};

inline double get(const HostTensor& t, int64_t i) {
  if (t.dtype == DT::kBool) return t.bytes[static_cast<size_t>(i)] ? 1.0 : 0.0;
  return dispatch_numeric(t.dtype, "get", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
    return static_cast<double>(static_cast<ComputeType<T>>(v));
  });
}

// Floats round to the type (through float for the half types); integers wrap modulo 2^bits.
inline void set(HostTensor& t, int64_t i, double v) {
  if (t.dtype == DT::kBool) {
    t.bytes[static_cast<size_t>(i)] = v != 0;
    return;
  }
  dispatch_numeric(t.dtype, "set", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T x;
    if constexpr (kIsFloat<T>)
      x = T(static_cast<ComputeType<T>>(v));
    else
      x = static_cast<T>(static_cast<int64_t>(v));
    std::memcpy(t.bytes.data() + i * sizeof(T), &x, sizeof(T));
  });
}

inline HostTensor make(DT dt, Shape shape, const std::vector<double>& v) {
  HostTensor t{dt, std::move(shape), {}};
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v[static_cast<size_t>(i) % v.size()]);
  return t;
}

inline HostTensor absent() {
  HostTensor t;
  t.exists = false;
  return t;
}

// Deterministic per test: reseeded from the test's name by the fixture.
inline std::mt19937& rng() {
  static std::mt19937 g(1234);
  return g;
}

// Uniform in [lo, hi]; integer-valued for integer dtypes or when `integral`; bools half true.
inline HostTensor rand_tensor(DT dt, Shape shape, double lo, double hi, bool integral = false) {
  HostTensor t{dt, std::move(shape), {}};
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = u(rng());
    if (dt == DT::kBool)
      x = x > (lo + hi) / 2;
    else if (integral || !is_float(dt))
      x = std::round(x);
    set(t, i, x);
  }
  return t;
}

// Random values with NaN, +-inf, +-0 and halves (rounding ties) mixed in.
// Integer and bool tensors get plain random values.
inline HostTensor special_tensor(DT dt, Shape shape, double lo, double hi) {
  HostTensor t = rand_tensor(dt, std::move(shape), lo, hi);
  if (!is_float(dt)) return t;
  const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0};
  for (int64_t i = 0; i < t.numel(); i += 3) set(t, i, specials[(i / 3) % std::size(specials)]);
  return t;
}

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
enum class Accuracy {
  kExact,           // the same IEEE operations as the CPU: bit-identical values (NaN matches NaN)
  kArith,           // float32 1e-5 relative + 1e-6 absolute (contracted multiply-adds)
  kTranscendental,  // float32 1e-4 relative + 1e-6 absolute (math library functions)
};

struct Tolerance {
  double rel = 0, abs = 0;
};

// Unless exact: float16 outputs 2e-3 relative + 1e-3 absolute (one half ulp is 2^-10 relative),
// bfloat16 8e-3 + 1e-3 (one ulp is up to 2^-7 relative: results computed in float that differ in
// the last float bits may round to neighbouring bfloat16 values), float64 the float32 bounds
// scaled down by 1e8 (the GPU computes float64 in double: the math library's last-place error
// and contracted multiply-adds).
inline Tolerance tolerance_for(DT out, Accuracy acc) {
  if (acc == Accuracy::kExact || !is_float(out)) return {};
  if (out == DT::kFloat16) return {2e-3, 1e-3};
  if (out == DT::kBFloat16) return {8e-3, 1e-3};
  if (out == DT::kFloat64) return acc == Accuracy::kTranscendental ? Tolerance{1e-12, 1e-14} : Tolerance{1e-13, 1e-14};
  return acc == Accuracy::kTranscendental ? Tolerance{1e-4, 1e-6} : Tolerance{1e-5, 1e-6};
}

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

inline std::vector<HostTensor> empty_outputs(const std::vector<OutputType>& types, uint8_t poison) {
  std::vector<HostTensor> outs;
  for (const OutputType& o : types) {
    HostTensor t{o.dtype, o.shape, {}};
    t.bytes.assign(static_cast<size_t>(t.numel()) * dtype_size(o.dtype), poison);
    outs.push_back(std::move(t));
  }
  return outs;
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

inline std::vector<HostTensor> run_cpu(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins,
                                       const std::vector<OutputType>& types) {
  std::vector<HostTensor> outs = empty_outputs(types, 0xAB);
  for (HostTensor& t : outs)
    if (is_float(t.dtype))
      for (int64_t i = 0; i < t.numel(); ++i) set(t, i, kNaN);
  std::vector<TensorView> iv, ov;
  for (const HostTensor& t : ins) iv.push_back(t.view(t.exists ? const_cast<uint8_t*>(t.bytes.data()) : nullptr));
  for (HostTensor& t : outs) ov.push_back(t.view(t.bytes.data()));
  cpu::KernelEnv env;
  cpu::cpu_kernel(kind)(kind, attrs, iv, ov, env);
  return outs;
}

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
  // what a Context gives its kernels in env.host_in.
  std::vector<const void*> host_in(ins.size(), nullptr);
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i].exists && i < 32 && (op_info(kind).const_inputs >> i & 1u)) host_in[i] = ins[i].bytes.data();
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
  return outs;
}

inline bool same_value(double g, double r, Tolerance tol) {
  if (std::isnan(r)) return std::isnan(g);
  if (std::isinf(r) || (tol.rel == 0 && tol.abs == 0)) return g == r && std::signbit(g) == std::signbit(r);
  return std::abs(g - r) <= tol.abs + tol.rel * std::abs(r);
}

// Reports up to 5 mismatching elements of one output.
inline void expect_match(const HostTensor& got, const HostTensor& want, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.dtype, want.dtype) << what;
  ASSERT_EQ(got.bytes.size(), want.bytes.size()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    bool ok;
    double g = 0, r = 0;
    if (got.dtype == DT::kBool) {
      // Exact bytes: a bool output must hold 0 or 1, never the 0xFF poison.
      g = got.bytes[static_cast<size_t>(i)];
      r = want.bytes[static_cast<size_t>(i)];
      ok = g == r;
    } else {
      g = get(got, i);
      r = get(want, i);
      ok = is_float(got.dtype) ? same_value(g, r, tol) : std::abs(g - r) <= tol.abs;
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " [" << dtype_name(got.dtype) << "] element " << i << " of " << got.numel() << ": gpu "
                    << g << ", cpu " << r;
    }
  }
}

inline std::string describe(OpKind kind, const std::vector<HostTensor>& ins) {
  std::ostringstream s;
  s << op_name(kind) << "(";
  for (size_t i = 0; i < ins.size(); ++i) {
    if (i) s << ", ";
    if (!ins[i].exists)
      s << "absent";
    else
      s << dtype_name(ins[i].dtype) << shape_str(ins[i].shape);
  }
  s << ")";
  return s.str();
}

// Views for shape inference: the data of the op's constant inputs (const_inputs), as the builder
// has it; the rest shape-only.
inline std::vector<TensorView> infer_views(OpKind kind, const std::vector<HostTensor>& ins) {
  static int64_t nothing = 0;  // data for an empty constant (an empty vector may have none)
  std::vector<TensorView> iv;
  for (size_t i = 0; i < ins.size(); ++i) {
    const HostTensor& t = ins[i];
    const bool is_const = t.exists && i < 32 && (op_info(kind).const_inputs >> i & 1u);
    void* d = nullptr;
    if (is_const) d = t.bytes.empty() ? static_cast<void*>(&nothing) : const_cast<uint8_t*>(t.bytes.data());
    iv.push_back(t.view(d));
  }
  return iv;
}

// The largest finite magnitude in t (0 if absent).
inline double max_abs(const HostTensor& t) {
  double m = 0;
  if (!t.exists) return 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = std::abs(get(t, i));
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

// Outputs that are sums of `terms` products of at most `scale` in size each (the nn ops): their
// summation order differs between cuDNN/cuBLASLt and the CPU. An absolute error of 2 * eps * terms
// * scale (eps of the accumulation type) on top of a relative one, and for float16 half an output
// ulp of the largest value (cuDNN may round the product before adding the bias).
inline Tolerance dot_tolerance(DT dt, double terms, double scale, double max_ref) {
  const double acc_eps = dt == DT::kFloat64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
  Tolerance t;
  t.abs = 2 * acc_eps * std::max(terms, 1.0) * scale + 1e-30;
  if (dt == DT::kFloat32) t.rel = 1e-5;
  if (dt == DT::kFloat64) t.rel = 1e-12;
  if (dt == DT::kFloat16) {
    t.rel = 2e-3;
    t.abs += std::ldexp(1.0, -11) * max_ref + 1e-4;
  }
  if (dt == DT::kBFloat16) {
    t.rel = 8e-3;
    t.abs += std::ldexp(1.0, -8) * max_ref + 1e-3;
  }
  return t;
}

// A dot product followed by an epilogue (the fused and channels-last ops): dot_tolerance widened
// for the activation applied after it (math-library differences, 1e-4 relative in float32) and, in
// float16, by a second half ulp (the CPU rounds the product to half before the epilogue, cuDNN's
// fused call does not).
inline Tolerance epilogue_tolerance(const HostTensor& want, double terms, double scale) {
  Tolerance t = dot_tolerance(want.dtype, terms, scale, max_abs(want));
  if (want.dtype == DT::kFloat32) t.rel += 1e-4;
  if (want.dtype == DT::kFloat16) t.abs += std::ldexp(1.0, -11) * max_abs(want);
  return t;
}

// The tolerance for one output, given the reference values.
using ToleranceFn = std::function<Tolerance(const HostTensor& want)>;

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
