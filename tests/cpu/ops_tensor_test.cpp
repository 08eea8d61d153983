// Tensor-family ops (layout, index, generators): each op through infer_shapes + its CPU kernel,
// against plain float64 references on random inputs, with poisoned output buffers; plus cases
// ported from the ONNX backend test data and negative tests for inference and index errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using Dims = std::vector<int64_t>;
using Vals = std::vector<double>;

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt8,    DataType::kUInt8,   DataType::kInt16,   DataType::kUInt16,
                                  DataType::kInt32,   DataType::kUInt32,  DataType::kInt64,   DataType::kUInt64,
                                  DataType::kBool};
constexpr DataType kSomeTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kInt64,
                                   DataType::kBool};

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}
bool is_unsigned(DataType t) {
  return t == DataType::kUInt8 || t == DataType::kUInt16 || t == DataType::kUInt32 || t == DataType::kUInt64;
}

// An owned tensor.
struct Tensor {
  DataType dtype = DataType::kFloat32;
  Dims shape;
  std::vector<uint8_t> buf;
  bool exists = true;
  TensorView view() const {
    TensorView v;
    v.dtype = dtype;
    v.shape = shape;
    v.data = const_cast<uint8_t*>(buf.data());
    v.exists = exists;
    return v;
  }
};

int64_t numel(const Dims& s) { return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()); }

// Stores double values in dtype; integers wrap as a C++20 conversion does.
Tensor make(DataType dt, Dims shape, const Vals& v) {
  Tensor t{dt, shape, std::vector<uint8_t>(static_cast<size_t>(numel(shape)) * dtype_size(dt) + 1)};
  EXPECT_EQ(static_cast<int64_t>(v.size()), numel(shape));
  dispatch_all(dt, "make", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = reinterpret_cast<T*>(t.buf.data());
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>)
        p[i] = v[i] != 0;
      else if constexpr (std::is_integral_v<T>)
        p[i] = static_cast<T>(static_cast<int64_t>(v[i]));
      else
        p[i] = static_cast<T>(static_cast<ComputeType<T>>(v[i]));
    }
  });
  return t;
}
Tensor ints(const Vals& v, DataType dt = DataType::kInt64) { return make(dt, {static_cast<int64_t>(v.size())}, v); }
Tensor scalar(double v, DataType dt) { return make(dt, {}, {v}); }
Tensor missing() {
  Tensor t;
  t.exists = false;
  return t;
}

// Values as double; bool bytes are read raw so that a poisoned (unwritten) byte shows as 171.
Vals values(const Tensor& t) {
  Vals out(static_cast<size_t>(numel(t.shape)));
  if (t.dtype == DataType::kBool) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = t.buf[i];
    return out;
  }
  dispatch_numeric(t.dtype, "values", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = reinterpret_cast<const T*>(t.buf.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
  });
  return out;
}

// Random values exactly representable in every dtype of the test (quarters for floats).
Vals rand_vals(int64_t n, DataType dt, std::mt19937& rng) {
  Vals v(static_cast<size_t>(n));
  std::uniform_int_distribution<int> d(-100, 100);
  for (double& x : v) {
    int k = d(rng);
    if (dt == DataType::kBool)
      x = k & 1;
    else if (is_float(dt))
      x = k / 4.0;
    else if (is_unsigned(dt))
      x = k + 100;
    else
      x = k;
  }
  return v;
}
Tensor rand_tensor(DataType dt, Dims shape, std::mt19937& rng) {
  return make(dt, shape, rand_vals(numel(shape), dt, rng));
}

// infer_shapes, then the kernel on outputs poisoned with NaN (floats) or 0xAB bytes.
std::vector<Tensor> run(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& in, size_t n_out = 1,
                        cpu::ThreadPool* pool = nullptr) {
  std::vector<TensorView> iv;
  for (const Tensor& t : in) iv.push_back(t.view());
  std::vector<OutputType> types = infer_shapes(kind, attrs, iv, n_out);
  std::vector<Tensor> outs;
  for (const OutputType& o : types)
    outs.push_back({o.dtype, o.shape,
                    std::vector<uint8_t>(static_cast<size_t>(numel(o.shape)) * dtype_size(o.dtype) + 1,
                                         is_float(o.dtype) ? 0xFF : 0xAB)});
  std::vector<TensorView> ov;
  for (const Tensor& t : outs) ov.push_back(t.view());
  cpu::CpuKernel k = cpu::cpu_kernel(kind);
  if (!k) throw Error("no kernel");
  cpu::KernelEnv env{pool};
  k(kind, attrs, iv, ov, env);
  return outs;
}
Tensor run1(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& in) { return run(kind, attrs, in)[0]; }

void expect_infer_error(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& in, size_t n_out = 1) {
  std::vector<TensorView> iv;
  for (const Tensor& t : in) iv.push_back(t.view());
  EXPECT_THROW(infer_shapes(kind, attrs, iv, n_out), Error) << op_name(kind);
}

// A plain float64 array for references.
struct Arr {
  Dims shape;
  Vals v;
};
Arr arr(const Tensor& t) { return {t.shape, values(t)}; }
Dims unravel(int64_t i, const Dims& s) {
  Dims id(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    id[d] = i % s[d];
    i /= s[d];
  }
  return id;
}
int64_t ravel(const Dims& id, const Dims& s) {
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d) i = i * s[d] + id[d];
  return i;
}
// Builds an output array of `shape` with value f(out multi-index).
template <class F>
Arr build(const Dims& shape, F f) {
  Arr a{shape, Vals(static_cast<size_t>(numel(shape)))};
  for (int64_t i = 0; i < numel(shape); ++i) a.v[i] = f(unravel(i, shape));
  return a;
}
double at(const Arr& a, const Dims& id) { return a.v[ravel(id, a.shape)]; }

// Casts reference values to what dtype stores (wrapping integers).
Vals as_dtype(const Vals& v, DataType dt) { return values(make(dt, {static_cast<int64_t>(v.size())}, v)); }

void expect_arr(const Tensor& got, const Arr& want, const std::string& what = "") {
  ASSERT_EQ(got.shape, want.shape) << what;
  const Vals g = values(got), w = as_dtype(want.v, got.dtype);
  for (size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i])) {
      ADD_FAILURE() << what << " element " << i << ": got " << g[i] << " want " << w[i];
      return;
    }
}

