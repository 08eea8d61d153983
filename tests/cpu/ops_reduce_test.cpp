// Tests of the reduce family (Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum, TopK,
// Einsum, LayerNormalization, InstanceNormalization, BatchNormalization, LRN): shape inference and
// CPU kernels against plain float64 references written here, on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

using namespace kiln;

namespace {

using Shape = std::vector<int64_t>;
using Vals = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

struct Buf {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;
  bool exists = true;
  bool null_data = false;  // as shape inference sees a value that is not a build-time constant
  TensorView view() const {
    static uint64_t empty_storage = 0;  // zero-size constants still have a data pointer
    void* p = null_data       ? nullptr
              : bytes.empty() ? static_cast<void*>(&empty_storage)
                              : const_cast<uint8_t*>(bytes.data());
    return {dtype, shape, p, exists};
  }
  Vals values() const { return view().to_double(); }
};

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

Buf make(DataType t, Shape shape, const Vals& v) {
  Buf b{t, shape, std::vector<uint8_t>(static_cast<size_t>(numel(shape)) * dtype_size(t))};
  EXPECT_EQ(static_cast<int64_t>(v.size()), numel(shape));
  if (t == DataType::kBool) {
    for (size_t i = 0; i < v.size(); ++i) b.bytes[i] = v[i] != 0;
    return b;
  }
  dispatch_numeric(t, "make", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = reinterpret_cast<T*>(b.bytes.data());
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(static_cast<ComputeType<T>>(v[i]));
  });
  return b;
}
Buf ints(Vals v, DataType t = DataType::kInt64) { return make(t, {static_cast<int64_t>(v.size())}, v); }
Buf absent() {
  Buf b;
  b.exists = false;
  return b;
}

std::mt19937& rng() {
  static std::mt19937 r(1234);
  return r;
}
// Random values in [lo, hi]; integers for integer types (and for floats when `integral`).
Buf random_buf(DataType t, Shape shape, double lo, double hi, bool integral = false) {
  Vals v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& x : v) {
    x = u(rng());
    if (integral || !is_float(t)) x = std::round(x);
  }
  return make(t, shape, v);
}

// Output buffers start as NaN (floats) or 0xAB bytes, so an unwritten element fails comparisons.
Buf poisoned(const OutputType& o) {
  Buf b{o.dtype, o.shape, std::vector<uint8_t>(static_cast<size_t>(numel(o.shape)) * dtype_size(o.dtype), 0xAB)};
  if (is_float(o.dtype)) b = make(o.dtype, o.shape, Vals(static_cast<size_t>(numel(o.shape)), kNaN));
  return b;
}

cpu::ThreadPool& pool() {
  static cpu::ThreadPool p(3);
  return p;
}

std::vector<Buf> run(OpKind kind, const Attrs& attrs, const std::vector<Buf>& ins, size_t n_out = 1,
                     bool threaded = false) {
  std::vector<TensorView> iv;
  for (const Buf& b : ins) iv.push_back(b.view());
  std::vector<OutputType> types = infer_shapes(kind, attrs, iv, n_out);
  std::vector<Buf> outs;
  for (const OutputType& t : types) outs.push_back(poisoned(t));
  std::vector<TensorView> ov;
  for (const Buf& b : outs) ov.push_back(b.view());
  cpu::KernelEnv env{threaded ? &pool() : nullptr};
  cpu::CpuKernel k = cpu::cpu_kernel(kind);
  EXPECT_NE(k, nullptr);
  if (k) k(kind, attrs, iv, ov, env);
  return outs;
}

void infer_throws(OpKind kind, const Attrs& attrs, const std::vector<Buf>& ins, size_t n_out = 1) {
  std::vector<TensorView> iv;
  for (const Buf& b : ins) iv.push_back(b.view());
  EXPECT_THROW(infer_shapes(kind, attrs, iv, n_out), Error) << op_name(kind);
}

double rtol_of(DataType t) {
  if (t == DataType::kFloat32) return 2e-5;
  if (t == DataType::kFloat64) return 1e-11;
  if (t == DataType::kFloat16) return 3e-3;
  if (t == DataType::kBFloat16) return 2e-2;
  return 0.0;
}

