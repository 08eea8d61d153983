// The epilogue kernel of the conv and gemm families (declared in nn_internal.cuh): after a convolution or a
// product that could not fuse it, one pass over the output computes
//   y = activation2(activation(y + bias[channel]) + z)
// in place (core/epilogue.h's formulas, in float; double for float64; any float type). It also serves the plain
// Conv's bias add. Element i's channel is (i / inner) % channels: inner is the plane for NCHW
// (channels-first), 1 for channels-last tensors and for the columns of a matrix.
//
// 16 bytes per thread per step where the layout allows: with inner a multiple of the vector width
// the N elements share one channel (NCHW); with inner 1 and channels a multiple of N they are N
// consecutive channels, whose biases are one aligned vector load. y and z must be 16-byte aligned
// for that; otherwise one element per thread.
#include "core/epilogue.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

namespace {

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

enum class Layout { kScalar, kSharedChannel, kConsecutiveChannels };

template <class T, int N, Layout L>
__global__ void __launch_bounds__(ew::kThreads)
    epilogue_kernel(T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ z, int64_t n_vec,
                    int64_t inner, int64_t channels, EpilogueAttrs e) {
  using C = Acc<T>;
  wait_for_inputs();  // a programmatic dependent launch (apply_epilogue)
  start_next_kernel();
  auto* yv = reinterpret_cast<ew::Vec<T, N>*>(y);
  const auto* zv = reinterpret_cast<const ew::Vec<T, N>*>(z);
  const int64_t step = ew::grid_threads();
  for (int64_t i = ew::global_thread(); i < n_vec; i += step) {
    ew::Vec<T, N> v = yv[i];
    ew::Vec<T, N> r{};
    if (z) r = zv[i];
    C b[N];
    if constexpr (L == Layout::kConsecutiveChannels) {
      const int64_t c0 = (i * N) % channels;  // channels % N == 0: one aligned vector of biases
      if (bias) {
        const ew::Vec<T, N> bv = reinterpret_cast<const ew::Vec<T, N>*>(bias + c0)[0];
#pragma unroll
        for (int k = 0; k < N; ++k) b[k] = static_cast<C>(ew::load(bv.v[k]));
      } else {
#pragma unroll
        for (int k = 0; k < N; ++k) b[k] = C(0);
      }
    } else {
      const C shared = bias ? static_cast<C>(ew::load(bias[(i * N / inner) % channels])) : C(0);
#pragma unroll
      for (int k = 0; k < N; ++k) b[k] = shared;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const C zk = z ? static_cast<C>(ew::load(r.v[k])) : C(0);
      v.v[k] = ew::store<T>(epilogue::apply<C>(e, static_cast<C>(ew::load(v.v[k])), b[k], zk, z != nullptr));
    }
    yv[i] = v;
  }
}

}  // namespace

bool epilogue_is_identity(const EpilogueAttrs& e, const void* bias, const void* z) {
  return !bias && !z && e.activation == Activation::kNone;
}

void apply_epilogue(void* y, const void* bias, const void* z, const EpilogueAttrs& e, int64_t n, int64_t inner,
                    int64_t channels, DataType dt, cudaStream_t stream, const char* op) {
  if (n == 0 || epilogue_is_identity(e, bias, z)) return;
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int N = ew::kVecBytes / sizeof(T);
    T* py = static_cast<T*>(y);
    const T* pb = static_cast<const T*>(bias);
    const T* pz = static_cast<const T*>(z);
    const bool aligned = ew::aligned_to(y, ew::kVecBytes) && (!z || ew::aligned_to(z, ew::kVecBytes));
    if (aligned && n % N == 0 && inner % N == 0) {
      launch_dependent<epilogue_kernel<T, N, Layout::kSharedChannel>>(dim3(ew::blocks_for(n / N)), ew::kThreads, 0,
                                                                      stream, 1, op, py, pb, pz, n / N, inner,
                                                                      channels, e);
    } else if (aligned && inner == 1 && channels % N == 0 && (!bias || ew::aligned_to(bias, ew::kVecBytes))) {
      launch_dependent<epilogue_kernel<T, N, Layout::kConsecutiveChannels>>(dim3(ew::blocks_for(n / N)), ew::kThreads,
                                                                            0, stream, 1, op, py, pb, pz, n / N,
                                                                            inner, channels, e);
    } else {
      launch_dependent<epilogue_kernel<T, 1, Layout::kScalar>>(dim3(ew::blocks_for(n)), ew::kThreads, 0, stream, 1, op,
                                                               py, pb, pz, n, inner, channels, e);
    }
  };
  ew::dispatch_ew_float(dt, op, launch);
  check_launch(op);
}

}  // namespace kiln::gpu::nn