Dims rand_shape(std::mt19937& rng, int rank, int lo = 1, int hi = 5) {
  Dims s(rank);
  for (auto& d : s) d = std::uniform_int_distribution<int>(lo, hi)(rng);
  return s;
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze ----------------------------------------------------

TEST(TensorOps, Reshape) {
  std::mt19937 rng(1);
  struct Case {
    Dims in;
    Vals shape;
    int64_t allowzero;
    Dims want;
  };
  const Case cases[] = {{{2, 3, 4}, {4, -1}, 0, {4, 6}},
                        {{2, 3, 4}, {0, -1}, 0, {2, 12}},
                        {{2, 3, 4}, {-1}, 0, {24}},
                        {{2, 3, 4}, {0, 0, 2, 2}, 0, {2, 3, 2, 2}},
                        {{0, 3}, {3, 0}, 1, {3, 0}},
                        {{0, 3}, {0, 3}, 0, {0, 3}},
                        {{1}, {}, 0, {}},
                        {{5}, {1, -1, 1}, 0, {1, 5, 1}}};
  for (DataType dt : kAllTypes)
    for (const Case& c : cases) {
      Tensor x = rand_tensor(dt, c.in, rng);
      ReshapeAttrs a;
      a.allowzero = c.allowzero;
      Tensor y = run1(OpKind::kReshape, a, {x, ints(c.shape)});
      expect_arr(y, {c.want, values(x)}, "Reshape");
    }
  Tensor x = rand_tensor(DataType::kFloat32, {2, 3, 4}, rng);
  for (const Vals& bad : std::vector<Vals>{{5, -1}, {-1, -1}, {7}, {0, 0, 0, 0}, {-2, 12}})
    expect_infer_error(OpKind::kReshape, ReshapeAttrs{}, {x, ints(bad)});
  ReshapeAttrs az;
  az.allowzero = 1;
  expect_infer_error(OpKind::kReshape, az, {x, ints({0, -1})});
  expect_infer_error(OpKind::kReshape, ReshapeAttrs{}, {make(DataType::kFloat32, {0, 3}, {}), ints({0, -1})});
  expect_infer_error(OpKind::kReshape, ReshapeAttrs{}, {x, ints({24}, DataType::kFloat32)});
}

TEST(TensorOps, FlattenSqueezeUnsqueeze) {
  std::mt19937 rng(2);
  for (DataType dt : kSomeTypes) {
    Tensor x = rand_tensor(dt, {2, 1, 3, 1}, rng);
    for (int64_t axis = -4; axis <= 4; ++axis) {
      const int64_t a = axis < 0 ? axis + 4 : axis;
      const int64_t outer = numel(Dims(x.shape.begin(), x.shape.begin() + a));
      expect_arr(run1(OpKind::kFlatten, AxisAttrs{axis}, {x}), {{outer, 6 / outer}, values(x)}, "Flatten");
    }
    expect_arr(run1(OpKind::kSqueeze, NoAttrs{}, {x}), {{2, 3}, values(x)}, "Squeeze all");
    expect_arr(run1(OpKind::kSqueeze, NoAttrs{}, {x, ints({-1})}), {{2, 1, 3}, values(x)}, "Squeeze -1");
    expect_arr(run1(OpKind::kSqueeze, NoAttrs{}, {x, ints({3, 1})}), {{2, 3}, values(x)}, "Squeeze 3,1");
    expect_arr(run1(OpKind::kUnsqueeze, NoAttrs{}, {x, ints({0, -1})}), {{1, 2, 1, 3, 1, 1}, values(x)}, "Unsq");
    expect_arr(run1(OpKind::kUnsqueeze, NoAttrs{}, {x, ints({5, 2}, DataType::kInt32)}),
               {{2, 1, 1, 3, 1, 1}, values(x)}, "Unsqueeze unsorted");
  }
  Tensor x = rand_tensor(DataType::kFloat32, {2, 1, 3}, rng);
  expect_infer_error(OpKind::kFlatten, AxisAttrs{4}, {x});
  expect_infer_error(OpKind::kFlatten, AxisAttrs{-4}, {x});
  expect_infer_error(OpKind::kSqueeze, NoAttrs{}, {x, ints({0})});      // size 2
  expect_infer_error(OpKind::kSqueeze, NoAttrs{}, {x, ints({3})});      // out of range
  expect_infer_error(OpKind::kSqueeze, NoAttrs{}, {x, ints({1, -2})});  // duplicate
  expect_infer_error(OpKind::kUnsqueeze, NoAttrs{}, {x, ints({4, -1})});
  expect_infer_error(OpKind::kUnsqueeze, NoAttrs{}, {x, ints({5})});
}

// ---- Transpose, Tile, Expand, DepthToSpace, SpaceToDepth ---------------------------------------

TEST(TensorOps, Transpose) {
  std::mt19937 rng(3);
  for (DataType dt : kAllTypes)
    for (int rank = 0; rank <= 5; ++rank) {
      Tensor x = rand_tensor(dt, rand_shape(rng, rank, rank > 3 ? 1 : 0, 5), rng);
      Dims perm(rank);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      const Arr ax = arr(x);
      for (bool dflt : {false, true}) {
        Dims p = perm;
        if (dflt)
          for (int i = 0; i < rank; ++i) p[i] = rank - 1 - i;
        Dims os(rank);
        for (int i = 0; i < rank; ++i) os[i] = x.shape[p[i]];
        Arr want = build(os, [&](const Dims& o) {
          Dims id(rank);
          for (int i = 0; i < rank; ++i) id[p[i]] = o[i];
          return at(ax, id);
        });
        TransposeAttrs a;
        if (!dflt) a.perm = perm;
        expect_arr(run1(OpKind::kTranspose, a, {x}), want, "Transpose");
      }
    }
  // Shapes large enough for the cache-blocked path (odd sizes leave partial tiles).
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kInt8, DataType::kBFloat16})
    for (const auto& [shape, perm] : std::vector<std::pair<Dims, Dims>>{
             {{37, 41}, {1, 0}}, {{3, 20, 9, 17}, {0, 2, 3, 1}}, {{2, 70, 33}, {2, 1, 0}}, {{9, 2, 40}, {2, 1, 0}}}) {
      Tensor x = rand_tensor(dt, shape, rng);
      const Arr ax = arr(x);
      Dims os(shape.size());
      for (size_t i = 0; i < shape.size(); ++i) os[i] = shape[perm[i]];
      Arr want = build(os, [&](const Dims& o) {
        Dims id(o.size());
        for (size_t i = 0; i < o.size(); ++i) id[perm[i]] = o[i];
        return at(ax, id);
      });
      expect_arr(run1(OpKind::kTranspose, TransposeAttrs{perm}, {x}), want, "Transpose blocked");
    }
  Tensor x = rand_tensor(DataType::kFloat32, {2, 3}, rng);
  expect_infer_error(OpKind::kTranspose, TransposeAttrs{{0, 0}}, {x});
  expect_infer_error(OpKind::kTranspose, TransposeAttrs{{0, 2}}, {x});
  expect_infer_error(OpKind::kTranspose, TransposeAttrs{{0}}, {x});
  expect_infer_error(OpKind::kTranspose, TransposeAttrs{{-1, 0}}, {x});
}

TEST(TensorOps, TileAndExpand) {
  std::mt19937 rng(4);
  for (DataType dt : kAllTypes) {
    Tensor x = rand_tensor(dt, {2, 1, 3}, rng);
    const Arr ax = arr(x);
    for (Vals rep : std::vector<Vals>{{1, 1, 1}, {2, 3, 1}, {1, 4, 2}, {3, 0, 2}}) {
      Dims os{2 * (int64_t)rep[0], (int64_t)rep[1], 3 * (int64_t)rep[2]};
      Arr want = build(os, [&](const Dims& o) { return at(ax, {o[0] % 2, 0, o[2] % 3}); });
      expect_arr(run1(OpKind::kTile, NoAttrs{}, {x, ints(rep)}), want, "Tile");
    }
    for (Vals shape : std::vector<Vals>{{2, 4, 3}, {3, 1, 1, 1}, {1}, {5, 2, 1, 3}, {2, 0, 1}}) {
      Dims os = broadcast_shapes(x.shape, Dims(shape.begin(), shape.end()));
      Arr want = build(os, [&](const Dims& o) {
        const size_t lead = o.size() - 3;
        return at(ax, {o[lead] % 2, 0, o[lead + 2] % 3});
      });
      expect_arr(run1(OpKind::kExpand, NoAttrs{}, {x, ints(shape)}), want, "Expand");
    }
    Tensor col = rand_tensor(dt, {3, 1}, rng);  // broadcast along the innermost dim
    const Arr ac = arr(col);
    for (Vals shape : std::vector<Vals>{{2, 3, 4}, {3, 5}, {1, 1}}) {
      Dims os = broadcast_shapes(col.shape, Dims(shape.begin(), shape.end()));
      Arr want = build(os, [&](const Dims& o) { return at(ac, {o[o.size() - 2], 0}); });
      expect_arr(run1(OpKind::kExpand, NoAttrs{}, {col, ints(shape)}), want, "Expand inner");
    }
  }
  Tensor x = rand_tensor(DataType::kFloat32, {2, 3}, rng);
  expect_infer_error(OpKind::kTile, NoAttrs{}, {x, ints({2})});
  expect_infer_error(OpKind::kTile, NoAttrs{}, {x, ints({2, -1})});
  expect_infer_error(OpKind::kTile, NoAttrs{}, {x, ints({1LL << 40, 1LL << 40})});
  expect_infer_error(OpKind::kExpand, NoAttrs{}, {x, ints({4, 3, 1})});  // 2 vs 3
  expect_infer_error(OpKind::kExpand, NoAttrs{}, {x, ints({-1, 3})});
}