void expect_close(const Buf& got, const Shape& want_shape, const Vals& want, const std::string& ctx, double atol = -1,
                  double rtol = -1) {
  ASSERT_EQ(got.shape, want_shape) << ctx;
  Vals g = got.values();
  ASSERT_EQ(g.size(), want.size()) << ctx;
  if (rtol < 0) rtol = rtol_of(got.dtype);
  if (atol < 0) atol = is_float(got.dtype) ? rtol : 0.0;
  int failures = 0;
  for (size_t i = 0; i < g.size() && failures < 5; ++i) {
    bool ok;
    if (std::isnan(want[i]))
      ok = std::isnan(g[i]);
    else if (std::isinf(want[i]))
      ok = g[i] == want[i];
    else
      ok = std::fabs(g[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << ctx << ": element " << i << " is " << g[i] << ", want " << want[i];
    }
  }
}

// Rounds reference values to what the element type can hold; integer types saturate (NaN -> 0).
Vals as_stored(DataType t, const Shape& s, Vals v) {
  if (!is_float(t)) {
    double lo = 0, hi = 1;
    if (t != DataType::kBool)
      dispatch_int(t, "range", [&](auto tag) {
        using T = typename decltype(tag)::type;
        lo = static_cast<double>(std::numeric_limits<T>::lowest());
        hi = static_cast<double>(std::numeric_limits<T>::max());
      });
    for (double& x : v) x = std::isnan(x) ? 0 : x <= lo ? lo : x >= hi ? hi : std::trunc(x);
    return v;  // compared as doubles, where the type's max reads as hi too
  }
  return make(t, s, v).values();
}

// Row-major multi-index helpers.
Shape unravel(int64_t i, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t o = 0;
  for (size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + idx[d];
  return o;
}

const DataType kFloats[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16};

}  // namespace

// ---- Reduce* -------------------------------------------------------------------------------

namespace {

const OpKind kReduceKinds[] = {
    OpKind::kReduceL1,   OpKind::kReduceL2,  OpKind::kReduceLogSum, OpKind::kReduceLogSumExp, OpKind::kReduceMax,
    OpKind::kReduceMean, OpKind::kReduceMin, OpKind::kReduceProd,   OpKind::kReduceSum,       OpKind::kReduceSumSquare};

double ref_reduce_one(OpKind k, const Vals& g) {
  double acc = 0.0;
  if (k == OpKind::kReduceMax || k == OpKind::kReduceMin) {
    bool mx = k == OpKind::kReduceMax;
    acc = mx ? -kInf : kInf;
    for (double v : g) {
      if (std::isnan(v)) return kNaN;
      acc = mx ? std::max(acc, v) : std::min(acc, v);
    }
    return acc;
  }
  if (k == OpKind::kReduceProd) {
    acc = 1.0;
    for (double v : g) acc *= v;
    return acc;
  }
  if (k == OpKind::kReduceLogSumExp) {
    for (double v : g) acc += std::exp(v);
    return std::log(acc);
  }
  for (double v : g) {
    if (k == OpKind::kReduceL1)
      acc += std::fabs(v);
    else if (k == OpKind::kReduceL2 || k == OpKind::kReduceSumSquare)
      acc += v * v;
    else
      acc += v;
  }
  if (k == OpKind::kReduceL2) return std::sqrt(acc);
  if (k == OpKind::kReduceLogSum) return std::log(acc);
  if (k == OpKind::kReduceMean) return acc / static_cast<double>(g.size());
  return acc;
}

// Groups every input element under its output element, then reduces each group.
Vals ref_reduce(OpKind k, const Vals& x, const Shape& shape, const std::vector<bool>& mask, Shape* kept_shape) {
  Shape os = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (mask[d]) os[d] = 1;
  std::vector<Vals> groups(static_cast<size_t>(numel(os)));
  for (int64_t i = 0; i < numel(shape); ++i) {
    Shape idx = unravel(i, shape);
    for (size_t d = 0; d < shape.size(); ++d)
      if (mask[d]) idx[d] = 0;
    groups[ravel(idx, os)].push_back(x[i]);
  }
  Vals out;
  for (const Vals& g : groups) out.push_back(ref_reduce_one(k, g));
  *kept_shape = os;
  return out;
}

std::vector<DataType> reduce_dtypes(OpKind k) {
  std::vector<DataType> t = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                             DataType::kInt32,   DataType::kInt64,   DataType::kUInt32,  DataType::kUInt64};
  if (k == OpKind::kReduceMax || k == OpKind::kReduceMin) {
    t.push_back(DataType::kInt8);
    t.push_back(DataType::kUInt8);
    t.push_back(DataType::kBool);
  }
  return t;
}

void value_range(OpKind k, DataType t, double* lo, double* hi) {
  bool is_unsigned = t == DataType::kUInt8 || t == DataType::kUInt32 || t == DataType::kUInt64;
  if (t == DataType::kBool)
    *lo = 0, *hi = 1;
  else if (k == OpKind::kReduceProd)
    *lo = is_float(t) ? 0.5 : is_unsigned ? 0 : -2, *hi = is_float(t) ? 1.5 : 2;
  else if (k == OpKind::kReduceLogSum)
    *lo = is_float(t) ? 0.1 : 1, *hi = is_float(t) ? 2 : 5;
  else
    *lo = is_unsigned ? 0 : is_float(t) ? -3 : -20, *hi = is_float(t) ? 3 : 20;
}

void check_reduce(OpKind k, DataType t, const Shape& shape, const std::vector<int64_t>* axes, int64_t keepdims,
                  bool threaded) {
  double lo, hi;
  value_range(k, t, &lo, &hi);
  Buf x = random_buf(t, shape, lo, hi);
  std::vector<Buf> ins{x};
  if (axes)
    ins.push_back(ints(Vals(axes->begin(), axes->end())));
  else if (shape.size() % 2)
    ins.push_back(absent());  // both spellings of "no axes"
  std::vector<bool> mask(shape.size(), axes == nullptr);
  if (axes)
    for (int64_t a : *axes) mask[a < 0 ? a + static_cast<int64_t>(shape.size()) : a] = true;
  Shape kept;
  Vals want = ref_reduce(k, x.values(), shape, mask, &kept);
  Shape want_shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!mask[d] || keepdims) want_shape.push_back(kept[d]);
  if (!is_float(t))
    for (double& v : want) v = std::trunc(v);
  want = as_stored(t, want_shape, want);
  std::string ctx = std::string(op_name(k)) + " " + std::string(dtype_name(t)) + " " + shape_string(shape) +
                    " keepdims=" + std::to_string(keepdims) +
                    " axes=" + (axes ? shape_string(*axes) : std::string("none"));
  auto out = run(k, ReduceAttrs{keepdims, 0}, ins, 1, threaded);
  double atol = !is_float(t) && k == OpKind::kReduceLogSumExp ? 1.0 : -1.0;
  expect_close(out[0], want_shape, want, ctx, atol);
}

}  // namespace

TEST(Reduce, AllOpsDtypesAxesKeepdims) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    bool has_axes;
  };
  const Case cases[] = {{{2, 3, 4}, {}, false},
                        {{2, 3, 4}, {0}, true},
                        {{2, 3, 4}, {1}, true},
                        {{2, 3, 4}, {-1}, true},
                        {{2, 3, 4}, {0, 2}, true},
                        {{2, 3, 4}, {2, -3}, true},
                        {{2, 3, 4}, {1, 2}, true},
                        {{2, 3, 4}, {0, 1, 2}, true},
                        {{5, 1, 7}, {1}, true},
                        {{5, 1, 7}, {0, 2}, true},
                        {{3, 0, 2}, {1}, true},
                        {{3, 0, 2}, {0}, true},
                        {{}, {}, false},
                        {{7}, {0}, true},
                        {{2, 3, 4, 5}, {1, 3}, true},
                        {{2, 3, 4, 5}, {0, 2}, true},
                        {{1, 1}, {}, false},
                        {{3, 1, 5, 2}, {3, 1}, true},
                        {{2, 3, 4}, {}, true}};
  for (OpKind k : kReduceKinds)
    for (DataType t : reduce_dtypes(k))
      for (const Case& c : cases)
        for (int64_t keep : {0, 1}) {
          if (c.has_axes && c.axes.empty()) {  // an empty axes tensor: reduce everything
            std::vector<Buf> ins{random_buf(t, c.shape, 1, 2), ints({})};
            auto out = run(k, ReduceAttrs{keep, 0}, ins);
            EXPECT_EQ(out[0].shape, keep ? Shape(c.shape.size(), 1) : Shape{}) << op_name(k);
            continue;
          }
          check_reduce(k, t, c.shape, c.has_axes ? &c.axes : nullptr, keep, false);
        }
}

TEST(Reduce, LargeThreaded) {
  const std::vector<int64_t> axes_list[] = {{0}, {1}, {2}, {0, 2}, {1, 2}};
  for (OpKind k :
       {OpKind::kReduceSum, OpKind::kReduceMax, OpKind::kReduceLogSumExp, OpKind::kReduceMean, OpKind::kReduceL2})
    for (const auto& axes : axes_list) check_reduce(k, DataType::kFloat32, {16, 130, 301}, &axes, 1, true);
  std::vector<int64_t> all{0, 1};
  check_reduce(OpKind::kReduceSum, DataType::kInt64, {300, 257}, &all, 0, true);
}

