// libFuzzer target for the CPU convolution: the bytes choose a geometry (rank 1 to 3, kernel,
// strides, dilations, pads, groups, channels, batch), Conv or ConvTranspose, float32 or float64 and
// 1 to 7 threads. Shape inference must accept it or throw kiln::Error; an accepted geometry must
// run and agree with the float64 definition (tests/cpu/conv_reference.h). A crash, a sanitizer
// report or a wrong value (abort) is a bug.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../cpu/conv_reference.h"
#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace {

struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  int64_t in(int64_t lo, int64_t hi) { return lo + next() % (hi - lo + 1); }
};

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<double>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  for (size_t i = 0; i < v.size(); ++i) {
    const T x = static_cast<T>(v[i]);
    std::memcpy(b.data() + i * sizeof(T), &x, sizeof(T));
  }
  return b;
}

template <class T>
std::vector<double> values_of(const std::vector<uint8_t>& b) {
  std::vector<double> v(b.size() / sizeof(T));
  for (size_t i = 0; i < v.size(); ++i) {
    T x;
    std::memcpy(&x, b.data() + i * sizeof(T), sizeof(T));
    v[i] = static_cast<double>(x);
  }
  return v;
}

template <class T>
void fuzz(Bytes& in, const kiln::test::ConvProblem& p, bool transpose, int threads) {
  using kiln::TensorView;
  std::vector<int64_t> xs{p.batch, p.channels}, ws;
  xs.insert(xs.end(), p.in.begin(), p.in.end());
  ws = transpose ? std::vector<int64_t>{p.channels, p.out_channels / p.group}
                 : std::vector<int64_t>{p.out_channels, p.channels / p.group};
  ws.insert(ws.end(), p.kernel.begin(), p.kernel.end());
  auto fill = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = (static_cast<int>(in.next()) - 128) / 64.0;  // exact in float
    return v;
  };
  const std::vector<double> xv = fill(kiln::test::product(xs)), wv = fill(kiln::test::product(ws)),
                            bv = fill(p.out_channels);
  std::vector<uint8_t> xb = bytes_of<T>(xv), wb = bytes_of<T>(wv), bb = bytes_of<T>(bv);
  const kiln::DataType dt = sizeof(T) == 4 ? kiln::DataType::kFloat32 : kiln::DataType::kFloat64;
  auto view = [&](std::vector<uint8_t>& b, const std::vector<int64_t>& shape) {
    TensorView v;
    v.dtype = dt;
    v.shape = shape;
    v.data = b.data();
    return v;
  };
  const std::vector<int64_t> bs{p.out_channels};
  std::vector<TensorView> inputs{view(xb, xs), view(wb, ws), view(bb, bs)};
  kiln::ConvAttrs a;
  a.group = p.group;
  a.kernel_shape = p.kernel;
  a.strides = p.strides;
  a.dilations = p.dilations;
  a.pads = p.pads();
  if (transpose) a.output_padding = p.output_padding;
  const kiln::OpKind kind = transpose ? kiln::OpKind::kConvTranspose : kiln::OpKind::kConv;
  std::vector<kiln::OutputType> types;
  try {
    types = kiln::infer_shapes(kind, a, inputs, 1);
  } catch (const kiln::Error&) {
    return;  // a geometry ONNX does not allow: refused, as it should be
  }
  const std::vector<int64_t> want_shape = [&] {
    std::vector<int64_t> s{p.batch, p.out_channels};
    const std::vector<int64_t> o = transpose ? p.transpose_out() : p.conv_out();
    s.insert(s.end(), o.begin(), o.end());
    return s;
  }();
  if (types.size() != 1 || types[0].shape != want_shape) std::abort();  // shape inference disagrees
  if (kiln::test::product(want_shape) > (1 << 16)) return;
  std::vector<uint8_t> yb(static_cast<size_t>(kiln::test::product(want_shape)) * sizeof(T), 0xAB);
  std::vector<TensorView> outputs{view(yb, want_shape)};
  kiln::cpu::ThreadPool pool(threads);
  kiln::cpu::KernelEnv env{threads > 1 ? &pool : nullptr};
  kiln::cpu::cpu_kernel(kind)(kind, a, inputs, outputs, env);
  const std::vector<double> want =
      transpose ? kiln::test::conv_transpose_reference(p, xv, wv, &bv) : kiln::test::conv_reference(p, xv, wv, &bv);
  const std::vector<double> got = values_of<T>(yb);
  const double taps = static_cast<double>(kiln::test::product(p.kernel) * p.channels);
  const double tol = (sizeof(T) == 4 ? 1e-5 : 1e-12) * (1 + taps);
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])))) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  kiln::test::ConvProblem p;
  const int64_t rank = in.in(1, 3);
  for (int64_t i = 0; i < rank; ++i) {
    p.kernel.push_back(in.in(1, rank == 1 ? 16 : rank == 2 ? 8 : 3));
    p.strides.push_back(in.in(1, 6));
    p.dilations.push_back(in.in(1, 4));
    p.pads_begin.push_back(in.in(0, 12));
    p.pads_end.push_back(in.in(0, 12));
    p.output_padding.push_back(in.in(0, 5));
    p.in.push_back(in.in(1, rank == 1 ? 64 : rank == 2 ? 24 : 8));
  }
  p.group = in.in(1, 4);
  p.channels = p.group * in.in(1, 3);
  p.out_channels = p.group * in.in(1, 3);
  p.batch = in.in(1, 3);
  const bool transpose = in.next() & 1;
  const bool f64 = in.next() & 1;
  const int threads = static_cast<int>(in.in(1, 7));
  if (!transpose) p.output_padding.clear();
  if (f64)
    fuzz<double>(in, p, transpose, threads);
  else
    fuzz<float>(in, p, transpose, threads);
  return 0;
}