TEST(TensorOps, DepthToSpaceAndSpaceToDepth) {
  std::mt19937 rng(5);
  for (DataType dt : kSomeTypes)
    for (int64_t b : {1, 2, 3})
      for (DepthToSpaceMode mode : {DepthToSpaceMode::kDcr, DepthToSpaceMode::kCrd}) {
        const int64_t n = 2, c = 2, h = 3, w = 2;
        Tensor x = rand_tensor(dt, {n, c * b * b, h, w}, rng);
        const Arr ax = arr(x);
        // ONNX spec: DCR reshapes to [n, b, b, c, h, w], CRD to [n, c, b, b, h, w].
        Arr want = build({n, c, h * b, w * b}, [&](const Dims& o) {
          const int64_t bi = o[2] % b, bj = o[3] % b;
          const int64_t ch = mode == DepthToSpaceMode::kDcr ? (bi * b + bj) * c + o[1] : o[1] * b * b + bi * b + bj;
          return at(ax, {o[0], ch, o[2] / b, o[3] / b});
        });
        Tensor y = run1(OpKind::kDepthToSpace, DepthToSpaceAttrs{b, mode}, {x});
        expect_arr(y, want, "DepthToSpace");
        if (mode == DepthToSpaceMode::kDcr)  // SpaceToDepth is DCR's inverse
          expect_arr(run1(OpKind::kSpaceToDepth, DepthToSpaceAttrs{b, mode}, {y}), ax, "SpaceToDepth");
      }
  Tensor x = rand_tensor(DataType::kFloat32, {1, 8, 2, 3}, rng);
  expect_infer_error(OpKind::kDepthToSpace, DepthToSpaceAttrs{3, DepthToSpaceMode::kDcr}, {x});
  expect_infer_error(OpKind::kDepthToSpace, DepthToSpaceAttrs{0, DepthToSpaceMode::kDcr}, {x});
  expect_infer_error(OpKind::kSpaceToDepth, DepthToSpaceAttrs{2, DepthToSpaceMode::kDcr}, {x});  // W = 3
  expect_infer_error(OpKind::kDepthToSpace, DepthToSpaceAttrs{2, DepthToSpaceMode::kDcr},
                     {rand_tensor(DataType::kFloat32, {8, 2, 3}, rng)});
  // Ported from ONNX backend data: test_depthtospace_crd_mode_example, test_spacetodepth_example.
  Vals in, out = {0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29, 3,  12, 4,  13, 5,  14, 21, 30, 22, 31, 23, 32,
                  36, 45, 37, 46, 38, 47, 54, 63, 55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68};
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 6; ++i) in.push_back(c * 9 + (i / 3) * 3 + i % 3);
  expect_arr(run1(OpKind::kDepthToSpace, DepthToSpaceAttrs{2, DepthToSpaceMode::kCrd},
                  {make(DataType::kFloat32, {1, 8, 2, 3}, in)}),
             {{1, 2, 4, 6}, out}, "onnx crd");
  Vals s2d_in = {0, 6, 1, 7, 2, 8, 12, 18, 13, 19, 14, 20, 3, 9, 4, 10, 5, 11, 15, 21, 16, 22, 17, 23}, s2d_out(24);
  std::iota(s2d_out.begin(), s2d_out.end(), 0);
  expect_arr(run1(OpKind::kSpaceToDepth, DepthToSpaceAttrs{2, DepthToSpaceMode::kDcr},
                  {make(DataType::kFloat32, {1, 1, 4, 6}, s2d_in)}),
             {{1, 4, 2, 3}, s2d_out}, "onnx s2d");
}

// ---- Concat, Split, Slice ----------------------------------------------------------------------

TEST(TensorOps, ConcatAndSplit) {
  std::mt19937 rng(6);
  for (DataType dt : kAllTypes)
    for (int64_t axis = -3; axis < 3; ++axis) {
      const int64_t ax = axis < 0 ? axis + 3 : axis;
      Dims base = rand_shape(rng, 3, 1, 4);
      std::vector<Tensor> parts;
      std::vector<Arr> pa;
      Dims sizes;
      for (int i = 0; i < 3; ++i) {
        Dims s = base;
        s[ax] = i == 1 ? 0 : std::uniform_int_distribution<int>(1, 4)(rng);  // a zero-size part
        sizes.push_back(s[ax]);
        parts.push_back(rand_tensor(dt, s, rng));
        pa.push_back(arr(parts.back()));
      }
      Dims os = base;
      os[ax] = sizes[0] + sizes[1] + sizes[2];
      Arr want = build(os, [&](const Dims& o) {
        Dims id = o;
        int i = 0;
        while (id[ax] >= sizes[i]) id[ax] -= sizes[i++];
        return at(pa[i], id);
      });
      Tensor y = run1(OpKind::kConcat, AxisAttrs{axis}, parts);
      expect_arr(y, want, "Concat");
      std::vector<Tensor> back =
          run(OpKind::kSplit, SplitAttrs{axis, 0}, {y, ints(Vals(sizes.begin(), sizes.end()))}, 3);
      for (int i = 0; i < 3; ++i) expect_arr(back[i], pa[i], "Split sizes");
    }
  // Equal and uneven parts (opset 18: ceil-sized parts, the last one smaller).
  struct Case {
    int64_t d, n, num_outputs;
    Dims want;
  };
  for (const Case& c : {Case{6, 3, 3, {2, 2, 2}}, Case{7, 3, 0, {3, 3, 1}}, Case{5, 2, 2, {3, 2}},
                        Case{4, 3, 3, {2, 2, 0}}, Case{0, 2, 2, {0, 0}}, Case{5, 1, 0, {5}}}) {
    Tensor x = rand_tensor(DataType::kFloat16, {2, c.d}, rng);
    const Arr ax = arr(x);
    std::vector<Tensor> outs = run(OpKind::kSplit, SplitAttrs{-1, c.num_outputs}, {x}, c.n);
    int64_t pos = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      expect_arr(outs[i], build({2, c.want[i]}, [&](const Dims& o) { return at(ax, {o[0], o[1] + pos}); }), "Split");
      pos += c.want[i];
    }
  }
  Tensor a = rand_tensor(DataType::kFloat32, {2, 3}, rng), b = rand_tensor(DataType::kFloat32, {3, 3}, rng);
  expect_infer_error(OpKind::kConcat, AxisAttrs{1}, {a, b});
  expect_infer_error(OpKind::kConcat, AxisAttrs{2}, {a, a});
  expect_infer_error(OpKind::kConcat, AxisAttrs{0}, {a, rand_tensor(DataType::kInt32, {3, 3}, rng)});
  expect_infer_error(OpKind::kConcat, AxisAttrs{0}, {a, rand_tensor(DataType::kFloat32, {3}, rng)});
  expect_infer_error(OpKind::kConcat, AxisAttrs{0}, {scalar(1, DataType::kFloat32)});
  expect_infer_error(OpKind::kSplit, SplitAttrs{1, 0}, {a, ints({1, 1})}, 2);     // sum 2 != 3
  expect_infer_error(OpKind::kSplit, SplitAttrs{1, 0}, {a, ints({1, 1, 1})}, 2);  // 3 sizes, 2 outputs
  expect_infer_error(OpKind::kSplit, SplitAttrs{1, 0}, {a, ints({4, -1})}, 2);
  expect_infer_error(OpKind::kSplit, SplitAttrs{1, 3}, {a}, 2);
  expect_infer_error(OpKind::kSplit, SplitAttrs{2, 0}, {a}, 2);
  expect_infer_error(OpKind::kSplit, SplitAttrs{1, 0}, {rand_tensor(DataType::kFloat32, {5}, rng)}, 4);  // 2,2,2,-1
}