TEST(Reduce, NoopWithEmptyAxesAppliesTheElementOp) {
  Buf x = random_buf(DataType::kFloat32, {3, 4}, 0.1, 2.0);
  Vals xv = x.values();
  for (bool empty_tensor : {false, true}) {
    std::vector<Buf> ins{x, empty_tensor ? ints({}) : absent()};
    for (OpKind k : kReduceKinds) {
      auto out = run(k, ReduceAttrs{1, 1}, ins);
      Vals want;
      for (double v : xv) want.push_back(ref_reduce_one(k, {v}));
      expect_close(out[0], {3, 4}, as_stored(DataType::kFloat32, {3, 4}, want), std::string(op_name(k)) + " noop");
    }
  }
}

TEST(Reduce, EmptySetGivesIdentity) {
  const std::map<OpKind, double> identity = {{OpKind::kReduceL1, 0},         {OpKind::kReduceL2, 0},
                                             {OpKind::kReduceLogSum, -kInf}, {OpKind::kReduceLogSumExp, -kInf},
                                             {OpKind::kReduceMax, -kInf},    {OpKind::kReduceMean, kNaN},
                                             {OpKind::kReduceMin, kInf},     {OpKind::kReduceProd, 1},
                                             {OpKind::kReduceSum, 0},        {OpKind::kReduceSumSquare, 0}};
  for (auto [k, v] : identity) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
      auto out = run(k, ReduceAttrs{1, 0}, {make(t, {2, 0, 3}, {}), ints({1})});
      expect_close(out[0], {2, 1, 3}, Vals(6, v), std::string(op_name(k)) + " empty set");
      out = run(k, ReduceAttrs{0, 0}, {make(t, {0}, {})});
      expect_close(out[0], {}, Vals(1, v), std::string(op_name(k)) + " empty set, all axes");
    }
  }
  auto out = run(OpKind::kReduceMax, ReduceAttrs{0, 0}, {make(DataType::kInt32, {0, 2}, {}), ints({0})});
  expect_close(out[0], {2}, Vals(2, std::numeric_limits<int32_t>::min()), "int32 max of nothing");
  out = run(OpKind::kReduceMin, ReduceAttrs{0, 0}, {make(DataType::kUInt8, {0, 2}, {}), ints({0})});
  expect_close(out[0], {2}, Vals(2, 255), "uint8 min of nothing");
  out = run(OpKind::kReduceMin, ReduceAttrs{0, 0}, {make(DataType::kBool, {0}, {})});
  expect_close(out[0], {}, {1}, "bool min of nothing");
  out = run(OpKind::kReduceProd, ReduceAttrs{0, 0}, {make(DataType::kInt64, {0}, {})});
  expect_close(out[0], {}, {1}, "int64 prod of nothing");
}

TEST(Reduce, SpecialValues) {
  auto one = [](OpKind k, DataType t, Vals v) {
    return run(k, ReduceAttrs{0, 0}, {make(t, {static_cast<int64_t>(v.size())}, v)})[0].values()[0];
  };
  EXPECT_TRUE(std::isnan(one(OpKind::kReduceMax, DataType::kFloat32, {1, kNaN, 3})));
  EXPECT_TRUE(std::isnan(one(OpKind::kReduceMin, DataType::kFloat64, {1, 3, kNaN})));
  EXPECT_NEAR(one(OpKind::kReduceLogSumExp, DataType::kFloat32, {1000, 1000}), 1000 + std::log(2.0), 1e-3);
  EXPECT_NEAR(one(OpKind::kReduceLogSumExp, DataType::kFloat64, {-1000, -1000, -kInf}), -1000 + std::log(2.0), 1e-9);
  EXPECT_EQ(one(OpKind::kReduceLogSumExp, DataType::kFloat32, {-kInf, -kInf}), -kInf);
  EXPECT_EQ(one(OpKind::kReduceLogSumExp, DataType::kFloat32, {kInf, 1}), kInf);
  EXPECT_EQ(one(OpKind::kReduceSum, DataType::kInt32, {2147483647, 1}), -2147483648.0);  // wraps
  EXPECT_EQ(one(OpKind::kReduceMax, DataType::kInt8, {-128, -5, -100}), -5);
  EXPECT_EQ(one(OpKind::kReduceMax, DataType::kBool, {0, 1, 0}), 1);
  EXPECT_EQ(one(OpKind::kReduceMin, DataType::kBool, {0, 1, 1}), 0);
  EXPECT_EQ(one(OpKind::kReduceMean, DataType::kInt32, {-3, -4}), -3);  // truncates like numpy's astype
  EXPECT_EQ(one(OpKind::kReduceL1, DataType::kInt64, {-3, 4, -5}), 12);
}

TEST(Reduce, InferenceRejectsBadInput) {
  Buf x = random_buf(DataType::kFloat32, {2, 3, 4}, -1, 1);
  for (OpKind k : kReduceKinds) {
    infer_throws(k, ReduceAttrs{}, {x, ints({0, 0})});   // repeated
    infer_throws(k, ReduceAttrs{}, {x, ints({1, -2})});  // repeated after normalization
    infer_throws(k, ReduceAttrs{}, {x, ints({3})});      // out of range
    infer_throws(k, ReduceAttrs{}, {x, ints({-4})});
    infer_throws(k, ReduceAttrs{}, {x, make(DataType::kInt64, {1, 1}, {0})});  // not 1-D
    infer_throws(k, ReduceAttrs{}, {x, make(DataType::kFloat32, {1}, {0})});   // not integer
    infer_throws(k, ReduceAttrs{2, 0}, {x});
    infer_throws(k, ReduceAttrs{1, 3}, {x});
    infer_throws(k, ReduceAttrs{}, {random_buf(DataType::kInt16, {2}, 0, 3)});
    Buf axes_unknown = ints({0});
    axes_unknown.null_data = true;
    infer_throws(k, ReduceAttrs{}, {x, axes_unknown});
    infer_throws(k, AxisAttrs{}, {x});
    if (k != OpKind::kReduceMax && k != OpKind::kReduceMin) {
      infer_throws(k, ReduceAttrs{}, {random_buf(DataType::kInt8, {2}, 0, 3)});
      infer_throws(k, ReduceAttrs{}, {random_buf(DataType::kBool, {2}, 0, 1)});
    }
  }
}

// ---- ArgMax / ArgMin -----------------------------------------------------------------------

