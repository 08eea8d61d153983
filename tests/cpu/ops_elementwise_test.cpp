// Elementwise family: every op against an independent float64 reference on random inputs (odd and
// zero-size shapes, broadcasting, every attribute, several dtypes), outputs poisoned before the
// kernel runs; parallel paths through a ThreadPool; ONNX backend-test cases; inference errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using DT = DataType;
using Shape = std::vector<int64_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<DT> kFloatTypes = {DT::kFloat32, DT::kFloat64, DT::kFloat16, DT::kBFloat16};
const std::vector<DT> kIntTypes = {DT::kInt8,  DT::kUInt8,  DT::kInt16, DT::kUInt16,
                                   DT::kInt32, DT::kUInt32, DT::kInt64, DT::kUInt64};
const std::vector<DT> kAllTypes = {DT::kFloat32, DT::kFloat64, DT::kFloat16, DT::kBFloat16, DT::kInt8,
                                   DT::kUInt8,   DT::kInt16,   DT::kUInt16,  DT::kInt32,    DT::kUInt32,
                                   DT::kInt64,   DT::kUInt64,  DT::kBool};

bool is_float(DT t) { return t == DT::kFloat32 || t == DT::kFloat64 || t == DT::kFloat16 || t == DT::kBFloat16; }
bool is_signed(DT t) { return is_float(t) || t == DT::kInt8 || t == DT::kInt16 || t == DT::kInt32 || t == DT::kInt64; }

struct Tensor {
  DT dtype = DT::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;
  bool exists = true;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  TensorView view(bool with_data = true) const {
    return TensorView{dtype, shape, with_data ? const_cast<uint8_t*>(bytes.data()) : nullptr, exists};
  }
};

double get(const Tensor& t, int64_t i) {
  if (t.dtype == DT::kBool) return t.bytes[i] ? 1.0 : 0.0;
  return dispatch_numeric(t.dtype, "get", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
    return static_cast<double>(static_cast<ComputeType<T>>(v));
  });
}

// Integers wrap modulo 2^bits (through int64), floats round to the type.
void set(Tensor& t, int64_t i, double v) {
  if (t.dtype == DT::kBool) {
    t.bytes[i] = v != 0;
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

Tensor make(DT dt, Shape shape, const std::vector<double>& v) {
  Tensor t{dt, std::move(shape), {}};
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v[i]);
  return t;
}

std::mt19937& rng() {
  static std::mt19937 g(1234);
  return g;
}

// Uniform in [lo, hi]; integer-valued for integer dtypes or when `integral`.
Tensor rand_tensor(DT dt, Shape shape, double lo, double hi, bool integral = false) {
  Tensor t{dt, std::move(shape), {}};
  std::vector<double> v(static_cast<size_t>(t.numel()));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& x : v) x = (integral || !is_float(dt)) ? std::round(u(rng())) : u(rng());
  return make(dt, t.shape, v);
}

Tensor absent() { return Tensor{DT::kFloat32, {}, {}, false}; }

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = get(t, i);
  return v;
}

// infer_shapes + the CPU kernel. Outputs are poisoned (NaN for floats, 0xAB bytes otherwise);
// bool outputs must come back as bytes 0/1. `const_data`: inference sees the input data.
std::vector<Tensor> run(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& ins, size_t n_out = 1,
                        cpu::ThreadPool* pool = nullptr, bool const_data = false) {
  std::vector<TensorView> iv;
  for (const Tensor& t : ins) iv.push_back(t.view(const_data));
  std::vector<OutputType> types = infer_shapes(kind, attrs, iv, n_out);
  std::vector<Tensor> outs;
  for (const OutputType& o : types) {
    Tensor t{o.dtype, o.shape, {}};
    t.bytes.assign(static_cast<size_t>(t.numel()) * dtype_size(o.dtype), 0xAB);
    if (is_float(o.dtype))
      for (int64_t i = 0; i < t.numel(); ++i) set(t, i, kNaN);
    outs.push_back(std::move(t));
  }
  iv.clear();
  for (const Tensor& t : ins) iv.push_back(t.view());
  std::vector<TensorView> ov;
  for (const Tensor& t : outs) ov.push_back(t.view());
  cpu::KernelEnv env{pool};
  cpu::CpuKernel k = cpu::cpu_kernel(kind);
  if (!k) throw std::runtime_error("no kernel");
  k(kind, attrs, iv, ov, env);
  for (const Tensor& t : outs) {
    if (t.dtype != DT::kBool) continue;
    for (uint8_t b : t.bytes) {
      EXPECT_LE(b, 1) << "bool output byte not 0/1 (unwritten?)";
    }
  }
  return outs;
}

Tensor run1(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& ins, cpu::ThreadPool* pool = nullptr) {
  return run(kind, attrs, ins, 1, pool)[0];
}

double tol_of(DT dt) {
  switch (dt) {
    case DT::kFloat64: return 1e-12;
    case DT::kFloat32: return 1e-5;
    case DT::kFloat16: return 3e-3;
    case DT::kBFloat16: return 2e-2;
    default: return 0;
  }
}

void expect_close(const Tensor& out, const std::vector<double>& ref, const std::string& what, double scale = 1) {
  ASSERT_EQ(out.numel(), static_cast<int64_t>(ref.size())) << what;
  const double tol = tol_of(out.dtype) * scale;
  int bad = 0;
  for (int64_t i = 0; i < out.numel() && bad < 5; ++i) {
    const double g = get(out, i), r = ref[i];
    bool ok;
    if (std::isnan(r))
      ok = std::isnan(g);
    else if (std::isinf(r) || tol == 0)
      ok = g == r;
    else
      ok = std::abs(g - r) <= tol * (1 + std::abs(r));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " [" << dtype_name(out.dtype) << "] element " << i << ": got " << g << ", want " << r;
    }
  }
}

// Reference broadcasting: index of output element `i` in an input of shape `in`.
int64_t bcast_index(const Shape& out, const Shape& in, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t c = i % out[d];
    i /= out[d];
    const size_t off = out.size() - in.size();
    if (d >= off) {
      const int64_t dim = in[d - off];
      if (dim != 1) idx += c * stride;
      stride *= dim;
    }
  }
  return idx;
}

std::vector<double> ref_nary(const std::vector<Tensor>& ins, const Shape& out,
                             const std::function<double(const std::vector<double>&)>& f) {
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  std::vector<double> r(static_cast<size_t>(n)), args(ins.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < ins.size(); ++k) args[k] = get(ins[k], bcast_index(out, ins[k].shape, i));
    r[i] = f(args);
  }
  return r;
}

// The integer result `v` (exact in double) as the dtype stores it: wrapped modulo 2^bits.
double wrap(DT dt, double v) {
  Tensor t = make(dt, {}, {v});
  return get(t, 0);
}

const std::vector<Shape> kUnaryShapes = {{}, {0}, {7}, {3, 5, 2}, {1, 1, 33}, {2, 0, 3}};

// ---- unary on floats -----------------------------------------------------------------------
struct UnaryCase {
  OpKind kind;
  Attrs attrs;
  double lo, hi;
  std::function<double(double)> ref;
};

double softplus(double x) { return std::log1p(std::exp(x)); }