// Independent reference: walk i from the clamped start while it has not passed the clamped end.
Dims slice_indices(int64_t dim, int64_t start, int64_t end, int64_t step) {
  auto fix = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v = v < -dim ? -1 : v + dim;
    return std::min(std::max(v, lo), hi);
  };
  Dims out;
  if (step > 0) {
    for (int64_t i = fix(start, 0, dim), e = fix(end, 0, dim); i < e; i = step < e - i ? i + step : e) out.push_back(i);
  } else {
    for (int64_t i = fix(start, 0, dim - 1), e = fix(end, -1, dim - 1); i > e; i = step > e - i ? i + step : e)
      out.push_back(i);
  }
  return out;
}

TEST(TensorOps, Slice) {
  std::mt19937 rng(7);
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  const Vals picks = {0, 1, 2, 3, -1, -2, -4, 5, 7, -9};
  for (int iter = 0; iter < 300; ++iter) {
    const DataType dt = kAllTypes[iter % std::size(kAllTypes)];
    const int rank = 1 + iter % 3;
    Tensor x = rand_tensor(dt, rand_shape(rng, rank, iter % 7 == 0 ? 0 : 1, 6), rng);
    const Arr ax = arr(x);
    Dims axes(rank);
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), rng);
    axes.resize(std::uniform_int_distribution<int>(1, rank)(rng));
    Dims starts, ends, steps, axes_in;
    std::vector<Dims> idx(rank);
    for (int d = 0; d < rank; ++d) idx[d] = slice_indices(x.shape[d], 0, big, 1);
    auto pick = [&]() { return static_cast<int64_t>(picks[rng() % picks.size()]); };
    for (int64_t a : axes) {
      int64_t s = pick(), e = pick(), st = pick();
      if (st == 0) st = 1;
      if (rng() % 6 == 0) e = st > 0 ? big : small;
      if (rng() % 8 == 0) s = st > 0 ? small : big;
      if (rng() % 10 == 0) st = st > 0 ? big : small;
      starts.push_back(s);
      ends.push_back(e);
      steps.push_back(st);
      axes_in.push_back(rng() % 2 ? a : a - rank);
      idx[a] = slice_indices(x.shape[a], s, e, st);
    }
    Dims os;
    for (const Dims& v : idx) os.push_back(static_cast<int64_t>(v.size()));
    Arr want = build(os, [&](const Dims& o) {
      Dims id(rank);
      for (int d = 0; d < rank; ++d) id[d] = idx[d][o[d]];
      return at(ax, id);
    });
    // Built bit-exactly: doubles cannot hold the INT64 extremes.
    auto t64 = [](const Dims& v) {
      Tensor t = ints(Vals(v.size(), 0.0));
      std::memcpy(t.buf.data(), v.data(), v.size() * 8);
      return t;
    };
    std::vector<Tensor> in = {x, t64(starts), t64(ends), t64(axes_in), t64(steps)};
    SCOPED_TRACE("shape " + shape_string(x.shape) + " starts " + shape_string(starts) + " ends " + shape_string(ends) +
                 " axes " + shape_string(axes_in) + " steps " + shape_string(steps));
    expect_arr(run1(OpKind::kSlice, NoAttrs{}, in), want, "Slice");
  }
  // int32 parameters, default axes and steps; ONNX test_slice_neg_steps shape.
  Tensor x = rand_tensor(DataType::kFloat32, {20, 10, 5}, rng);
  const Arr ax = arr(x);
  Tensor y = run1(OpKind::kSlice, NoAttrs{},
                  {x, ints({20, 10, 4}, DataType::kInt32), ints({0, 0, 1}, DataType::kInt32),
                   ints({0, 1, 2}, DataType::kInt32), ints({-1, -3, -2}, DataType::kInt32)});
  expect_arr(y,
             build({19, 3, 2},
                   [&](const Dims& o) {
                     return at(ax, {19 - o[0], 9 - 3 * o[1], 4 - 2 * o[2]});
                   }),
             "slice_neg_steps");
  y = run1(OpKind::kSlice, NoAttrs{}, {x, ints({1, -3}, DataType::kInt32), ints({3, 100}, DataType::kInt32)});
  expect_arr(y, build({2, 3, 5}, [&](const Dims& o) { return at(ax, {o[0] + 1, o[1] + 7, o[2]}); }), "default axes");
  y = run1(OpKind::kSlice, NoAttrs{}, {x, ints({0}), ints({-1}), missing(), missing()});
  EXPECT_EQ(y.shape, (Dims{19, 10, 5}));
  expect_infer_error(OpKind::kSlice, NoAttrs{}, {x, ints({0}), ints({5}), ints({0}), ints({0})});  // step 0
  expect_infer_error(OpKind::kSlice, NoAttrs{}, {x, ints({0, 0}), ints({5, 5}), ints({1, -2})});   // dup axis
  expect_infer_error(OpKind::kSlice, NoAttrs{}, {x, ints({0}), ints({5}), ints({3})});             // axis range
  expect_infer_error(OpKind::kSlice, NoAttrs{}, {x, ints({0, 1}), ints({5})});                     // lengths
  expect_infer_error(OpKind::kSlice, NoAttrs{}, {x, ints({0}, DataType::kFloat32), ints({5})});
}

// ---- Gather, GatherElements, GatherND ------------------------------------------------------------

Tensor rand_indices(Dims shape, int64_t dim, DataType it, std::mt19937& rng) {
  Vals v(static_cast<size_t>(numel(shape)));
  for (double& x : v) x = std::uniform_int_distribution<int64_t>(-dim, dim - 1)(rng);  // negatives wrap
  return make(it, shape, v);
}
int64_t wrap(double v, int64_t dim) { return v < 0 ? static_cast<int64_t>(v) + dim : static_cast<int64_t>(v); }

TEST(TensorOps, Gather) {
  std::mt19937 rng(8);
  for (DataType dt : kAllTypes)
    for (int rank = 1; rank <= 3; ++rank)
      for (int64_t axis = -rank; axis < rank; ++axis) {
        const int64_t ax = axis < 0 ? axis + rank : axis;
        Tensor x = rand_tensor(dt, rand_shape(rng, rank, 1, 5), rng);
        const DataType it = axis % 2 ? DataType::kInt32 : DataType::kInt64;
        Tensor ind = rand_indices(rand_shape(rng, static_cast<int>(rng() % 3), 0, 3), x.shape[ax], it, rng);
        const Arr a = arr(x), ai = arr(ind);
        Dims os(x.shape.begin(), x.shape.begin() + ax);
        os.insert(os.end(), ind.shape.begin(), ind.shape.end());
        os.insert(os.end(), x.shape.begin() + ax + 1, x.shape.end());
        const size_t q = ind.shape.size();
        Arr want = build(os, [&](const Dims& o) {
          Dims id(o.begin(), o.begin() + ax), ii(o.begin() + ax, o.begin() + ax + q);
          id.push_back(wrap(at(ai, ii), x.shape[ax]));
          id.insert(id.end(), o.begin() + ax + q, o.end());
          return at(a, id);
        });
        expect_arr(run1(OpKind::kGather, AxisAttrs{axis}, {x, ind}), want, "Gather");
      }
  Tensor x = rand_tensor(DataType::kFloat32, {3, 4}, rng);
  EXPECT_THROW(run1(OpKind::kGather, AxisAttrs{0}, {x, ints({0, 3})}), Error);
  EXPECT_THROW(run1(OpKind::kGather, AxisAttrs{1}, {x, ints({-5}, DataType::kInt32)}), Error);
  EXPECT_THROW(run1(OpKind::kGather, AxisAttrs{0}, {make(DataType::kFloat32, {0, 2}, {}), ints({0})}), Error);
  expect_infer_error(OpKind::kGather, AxisAttrs{2}, {x, ints({0})});
  expect_infer_error(OpKind::kGather, AxisAttrs{0}, {x, ints({0}, DataType::kFloat32)});
  expect_infer_error(OpKind::kGather, AxisAttrs{0}, {scalar(1, DataType::kFloat32), ints({0})});
}