TEST(ArgReduce, AgainstReference) {
  const Shape shapes[] = {{7}, {3, 4}, {2, 3, 5}, {4, 1, 3}, {2, 300, 3}, {0, 3}};
  for (OpKind k : {OpKind::kArgMax, OpKind::kArgMin})
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                       DataType::kInt32, DataType::kUInt8, DataType::kInt64, DataType::kInt8})
      for (const Shape& shape : shapes)
        for (int64_t axis = -static_cast<int64_t>(shape.size()); axis < static_cast<int64_t>(shape.size()); ++axis)
          for (int64_t keep : {0, 1})
            for (int64_t last : {0, 1}) {
              int64_t ax = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
              if (shape[ax] == 0) continue;              // rejected by inference (tested below)
              Buf x = random_buf(t, shape, 0, 6, true);  // few distinct values: many ties
              Vals xv = x.values();
              Shape os = shape;
              os[ax] = 1;
              Vals want(static_cast<size_t>(numel(os)));
              for (int64_t o = 0; o < numel(os); ++o) {
                Shape idx = unravel(o, os);
                int64_t best = 0;
                for (int64_t i = 0; i < shape[ax]; ++i) {
                  idx[ax] = i;
                  double v = xv[ravel(idx, shape)];
                  idx[ax] = best;
                  double b = xv[ravel(idx, shape)];
                  bool better = k == OpKind::kArgMax ? (v > b || (last && v == b)) : (v < b || (last && v == b));
                  if (i > 0 && better) best = i;
                }
                want[o] = static_cast<double>(best);
              }
              if (!keep) os.erase(os.begin() + ax);
              auto out = run(k, ArgReduceAttrs{axis, keep, last}, {x});
              EXPECT_EQ(out[0].dtype, DataType::kInt64);
              expect_close(out[0], os, want,
                           std::string(op_name(k)) + " " + std::string(dtype_name(t)) + " " + shape_string(shape) +
                               " axis=" + std::to_string(axis) + " keep=" + std::to_string(keep) +
                               " last=" + std::to_string(last));
            }
}

TEST(ArgReduce, NaNAndThreads) {
  Buf x = make(DataType::kFloat32, {5}, {1, kNaN, 3, kNaN, 0});
  EXPECT_EQ(run(OpKind::kArgMax, ArgReduceAttrs{0, 0, 0}, {x})[0].values()[0], 1);
  EXPECT_EQ(run(OpKind::kArgMax, ArgReduceAttrs{0, 0, 1}, {x})[0].values()[0], 3);
  EXPECT_EQ(run(OpKind::kArgMin, ArgReduceAttrs{0, 0, 0}, {x})[0].values()[0], 1);
  Buf big = random_buf(DataType::kFloat32, {64, 257, 9}, -5, 5);
  for (int64_t axis : {0, 1, 2}) {
    auto a = run(OpKind::kArgMax, ArgReduceAttrs{axis, 1, 0}, {big}, 1, true)[0].values();
    auto b = run(OpKind::kArgMax, ArgReduceAttrs{axis, 1, 0}, {big}, 1, false)[0].values();
    EXPECT_EQ(a, b);
  }
}

TEST(ArgReduce, InferenceRejectsBadInput) {
  Buf x = random_buf(DataType::kFloat32, {2, 3}, -1, 1);
  for (OpKind k : {OpKind::kArgMax, OpKind::kArgMin}) {
    infer_throws(k, ArgReduceAttrs{2, 1, 0}, {x});
    infer_throws(k, ArgReduceAttrs{-3, 1, 0}, {x});
    infer_throws(k, ArgReduceAttrs{0, 2, 0}, {x});
    infer_throws(k, ArgReduceAttrs{0, 1, 5}, {x});
    infer_throws(k, ArgReduceAttrs{0, 1, 0}, {make(DataType::kFloat32, {}, {1})});
    infer_throws(k, ArgReduceAttrs{1, 1, 0}, {make(DataType::kFloat32, {2, 0}, {})});  // extreme of nothing
    infer_throws(k, ArgReduceAttrs{0, 1, 0}, {make(DataType::kBool, {2}, {0, 1})});
  }
}

// ---- Softmax / LogSoftmax / Hardmax --------------------------------------------------------

TEST(Softmax, AgainstReference) {
  const Shape shapes[] = {{5}, {3, 4}, {2, 3, 5}, {4, 1, 3}, {3, 0, 4}, {2, 3, 2, 300}};
  for (OpKind k : {OpKind::kSoftmax, OpKind::kLogSoftmax, OpKind::kHardmax})
    for (DataType t : kFloats)
      for (const Shape& shape : shapes)
        for (int64_t axis = -static_cast<int64_t>(shape.size()); axis < static_cast<int64_t>(shape.size()); ++axis)
          for (int64_t coerce : {0, 1}) {
            int64_t ax = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
            // Hardmax: integers so that ties happen; the others: an offset that would overflow exp().
            Buf x = k == OpKind::kHardmax ? random_buf(t, shape, 0, 4, true) : random_buf(t, shape, -4, 4);
            Vals xv = x.values();
            if (k != OpKind::kHardmax && t != DataType::kFloat16) {
              for (double& v : xv) v += 200;
              x = make(t, shape, xv);
              xv = x.values();
            }
            // Lines: coerce_2d flattens dims >= axis into one line per prefix.
            int64_t outer = 1, len = 1, inner = 1;
            for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
              (d < ax ? outer : d == ax ? len : inner) *= shape[d];
            if (coerce) len *= inner, inner = 1;
            Vals want(xv.size());
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t in = 0; in < inner; ++in) {
                auto at = [&](int64_t i) { return (o * len + i) * inner + in; };
                double m = -kInf, sum = 0;
                int64_t arg = 0;
                for (int64_t i = 0; i < len; ++i)
                  if (xv[at(i)] > m) m = xv[at(i)], arg = i;
                for (int64_t i = 0; i < len; ++i) sum += std::exp(xv[at(i)] - m);
                for (int64_t i = 0; i < len; ++i) {
                  if (k == OpKind::kSoftmax)
                    want[at(i)] = std::exp(xv[at(i)] - m) / sum;
                  else if (k == OpKind::kLogSoftmax)
                    want[at(i)] = xv[at(i)] - m - std::log(sum);
                  else
                    want[at(i)] = i == arg ? 1 : 0;
                }
              }
            auto out = run(k, SoftmaxAttrs{axis, coerce}, {x}, 1, shape.back() == 300);
            // LogSoftmax near 200 loses absolute bits in the input's precision, not in the op.
            double atol = k == OpKind::kLogSoftmax ? 4 * rtol_of(t) : -1;
            expect_close(out[0], shape, want,
                         std::string(op_name(k)) + " " + std::string(dtype_name(t)) + " " + shape_string(shape) +
                             " axis=" + std::to_string(axis) + " coerce_2d=" + std::to_string(coerce),
                         atol);
          }
}