std::vector<UnaryCase> unary_cases() {
  auto al = [](float a) { return Attrs{AlphaAttrs{a}}; };
  const double sel_a = 1.67326319217681884765625, sel_g = 1.05070102214813232421875;
  return {
      {OpKind::kAcos, NoAttrs{}, -1, 1, [](double x) { return std::acos(x); }},
      {OpKind::kAcosh, NoAttrs{}, 1, 5, [](double x) { return std::acosh(x); }},
      {OpKind::kAsin, NoAttrs{}, -1, 1, [](double x) { return std::asin(x); }},
      {OpKind::kAsinh, NoAttrs{}, -5, 5, [](double x) { return std::asinh(x); }},
      {OpKind::kAtan, NoAttrs{}, -5, 5, [](double x) { return std::atan(x); }},
      {OpKind::kAtanh, NoAttrs{}, -0.95, 0.95, [](double x) { return std::atanh(x); }},
      {OpKind::kCos, NoAttrs{}, -6, 6, [](double x) { return std::cos(x); }},
      {OpKind::kCosh, NoAttrs{}, -5, 5, [](double x) { return std::cosh(x); }},
      {OpKind::kSin, NoAttrs{}, -6, 6, [](double x) { return std::sin(x); }},
      {OpKind::kSinh, NoAttrs{}, -5, 5, [](double x) { return std::sinh(x); }},
      {OpKind::kTan, NoAttrs{}, -1.3, 1.3, [](double x) { return std::tan(x); }},
      {OpKind::kTanh, NoAttrs{}, -5, 5, [](double x) { return std::tanh(x); }},
      {OpKind::kErf, NoAttrs{}, -3, 3, [](double x) { return std::erf(x); }},
      {OpKind::kExp, NoAttrs{}, -10, 10, [](double x) { return std::exp(x); }},
      {OpKind::kLog, NoAttrs{}, 0.01, 100, [](double x) { return std::log(x); }},
      {OpKind::kSqrt, NoAttrs{}, 0, 100, [](double x) { return std::sqrt(x); }},
      {OpKind::kReciprocal, NoAttrs{}, 0.1, 10, [](double x) { return 1 / x; }},
      {OpKind::kSigmoid, NoAttrs{}, -30, 30, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {OpKind::kSoftplus, NoAttrs{}, -30, 30, softplus},
      {OpKind::kSoftsign, NoAttrs{}, -10, 10, [](double x) { return x / (1 + std::abs(x)); }},
      {OpKind::kCeil, NoAttrs{}, -10, 10, [](double x) { return std::ceil(x); }},
      {OpKind::kFloor, NoAttrs{}, -10, 10, [](double x) { return std::floor(x); }},
      {OpKind::kRound, NoAttrs{}, -10, 10, [](double x) { return std::nearbyint(x); }},
      {OpKind::kGelu, GeluAttrs{}, -5, 5, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {OpKind::kGelu, GeluAttrs{GeluApproximation::kTanh}, -5, 5,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
       }},
      {OpKind::kMish, NoAttrs{}, -10, 10, [](double x) { return x * std::tanh(softplus(x)); }},
      {OpKind::kHardSwish, NoAttrs{}, -5, 5, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }},
      {OpKind::kHardSigmoid, HardSigmoidAttrs{0.3f, 0.6f}, -5, 5,
       [](double x) { return std::clamp(double(0.3f) * x + double(0.6f), 0.0, 1.0); }},
      {OpKind::kElu, al(0.7f), -5, 5, [](double x) { return x < 0 ? double(0.7f) * (std::exp(x) - 1) : x; }},
      {OpKind::kCelu, al(1.5f), -5, 5,
       [](double x) { return std::max(0.0, x) + std::min(0.0, 1.5 * (std::exp(x / 1.5) - 1)); }},
      {OpKind::kLeakyRelu, al(0.1f), -5, 5, [](double x) { return x < 0 ? double(0.1f) * x : x; }},
      {OpKind::kThresholdedRelu, al(0.5f), -2, 2, [](double x) { return x > 0.5 ? x : 0; }},
      {OpKind::kSelu, SeluAttrs{}, -5, 5,
       [=](double x) { return x > 0 ? sel_g * x : sel_g * (sel_a * std::exp(x) - sel_a); }},
      {OpKind::kSelu, SeluAttrs{2.0f, 3.0f}, -5, 5, [](double x) { return x > 0 ? 3 * x : 3 * (2 * std::exp(x) - 2); }},
      {OpKind::kShrink, ShrinkAttrs{0.25f, 0.75f}, -2, 2,
       [](double x) { return x < -0.75  ? x + 0.25
                             : x > 0.75 ? x - 0.25
                                        : 0; }},
      {OpKind::kRelu, NoAttrs{}, -5, 5, [](double x) { return std::max(x, 0.0); }},
      {OpKind::kAbs, NoAttrs{}, -5, 5, [](double x) { return std::abs(x); }},
      {OpKind::kNeg, NoAttrs{}, -5, 5, [](double x) { return -x; }},
      {OpKind::kSign, NoAttrs{}, -2, 2, [](double x) { return double((x > 0) - (x < 0)); }},
  };
}

TEST(Elementwise, UnaryFloatOps) {
  cpu::ThreadPool pool(2);
  for (const UnaryCase& c : unary_cases()) {
    for (DT dt : kFloatTypes) {
      for (const Shape& s : kUnaryShapes) {
        Tensor x = rand_tensor(dt, s, c.lo, c.hi);
        Tensor y = run1(c.kind, c.attrs, {x});
        EXPECT_EQ(y.shape, s);
        EXPECT_EQ(y.dtype, dt);
        std::vector<double> ref;
        for (double v : values(x)) ref.push_back(c.ref(v));
        expect_close(y, ref, std::string(op_name(c.kind)));
      }
    }
    // Large enough to split across the pool.
    Tensor x = rand_tensor(DT::kFloat32, {70001}, c.lo, c.hi);
    Tensor y = run1(c.kind, c.attrs, {x}, &pool);
    std::vector<double> ref;
    for (double v : values(x)) ref.push_back(c.ref(v));
    expect_close(y, ref, std::string(op_name(c.kind)) + " parallel");
  }
}

TEST(Elementwise, UnarySpecialValues) {
  Tensor x = make(DT::kFloat32, {8}, {0.5, 1.5, 2.5, -0.5, -2.5, kNaN, kInf, -kInf});
  expect_close(run1(OpKind::kRound, NoAttrs{}, {x}), {0, 2, 2, -0.0, -2, kNaN, kInf, -kInf}, "Round half even");
  expect_close(run1(OpKind::kSign, NoAttrs{}, {x}), {1, 1, 1, -1, -1, kNaN, 1, -1}, "Sign");
  expect_close(run1(OpKind::kRelu, NoAttrs{}, {x}), {0.5, 1.5, 2.5, 0, 0, kNaN, kInf, 0}, "Relu");
  expect_close(run1(OpKind::kSigmoid, NoAttrs{}, {make(DT::kFloat32, {3}, {-200, 200, 0})}), {0, 1, 0.5}, "Sigmoid");
  expect_close(run1(OpKind::kSoftplus, NoAttrs{}, {make(DT::kFloat32, {2}, {-200, 200})}), {0, 200}, "Softplus");
  Tensor s = make(DT::kFloat64, {6}, {1, -kInf, kInf, kNaN, -0.0, 3});
  for (int neg = 0; neg < 2; ++neg)
    for (int pos = 0; pos < 2; ++pos) {
      Tensor y = run1(OpKind::kIsInf, IsInfAttrs{neg, pos}, {s});
      EXPECT_EQ(y.dtype, DT::kBool);
      expect_close(y, {0, double(neg), double(pos), 0, 0, 0}, "IsInf");
    }
  for (DT dt : kFloatTypes) {
    Tensor v = make(dt, {4}, {kNaN, 1, kInf, -kNaN});
    expect_close(run1(OpKind::kIsNaN, NoAttrs{}, {v}), {1, 0, 0, 1}, "IsNaN");
  }
  expect_close(run1(OpKind::kNot, NoAttrs{}, {make(DT::kBool, {3}, {1, 0, 1})}), {0, 1, 0}, "Not");
  Tensor odd{DT::kBool, {2}, {2, 0}};  // a non-canonical true byte still reads as true
  expect_close(run1(OpKind::kNot, NoAttrs{}, {odd}), {0, 1}, "Not byte 2");
}