TEST(TensorOps, GatherElements) {
  std::mt19937 rng(9);
  for (DataType dt : kAllTypes)
    for (int rank = 1; rank <= 3; ++rank)
      for (int64_t axis = -rank; axis < rank; ++axis) {
        const int64_t ax = axis < 0 ? axis + rank : axis;
        Tensor x = rand_tensor(dt, rand_shape(rng, rank, 1, 5), rng);
        Dims is = x.shape;
        for (int d = 0; d < rank; ++d) is[d] = d == ax ? rng() % 5 : 1 + rng() % x.shape[d];  // smaller off-axis
        Tensor ind = rand_indices(is, x.shape[ax], axis % 2 ? DataType::kInt32 : DataType::kInt64, rng);
        const Arr a = arr(x), ai = arr(ind);
        Arr want = build(is, [&](const Dims& o) {
          Dims id = o;
          id[ax] = wrap(at(ai, o), x.shape[ax]);
          return at(a, id);
        });
        expect_arr(run1(OpKind::kGatherElements, AxisAttrs{axis}, {x, ind}), want, "GatherElements");
      }
  Tensor x = rand_tensor(DataType::kFloat32, {3, 4}, rng);
  EXPECT_THROW(run1(OpKind::kGatherElements, AxisAttrs{1}, {x, make(DataType::kInt64, {1, 2}, {0, 4})}), Error);
  expect_infer_error(OpKind::kGatherElements, AxisAttrs{1}, {x, make(DataType::kInt64, {4, 1}, {0, 0, 0, 0})});
  expect_infer_error(OpKind::kGatherElements, AxisAttrs{1}, {x, ints({0})});
}

TEST(TensorOps, GatherND) {
  std::mt19937 rng(10);
  for (DataType dt : kSomeTypes)
    for (int64_t b = 0; b <= 2; ++b)
      for (int64_t m = 1; m <= 2; ++m) {
        Tensor x = rand_tensor(dt, rand_shape(rng, static_cast<int>(b + m + rng() % 2), 1, 4), rng);
        Dims is(x.shape.begin(), x.shape.begin() + b);
        is.push_back(1 + rng() % 3);
        is.push_back(m);
        Vals iv;
        for (int64_t t = 0; t < numel(is) / m; ++t)
          for (int64_t j = 0; j < m; ++j) {
            const int64_t dim = x.shape[b + j];
            iv.push_back(std::uniform_int_distribution<int64_t>(-dim, dim - 1)(rng));
          }
        Tensor ind = make(b == 1 ? DataType::kInt32 : DataType::kInt64, is, iv);
        const Arr a = arr(x), ai = arr(ind);
        Dims os(is.begin(), is.end() - 1);
        os.insert(os.end(), x.shape.begin() + b + m, x.shape.end());
        Arr want = build(os, [&](const Dims& o) {
          Dims id(o.begin(), o.begin() + b), ii(o.begin(), o.begin() + b + 1);
          ii.push_back(0);
          for (int64_t j = 0; j < m; ++j) {
            ii.back() = j;
            id.push_back(wrap(at(ai, ii), x.shape[b + j]));
          }
          id.insert(id.end(), o.begin() + b + 1, o.end());
          return at(a, id);
        });
        expect_arr(run1(OpKind::kGatherND, GatherNDAttrs{b}, {x, ind}), want, "GatherND");
      }
  // ONNX test_gathernd_example_int32_batch_dim1.
  expect_arr(
      run1(OpKind::kGatherND, GatherNDAttrs{1},
           {make(DataType::kInt32, {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), make(DataType::kInt64, {2, 1}, {1, 0})}),
      {{2, 2}, {2, 3, 4, 5}});
  Tensor x = rand_tensor(DataType::kFloat32, {2, 3}, rng);
  EXPECT_THROW(run1(OpKind::kGatherND, GatherNDAttrs{0}, {x, make(DataType::kInt64, {1, 2}, {1, 3})}), Error);
  expect_infer_error(OpKind::kGatherND, GatherNDAttrs{0}, {x, make(DataType::kInt64, {1, 3}, {0, 0, 0})});
  expect_infer_error(OpKind::kGatherND, GatherNDAttrs{1}, {x, make(DataType::kInt64, {3, 1}, {0, 0, 0})});
  expect_infer_error(OpKind::kGatherND, GatherNDAttrs{2}, {x, make(DataType::kInt64, {2, 1}, {0, 0})});
}

// ---- ScatterElements, ScatterND ------------------------------------------------------------------

double combine_ref(ScatterReduction r, double a, double b) {
  switch (r) {
    case ScatterReduction::kNone: return b;
    case ScatterReduction::kAdd: return a + b;
    case ScatterReduction::kMul: return a * b;
    case ScatterReduction::kMax: return std::max(a, b);
    case ScatterReduction::kMin: return std::min(a, b);
  }
  return 0;
}

TEST(TensorOps, ScatterElements) {
  std::mt19937 rng(11);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt8, DataType::kInt32,
                      DataType::kUInt16, DataType::kInt64, DataType::kBool})
    for (int red = 0; red < 5; ++red) {
      const auto r = static_cast<ScatterReduction>(red);
      if (dt == DataType::kBool && r != ScatterReduction::kNone) continue;
      for (int64_t axis : {-2, 0, 1}) {
        const int64_t ax = axis < 0 ? axis + 2 : axis;
        Tensor x = rand_tensor(dt, {3, 4}, rng);
        Dims is{1 + (int64_t)(rng() % 3), 1 + (int64_t)(rng() % 4)};
        is[ax] = rng() % 6;  // more updates than the axis holds: duplicates
        // none: distinct targets (duplicates are unspecified); reductions: duplicates on purpose.
        if (r == ScatterReduction::kNone) is[ax] = std::min(is[ax], x.shape[ax]);
        Vals iv(numel(is));
        for (int64_t p = 0; p < numel(is); ++p) {
          const int64_t pos = unravel(p, is)[ax], dim = x.shape[ax];
          iv[p] = r == ScatterReduction::kNone ? (pos % 2 ? pos - dim : pos)
                                               : std::uniform_int_distribution<int64_t>(-dim, dim - 1)(rng);
        }
        Tensor ind = make(axis == 1 ? DataType::kInt32 : DataType::kInt64, is, iv);
        Vals uv = rand_vals(numel(is), dt, rng);
        if (r == ScatterReduction::kMul)
          for (double& u : uv) u = is_float(dt) ? std::round(u) / 8 : std::fmod(u, 3);
        Tensor upd = make(dt, is, uv);
        Arr want = arr(x);
        const Arr ai = arr(ind), au = arr(upd);
        for (int64_t p = 0; p < numel(is); ++p) {
          Dims id = unravel(p, is);
          const double u = au.v[p];
          id[ax] = wrap(ai.v[p], x.shape[ax]);
          double& o = want.v[ravel(id, want.shape)];
          o = as_dtype({combine_ref(r, o, u)}, dt)[0];
        }
        ScatterAttrs a{axis, r};
        expect_arr(run1(OpKind::kScatterElements, a, {x, ind, upd}), want, "ScatterElements");
      }
    }
  // ONNX test_scatter_elements_with_duplicate_indices (add).
  expect_arr(run1(OpKind::kScatterElements, ScatterAttrs{1, ScatterReduction::kAdd},
                  {make(DataType::kFloat32, {1, 5}, {1, 2, 3, 4, 5}), make(DataType::kInt64, {1, 2}, {1, 1}),
                   make(DataType::kFloat32, {1, 2}, {1.25, 2})}),
             {{1, 5}, {1, 5.25, 3, 4, 5}});
  Tensor x = rand_tensor(DataType::kFloat32, {3, 4}, rng);
  Tensor u = rand_tensor(DataType::kFloat32, {1, 2}, rng);
  EXPECT_THROW(run1(OpKind::kScatterElements, ScatterAttrs{0, ScatterReduction::kNone},
                    {x, make(DataType::kInt64, {1, 2}, {0, -4}), u}),
               Error);
  expect_infer_error(OpKind::kScatterElements, ScatterAttrs{}, {x, make(DataType::kInt64, {1, 3}, {0, 0, 0}), u});
  expect_infer_error(OpKind::kScatterElements, ScatterAttrs{},
                     {x, make(DataType::kInt64, {1, 2}, {0, 0}), rand_tensor(DataType::kFloat64, {1, 2}, rng)});
  expect_infer_error(OpKind::kScatterElements, ScatterAttrs{0, ScatterReduction::kAdd},
                     {make(DataType::kBool, {2}, {0, 1}), ints({0}), make(DataType::kBool, {1}, {1})});
}

