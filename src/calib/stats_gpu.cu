// TensorStats's two passes on the GPU (stats_gpu.h). Each pass is one launch over every tensor:
// blockIdx.y picks the tensor, the blocks along x stride over it. The summary pass writes one
// partial per block, which the host merges in double; the histogram pass counts into 2048 bins of
// shared memory per block and adds them to 64-bit counts in global memory.
#include "calib/stats_gpu.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/types.h"
#include "runtime/cuda/shared.h"

namespace kiln::calib {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 512;  // per tensor
constexpr int kBins = TensorStats::kBins;

constexpr const char* kWhat = "calibration statistics on the GPU";

// check_cuda with kWhat before what the call was doing.
void check(cudaError_t err, const char* what) { gpu::check_cuda(err, std::string(kWhat) + ": " + what); }

// Device memory, freed on every path.
gpu::DeviceBuffer buffer(size_t bytes) { return gpu::DeviceBuffer(bytes, std::string(kWhat) + ": cudaMalloc"); }

struct Partial {
  float min, max, absmax;
  unsigned long long finite, nonfinite;
};

__device__ void merge(Partial& a, const Partial& b) {
  a.min = fminf(a.min, b.min);
  a.max = fmaxf(a.max, b.max);
  a.absmax = fmaxf(a.absmax, b.absmax);
  a.finite += b.finite;
  a.nonfinite += b.nonfinite;
}

__global__ void summarize(const DeviceFloats* tensors, Partial* partials) {
  const DeviceFloats t = tensors[blockIdx.y];
  Partial p{INFINITY, -INFINITY, 0.0f, 0, 0};
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < t.count; i += size_t{gridDim.x} * kThreads) {
    const float f = t.data[i];
    if (isfinite(f)) {
      p.min = fminf(p.min, f);
      p.max = fmaxf(p.max, f);
      p.absmax = fmaxf(p.absmax, fabsf(f));
      ++p.finite;
    } else {
      ++p.nonfinite;
    }
  }
  for (int d = 16; d > 0; d /= 2) {
    Partial o;
    o.min = __shfl_down_sync(0xffffffffu, p.min, d);
    o.max = __shfl_down_sync(0xffffffffu, p.max, d);
    o.absmax = __shfl_down_sync(0xffffffffu, p.absmax, d);
    o.finite = __shfl_down_sync(0xffffffffu, p.finite, d);
    o.nonfinite = __shfl_down_sync(0xffffffffu, p.nonfinite, d);
    merge(p, o);
  }
  __shared__ Partial warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = p;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) merge(p, warps[w]);
    partials[blockIdx.y * size_t{gridDim.x} + blockIdx.x] = p;
  }
}

// Bin 0 (a ReLU output's zeros: half of most tensors) is counted per thread, apart from the shared
// bins, where every lane of a warp adding to one address would wait for the others.
__global__ void histogram(const DeviceFloats* tensors, const double* widths, unsigned long long* counts) {
  const double width = widths[blockIdx.y];
  if (width == 0) return;  // the whole block: this tensor needs no histogram
  __shared__ unsigned int bins[kBins];
  for (int j = threadIdx.x; j < kBins; j += kThreads) bins[j] = 0;
  __syncthreads();
  const DeviceFloats t = tensors[blockIdx.y];
  unsigned int zeros = 0;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < t.count; i += size_t{gridDim.x} * kThreads) {
    const float f = t.data[i];
    if (!isfinite(f)) continue;
    const double b = fmin(floor(fabs(static_cast<double>(f)) / width), static_cast<double>(kBins - 1));
    if (b == 0)
      ++zeros;
    else
      atomicAdd(&bins[static_cast<int>(b)], 1u);
  }
  if (zeros) atomicAdd(&bins[0], zeros);
  __syncthreads();
  unsigned long long* out = counts + blockIdx.y * size_t{kBins};
  for (int j = threadIdx.x; j < kBins; j += kThreads)
    if (bins[j]) atomicAdd(&out[j], static_cast<unsigned long long>(bins[j]));
}

}  // namespace

void add_on_gpu(std::span<TensorStats* const> stats, std::span<const DeviceFloats> batch) {
  if (stats.size() != batch.size()) throw Error(std::string(kWhat) + ": as many statistics as tensors");
  const size_t n = batch.size();
  if (n == 0) return;
  if (n > 65535) throw Error(std::string(kWhat) + ": more than 65535 tensors in one batch");
  size_t longest = 0;
  for (const DeviceFloats& t : batch) longest = std::max(longest, t.count);
  // Enough blocks to fill the GPU on the longest tensor; a block counts at most 2^32 - 1 values
  // into its 32-bit shared bins.
  const size_t per_block = size_t{kThreads} * 16;
  int blocks = static_cast<int>(std::clamp<size_t>((longest + per_block - 1) / per_block, 1, kMaxBlocks));
  if (longest / static_cast<size_t>(blocks) >= std::numeric_limits<unsigned int>::max())
    throw Error(std::string(kWhat) + ": a tensor of " + std::to_string(longest) + " values is too large");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(n));

  const gpu::DeviceBuffer tensors = buffer(n * sizeof(DeviceFloats)), partials = buffer(n * blocks * sizeof(Partial)),
                          widths = buffer(n * sizeof(double)), counts = buffer(n * kBins * sizeof(unsigned long long));
  check(cudaMemcpy(tensors.get(), batch.data(), n * sizeof(DeviceFloats), cudaMemcpyHostToDevice), "uploading the tensors");
  summarize<<<grid, kThreads>>>(tensors.as<DeviceFloats>(), partials.as<Partial>());
  gpu::check_launch(std::string(kWhat) + ": the summary kernel");
  std::vector<Partial> p(n * blocks);
  check(cudaMemcpy(p.data(), partials.get(), p.size() * sizeof(Partial), cudaMemcpyDeviceToHost), "the summaries");

  std::vector<double> w(n, 0);
  for (size_t t = 0; t < n; ++t) {
    BatchSummary s;
    for (int b = 0; b < blocks; ++b) {
      const Partial& q = p[t * blocks + b];
      s.nonfinite += q.nonfinite;
      if (q.finite == 0) continue;
      s.min = s.finite ? std::min(s.min, static_cast<double>(q.min)) : q.min;
      s.max = s.finite ? std::max(s.max, static_cast<double>(q.max)) : q.max;
      s.absmax = std::max(s.absmax, static_cast<double>(q.absmax));
      s.finite += q.finite;
    }
    w[t] = stats[t]->add_summary(s);
  }
  if (std::all_of(w.begin(), w.end(), [](double x) { return x == 0; })) return;
  check(cudaMemcpy(widths.get(), w.data(), n * sizeof(double), cudaMemcpyHostToDevice), "uploading the bin widths");
  check(cudaMemset(counts.get(), 0, n * kBins * sizeof(unsigned long long)), "cudaMemset");
  histogram<<<grid, kThreads>>>(tensors.as<DeviceFloats>(), widths.as<double>(), counts.as<unsigned long long>());
  gpu::check_launch(std::string(kWhat) + ": the histogram kernel");
  std::vector<uint64_t> c(n * kBins);
  check(cudaMemcpy(c.data(), counts.get(), c.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "the histograms");
  for (size_t t = 0; t < n; ++t)
    if (w[t] != 0) stats[t]->add_histogram(std::span<const uint64_t>(c).subspan(t * kBins, kBins));
}

}  // namespace kiln::calib