TEST(Elementwise, UnaryIntegerOps) {
  for (DT dt : kIntTypes) {
    const bool sg = is_signed(dt);
    for (const Shape& s : kUnaryShapes) {
      Tensor x = rand_tensor(dt, s, sg ? -100 : 0, 100);
      std::vector<double> v = values(x), a, n, sgn, r, e, sh;
      for (double q : v) {
        a.push_back(std::abs(q));
        n.push_back(wrap(dt, -q));
        sgn.push_back((q > 0) - (q < 0));
        r.push_back(std::max(q, 0.0));
        e.push_back(std::trunc(std::erf(q)));
        sh.push_back(q < -2 ? std::trunc(q + 1.5) : q > 2 ? std::max(0.0, std::trunc(q - 1.5)) : 0);
      }
      expect_close(run1(OpKind::kAbs, NoAttrs{}, {x}), a, "Abs");
      expect_close(run1(OpKind::kSign, NoAttrs{}, {x}), sgn, "Sign");
      expect_close(run1(OpKind::kErf, NoAttrs{}, {x}), e, "Erf int");
      expect_close(run1(OpKind::kShrink, ShrinkAttrs{1.5f, 2.0f}, {x}), sh, "Shrink int");
      if (sg) {
        expect_close(run1(OpKind::kNeg, NoAttrs{}, {x}), n, "Neg");
        expect_close(run1(OpKind::kRelu, NoAttrs{}, {x}), r, "Relu");
      }
    }
  }
  // |INT_MIN| and -INT_MIN wrap instead of overflowing.
  Tensor m = make(DT::kInt32, {2}, {-2147483648.0, 5});
  expect_close(run1(OpKind::kAbs, NoAttrs{}, {m}), {-2147483648.0, 5}, "Abs INT_MIN");
  expect_close(run1(OpKind::kNeg, NoAttrs{}, {m}), {-2147483648.0, -5}, "Neg INT_MIN");
}

TEST(Elementwise, IdentityAndDropout) {
  for (DT dt : kAllTypes) {
    Tensor x = rand_tensor(dt, {3, 5}, 0, 1);
    EXPECT_EQ(run1(OpKind::kIdentity, NoAttrs{}, {x}).bytes, x.bytes);
  }
  for (DT dt : kFloatTypes) {
    Tensor x = rand_tensor(dt, {2, 7}, -1, 1);
    std::vector<Tensor> y = run(OpKind::kDropout, NoAttrs{}, {x}, 2);
    EXPECT_EQ(y[0].bytes, x.bytes);
    EXPECT_EQ(y[1].dtype, DT::kBool);
    EXPECT_EQ(y[1].shape, x.shape);
    for (uint8_t b : y[1].bytes) EXPECT_EQ(b, 1);
    Tensor ratio = make(DT::kFloat32, {}, {0.3});
    Tensor off = make(DT::kBool, {}, {0});
    y = run(OpKind::kDropout, NoAttrs{}, {x, ratio, off}, 2, nullptr, true);
    EXPECT_EQ(y[0].bytes, x.bytes);
    EXPECT_EQ(run(OpKind::kDropout, NoAttrs{}, {x, absent(), off}, 1)[0].bytes, x.bytes);
  }
  Tensor x = rand_tensor(DT::kFloat32, {4}, -1, 1);
  Tensor on = make(DT::kBool, {}, {1});
  try {
    run(OpKind::kDropout, NoAttrs{}, {x, absent(), on}, 1, nullptr, true);
    ADD_FAILURE() << "training-mode Dropout accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training-mode Dropout with a ratio other than 0"), std::string::npos)
        << e.what();
  }
  // Not a build-time constant: inference passes, the kernel refuses.
  EXPECT_THROW(run(OpKind::kDropout, NoAttrs{}, {x, absent(), on}, 1), Error);
  // Training mode with ratio 0 (or -0) drops nothing: the identity with an all-true mask, known at
  // build time or only when it runs (PyTorch 1.13 exports torchvision's Swin-T so).
  for (double zero : {0.0, -0.0})
    for (bool constant : {true, false}) {
      Tensor r = make(DT::kFloat32, {}, {zero});
      std::vector<Tensor> y = run(OpKind::kDropout, NoAttrs{}, {x, r, on}, 2, nullptr, constant);
      EXPECT_EQ(y[0].bytes, x.bytes);
      for (uint8_t b : y[1].bytes) EXPECT_EQ(b, 1);
    }
  Tensor small = make(DT::kFloat32, {}, {1e-3});
  EXPECT_THROW(run(OpKind::kDropout, NoAttrs{}, {x, small, on}, 1, nullptr, true), Error);
  EXPECT_THROW(run(OpKind::kDropout, NoAttrs{}, {x, small, on}, 1), Error);
}

// ---- broadcasting binary -------------------------------------------------------------------
const std::vector<std::pair<Shape, Shape>> kBcast = {
    {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}},       {{2, 1, 4}, {3, 1}},          {{}, {5}},
    {{5}, {}},        {{0, 3}, {3}},          {{1, 3, 1, 5}, {2, 1, 4, 1}}, {{2, 3}, {1, 1, 1}},
    {{7, 1}, {1, 9}}, {{2, 3, 5}, {2, 3, 5}}, {{4, 1, 3}, {4, 2, 3}}};

using Ref2 = std::function<double(double, double)>;

void check_binary(OpKind kind, const Attrs& attrs, DT dt, double lo, double hi, const Ref2& ref,
                  const std::function<void(Tensor&)>& fix_b = {}, DT out_dt = DT(0)) {
  for (const auto& [sa, sb] : kBcast) {
    Tensor a = rand_tensor(dt, sa, lo, hi), b = rand_tensor(dt, sb, lo, hi);
    if (fix_b) fix_b(b);
    Tensor y = run1(kind, attrs, {a, b});
    EXPECT_EQ(y.dtype, out_dt == DT(0) ? dt : out_dt);
    const Shape out = broadcast_shapes(sa, sb);
    EXPECT_EQ(y.shape, out);
    expect_close(y, ref_nary({a, b}, out, [&](const std::vector<double>& v) { return ref(v[0], v[1]); }),
                 std::string(op_name(kind)) + " " + shape_string(sa) + " " + shape_string(sb), 2);
  }
}

void nonzero(Tensor& b) {
  for (int64_t i = 0; i < b.numel(); ++i)
    if (get(b, i) == 0) set(b, i, 1);
}