TEST(TensorOps, ScatterND) {
  std::mt19937 rng(12);
  for (DataType dt :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kInt16, DataType::kUInt8, DataType::kInt64, DataType::kBool})
    for (int red = 0; red < 5; ++red) {
      const auto r = static_cast<ScatterReduction>(red);
      if (dt == DataType::kBool && r != ScatterReduction::kNone) continue;
      for (int64_t k = 1; k <= 3; ++k) {
        Tensor x = rand_tensor(dt, {3, 2, 4}, rng);
        // none: distinct tuples in random order; reductions: random tuples with repeats.
        int64_t cells = numel(Dims(x.shape.begin(), x.shape.begin() + k));
        Dims order(cells);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        const int64_t n = r == ScatterReduction::kNone ? 1 + rng() % cells : 1 + rng() % 8;
        Vals iv;
        std::vector<Dims> tuples;
        for (int64_t t = 0; t < n; ++t) {
          Dims id = unravel(r == ScatterReduction::kNone ? order[t] : rng() % cells,
                            Dims(x.shape.begin(), x.shape.begin() + k));
          tuples.push_back(id);
          for (int64_t j = 0; j < k; ++j) iv.push_back(rng() % 2 ? id[j] : id[j] - x.shape[j]);
        }
        Tensor ind = make(DataType::kInt64, {n, k}, iv);
        Dims us{n};
        us.insert(us.end(), x.shape.begin() + k, x.shape.end());
        Vals uv = rand_vals(numel(us), dt, rng);
        if (r == ScatterReduction::kMul)
          for (double& u : uv) u = is_float(dt) ? std::round(u) / 8 : std::fmod(u, 3);
        Tensor upd = make(dt, us, uv);
        Arr want = arr(x);
        const int64_t slice = numel(us) / n;
        for (int64_t t = 0; t < n; ++t)
          for (int64_t i = 0; i < slice; ++i) {
            Dims id = tuples[t], rest = unravel(i, Dims(x.shape.begin() + k, x.shape.end()));
            id.insert(id.end(), rest.begin(), rest.end());
            double& o = want.v[ravel(id, want.shape)];
            o = as_dtype({combine_ref(r, o, values(upd)[t * slice + i])}, dt)[0];
          }
        expect_arr(run1(OpKind::kScatterND, ScatterAttrs{0, r}, {x, ind, upd}), want, "ScatterND");
      }
    }
  Tensor x = rand_tensor(DataType::kFloat32, {3, 4}, rng);
  EXPECT_THROW(run1(OpKind::kScatterND, ScatterAttrs{},
                    {x, make(DataType::kInt64, {1, 1}, {3}), rand_tensor(DataType::kFloat32, {1, 4}, rng)}),
               Error);
  expect_infer_error(OpKind::kScatterND, ScatterAttrs{},
                     {x, make(DataType::kInt64, {1, 1}, {0}), rand_tensor(DataType::kFloat32, {1, 3}, rng)});
  expect_infer_error(OpKind::kScatterND, ScatterAttrs{},
                     {x, make(DataType::kInt64, {1, 3}, {0, 0, 0}), rand_tensor(DataType::kFloat32, {1}, rng)});
}

// ---- Pad -------------------------------------------------------------------------------------------

// Source position along one axis, or -1 for the constant: crop by negative pads, then pad; reflect
// and wrap are computed by walking (bouncing / shifting) rather than by a closed formula.
int64_t pad_src(int64_t o, int64_t dim, int64_t b, int64_t e, PadMode mode) {
  const int64_t cb = b < 0 ? -b : 0, len = dim - cb - (e < 0 ? -e : 0);
  int64_t p = o - (b > 0 ? b : 0);
  if (p >= 0 && p < len) return cb + p;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return cb + (p < 0 ? 0 : len - 1);
    case PadMode::kWrap:
      while (p < 0) p += len;
      while (p >= len) p -= len;
      return cb + p;
    case PadMode::kReflect:
      if (len == 1) return cb;
      while (p < 0 || p >= len) p = p < 0 ? -p : 2 * (len - 1) - p;
      return cb + p;
  }
  return -1;
}

TEST(TensorOps, Pad) {
  std::mt19937 rng(13);
  for (DataType dt : kAllTypes)
    for (PadMode mode : {PadMode::kConstant, PadMode::kReflect, PadMode::kEdge, PadMode::kWrap})
      for (int iter = 0; iter < 6; ++iter) {
        const int rank = 1 + iter % 3;
        Tensor x = rand_tensor(dt, rand_shape(rng, rank, 2, 5), rng);
        const bool use_axes = iter % 2;
        Dims axes(rank);
        std::iota(axes.begin(), axes.end(), 0);
        if (use_axes) {
          std::shuffle(axes.begin(), axes.end(), rng);
          axes.resize(1 + rng() % rank);
        }
        Dims b(rank, 0), e(rank, 0);
        Vals pads(2 * axes.size());
        for (size_t i = 0; i < axes.size(); ++i) {
          const int64_t d = x.shape[axes[i]];
          b[axes[i]] = std::uniform_int_distribution<int64_t>(-1, mode == PadMode::kConstant ? 4 : d + 3)(rng);
          e[axes[i]] = std::uniform_int_distribution<int64_t>(-1, mode == PadMode::kConstant ? 4 : d + 3)(rng);
          pads[i] = b[axes[i]];
          pads[axes.size() + i] = e[axes[i]];
        }
        Dims os(rank);
        for (int d = 0; d < rank; ++d) os[d] = x.shape[d] + b[d] + e[d];
        const double cv = dt == DataType::kBool ? 1 : is_unsigned(dt) ? 7 : -1.5 * is_float(dt) - 3 * !is_float(dt);
        const bool use_value = iter % 3 != 0;
        const Arr ax = arr(x);
        Arr want = build(os, [&](const Dims& o) {
          Dims id(rank);
          for (int d = 0; d < rank; ++d)
            if ((id[d] = pad_src(o[d], x.shape[d], b[d], e[d], mode)) < 0) return use_value ? cv : 0.0;
          return at(ax, id);
        });
        Vals av;
        for (int64_t a : axes) av.push_back(rng() % 2 ? a : a - rank);
        std::vector<Tensor> in = {x, ints(pads), use_value ? scalar(cv, dt) : missing()};
        if (use_axes) in.push_back(ints(av, iter % 4 == 1 ? DataType::kInt32 : DataType::kInt64));
        SCOPED_TRACE("mode " + std::to_string(int(mode)) + " shape " + shape_string(x.shape) + " b " + shape_string(b) +
                     " e " + shape_string(e));
        expect_arr(run1(OpKind::kPad, PadAttrs{mode}, in), want, "Pad");
      }
  // ONNX test_reflect_pad / test_edge_pad geometry on a 4x5 plane, and a scalar.
  Tensor x = rand_tensor(DataType::kInt32, {1, 3, 4, 5}, rng);
  const Arr ax = arr(x);
  Tensor pads = ints({0, 0, 1, 1, 0, 0, 1, 1});
  expect_arr(run1(OpKind::kPad, PadAttrs{PadMode::kReflect}, {x, pads}),
             build({1, 3, 6, 7},
                   [&](const Dims& o) {
                     auto rf = [](int64_t i, int64_t n) { return i < 0 ? -i : i >= n ? 2 * n - 2 - i : i; };
                     return at(ax, {0, o[1], rf(o[2] - 1, 4), rf(o[3] - 1, 5)});
                   }),
             "reflect");
  expect_arr(run1(OpKind::kPad, PadAttrs{PadMode::kEdge}, {x, pads}),
             build({1, 3, 6, 7},
                   [&](const Dims& o) {
                     return at(ax, {0, o[1], std::clamp<int64_t>(o[2] - 1, 0, 3), std::clamp<int64_t>(o[3] - 1, 0, 4)});
                   }),
             "edge");
  expect_arr(run1(OpKind::kPad, PadAttrs{}, {scalar(2, DataType::kFloat32), ints({})}), {{}, {2}}, "scalar");
  expect_infer_error(OpKind::kPad, PadAttrs{}, {x, ints({0, 0, 1, 1})});                      // length
  expect_infer_error(OpKind::kPad, PadAttrs{}, {x, ints({0, 0, -5, 0, 0, 0, 0, 0})});         // size < 0
  expect_infer_error(OpKind::kPad, PadAttrs{}, {x, ints({0, 0, -5, 0, 0, 0, 2, 0})});         // crop > dim
  expect_infer_error(OpKind::kPad, PadAttrs{}, {x, ints({1, 1}), missing(), ints({1, -3})});  // dup axes
  expect_infer_error(OpKind::kPad, PadAttrs{}, {x, ints({1, 1}), scalar(0, DataType::kFloat32), ints({1})});
  expect_infer_error(OpKind::kPad, PadAttrs{PadMode::kEdge},
                     {make(DataType::kFloat32, {0, 2}, {}), ints({1, 0, 0, 0})});  // nothing to replicate
}