TEST(Softmax, LargeNumbersAndInference) {
  Buf x = make(DataType::kFloat32, {2, 4}, {0, 1, 2, 3, 10000, 10001, 10002, 10003});
  Vals want = {0.032058604, 0.087144315, 0.23688282, 0.64391426, 0.032058604, 0.087144315, 0.23688282, 0.64391426};
  expect_close(run(OpKind::kSoftmax, SoftmaxAttrs{-1, 0}, {x})[0], {2, 4}, want, "softmax large");
  Vals lwant;
  for (double v : want) lwant.push_back(std::log(v));
  expect_close(run(OpKind::kLogSoftmax, SoftmaxAttrs{1, 0}, {x})[0], {2, 4}, lwant, "logsoftmax large");
  for (OpKind k : {OpKind::kSoftmax, OpKind::kLogSoftmax, OpKind::kHardmax}) {
    infer_throws(k, SoftmaxAttrs{2, 0}, {x});
    infer_throws(k, SoftmaxAttrs{-3, 0}, {x});
    infer_throws(k, SoftmaxAttrs{0, 2}, {x});
    infer_throws(k, SoftmaxAttrs{0, 0}, {random_buf(DataType::kInt32, {2}, 0, 2)});
    infer_throws(k, SoftmaxAttrs{-1, 0}, {make(DataType::kFloat32, {}, {1})});
  }
}

// ---- CumSum ------------------------------------------------------------------------------

TEST(CumSum, AgainstReference) {
  const Shape shapes[] = {{6}, {3, 4}, {2, 3, 5}, {2, 0, 3}, {3, 1, 700}};
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kUInt32, DataType::kUInt64})
    for (const Shape& shape : shapes)
      for (int64_t axis = -static_cast<int64_t>(shape.size()); axis < static_cast<int64_t>(shape.size()); ++axis)
        for (int64_t excl : {0, 1})
          for (int64_t rev : {0, 1}) {
            int64_t ax = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
            bool is_unsigned = t == DataType::kUInt32 || t == DataType::kUInt64;
            Buf x = random_buf(t, shape, is_unsigned ? 0 : -8, 8, t == DataType::kBFloat16);
            Vals xv = x.values(), want(xv.size());
            for (int64_t i = 0; i < numel(shape); ++i) {
              Shape idx = unravel(i, shape);
              int64_t me = idx[ax];
              double s = 0;
              for (int64_t j = 0; j < shape[ax]; ++j) {
                bool take = rev ? (excl ? j > me : j >= me) : (excl ? j < me : j <= me);
                idx[ax] = j;
                if (take) s += xv[ravel(idx, shape)];
              }
              want[i] = s;
            }
            Buf axis_in = make(axis % 2 ? DataType::kInt32 : DataType::kInt64, axis % 3 ? Shape{} : Shape{1},
                               {static_cast<double>(axis)});
            auto out = run(OpKind::kCumSum, CumSumAttrs{excl, rev}, {x, axis_in}, 1, shape.back() == 700);
            expect_close(out[0], shape, as_stored(t, shape, want),
                         std::string(dtype_name(t)) + " " + shape_string(shape) + " axis=" + std::to_string(axis) +
                             " exclusive=" + std::to_string(excl) + " reverse=" + std::to_string(rev),
                         t == DataType::kFloat16 ? 0.02 : -1);
          }
  Buf x = random_buf(DataType::kFloat32, {2, 3}, -1, 1);
  infer_throws(OpKind::kCumSum, CumSumAttrs{}, {x, ints({0, 1})});
  infer_throws(OpKind::kCumSum, CumSumAttrs{}, {x, ints({2})});
  infer_throws(OpKind::kCumSum, CumSumAttrs{}, {x, make(DataType::kFloat32, {1}, {0})});
  infer_throws(OpKind::kCumSum, CumSumAttrs{2, 0}, {x, ints({0})});
  infer_throws(OpKind::kCumSum, CumSumAttrs{}, {random_buf(DataType::kInt8, {2}, 0, 2), ints({0})});
}

// ---- TopK ----------------------------------------------------------------------------------

TEST(TopK, AgainstReference) {
  const Shape shapes[] = {{9}, {3, 5}, {2, 4, 3}, {2, 0, 3}, {3, 200, 2}};
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt32, DataType::kInt64,
                     DataType::kUInt8, DataType::kInt8})
    for (const Shape& shape : shapes)
      for (int64_t axis = -static_cast<int64_t>(shape.size()); axis < static_cast<int64_t>(shape.size()); ++axis)
        for (int64_t largest : {0, 1}) {
          int64_t ax = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
          for (int64_t kk : {int64_t{0}, int64_t{1}, shape[ax] / 2, shape[ax]}) {
            if (kk > shape[ax]) continue;
            Buf x = random_buf(t, shape, 0, 9, true);  // ties: the lower index must come first
            Vals xv = x.values();
            Shape os = shape;
            os[ax] = kk;
            Vals wv(static_cast<size_t>(numel(os))), wi(wv.size());
            for (int64_t o = 0; o < numel(os); ++o) {
              Shape idx = unravel(o, os);
              int64_t r = idx[ax];
              std::vector<std::pair<double, int64_t>> line;
              for (int64_t i = 0; i < shape[ax]; ++i) {
                idx[ax] = i;
                line.push_back({largest ? -xv[ravel(idx, shape)] : xv[ravel(idx, shape)], i});
              }
              std::sort(line.begin(), line.end());
              wv[o] = largest ? -line[r].first : line[r].first;
              wi[o] = static_cast<double>(line[r].second);
            }
            auto out = run(OpKind::kTopK, TopKAttrs{axis, largest, 1}, {x, ints({static_cast<double>(kk)})}, 2,
                           shape.size() > 1 && shape[1] == 200);
            std::string ctx = std::string(dtype_name(t)) + " " + shape_string(shape) + " axis=" + std::to_string(axis) +
                              " k=" + std::to_string(kk) + " largest=" + std::to_string(largest);
            expect_close(out[0], os, wv, ctx);
            expect_close(out[1], os, wi, ctx + " indices");
          }
        }
}

TEST(TopK, NaNAndInference) {
  Buf x = make(DataType::kFloat32, {4}, {1, kNaN, 3, 2});
  auto out = run(OpKind::kTopK, TopKAttrs{0, 1, 1}, {x, ints({2})}, 2);
  EXPECT_TRUE(std::isnan(out[0].values()[0]));
  EXPECT_EQ(out[1].values(), (Vals{1, 2}));
  out = run(OpKind::kTopK, TopKAttrs{0, 0, 1}, {x, ints({3})}, 2);
  EXPECT_EQ(out[1].values(), (Vals{0, 3, 2}));
  Buf y = random_buf(DataType::kFloat32, {2, 3}, -1, 1);
  infer_throws(OpKind::kTopK, TopKAttrs{}, {y, ints({4})}, 2);
  infer_throws(OpKind::kTopK, TopKAttrs{}, {y, ints({-1})}, 2);
  infer_throws(OpKind::kTopK, TopKAttrs{}, {y, ints({1, 1})}, 2);
  infer_throws(OpKind::kTopK, TopKAttrs{2, 1, 1}, {y, ints({1})}, 2);
  infer_throws(OpKind::kTopK, TopKAttrs{-1, 2, 1}, {y, ints({1})}, 2);
  infer_throws(OpKind::kTopK, TopKAttrs{}, {y, ints({1})}, 1);
  infer_throws(OpKind::kTopK, TopKAttrs{}, {make(DataType::kBool, {2}, {0, 1}), ints({1})}, 2);
}