TEST(Elementwise, Arithmetic) {
  for (DT dt : kFloatTypes) {
    check_binary(OpKind::kAdd, NoAttrs{}, dt, -3, 3, [](double a, double b) { return a + b; });
    check_binary(OpKind::kSub, NoAttrs{}, dt, -3, 3, [](double a, double b) { return a - b; });
    check_binary(OpKind::kMul, NoAttrs{}, dt, -3, 3, [](double a, double b) { return a * b; });
    check_binary(OpKind::kDiv, NoAttrs{}, dt, 0.5, 3, [](double a, double b) { return a / b; });
    check_binary(
        OpKind::kMod, ModAttrs{1}, dt, -9, 9, [](double a, double b) { return std::fmod(a, b); }, nonzero);
    check_binary(OpKind::kPow, NoAttrs{}, dt, 0.2, 2.5, [](double a, double b) { return std::pow(a, b); });
  }
  for (DT dt : kIntTypes) {
    const bool sg = is_signed(dt);
    const double lo = sg ? -11 : 0;
    check_binary(OpKind::kAdd, NoAttrs{}, dt, lo, 11, [&](double a, double b) { return wrap(dt, a + b); });
    check_binary(OpKind::kSub, NoAttrs{}, dt, lo, 11, [&](double a, double b) { return wrap(dt, a - b); });
    check_binary(OpKind::kMul, NoAttrs{}, dt, lo, 11, [&](double a, double b) { return wrap(dt, a * b); });
    const double dlo = sg ? -41 : 0;
    check_binary(
        OpKind::kDiv, NoAttrs{}, dt, dlo, 40, [](double a, double b) { return std::trunc(a / b); }, nonzero);
    check_binary(
        OpKind::kMod, ModAttrs{1}, dt, dlo, 40, [](double a, double b) { return std::fmod(a, b); }, nonzero);
    check_binary(
        OpKind::kMod, ModAttrs{0}, dt, dlo, 40, [](double a, double b) { return a - b * std::floor(a / b); }, nonzero);
    // Exponents in [0, 6]: |result| <= 6^6 is exact in double, then wraps like the dtype.
    check_binary(
        OpKind::kPow, NoAttrs{}, dt, lo / 2, 6, [&](double a, double b) { return wrap(dt, std::pow(a, b)); },
        [](Tensor& b) {
          for (int64_t i = 0; i < b.numel(); ++i) set(b, i, std::abs(get(b, i)));
        });
  }
  // Wrapping, truncation and the INT_MIN / -1 corner.
  Tensor a = make(DT::kInt32, {4}, {2147483647.0, -2147483648.0, -7, 7});
  Tensor b = make(DT::kInt32, {4}, {1, -1, 2, -2});
  expect_close(run1(OpKind::kAdd, NoAttrs{}, {a, b}), {-2147483648.0, 2147483647.0, -5, 5}, "Add wrap");
  expect_close(run1(OpKind::kDiv, NoAttrs{}, {a, b}), {2147483647.0, -2147483648.0, -3, -3}, "Div trunc");
  expect_close(run1(OpKind::kMod, ModAttrs{0}, {a, b}), {0, 0, 1, -1}, "Mod python");
  expect_close(run1(OpKind::kMod, ModAttrs{1}, {a, b}), {0, 0, -1, 1}, "Mod fmod");
  Tensor u16 = make(DT::kUInt16, {1}, {65535});
  expect_close(run1(OpKind::kMul, NoAttrs{}, {u16, u16}), {1}, "uint16 mul wraps");
  for (OpKind k : {OpKind::kDiv, OpKind::kMod})
    for (DT dt : {DT::kInt8, DT::kUInt64, DT::kInt32})
      EXPECT_THROW(run1(k, NoAttrs{}, {make(dt, {2}, {4, 5}), make(dt, {}, {0})}), Error) << op_name(k);
  EXPECT_THROW(run1(OpKind::kMod, ModAttrs{0}, {make(DT::kInt8, {2}, {4, 5}), make(DT::kInt8, {2}, {1, 0})}), Error);
  // Float division by zero is IEEE.
  expect_close(run1(OpKind::kDiv, NoAttrs{}, {make(DT::kFloat32, {2}, {1, -1}), make(DT::kFloat32, {}, {0})}),
               {kInf, -kInf}, "Div float by 0");
}

TEST(Elementwise, PowMixedTypes) {
  struct P {
    DT base, exp;
    double blo, bhi, elo, ehi;
  };
  const P cases[] = {{DT::kFloat32, DT::kInt32, -3, 3, -3, 4},    {DT::kFloat32, DT::kInt64, -3, 3, 0, 5},
                     {DT::kFloat32, DT::kUInt64, -3, 3, 0, 5},    {DT::kFloat64, DT::kFloat32, 0.1, 3, -2, 2},
                     {DT::kFloat16, DT::kFloat32, 0.1, 3, -2, 2}, {DT::kBFloat16, DT::kInt8, -3, 3, -2, 3},
                     {DT::kInt32, DT::kFloat32, 0, 9, 0, 2.5},    {DT::kInt64, DT::kFloat64, -9, 9, 0, 3},
                     {DT::kUInt8, DT::kUInt8, 0, 4, 0, 4},        {DT::kInt8, DT::kInt16, -4, 4, 0, 3},
                     {DT::kUInt16, DT::kFloat64, 0, 30, 0.5, 2}};
  for (const P& p : cases) {
    for (const auto& [sa, sb] : kBcast) {
      Tensor a = rand_tensor(p.base, sa, p.blo, p.bhi), b = rand_tensor(p.exp, sb, p.elo, p.ehi);
      Tensor y = run1(OpKind::kPow, NoAttrs{}, {a, b});
      EXPECT_EQ(y.dtype, p.base);
      expect_close(y,
                   ref_nary({a, b}, y.shape,
                            [&](const std::vector<double>& v) {
                              const double r = std::pow(v[0], v[1]);
                              if (is_float(p.base)) return r;
                              if (!is_float(p.exp)) return wrap(p.base, r);
                              return std::isnan(r) ? 0.0 : std::trunc(r);
                            }),
                   "Pow " + std::string(dtype_name(p.base)) + "^" + std::string(dtype_name(p.exp)), 4);
    }
  }
  // Scalar fast paths (x^2, x^0.5, x^1) and a large broadcast through the pool.
  cpu::ThreadPool pool(2);
  for (double e : {2.0, 0.5, 1.0, 3.0}) {
    Tensor a = rand_tensor(DT::kFloat32, {40000}, 0, 3);
    Tensor y = run1(OpKind::kPow, NoAttrs{}, {a, make(DT::kFloat32, {1, 1}, {e})}, &pool);
    EXPECT_EQ(y.shape, (Shape{1, 40000}));
    std::vector<double> ref;
    for (double v : values(a)) ref.push_back(std::pow(v, e));
    expect_close(y, ref, "Pow scalar");
  }
  expect_close(run1(OpKind::kPow, NoAttrs{}, {make(DT::kInt64, {3}, {-1, -1, 2}), make(DT::kInt64, {3}, {-3, -4, -1})}),
               {-1, 1, 0}, "Pow int negative exponent");
  EXPECT_THROW(run1(OpKind::kPow, NoAttrs{}, {make(DT::kInt32, {1}, {0}), make(DT::kInt32, {1}, {-1})}), Error);
  expect_close(run1(OpKind::kPow, NoAttrs{}, {make(DT::kInt32, {2}, {3, 2}), make(DT::kFloat32, {2}, {40, 0.5})}),
               {2147483647.0, 1}, "Pow int^float saturates");
}

TEST(Elementwise, PRelu) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {4}}, {{2, 3, 4}, {3, 1}}, {{5}, {}}, {{0, 2}, {2}}, {{3, 4}, {3, 4}}, {{1, 3, 5, 5}, {3, 1, 1}}};
  for (DT dt : {DT::kFloat32, DT::kFloat64, DT::kFloat16, DT::kBFloat16, DT::kInt32, DT::kInt64, DT::kUInt32}) {
    for (const auto& [sx, ss] : shapes) {
      Tensor x = rand_tensor(dt, sx, is_signed(dt) ? -5 : 0, 5), s = rand_tensor(dt, ss, -2, 2);
      if (!is_signed(dt)) s = rand_tensor(dt, ss, 0, 3);
      Tensor y = run1(OpKind::kPRelu, NoAttrs{}, {x, s});
      expect_close(y, ref_nary({x, s}, sx, [](const std::vector<double>& v) { return v[0] < 0 ? v[0] * v[1] : v[0]; }),
                   "PRelu", 2);
    }
  }
}