// ---- Shape, Size, ConstantOfShape, Range, EyeLike, OneHot, Trilu --------------------------------

TEST(TensorOps, ShapeSizeConstantOfShape) {
  std::mt19937 rng(14);
  Tensor x = rand_tensor(DataType::kBool, {2, 3, 0, 5}, rng);
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  for (int64_t s : Dims{small, -5, -4, -1, 0, 1, 3, 4, 9, big})
    for (int64_t e : Dims{small, -5, -2, 0, 2, 4, 10, big}) {
      Vals want;
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t ns = s < 0 ? std::max<int64_t>(s < -4 ? 0 : s + 4, 0) : s;
        const int64_t ne = e < 0 ? std::max<int64_t>(e < -4 ? 0 : e + 4, 0) : e;
        if (i >= ns && i < ne) want.push_back(x.shape[i]);
      }
      expect_arr(run1(OpKind::kShape, ShapeAttrs{s, e}, {x}), {{(int64_t)want.size()}, want}, "Shape");
    }
  Tensor sz = run1(OpKind::kSize, NoAttrs{}, {rand_tensor(DataType::kFloat16, {3, 7}, rng)});
  EXPECT_EQ(sz.dtype, DataType::kInt64);
  expect_arr(sz, {{}, {21}}, "Size");
  expect_arr(run1(OpKind::kSize, NoAttrs{}, {x}), {{}, {0}}, "Size 0");
  for (DataType dt : kAllTypes) {
    Scalar v{dt, {}};
    Tensor one = make(dt, {}, {dt == DataType::kBool ? 1.0 : is_float(dt) ? 2.5 : 9});
    std::memcpy(v.bytes.data(), one.buf.data(), dtype_size(dt));
    Tensor y = run1(OpKind::kConstantOfShape, ConstantOfShapeAttrs{v}, {ints({2, 3})});
    EXPECT_EQ(y.dtype, dt);
    expect_arr(y, {{2, 3}, Vals(6, values(one)[0])}, "ConstantOfShape");
  }
  expect_arr(run1(OpKind::kConstantOfShape, ConstantOfShapeAttrs{}, {ints({})}), {{}, {0}}, "CoS scalar");
  expect_arr(run1(OpKind::kConstantOfShape, ConstantOfShapeAttrs{}, {ints({4, 0})}), {{4, 0}, {}}, "CoS empty");
  expect_infer_error(OpKind::kConstantOfShape, ConstantOfShapeAttrs{}, {ints({2, -1})});
  expect_infer_error(OpKind::kConstantOfShape, ConstantOfShapeAttrs{}, {ints({1LL << 40, 1LL << 40})});
  expect_infer_error(OpKind::kConstantOfShape, ConstantOfShapeAttrs{}, {make(DataType::kInt64, {1, 1}, {2})});
}

TEST(TensorOps, Range) {
  struct Case {
    double s, l, d;
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kInt16, DataType::kInt32, DataType::kInt64})
    for (Case c : {Case{0, 10, 3}, Case{10, 6, -3}, Case{1, 1, 1}, Case{5, 1, 2}, Case{-4, 4, 1}, Case{0.5, 3, 0.75},
                   Case{3, -1.5, -0.5}}) {
      if (!is_float(dt) && (c.s != std::floor(c.s) || c.l != std::floor(c.l) || c.d != std::floor(c.d))) continue;
      Vals want;
      for (int64_t i = 0; i < std::max(std::ceil((c.l - c.s) / c.d), 0.0); ++i) want.push_back(c.s + i * c.d);
      expect_arr(run1(OpKind::kRange, NoAttrs{}, {scalar(c.s, dt), scalar(c.l, dt), scalar(c.d, dt)}),
                 {{(int64_t)want.size()}, want}, "Range");
    }
  // Extremes: the difference overflows int64 but the count is small.
  Tensor s = scalar(0, DataType::kInt64), l = scalar(0, DataType::kInt64), d = scalar(0, DataType::kInt64);
  const int64_t vs = std::numeric_limits<int64_t>::max(), vl = std::numeric_limits<int64_t>::min(), vd = -(1LL << 62);
  std::memcpy(s.buf.data(), &vs, 8);
  std::memcpy(l.buf.data(), &vl, 8);
  std::memcpy(d.buf.data(), &vd, 8);
  Tensor y = run1(OpKind::kRange, NoAttrs{}, {s, l, d});
  ASSERT_EQ(y.shape, Dims{4});
  EXPECT_EQ(reinterpret_cast<const int64_t*>(y.buf.data())[3], vs + vd + vd + vd);
  for (const Case& bad : {Case{0, 5, 0}, Case{0, 1e30, 1e-30}})
    expect_infer_error(
        OpKind::kRange, NoAttrs{},
        {scalar(bad.s, DataType::kFloat32), scalar(bad.l, DataType::kFloat32), scalar(bad.d, DataType::kFloat32)});
  expect_infer_error(OpKind::kRange, NoAttrs{},
                     {scalar(0, DataType::kInt32), scalar(1, DataType::kInt64), scalar(1, DataType::kInt32)});
  expect_infer_error(OpKind::kRange, NoAttrs{},
                     {scalar(0, DataType::kInt32), scalar(4, DataType::kInt32), scalar(0, DataType::kInt32)});
  expect_infer_error(OpKind::kRange, NoAttrs{},
                     {ints({0, 1}), scalar(4, DataType::kInt64), scalar(1, DataType::kInt64)});
}