// ---- Einsum --------------------------------------------------------------------------------

namespace {

// Brute force over every combination of label values; a size-1 operand dim broadcasts (numpy).
Vals ref_einsum(const std::string& eq, const std::vector<Shape>& shapes, const std::vector<Vals>& xs,
                Shape* out_shape) {
  size_t arrow = eq.find("->");
  std::string rhs = eq.substr(arrow + 2);
  std::vector<std::string> terms(1);
  for (char c : eq.substr(0, arrow)) {
    if (c == ',')
      terms.emplace_back();
    else
      terms.back().push_back(c);
  }
  std::map<char, int64_t> dims;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) dims[terms[i][d]] = std::max(dims[terms[i][d]], shapes[i][d]);
  std::string labels;
  Shape all;
  for (auto [c, d] : dims) labels.push_back(c), all.push_back(d);
  out_shape->clear();
  for (char c : rhs) out_shape->push_back(dims[c]);
  Vals out(static_cast<size_t>(numel(*out_shape)), 0.0);
  for (int64_t n = 0; n < numel(all); ++n) {
    Shape v = unravel(n, all);
    auto value_of = [&](char c) { return v[labels.find(c)]; };
    double p = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      Shape idx;
      for (size_t d = 0; d < terms[i].size(); ++d) idx.push_back(shapes[i][d] == 1 ? 0 : value_of(terms[i][d]));
      p *= xs[i][ravel(idx, shapes[i])];
    }
    Shape oidx;
    for (char c : rhs) oidx.push_back(value_of(c));
    out[ravel(oidx, *out_shape)] += p;
  }
  return out;
}

double wrap_int(DataType t, double v) {
  if (t != DataType::kInt8 && t != DataType::kUInt8) return v;
  int64_t m = ((static_cast<int64_t>(v) % 256) + 256) % 256;
  return static_cast<double>(t == DataType::kInt8 && m >= 128 ? m - 256 : m);
}

}  // namespace

TEST(Einsum, AgainstReference) {
  struct Case {
    std::string eq, ref_eq;  // ref_eq: the same contraction with explicit letters only
    std::vector<Shape> shapes;
  };
  const Case cases[] = {
      {"ij,jk->ik", "ij,jk->ik", {{2, 3}, {3, 4}}},
      {"ij,jk", "ij,jk->ik", {{2, 3}, {3, 4}}},
      {"ij, jk -> ik", "ij,jk->ik", {{3, 1}, {1, 2}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{8, 33, 20}, {8, 20, 17}}},
      {"ii->i", "ii->i", {{4, 4}}},
      {"ii", "ii->", {{4, 4}}},
      {"iji->j", "iji->j", {{3, 2, 3}}},
      {"iij->j", "iij->j", {{3, 3, 2}}},
      {"bii->bi", "bii->bi", {{3, 4, 4}}},
      {"ij->ji", "ij->ji", {{3, 5}}},
      {"ij->", "ij->", {{3, 5}}},
      {"i,i", "i,i->", {{6}, {6}}},
      {"i,j->ij", "i,j->ij", {{3}, {4}}},
      {"ij,ij->ij", "ij,ij->ij", {{3, 4}, {3, 4}}},
      {"ab,ab,ab->", "ab,ab,ab->", {{2, 3}, {2, 3}, {2, 3}}},
      {"ijk,jl,lk->i", "ijk,jl,lk->i", {{2, 3, 4}, {3, 5}, {5, 4}}},
      {"ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}},
      {"a,b,c->abc", "a,b,c->abc", {{2}, {3}, {4}}},
      {"...ij,...jk->...ik", "xyij,yjk->xyik", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"...j,...j->...", "xyj,yj->xy", {{3, 1, 4}, {2, 4}}},
      {"...ii->...i", "xyii->xyi", {{2, 3, 4, 4}}},
      {"i...i", "ixi->x", {{3, 2, 3}}},
      {"...", "xy->xy", {{2, 3}}},
      {"Ab,bC->AC", "Ab,bC->AC", {{2, 3}, {3, 4}}},
      {"aB", "aB->Ba", {{2, 3}}},
      {"Ba,aB", "Ba,aB->", {{2, 3}, {3, 2}}},
      {"ij,jk->ik", "ij,jk->ik", {{2, 0}, {0, 3}}},
      {"ij,jk->ik", "ij,jk->ik", {{0, 3}, {3, 2}}},
      {",i->i", ",i->i", {{}, {4}}},
      {"i->", "i->", {{0}}},
  };
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kUInt8, DataType::kInt8})
    for (const Case& c : cases) {
      std::vector<Buf> ins;
      std::vector<Vals> xs;
      for (const Shape& s : c.shapes) {
        ins.push_back(is_float(t) ? random_buf(t, s, -1, 1) : random_buf(t, s, t == DataType::kUInt8 ? 0 : -9, 9));
        xs.push_back(ins.back().values());
      }
      Shape os;
      Vals want = ref_einsum(c.ref_eq, c.shapes, xs, &os);
      for (double& v : want) v = wrap_int(t, v);
      auto out = run(OpKind::kEinsum, EinsumAttrs{c.eq}, ins, 1, c.shapes[0].size() == 3 && c.shapes[0][0] == 8);
      double atol = t == DataType::kFloat32    ? 1e-5
                    : t == DataType::kFloat16  ? 2e-2
                    : t == DataType::kBFloat16 ? 8e-2
                                               : -1;
      expect_close(out[0], os, want, c.eq + " " + std::string(dtype_name(t)), atol);
    }
}