TEST(Elementwise, ComparisonsAndLogic) {
  for (DT dt : kAllTypes) {
    const bool b = dt == DT::kBool;
    for (const auto& [sa, sb] : kBcast) {
      Tensor x = rand_tensor(dt, sa, b ? 0 : is_signed(dt) ? -2 : 0, b ? 1 : 3, true);
      Tensor y = rand_tensor(dt, sb, b ? 0 : is_signed(dt) ? -2 : 0, b ? 1 : 3, true);
      const Shape out = broadcast_shapes(sa, sb);
      auto check = [&](OpKind k, const Ref2& f) {
        Tensor r = run1(k, NoAttrs{}, {x, y});
        EXPECT_EQ(r.dtype, DT::kBool);
        expect_close(r, ref_nary({x, y}, out, [&](const std::vector<double>& v) { return f(v[0], v[1]); }),
                     std::string(op_name(k)) + " " + std::string(dtype_name(dt)));
      };
      check(OpKind::kEqual, [](double p, double q) { return double(p == q); });
      if (b) {
        check(OpKind::kAnd, [](double p, double q) { return double(p && q); });
        check(OpKind::kOr, [](double p, double q) { return double(p || q); });
        check(OpKind::kXor, [](double p, double q) { return double((p != 0) != (q != 0)); });
      } else {
        check(OpKind::kGreater, [](double p, double q) { return double(p > q); });
        check(OpKind::kGreaterOrEqual, [](double p, double q) { return double(p >= q); });
        check(OpKind::kLess, [](double p, double q) { return double(p < q); });
        check(OpKind::kLessOrEqual, [](double p, double q) { return double(p <= q); });
      }
    }
  }
  Tensor n = make(DT::kFloat32, {3}, {kNaN, 1, kNaN});
  expect_close(run1(OpKind::kEqual, NoAttrs{}, {n, n}), {0, 1, 0}, "Equal NaN");
  expect_close(run1(OpKind::kLessOrEqual, NoAttrs{}, {n, n}), {0, 1, 0}, "LessOrEqual NaN");
}

// ---- variadic and Where --------------------------------------------------------------------
TEST(Elementwise, Variadic) {
  const std::vector<std::vector<Shape>> sets = {{{3, 4}},      {{3, 4}, {4}},        {{2, 1, 4}, {3, 1}, {}},
                                                {{0, 2}, {2}}, {{5}, {5}, {5}, {5}}, {{2, 3, 1}, {1, 1, 7}}};
  for (DT dt : kAllTypes) {
    if (dt == DT::kBool) continue;
    for (const auto& shapes : sets) {
      std::vector<Tensor> ins;
      const double hi = is_float(dt) ? 4 : 50;  // small floats: half-type sums round at each step
      for (const Shape& s : shapes) ins.push_back(rand_tensor(dt, s, is_signed(dt) ? -hi : 0, hi));
      Shape out = ins[0].shape;
      for (const Tensor& t : ins) out = broadcast_shapes(out, t.shape);
      auto fold = [](const std::function<double(double, double)>& f) {
        return [f](const std::vector<double>& v) {
          double r = v[0];
          for (size_t i = 1; i < v.size(); ++i) r = f(r, v[i]);
          return r;
        };
      };
      const std::string tag = std::string(dtype_name(dt)) + " x" + std::to_string(shapes.size());
      expect_close(run1(OpKind::kMax, NoAttrs{}, ins),
                   ref_nary(ins, out, fold([](double a, double b) { return std::max(a, b); })), "Max " + tag);
      expect_close(run1(OpKind::kMin, NoAttrs{}, ins),
                   ref_nary(ins, out, fold([](double a, double b) { return std::min(a, b); })), "Min " + tag);
      if (!is_float(dt)) continue;
      expect_close(run1(OpKind::kSum, NoAttrs{}, ins), ref_nary(ins, out, fold(std::plus<double>())), "Sum " + tag, 8);
      const double n = double(ins.size());
      expect_close(run1(OpKind::kMean, NoAttrs{}, ins),
                   ref_nary(ins, out, [&](const std::vector<double>& v) { return fold(std::plus<double>())(v) / n; }),
                   "Mean " + tag, 8);
    }
  }
  Tensor a = make(DT::kFloat32, {3}, {kNaN, 1, 2}), b = make(DT::kFloat32, {3}, {0, kNaN, 3});
  expect_close(run1(OpKind::kMax, NoAttrs{}, {a, b}), {kNaN, kNaN, 3}, "Max NaN");
  expect_close(run1(OpKind::kMin, NoAttrs{}, {a, b}), {kNaN, kNaN, 2}, "Min NaN");
}

TEST(Elementwise, Where) {
  const std::vector<std::array<Shape, 3>> sets = {{Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},
                                                  {Shape{3}, Shape{2, 1}, Shape{1}},
                                                  {Shape{}, Shape{4}, Shape{2, 4}},
                                                  {Shape{2, 1, 3}, Shape{1, 4, 1}, Shape{3}},
                                                  {Shape{0, 3}, Shape{3}, Shape{}}};
  for (DT dt : {DT::kFloat32, DT::kInt64, DT::kUInt8, DT::kBool, DT::kFloat16, DT::kInt16}) {
    for (const auto& s : sets) {
      Tensor c = rand_tensor(DT::kBool, s[0], 0, 1), x = rand_tensor(dt, s[1], 0, 1, dt != DT::kFloat32),
             y = rand_tensor(dt, s[2], 0, 1, dt != DT::kFloat32);
      Tensor r = run1(OpKind::kWhere, NoAttrs{}, {c, x, y});
      EXPECT_EQ(r.dtype, dt);
      const Shape out = broadcast_shapes(broadcast_shapes(s[0], s[1]), s[2]);
      expect_close(r, ref_nary({c, x, y}, out, [](const std::vector<double>& v) { return v[0] ? v[1] : v[2]; }),
                   "Where");
    }
  }
}

TEST(Elementwise, LargeBroadcastsInParallel) {
  cpu::ThreadPool pool(2);
  const std::vector<std::pair<Shape, Shape>> big = {
      {{300, 257}, {257}}, {{300, 1}, {1, 257}}, {{100003}, {100003}}, {{}, {100003}}, {{8, 3, 64, 64}, {1, 3, 1, 1}}};
  for (const auto& [sa, sb] : big) {
    Tensor a = rand_tensor(DT::kFloat32, sa, -2, 2), b = rand_tensor(DT::kFloat32, sb, -2, 2);
    const Shape out = broadcast_shapes(sa, sb);
    expect_close(run1(OpKind::kSub, NoAttrs{}, {a, b}, &pool),
                 ref_nary({a, b}, out, [](const std::vector<double>& v) { return v[0] - v[1]; }), "Sub parallel");
    Tensor c = rand_tensor(DT::kBool, sb, 0, 1);
    expect_close(run1(OpKind::kWhere, NoAttrs{}, {c, a, b}, &pool),
                 ref_nary({c, a, b}, out, [](const std::vector<double>& v) { return v[0] ? v[1] : v[2]; }),
                 "Where parallel");
    Tensor ia = rand_tensor(DT::kInt32, sa, -100, 100), ib = rand_tensor(DT::kInt32, sb, 1, 9);
    expect_close(
        run1(OpKind::kMod, ModAttrs{0}, {ia, ib}, &pool),
        ref_nary({ia, ib}, out, [](const std::vector<double>& v) { return v[0] - v[1] * std::floor(v[0] / v[1]); }),
        "Mod parallel");
  }
}