TEST(TensorOps, EyeLikeAndTrilu) {
  std::mt19937 rng(15);
  for (DataType dt : kAllTypes)
    for (Dims s : {Dims{3, 3}, Dims{2, 5}, Dims{4, 1}, Dims{0, 3}})
      for (int64_t k : {-5, -1, 0, 1, 2, 7}) {
        Tensor x = rand_tensor(DataType::kInt32, s, rng);
        expect_arr(run1(OpKind::kEyeLike, EyeLikeAttrs{dt, k}, {x}),
                   build(s, [&](const Dims& o) { return o[1] - o[0] == k ? 1.0 : 0.0; }), "EyeLike");
      }
  expect_infer_error(OpKind::kEyeLike, EyeLikeAttrs{}, {rand_tensor(DataType::kFloat32, {2, 2, 2}, rng)});
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  for (DataType dt : kAllTypes)
    for (Dims s : {Dims{4, 5}, Dims{2, 3, 3}, Dims{3, 1, 5}, Dims{2, 0, 3}})
      for (int64_t k : Dims{small, -7, -1, 0, 1, 3, big})
        for (int64_t upper : {0, 1}) {
          Tensor x = rand_tensor(dt, s, rng);
          const Arr ax = arr(x);
          Tensor kt = ints({0});
          std::memcpy(kt.buf.data(), &k, 8);
          Arr want = build(s, [&](const Dims& o) {
            const int64_t j = o.back(), i = o[o.size() - 2];
            const bool keep = upper ? j - i >= k : j - i <= k;
            return keep ? at(ax, o) : 0.0;
          });
          expect_arr(run1(OpKind::kTrilu, TriluAttrs{upper}, {x, kt}), want, "Trilu");
          if (k == 0) expect_arr(run1(OpKind::kTrilu, TriluAttrs{upper}, {x}), want, "Trilu no k");
        }
  expect_infer_error(OpKind::kTrilu, TriluAttrs{}, {rand_tensor(DataType::kFloat32, {4}, rng)});
  expect_infer_error(OpKind::kTrilu, TriluAttrs{}, {rand_tensor(DataType::kFloat32, {4, 4}, rng), ints({1, 2})});
  // ONNX test_tril_neg.
  expect_arr(run1(OpKind::kTrilu, TriluAttrs{0},
                  {make(DataType::kInt64, {4, 5}, {5, 0, 3, 3, 7, 9, 3, 5, 2, 4, 7, 6, 8, 8, 1, 6, 7, 7, 8, 1}),
                   scalar(-1, DataType::kInt64)}),
             {{4, 5}, {0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 7, 6, 0, 0, 0, 6, 7, 7, 0, 0}}, "tril_neg");
}

TEST(TensorOps, OneHot) {
  std::mt19937 rng(16);
  for (DataType it : {DataType::kInt64, DataType::kInt32, DataType::kUInt8, DataType::kFloat32, DataType::kFloat16})
    for (DataType vt : kSomeTypes)
      for (int64_t axis : {-3, -2, -1, 0, 1, 2}) {
        const int64_t depth = 4;
        Vals iv;
        for (int i = 0; i < 6; ++i) {
          double v = std::uniform_int_distribution<int>(-6, 6)(rng);
          if (is_unsigned(it) && v < 0) v = 200;
          if (is_float(it)) v += 0.25 * (v >= 0 ? 1 : -1);  // truncates toward zero
          iv.push_back(v);
        }
        Tensor ind = make(it, {2, 3}, iv);
        const Vals vals = {vt == DataType::kBool ? 0.0 : 2, vt == DataType::kBool ? 1.0 : 5};
        const int64_t ax = axis < 0 ? axis + 3 : axis;
        Dims os = {2, 3};
        os.insert(os.begin() + ax, depth);
        Arr want = build(os, [&](const Dims& o) {
          Dims id = o;
          id.erase(id.begin() + ax);
          int64_t c = static_cast<int64_t>(std::trunc(iv[ravel(id, {2, 3})]));
          if (c < 0 && c >= -depth) c += depth;
          return vals[c == o[ax]];
        });
        Tensor depth_t = scalar(depth + (axis % 2 ? 0.5 : 0), axis % 2 ? DataType::kFloat32 : DataType::kInt32);
        expect_arr(run1(OpKind::kOneHot, OneHotAttrs{axis}, {ind, depth_t, make(vt, {2}, vals)}), want, "OneHot");
      }
  // ONNX test_onehot_negative_indices.
  expect_arr(run1(OpKind::kOneHot, OneHotAttrs{1},
                  {ints({0, -7, -8}), scalar(10, DataType::kFloat32), make(DataType::kFloat32, {2}, {1, 3})}),
             build({3, 10},
                   [](const Dims& o) {
                     return o[1] == (Dims{0, 3, 2})[o[0]] ? 3.0 : 1.0;
                   }),
             "onnx");
  Tensor ind = ints({0, 1}), v = make(DataType::kFloat32, {2}, {0, 1});
  expect_infer_error(OpKind::kOneHot, OneHotAttrs{2}, {ind, scalar(3, DataType::kInt64), v});
  expect_infer_error(OpKind::kOneHot, OneHotAttrs{-3}, {ind, scalar(3, DataType::kInt64), v});
  expect_infer_error(OpKind::kOneHot, OneHotAttrs{}, {ind, scalar(0, DataType::kInt64), v});
  expect_infer_error(OpKind::kOneHot, OneHotAttrs{}, {ind, scalar(3, DataType::kInt64), ints({0, 1, 2})});
  expect_infer_error(OpKind::kOneHot, OneHotAttrs{}, {ind, ints({3, 3}), v});
}

// ---- threads: large inputs take the parallel paths; results must equal the serial ones ------------

TEST(TensorOps, ThreadedMatchesSerial) {
  std::mt19937 rng(17);
  cpu::ThreadPool pool(4);
  Tensor x = rand_tensor(DataType::kFloat32, {64, 33, 47}, rng);
  Tensor xi = rand_tensor(DataType::kInt8, {64, 33, 47}, rng);
  struct Case {
    OpKind kind;
    Attrs attrs;
    std::vector<Tensor> in;
    size_t n_out;
  };
  const std::vector<Case> cases = {
      {OpKind::kTranspose, TransposeAttrs{{2, 0, 1}}, {x}, 1},
      {OpKind::kTranspose, TransposeAttrs{{1, 0, 2}}, {xi}, 1},
      {OpKind::kSlice, NoAttrs{}, {x, ints({60, 1}), ints({0, 40}), ints({0, 2}), ints({-2, 3})}, 1},
      {OpKind::kTile, NoAttrs{}, {xi, ints({1, 2, 3})}, 1},
      {OpKind::kExpand, NoAttrs{}, {make(DataType::kFloat32, {1, 33, 1}, Vals(33, 1)), ints({64, 33, 47})}, 1},
      {OpKind::kConcat, AxisAttrs{1}, {x, xi.dtype == x.dtype ? xi : x}, 1},
      {OpKind::kSplit, SplitAttrs{2, 3}, {x}, 3},
      {OpKind::kGather, AxisAttrs{1}, {x, rand_indices({5, 7}, 33, DataType::kInt64, rng)}, 1},
      {OpKind::kGatherElements, AxisAttrs{2}, {x, rand_indices({64, 33, 9}, 47, DataType::kInt32, rng)}, 1},
      {OpKind::kGatherND, GatherNDAttrs{0}, {x, make(DataType::kInt64, {300, 1}, Vals(300, 5))}, 1},
      {OpKind::kPad, PadAttrs{PadMode::kReflect}, {x, ints({1, 2, 3, 4, 5, 6})}, 1},
      {OpKind::kTrilu, TriluAttrs{0}, {x, ints({2})}, 1},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> serial = run(c.kind, c.attrs, c.in, c.n_out), par = run(c.kind, c.attrs, c.in, c.n_out, &pool);
    for (size_t i = 0; i < serial.size(); ++i) EXPECT_EQ(serial[i].buf, par[i].buf) << op_name(c.kind);
  }
  // A spot check that the threaded transpose is right, not merely deterministic.
  Tensor y = run(OpKind::kTranspose, TransposeAttrs{{2, 0, 1}}, {x}, 1, &pool)[0];
  const Vals vx = values(x), vy = values(y);
  for (int64_t i = 0; i < numel(y.shape); i += 97) {
    Dims o = unravel(i, y.shape);
    ASSERT_EQ(vy[i], vx[ravel({o[1], o[2], o[0]}, x.shape)]);
  }
}

}  // namespace
}  // namespace kiln