TEST(Einsum, InferenceRejectsBadEquations) {
  Buf a = random_buf(DataType::kFloat32, {2, 3}, -1, 1), b = random_buf(DataType::kFloat32, {3, 4}, -1, 1);
  Buf sq = random_buf(DataType::kFloat32, {3, 3}, -1, 1);
  auto bad = [&](const std::string& eq, std::vector<Buf> ins) { infer_throws(OpKind::kEinsum, EinsumAttrs{eq}, ins); };
  bad("ij,j2->i", {a, b});  // bad character
  bad("ij,jk->i_", {a, b});
  bad("", {a});
  bad("ij,jk,kl->il", {a, b});  // term count
  bad("ij->i", {a, b});
  bad("ijk,jk->ik", {a, b});  // rank mismatch
  bad("i,jk->ik", {a, b});
  bad("ij,kj->ik", {a, b});  // j is 3 vs 4
  bad("ij,jk->ii", {a, b});  // repeated output label
  bad("ij,jk->iz", {a, b});  // output label in no input
  bad("...j->j", {a});       // ellipsis dims dropped
  bad("..i->i", {random_buf(DataType::kFloat32, {3}, -1, 1)});
  bad("...i...->i", {a});
  bad("ij->j->i", {a});
  bad("ij-jk", {a});
  bad("ij,jk->i,k", {a, b});
  bad("ii->i", {a});  // diagonal of a non-square
  bad("...i,...i->...i",
      {random_buf(DataType::kFloat32, {2, 3}, -1, 1), random_buf(DataType::kFloat32, {4, 3}, -1, 1)});
  bad("ij,jk->ik", {a, random_buf(DataType::kFloat64, {3, 4}, -1, 1)});  // mixed element types
  bad("i->i", {make(DataType::kBool, {2}, {0, 1})});
  EXPECT_NO_THROW(run(OpKind::kEinsum, EinsumAttrs{"ii"}, {sq}));
}

// ---- Normalizations ------------------------------------------------------------------------

TEST(LayerNormalization, AgainstReference) {
  struct Case {
    Shape x;
    int64_t axis;
    Shape scale, bias;  // empty bias shape with has_bias = false: omitted
    bool has_bias;
  };
  const Case cases[] = {{{2, 3, 4}, -1, {4}, {4}, true},    {{2, 3, 4}, 1, {3, 4}, {3, 4}, true},
                        {{2, 3, 4}, 1, {4}, {1, 4}, true},  {{2, 3, 4}, 0, {2, 3, 4}, {}, false},
                        {{2, 3, 4}, -2, {3, 1}, {1}, true}, {{5, 7}, 1, {7}, {}, false},
                        {{6}, 0, {6}, {6}, true},           {{0, 4}, 1, {4}, {4}, true},
                        {{4, 300}, -1, {300}, {300}, true}, {{3, 2, 5}, 2, {1}, {5}, true}};
  for (DataType t : kFloats)
    for (const Case& c : cases)
      for (size_t n_out : {1, 3}) {
        Buf x = random_buf(t, c.x, -3, 3), sc = random_buf(t, c.scale, 0.5, 2), b = random_buf(t, c.bias, -1, 1);
        std::vector<Buf> ins{x, sc};
        if (c.has_bias) ins.push_back(b);
        int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis;
        Shape norm(c.x.begin() + axis, c.x.end()), stat = c.x;
        for (size_t d = axis; d < c.x.size(); ++d) stat[d] = 1;
        int64_t rows = numel(stat), dn = numel(norm);
        Vals xv = x.values(), sv = sc.values(), bv = b.values(), want(xv.size()), mean_w, inv_w;
        auto param = [&](const Vals& p, const Shape& ps, int64_t j) {  // broadcast p to norm
          Shape idx = unravel(j, norm), pidx;
          for (size_t d = 0; d < ps.size(); ++d) pidx.push_back(ps[d] == 1 ? 0 : idx[norm.size() - ps.size() + d]);
          return p[ravel(pidx, ps)];
        };
        for (int64_t r = 0; r < rows; ++r) {
          double mu = 0, var = 0;
          for (int64_t j = 0; j < dn; ++j) mu += xv[r * dn + j] / dn;
          for (int64_t j = 0; j < dn; ++j) var += (xv[r * dn + j] - mu) * (xv[r * dn + j] - mu) / dn;
          double inv = 1 / std::sqrt(var + double{1e-5f});
          for (int64_t j = 0; j < dn; ++j)
            want[r * dn + j] =
                (xv[r * dn + j] - mu) * inv * param(sv, c.scale, j) + (c.has_bias ? param(bv, c.bias, j) : 0.0);
          mean_w.push_back(mu);
          inv_w.push_back(inv);
        }
        auto out = run(OpKind::kLayerNormalization, LayerNormAttrs{c.axis, 1e-5f, 1}, ins, n_out, dn == 300);
        std::string ctx =
            "LayerNorm " + std::string(dtype_name(t)) + " " + shape_string(c.x) + " axis " + std::to_string(c.axis);
        expect_close(out[0], c.x, want, ctx, 4 * rtol_of(t));
        if (n_out == 3) {
          EXPECT_EQ(out[1].dtype, DataType::kFloat32);
          EXPECT_EQ(out[2].dtype, DataType::kFloat32);
          expect_close(out[1], stat, mean_w, ctx + " mean", 4 * rtol_of(t));
          expect_close(out[2], stat, inv_w, ctx + " invstd", 4 * rtol_of(t));
        }
      }
  Buf x = random_buf(DataType::kFloat32, {2, 3, 4}, -1, 1);
  auto bad = [&](std::vector<Buf> ins, LayerNormAttrs a = {}) { infer_throws(OpKind::kLayerNormalization, a, ins, 3); };
  bad({x, random_buf(DataType::kFloat32, {3}, 1, 2)});  // scale does not broadcast
  bad({x, random_buf(DataType::kFloat32, {2, 4}, 1, 2)}, LayerNormAttrs{1, 1e-5f, 1});
  bad({x, random_buf(DataType::kFloat64, {4}, 1, 2)});  // dtype mismatch
  bad({x, random_buf(DataType::kFloat32, {4}, 1, 2), random_buf(DataType::kFloat32, {5}, 1, 2)});
  bad({x, random_buf(DataType::kFloat32, {4}, 1, 2)}, LayerNormAttrs{3, 1e-5f, 1});
  bad({x, random_buf(DataType::kFloat32, {4}, 1, 2)}, LayerNormAttrs{-1, 1e-5f, 7});
  bad({x, random_buf(DataType::kFloat32, {4}, 1, 2)}, LayerNormAttrs{-1, -1.0f, 1});
  bad({random_buf(DataType::kInt32, {4}, 1, 2), random_buf(DataType::kInt32, {4}, 1, 2)});
}

namespace {

// Per-(n, c) plane helpers for [N, C, ...] tensors.
void ref_planes(const Shape& s, int64_t* n, int64_t* c, int64_t* sp) {
  *n = s[0], *c = s[1], *sp = 1;
  for (size_t d = 2; d < s.size(); ++d) *sp *= s[d];
}

}  // namespace