// ---- Clip, Cast ----------------------------------------------------------------------------
TEST(Elementwise, Clip) {
  for (DT dt :
       {DT::kFloat32, DT::kFloat64, DT::kFloat16, DT::kBFloat16, DT::kInt8, DT::kUInt16, DT::kInt64, DT::kUInt64}) {
    const double lo = is_signed(dt) ? -20 : 0;
    for (const Shape& s : kUnaryShapes) {
      Tensor x = rand_tensor(dt, s, lo, 20);
      struct B {
        bool has_min, has_max;
        double mn, mx;
      };
      for (const B& b : {B{true, true, lo / 2 + 1, 9}, B{true, false, 3, 0}, B{false, true, 0, 4},
                         B{false, false, 0, 0}, B{true, true, 12, 5}}) {
        std::vector<Tensor> ins = {x, b.has_min ? make(dt, {}, {b.mn}) : absent()};
        if (b.has_max) ins.push_back(make(dt, {1}, {b.mx}));
        std::vector<double> ref;
        for (double v : values(x)) {
          double r = b.has_min ? std::max(v, b.mn) : v;
          ref.push_back(b.has_max ? std::min(r, b.mx) : r);
        }
        expect_close(run1(OpKind::kClip, NoAttrs{}, ins), ref, "Clip " + std::string(dtype_name(dt)));
      }
    }
  }
  Tensor x = make(DT::kFloat32, {3}, {kNaN, -kInf, kInf});
  expect_close(run1(OpKind::kClip, NoAttrs{}, {x, make(DT::kFloat32, {}, {-1}), make(DT::kFloat32, {}, {1})}),
               {kNaN, -1, 1}, "Clip specials");
}

double cast_ref(DT from, DT to, double v) {
  if (to == DT::kBool) return v != 0;
  if (from == DT::kBool || is_float(to)) return v;
  if (is_float(from)) {
    if (std::isnan(v)) return 0;
    dispatch_int(to, "lim", [&](auto tag) {
      using T = typename decltype(tag)::type;
      v = std::clamp(std::trunc(v), double(std::numeric_limits<T>::min()), double(std::numeric_limits<T>::max()));
    });
    return v;
  }
  return wrap(to, v);
}

TEST(Elementwise, CastAllPairs) {
  for (DT from : kAllTypes) {
    for (DT to : kAllTypes) {
      const double lo = from == DT::kBool ? 0 : is_signed(from) ? -100 : 0, hi = from == DT::kBool ? 1 : 100;
      for (const Shape& s : {Shape{}, Shape{0}, Shape{37}, Shape{3, 4}}) {
        Tensor x = rand_tensor(from, s, lo, hi, false);
        for (OpKind k : {OpKind::kCast, OpKind::kCastLike}) {
          std::vector<Tensor> ins = {x};
          if (k == OpKind::kCastLike) ins.push_back(make(to, {0}, {}));
          Tensor y = run1(k, CastAttrs{to, 1}, ins);
          EXPECT_EQ(y.dtype, to);
          std::vector<double> ref;
          for (double v : values(x)) ref.push_back(cast_ref(from, to, v));
          // Half targets round the value: compare through the target's precision.
          expect_close(y, ref, "Cast " + std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)));
        }
      }
    }
  }
  // Out of range and special values (documented: saturate, NaN -> 0).
  Tensor f = make(DT::kFloat32, {7}, {300.7, -1e10, kNaN, kInf, -kInf, -0.9, 126.9});
  expect_close(run1(OpKind::kCast, CastAttrs{DT::kInt8, 1}, {f}), {127, -128, 0, 127, -128, 0, 126}, "f32->i8");
  expect_close(run1(OpKind::kCast, CastAttrs{DT::kUInt8, 1}, {f}), {255, 0, 0, 255, 0, 0, 126}, "f32->u8");
  expect_close(run1(OpKind::kCast, CastAttrs{DT::kBool, 1}, {f}), {1, 1, 1, 1, 1, 1, 1}, "f32->bool");
  Tensor d = make(DT::kFloat64, {4}, {9.3e18, -9.3e18, 1e30, -1});
  Tensor i64 = run1(OpKind::kCast, CastAttrs{DT::kInt64, 1}, {d});
  int64_t got[4];
  std::memcpy(got, i64.bytes.data(), sizeof(got));
  EXPECT_EQ(got[0], INT64_MAX);
  EXPECT_EQ(got[1], INT64_MIN);
  EXPECT_EQ(got[2], INT64_MAX);
  EXPECT_EQ(got[3], -1);
  Tensor u64 = run1(OpKind::kCast, CastAttrs{DT::kUInt64, 1}, {d});
  uint64_t ug[4];
  std::memcpy(ug, u64.bytes.data(), sizeof(ug));
  EXPECT_EQ(ug[2], UINT64_MAX);
  EXPECT_EQ(ug[3], 0u);
  expect_close(run1(OpKind::kCast, CastAttrs{DT::kFloat16, 1}, {make(DT::kFloat64, {2}, {1e6, -1e6})}), {kInf, -kInf},
               "f64->f16 overflow");
  expect_close(run1(OpKind::kCast, CastAttrs{DT::kInt8, 1}, {make(DT::kInt32, {2}, {300, -129})}), {44, 127},
               "i32->i8 wraps");
}

// ---- QuantizeLinear / DequantizeLinear -----------------------------------------------------
struct QCase {
  Shape x, scale;
  int64_t axis, block;
};
const QCase kQCases[] = {{{2, 3, 4}, {}, 1, 0},   {{2, 3, 4}, {1}, 1, 0}, {{2, 3, 4}, {3}, 1, 0},
                         {{2, 3, 4}, {4}, -1, 0}, {{5, 2}, {5}, 0, 0},    {{2, 5, 3}, {2, 3, 3}, 1, 2},
                         {{4, 7}, {4, 3}, -1, 3}, {{0, 3}, {3}, 1, 0},    {{6, 4}, {2, 4}, 0, 3}};

// Scale/zero-point element for x element i (mirrors the ONNX reference's reshape/repeat).
int64_t qindex(const QCase& c, int64_t i) {
  if (c.scale.empty() || (c.scale.size() == 1 && c.scale[0] == 1)) return 0;
  const int64_t r = static_cast<int64_t>(c.x.size()), axis = c.axis < 0 ? c.axis + r : c.axis;
  std::vector<int64_t> idx(r);
  for (int64_t d = r; d-- > 0;) {
    idx[d] = i % c.x[d];
    i /= c.x[d];
  }
  if (c.block == 0) return idx[axis];
  idx[axis] /= c.block;
  int64_t s = 0;
  for (int64_t d = 0; d < r; ++d) s = s * c.scale[d] + idx[d];
  return s;
}

TEST(Elementwise, QuantizeLinear) {
  for (const QCase& c : kQCases) {
    for (DT xdt : {DT::kFloat32, DT::kFloat16, DT::kBFloat16, DT::kInt32}) {
      for (DT zdt : {DT::kUInt8, DT::kInt8, DT::kInt16, DT::kUInt16, DT(0)}) {
        const DT sdt = xdt == DT::kInt32 ? DT::kFloat32 : xdt;
        Tensor x = rand_tensor(xdt, c.x, -300, 300);
        Tensor s = rand_tensor(sdt, c.scale, 0.5, 4);
        std::vector<Tensor> ins = {x, s};
        if (zdt != DT(0)) ins.push_back(rand_tensor(zdt, c.scale, is_signed(zdt) ? -20 : 0, 20));
        Tensor y = run1(OpKind::kQuantizeLinear, QuantizeAttrs{c.axis, c.block, 1}, ins);
        const DT odt = zdt == DT(0) ? DT::kUInt8 : zdt;
        EXPECT_EQ(y.dtype, odt);
        const double qmin = odt == DT::kUInt8 || odt == DT::kUInt16 ? 0 : odt == DT::kInt8 ? -128 : -32768;
        const double qmax = odt == DT::kUInt8 ? 255 : odt == DT::kInt8 ? 127 : odt == DT::kInt16 ? 32767 : 65535;
        std::vector<double> ref;
        for (int64_t i = 0; i < x.numel(); ++i) {
          const int64_t q = qindex(c, i);
          // Float inputs divide in float32 (as the ONNX reference); int32 in double.
          const double div = xdt == DT::kInt32 ? get(x, i) / get(s, q) : double(float(get(x, i)) / float(get(s, q)));
          const double zp = zdt == DT(0) ? 0 : get(ins[2], q);
          ref.push_back(std::clamp(std::nearbyint(div) + zp, qmin, qmax));
        }
        expect_close(y, ref, "QuantizeLinear " + shape_string(c.x) + " " + std::string(dtype_name(xdt)));
      }
    }
  }
  // Ties go to even; NaN quantizes to the zero point.
  Tensor x = make(DT::kFloat32, {6}, {0.5, 1.5, 2.5, -0.5, -1.5, kNaN});
  expect_close(
      run1(OpKind::kQuantizeLinear, QuantizeAttrs{}, {x, make(DT::kFloat32, {}, {1}), make(DT::kInt8, {}, {3})}),
      {3, 5, 5, 3, 1, 3}, "Quantize ties");
}

TEST(Elementwise, DequantizeLinear) {
  for (const QCase& c : kQCases) {
    for (DT xdt : {DT::kUInt8, DT::kInt8, DT::kInt16, DT::kUInt16, DT::kInt32}) {
      for (DT sdt : {DT::kFloat32, DT::kFloat16, DT::kBFloat16}) {
        for (bool with_zp : {true, false}) {
          Tensor x = rand_tensor(xdt, c.x, is_signed(xdt) ? -120 : 0, 120);
          Tensor s = rand_tensor(sdt, c.scale, 0.01, 2);
          std::vector<Tensor> ins = {x, s};
          if (with_zp) ins.push_back(rand_tensor(xdt, c.scale, is_signed(xdt) ? -20 : 0, 20));
          Tensor y = run1(OpKind::kDequantizeLinear, QuantizeAttrs{c.axis, c.block, 1}, ins);
          EXPECT_EQ(y.dtype, sdt);
          std::vector<double> ref;
          for (int64_t i = 0; i < x.numel(); ++i) {
            const int64_t q = qindex(c, i);
            ref.push_back((get(x, i) - (with_zp ? get(ins[2], q) : 0)) * get(s, q));
          }
          expect_close(y, ref, "DequantizeLinear " + shape_string(c.x));
        }
      }
    }
  }
}

// ---- cases from the ONNX backend tests -----------------------------------------------------
TEST(Elementwise, OnnxBackendCases) {
  expect_close(run1(OpKind::kMod, ModAttrs{0},
                    {make(DT::kInt8, {6}, {-4, 7, 5, 4, -7, 8}), make(DT::kInt8, {6}, {2, -3, 8, -2, 3, 5})}),
               {0, -2, 5, 0, 2, 3}, "test_mod_mixed_sign_int8");
  expect_close(run1(OpKind::kMod, ModAttrs{1},
                    {make(DT::kFloat32, {6}, {-4.3, 7.2, 5.0, 4.3, -7.2, 8.0}),
                     make(DT::kFloat32, {6}, {2.1, -3.4, 8.0, -2.1, 3.4, 5.0})}),
               {-0.10000038146972656, 0.39999961853027344, 5.0, 0.10000038146972656, -0.39999961853027344, 3.0},
               "test_mod_mixed_sign_float32");
  expect_close(run1(OpKind::kPow, NoAttrs{}, {make(DT::kInt32, {3}, {1, 2, 3}), make(DT::kFloat32, {3}, {4, 5, 6})}),
               {1, 32, 729}, "test_pow_types_int32_float32");
  expect_close(
      run1(OpKind::kDiv, NoAttrs{}, {make(DT::kUInt8, {4}, {16, 6, 0, 12}), make(DT::kUInt8, {4}, {11, 5, 23, 23})}),
      {1, 1, 0, 0}, "test_div_uint8");
  Tensor r =
      make(DT::kFloat32, {15}, {0.1, 0.5, 0.9, 1.2, 1.5, 1.8, 2.3, 2.5, 2.7, -1.1, -1.5, -1.9, -2.2, -2.5, -2.8});
  expect_close(run1(OpKind::kRound, NoAttrs{}, {r}), {0, 0, 1, 1, 2, 2, 2, 2, 3, -1, -2, -2, -2, -2, -3}, "test_round");
  const std::vector<double> xf = {-162, 10, -100, 232, -20,  -50,  -76,  0,    0,
                                  252,  32, -44,  245, -485, -960, -270, -375, -470};
  const std::vector<double> xq = {3, 89, 34, 200, 74, 59, 5, 24, 24, 87, 32, 13, 245, 99, 4, 142, 121, 102};
  Tensor sc = make(DT::kFloat32, {3}, {2, 4, 5}), zp = make(DT::kUInt8, {3}, {84, 24, 196});
  expect_close(run1(OpKind::kQuantizeLinear, QuantizeAttrs{}, {make(DT::kFloat32, {1, 3, 3, 2}, xf), sc, zp}), xq,
               "test_quantizelinear_axis");
  expect_close(run1(OpKind::kDequantizeLinear, QuantizeAttrs{}, {make(DT::kUInt8, {1, 3, 3, 2}, xq), sc, zp}), xf,
               "test_dequantizelinear_axis");
  expect_close(run1(OpKind::kShrink, ShrinkAttrs{1.5f, 1.5f}, {make(DT::kFloat32, {5}, {-2, -1, 0, 1, 2})}),
               {-0.5, 0, 0, 0, 0.5}, "test_shrink_soft");
}

// ---- inference errors ----------------------------------------------------------------------
void expect_infer_error(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& ins, const std::string& what,
                        size_t n_out = 1, bool const_data = false) {
  std::vector<TensorView> iv;
  for (const Tensor& t : ins) iv.push_back(t.view(const_data));
  EXPECT_THROW(infer_shapes(kind, attrs, iv, n_out), Error) << what;
}