TEST(InstanceAndBatchNormalization, AgainstReference) {
  const Shape shapes[] = {{2, 3, 5}, {1, 4, 3, 3}, {2, 3, 1, 1}, {2, 2, 2, 2, 3}, {0, 3, 4}, {2, 8, 70, 70}};
  for (DataType t : kFloats)
    for (const Shape& s : shapes) {
      int64_t n, c, sp;
      ref_planes(s, &n, &c, &sp);
      Buf x = random_buf(t, s, -3, 3), scale = random_buf(t, {c}, 0.5, 2), bias = random_buf(t, {c}, -1, 1);
      Vals xv = x.values(), sv = scale.values(), bv = bias.values(), want(xv.size());
      for (int64_t p = 0; p < n * c; ++p) {
        double mu = 0, var = 0;
        for (int64_t j = 0; j < sp; ++j) mu += xv[p * sp + j] / sp;
        for (int64_t j = 0; j < sp; ++j) var += (xv[p * sp + j] - mu) * (xv[p * sp + j] - mu) / sp;
        for (int64_t j = 0; j < sp; ++j)
          want[p * sp + j] = (xv[p * sp + j] - mu) / std::sqrt(var + double{1e-3f}) * sv[p % c] + bv[p % c];
      }
      bool big = s.back() == 70;
      auto out = run(OpKind::kInstanceNormalization, EpsilonAttrs{1e-3f}, {x, scale, bias}, 1, big);
      expect_close(out[0], s, want, "InstanceNorm " + std::string(dtype_name(t)) + shape_string(s), 4 * rtol_of(t));

      // BatchNormalization; mean/var in float64 to exercise mixed parameter types.
      Buf mean = random_buf(DataType::kFloat64, {c}, -1, 1), var = random_buf(DataType::kFloat64, {c}, 0.1, 2);
      Vals mv = mean.values(), vv = var.values();
      for (int64_t i = 0; i < numel(s); ++i) {
        int64_t ch = (i / sp) % c;
        want[i] = (xv[i] - mv[ch]) / std::sqrt(vv[ch] + double{1e-5f}) * sv[ch] + bv[ch];
      }
      out = run(OpKind::kBatchNormalization, BatchNormAttrs{1e-5f, 0.9f, 0}, {x, scale, bias, mean, var}, 1, big);
      expect_close(out[0], s, want, "BatchNorm " + std::string(dtype_name(t)) + shape_string(s), 4 * rtol_of(t));
    }
  Buf bx = random_buf(DataType::kFloat32, {2, 3}, -1, 1), p = random_buf(DataType::kFloat32, {3}, 0.5, 1);
  Vals bxv = bx.values(), pv = p.values(), want;  // rank-2 BatchNorm ([N, C], BatchNorm1d)
  for (int64_t i = 0; i < 6; ++i)
    want.push_back((bxv[i] - pv[i % 3]) / std::sqrt(pv[i % 3] + double{1e-5f}) * pv[i % 3] + pv[i % 3]);
  expect_close(run(OpKind::kBatchNormalization, BatchNormAttrs{}, {bx, p, p, p, p})[0], {2, 3}, want, "BatchNorm 2-D");

  Buf x = random_buf(DataType::kFloat32, {2, 3, 4}, -1, 1), c3 = random_buf(DataType::kFloat32, {3}, 0.5, 1);
  Buf c4 = random_buf(DataType::kFloat32, {4}, 0.5, 1);
  infer_throws(OpKind::kInstanceNormalization, EpsilonAttrs{}, {x, c4, c3});
  infer_throws(OpKind::kInstanceNormalization, EpsilonAttrs{}, {x, c3, make(DataType::kFloat64, {3}, {1, 1, 1})});
  infer_throws(OpKind::kInstanceNormalization, EpsilonAttrs{}, {random_buf(DataType::kFloat32, {2, 3}, 0, 1), c3, c3});
  infer_throws(OpKind::kInstanceNormalization, EpsilonAttrs{-1.0f}, {x, c3, c3});
  infer_throws(OpKind::kBatchNormalization, BatchNormAttrs{}, {x, c3, c3, c4, c3});
  if (op_info(OpKind::kBatchNormalization).max_outputs > 1)  // running stats: training mode only
    infer_throws(OpKind::kBatchNormalization, BatchNormAttrs{}, {x, c3, c3, c3, c3}, 3);
  infer_throws(OpKind::kBatchNormalization, BatchNormAttrs{},
               {random_buf(DataType::kFloat32, {3}, 0, 1), c3, c3, c3, c3});
  infer_throws(OpKind::kBatchNormalization, BatchNormAttrs{},
               {random_buf(DataType::kInt32, {2, 3}, 0, 1), c3, c3, c3, c3});
  try {
    std::vector<TensorView> iv;
    for (const Buf& b : {x, c3, c3, c3, c3}) iv.push_back(b.view());
    infer_shapes(OpKind::kBatchNormalization, BatchNormAttrs{1e-5f, 0.9f, 1}, iv, 1);
    ADD_FAILURE() << "training_mode = 1 must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eval mode"), std::string::npos) << e.what();
  }
}

TEST(LRN, AgainstReference) {
  const Shape shapes[] = {{2, 5, 3, 3}, {1, 4, 7}, {2, 7}, {1, 16, 40, 40}};
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16})
    for (const Shape& s : shapes)
      for (int64_t size : {1, 2, 3, 5}) {
        int64_t n, c, sp;
        ref_planes(s, &n, &c, &sp);
        Buf x = random_buf(t, s, -3, 3);
        Vals xv = x.values(), want(xv.size());
        const double alpha = double{0.02f}, beta = 0.75, bias = 1.5;
        for (int64_t i = 0; i < numel(s); ++i) {
          int64_t ch = (i / sp) % c, img = i / (sp * c), j = i % sp;
          double sq = 0;
          for (int64_t cc = ch - (size - 1) / 2; cc <= ch + size / 2; ++cc)
            if (cc >= 0 && cc < c) sq += xv[(img * c + cc) * sp + j] * xv[(img * c + cc) * sp + j];
          want[i] = xv[i] / std::pow(bias + alpha / size * sq, beta);
        }
        auto out = run(OpKind::kLRN, LrnAttrs{0.02f, 0.75f, 1.5f, size}, {x}, 1, s.back() == 40);
        expect_close(out[0], s, want,
                     "LRN " + std::string(dtype_name(t)) + shape_string(s) + " size " + std::to_string(size),
                     2 * rtol_of(t));
      }
  Buf x = random_buf(DataType::kFloat32, {1, 3, 2}, -1, 1);
  infer_throws(OpKind::kLRN, LrnAttrs{1e-4f, 0.75f, 1.0f, 0}, {x});
  infer_throws(OpKind::kLRN, LrnAttrs{1e-4f, 0.75f, 1.0f, 3}, {random_buf(DataType::kFloat32, {3}, -1, 1)});
  infer_throws(OpKind::kLRN, LrnAttrs{1e-4f, 0.75f, 1.0f, 3}, {random_buf(DataType::kInt64, {1, 3, 2}, -1, 1)});
}