TEST(Elementwise, InferenceRejectsBadInput) {
  auto f32 = [](Shape s) { return rand_tensor(DT::kFloat32, std::move(s), 0, 1); };
  auto t = [](DT dt, Shape s) { return rand_tensor(dt, std::move(s), 0, 1); };
  expect_infer_error(OpKind::kAdd, NoAttrs{}, {f32({2}), t(DT::kInt32, {2})}, "dtype mismatch");
  expect_infer_error(OpKind::kAdd, NoAttrs{}, {f32({2, 3}), f32({4})}, "bad broadcast");
  expect_infer_error(OpKind::kAdd, NoAttrs{}, {t(DT::kBool, {2}), t(DT::kBool, {2})}, "bool add");
  expect_infer_error(OpKind::kSin, NoAttrs{}, {t(DT::kInt32, {2})}, "Sin int");
  expect_infer_error(OpKind::kNot, NoAttrs{}, {f32({2})}, "Not float");
  expect_infer_error(OpKind::kIsNaN, NoAttrs{}, {t(DT::kInt8, {2})}, "IsNaN int");
  expect_infer_error(OpKind::kRelu, NoAttrs{}, {t(DT::kUInt8, {2})}, "Relu uint8");
  expect_infer_error(OpKind::kNeg, NoAttrs{}, {t(DT::kUInt32, {2})}, "Neg uint32");
  expect_infer_error(OpKind::kIdentity, NoAttrs{}, {Tensor{DT(99), {2}, {0, 0}}}, "invalid dtype");
  expect_infer_error(OpKind::kMod, ModAttrs{0}, {f32({2}), f32({2})}, "float Mod fmod=0");
  expect_infer_error(OpKind::kMod, ModAttrs{2}, {t(DT::kInt32, {2}), t(DT::kInt32, {2})}, "fmod=2");
  expect_infer_error(OpKind::kAnd, NoAttrs{}, {f32({2}), f32({2})}, "And float");
  expect_infer_error(OpKind::kGreater, NoAttrs{}, {t(DT::kBool, {2}), t(DT::kBool, {2})}, "Greater bool");
  expect_infer_error(OpKind::kSum, NoAttrs{}, {t(DT::kInt32, {2}), t(DT::kInt32, {2})}, "Sum int");
  expect_infer_error(OpKind::kMax, NoAttrs{}, {f32({2}), f32({2}), t(DT::kFloat64, {2})}, "Max dtype");
  expect_infer_error(OpKind::kMax, NoAttrs{}, {f32({2}), absent()}, "Max missing");
  expect_infer_error(OpKind::kMean, NoAttrs{}, {f32({2}), f32({3})}, "Mean broadcast");
  expect_infer_error(OpKind::kWhere, NoAttrs{}, {f32({2}), f32({2}), f32({2})}, "Where cond");
  expect_infer_error(OpKind::kWhere, NoAttrs{}, {t(DT::kBool, {2}), f32({2}), t(DT::kFloat64, {2})}, "Where xy");
  expect_infer_error(OpKind::kWhere, NoAttrs{}, {t(DT::kBool, {3}), f32({2}), f32({2})}, "Where bcast");
  expect_infer_error(OpKind::kClip, NoAttrs{}, {f32({4}), f32({2})}, "Clip min shape");
  expect_infer_error(OpKind::kClip, NoAttrs{}, {f32({4}), absent(), t(DT::kFloat64, {})}, "Clip max dtype");
  expect_infer_error(OpKind::kClip, NoAttrs{}, {t(DT::kBool, {4})}, "Clip bool");
  expect_infer_error(OpKind::kCast, CastAttrs{DT(99), 1}, {f32({2})}, "Cast to invalid");
  expect_infer_error(OpKind::kCastLike, CastAttrs{DT::kInt8, 1}, {f32({2}), t(DT::kInt16, {})}, "CastLike to");
  expect_infer_error(OpKind::kPow, NoAttrs{}, {t(DT::kBool, {2}), f32({2})}, "Pow bool");
  expect_infer_error(OpKind::kPRelu, NoAttrs{}, {f32({2, 1}), f32({3})}, "PRelu slope");
  expect_infer_error(OpKind::kCelu, AlphaAttrs{0.0f}, {f32({2})}, "Celu alpha 0");
  expect_infer_error(OpKind::kGelu, GeluAttrs{static_cast<GeluApproximation>(7)}, {f32({2})}, "Gelu approx");
  expect_infer_error(OpKind::kAbs, NoAttrs{}, {Tensor{DT::kFloat32, {-1}, {}}}, "negative dim");
  expect_infer_error(OpKind::kMod, NoAttrs{}, {t(DT::kInt32, {2}), t(DT::kInt32, {2})}, "wrong attrs kind");
  // QuantizeLinear / DequantizeLinear
  const QuantizeAttrs q1{1, 0, 1};
  expect_infer_error(OpKind::kQuantizeLinear, q1, {f32({2, 3}), f32({2})}, "scale length");
  expect_infer_error(OpKind::kQuantizeLinear, QuantizeAttrs{2, 0, 1}, {f32({2, 3}), f32({3})}, "axis range");
  expect_infer_error(OpKind::kQuantizeLinear, QuantizeAttrs{1, 2, 1}, {f32({2, 5}), f32({2, 2})}, "block shape");
  expect_infer_error(OpKind::kQuantizeLinear, QuantizeAttrs{1, -1, 1}, {f32({2, 5}), f32({})}, "block negative");
  expect_infer_error(OpKind::kQuantizeLinear, q1, {f32({2, 3}), f32({3}), t(DT::kUInt8, {2})}, "zp shape");
  expect_infer_error(OpKind::kQuantizeLinear, q1, {f32({2, 3}), f32({}), t(DT::kInt32, {})}, "zp int32");
  expect_infer_error(OpKind::kQuantizeLinear, q1, {t(DT::kInt8, {2, 3}), f32({})}, "x int8");
  expect_infer_error(OpKind::kQuantizeLinear, q1, {t(DT::kFloat64, {2, 3}), f32({})}, "x f64");
  expect_infer_error(OpKind::kDequantizeLinear, q1, {t(DT::kUInt8, {2, 3}), t(DT::kInt32, {})}, "scale int");
  expect_infer_error(OpKind::kDequantizeLinear, q1, {t(DT::kUInt8, {2, 3}), f32({}), t(DT::kInt8, {})}, "zp type");
  expect_infer_error(OpKind::kDequantizeLinear, q1, {f32({2, 3}), f32({})}, "x float");
  expect_infer_error(OpKind::kDequantizeLinear, q1, {t(DT::kUInt8, {2, 3}), f32({4})}, "deq scale length");
  // Dropout
  expect_infer_error(OpKind::kDropout, NoAttrs{}, {f32({2}), absent(), make(DT::kBool, {}, {1})}, "training", 1, true);
  expect_infer_error(OpKind::kDropout, NoAttrs{}, {f32({2}), f32({2})}, "ratio shape");
  expect_infer_error(OpKind::kDropout, NoAttrs{}, {f32({2}), absent(), f32({})}, "training_mode dtype");
  expect_infer_error(OpKind::kDropout, NoAttrs{}, {t(DT::kInt32, {2})}, "Dropout int");
}

TEST(Elementwise, InferenceShapesAndTypes) {
  auto infer = [](OpKind k, const Attrs& a, std::vector<Tensor> ins, size_t n = 1) {
    std::vector<TensorView> iv;
    for (const Tensor& t : ins) iv.push_back(t.view(false));
    return infer_shapes(k, a, iv, n);
  };
  auto f32 = [](Shape s) { return rand_tensor(DT::kFloat32, std::move(s), 0, 1); };
  auto o = infer(OpKind::kAdd, NoAttrs{}, {f32({2, 1, 4}), f32({3, 1})});
  EXPECT_EQ(o[0].shape, (Shape{2, 3, 4}));
  o = infer(OpKind::kLess, NoAttrs{}, {f32({}), f32({0, 2})});
  EXPECT_EQ(o[0].shape, (Shape{0, 2}));
  EXPECT_EQ(o[0].dtype, DT::kBool);
  o = infer(OpKind::kPow, NoAttrs{}, {rand_tensor(DT::kInt32, {3}, 0, 1), f32({2, 1})});
  EXPECT_EQ(o[0].dtype, DT::kInt32);
  EXPECT_EQ(o[0].shape, (Shape{2, 3}));
  o = infer(OpKind::kSum, NoAttrs{}, {f32({4}), f32({3, 1}), f32({2, 1, 1})});
  EXPECT_EQ(o[0].shape, (Shape{2, 3, 4}));
  o = infer(OpKind::kQuantizeLinear, QuantizeAttrs{}, {f32({2, 3}), f32({})});
  EXPECT_EQ(o[0].dtype, DT::kUInt8);
  o = infer(OpKind::kDequantizeLinear, QuantizeAttrs{},
            {rand_tensor(DT::kInt8, {2, 3}, 0, 1), rand_tensor(DT::kFloat16, {3}, 0, 1)});
  EXPECT_EQ(o[0].dtype, DT::kFloat16);
  o = infer(OpKind::kDropout, NoAttrs{}, {f32({2, 3})}, 2);
  EXPECT_EQ(o[1].dtype, DT::kBool);
  EXPECT_EQ(o[1].shape, (Shape{2, 3}));
}

}  // namespace
}  // namespace kiln
