// The tensor family's op cases (tests/ops/op_case.h): layout ops (Reshape .. Split, Pad), index ops
// (Gather*, Scatter*), generators (Shape .. Trilu), the data-dependent NonZero and
// NonMaxSuppression (whose packed result is compared) and SelectBranch (an If's outputs), each on several shapes (odd
// sizes, size-1 and zero-size dims, scalars), attribute variants, negative axes and indices, and element types of 1, 2,
// 4 and 8 bytes plus bool. Shape inference sees the data of the op's constant inputs (Slice starts, Pad pads, ...), as
// the builder's does. DepthToSpace and SpaceToDepth: pool_norm_resize_cases.cpp.
#include <cmath>
#include <numeric>

#include "ops/op_case.h"

namespace kiln::optest {
namespace {

// One run of an op: its attributes, inputs and number of outputs.
struct TensorRun {
  Attrs attrs;
  Inputs in;
  size_t n_out = 1;
};
using Runs = std::vector<TensorRun>;

struct TensorCase {
  std::string name;
  OpKind kind;
  std::vector<DT> dtypes;        // the main element types to test
  std::function<Runs(DT)> runs;  // the runs for one of them
  Accuracy acc = Accuracy::kExact;
};

// One type per element size, and bool.
const std::vector<DT> kBytes = {DT::kFloat32, DT::kFloat16, DT::kInt8, DT::kInt64, DT::kBool};
const std::vector<DT> kNumeric = {DT::kFloat32, DT::kFloat16, DT::kBFloat16, DT::kFloat64,
                                  DT::kInt8,    DT::kUInt8,   DT::kInt32,    DT::kInt64};

HostTensor scalar(double v, DT dt) { return make(dt, {}, {v}); }

HostTensor data(DT dt, Shape s) { return rand_tensor(dt, std::move(s), -9, 9); }

// Random indices in [-dim, dim).
HostTensor indices(Shape s, int64_t dim, DT dt = DT::kInt64) {
  return rand_tensor(dt, std::move(s), static_cast<double>(-dim), static_cast<double>(dim - 1), true);
}

int64_t numel(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()); }

// ---- layout cases ------------------------------------------------------------------------------
Runs reshape_runs(DT dt) {
  return {
      {ReshapeAttrs{}, {data(dt, {2, 3, 4}), ints({4, -1})}},
      {ReshapeAttrs{}, {data(dt, {2, 3, 4}), ints({0, 12}, DT::kInt32)}},
      {ReshapeAttrs{}, {data(dt, {0, 3}), ints({0, 3, 1})}},
      {ReshapeAttrs{1}, {data(dt, {0, 3}), ints({3, 0})}},
      {ReshapeAttrs{}, {data(dt, {}), ints({1, 1})}},
      {ReshapeAttrs{}, {data(dt, {4099}), ints({-1})}},
  };
}

Runs flatten_runs(DT dt) {
  Runs r;
  for (int64_t axis : {0, 1, 2, -1, 3}) r.push_back({AxisAttrs{axis}, {data(dt, {2, 3, 5})}});
  r.push_back({AxisAttrs{1}, {data(dt, {0, 4})}});
  return r;
}

Runs squeeze_runs(DT dt) {
  return {
      {NoAttrs{}, {data(dt, {2, 1, 3, 1})}},
      {NoAttrs{}, {data(dt, {2, 1, 3, 1}), ints({-1})}},
      {NoAttrs{}, {data(dt, {2, 1, 3, 1}), ints({3, 1})}},
      {NoAttrs{}, {data(dt, {1})}},
      {NoAttrs{}, {data(dt, {1, 0, 1})}},
  };
}

Runs unsqueeze_runs(DT dt) {
  return {
      {NoAttrs{}, {data(dt, {2, 3}), ints({0, -1})}},
      {NoAttrs{}, {data(dt, {2, 3}), ints({3, 1}, DT::kInt32)}},
      {NoAttrs{}, {data(dt, {}), ints({0})}},
      {NoAttrs{}, {data(dt, {0, 3}), ints({1})}},
  };
}

// Covers: reversal (default perm), tiled paths (last-two-dims swaps, NCHW<->NHWC, tiles with
// partial edges, 1- and 2-byte tiles), narrow inner dims (strided path), preserved inner dims
// (wide words), identity (a plain copy), 6-D, zero-size and scalar inputs.
Runs transpose_runs(DT dt) {
  using P = std::vector<int64_t>;
  const std::vector<std::pair<Shape, P>> cases = {
      {{3, 5}, {}},
      {{33, 65}, {}},
      {{300, 40}, {}},  // taller tiles for narrow types
      {{3, 70, 130}, {0, 2, 1}},
      {{2, 37, 41}, {0, 2, 1}},
      {{2, 16, 9, 11}, {0, 2, 3, 1}},  // NCHW -> NHWC
      {{2, 9, 11, 16}, {0, 3, 1, 2}},  // NHWC -> NCHW
      {{1, 3, 10, 10}, {0, 2, 3, 1}},  // 3 channels: narrow inner dim (one thread per pixel)
      {{3, 3, 17, 13}, {0, 2, 3, 1}},  // ... with a batch and a ragged last block
      {{2, 7, 5, 9}, {0, 2, 3, 1}},    // 7 channels, the widest the per-pixel kernel takes
      {{2, 3, 8, 12}, {0, 2, 3, 1}},   // 3 channels, 96 pixels: 16-byte runs of pixels per thread
      {{3, 5, 4, 8}, {0, 2, 3, 1}},    // ... 5 channels, 32 pixels
      {{4, 5, 40}, {0, 2, 1}},         // the last two dims swapped, 5 inner elements
      {{1, 10, 10, 3}, {0, 3, 1, 2}},
      {{3, 4, 5, 6}, {2, 0, 3, 1}},
      {{4, 5, 6}, {1, 0, 2}},
      {{4, 64, 2}, {1, 0, 2}},
      {{2, 3, 64}, {1, 0, 2}},
      {{3, 4, 5}, {0, 1, 2}},
      {{2, 3, 2, 3, 2, 3}, {5, 3, 1, 4, 2, 0}},
      {{9, 1, 40}, {2, 1, 0}},
      {{0, 3}, {}},
      {{2, 0, 4}, {2, 0, 1}},
      {{7}, {0}},
      {{}, {}},
  };
  Runs r;
  for (const auto& [s, p] : cases) r.push_back({TransposeAttrs{p}, {data(dt, s)}});
  return r;
}

Runs slice_runs(DT dt) {
  const HostTensor x = data(dt, {20, 10, 5});
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  auto none = absent;
  return {
      {NoAttrs{}, {x, ints({0, 0}), ints({3, 10}), ints({0, 1}), ints({1, 1})}},
      {NoAttrs{}, {x, ints({1, -3}, DT::kInt32), ints({3, 100}, DT::kInt32)}},
      {NoAttrs{}, {x, ints({0}), ints({-1}), none(), none()}},
      {NoAttrs{}, {x, ints({-1}), ints({kMin}), ints({1}), ints({-1})}},  // reverse axis 1
      {NoAttrs{}, {x, ints({19, 4}), ints({-100, 0}), ints({0, -1}), ints({-3, -2})}},
      {NoAttrs{}, {x, ints({1, 0, 4}), ints({18, 10, 0}), ints({0, 1, 2}), ints({2, 3, -1})}},
      {NoAttrs{}, {x, ints({3}), ints({3}), ints({2})}},                 // empty result
      {NoAttrs{}, {data(dt, {0, 4}), ints({0}), ints({1}), ints({1})}},  // empty input
      {NoAttrs{}, {data(dt, {64, 33}), ints({5}), ints({60})}},          // one contiguous block
      {NoAttrs{}, {data(dt, {64, 33}), ints({1}), ints({33}), ints({1})}},
      {NoAttrs{}, {data(dt, {8, 64}), ints({16}), ints({48}), ints({-1})}},  // wide words
      {NoAttrs{}, {data(dt, {6, 40}), ints({-1}), ints({-41}), ints({1}), ints({-3})}},
      {NoAttrs{}, {data(dt, {37, 41}), ints({40, 36}), ints({kMin, kMin}), ints({1, 0}), ints({-1, -1})}},
      {NoAttrs{}, {data(dt, {4099}), ints({7}), ints({4000}), ints({0}), ints({5})}},
  };
}

Runs expand_runs(DT dt) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{3, 1}, {2, 3, 4}},       {{1}, {5}},          {{}, {2, 3}},     {{4}, {3, 4}},          {{2, 1, 3}, {2, 4, 3}},
      {{1, 33, 1}, {4, 33, 47}}, {{3, 1}, {0, 3, 1}}, {{2, 3}, {1, 1}}, {{5, 1, 8}, {5, 3, 8}}, {{1, 4099}, {3, 1}},
  };
  Runs r;
  for (const auto& [s, to] : cases) r.push_back({NoAttrs{}, {data(dt, s), ints(to)}});
  return r;
}

Runs tile_runs(DT dt) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{2, 3}, {2, 3}}, {{3}, {4}},       {{2, 1, 3}, {1, 5, 2}}, {{2, 3}, {2, 0}},
      {{0, 3}, {2, 2}}, {{1, 1}, {3, 7}}, {{5, 64}, {3, 2}},      {{7, 1}, {1, 1}},
  };
  Runs r;
  for (const auto& [s, rep] : cases) r.push_back({NoAttrs{}, {data(dt, s), ints(rep)}});
  return r;
}

Runs concat_runs(DT dt) {
  Runs r = {
      {AxisAttrs{0}, {data(dt, {2, 3}), data(dt, {4, 3}), data(dt, {1, 3})}},
      {AxisAttrs{1}, {data(dt, {2, 3, 4}), data(dt, {2, 1, 4}), data(dt, {2, 5, 4})}},
      {AxisAttrs{-1}, {data(dt, {3, 2}), data(dt, {3, 7}), data(dt, {3, 1})}},
      {AxisAttrs{1}, {data(dt, {2, 3, 4}), data(dt, {2, 0, 4}), data(dt, {2, 2, 4})}},
      {AxisAttrs{1}, {data(dt, {0, 3}), data(dt, {0, 2})}},
      {AxisAttrs{0}, {data(dt, {5})}},
      {AxisAttrs{-1}, {data(dt, {4, 64}), data(dt, {4, 32}), data(dt, {4, 1}), data(dt, {4, 31})}},
      {AxisAttrs{0}, {data(dt, {4099}), data(dt, {17})}},
  };
  Inputs many;  // more parts than one launch takes
  for (int i = 0; i < 80; ++i) many.push_back(data(dt, {3, i % 4, 2}));
  r.push_back({AxisAttrs{-2}, many});
  return r;
}

Runs split_runs(DT dt) {
  return {
      {SplitAttrs{0, 0}, {data(dt, {6, 4}), ints({1, 2, 3})}, 3},
      {SplitAttrs{1, 2}, {data(dt, {6, 4})}, 2},
      {SplitAttrs{-1, 3}, {data(dt, {2, 7})}, 3},  // 3, 3, 1
      {SplitAttrs{1, 0}, {data(dt, {2, 6, 2}), ints({4, 0, 2})}, 3},
      {SplitAttrs{0, 0}, {data(dt, {0, 5}), ints({0, 0})}, 2},
      {SplitAttrs{1, 0}, {data(dt, {0, 5}), ints({2, 3})}, 2},
      {SplitAttrs{1, 35}, {data(dt, {3, 35, 2})}, 35},
      {SplitAttrs{-1, 0}, {data(dt, {4, 97}), ints({64, 32, 1})}, 3},
      {SplitAttrs{0, 0}, {data(dt, {4099}), ints({4000, 99})}, 2},
  };
}

Runs pad_runs(DT dt) {
  Runs r;
  const HostTensor x = data(dt, {3, 4});
  for (PadMode m : {PadMode::kConstant, PadMode::kReflect, PadMode::kEdge, PadMode::kWrap}) {
    r.push_back({PadAttrs{m}, {x, ints({1, 2, 0, 1})}});
    r.push_back({PadAttrs{m}, {x, ints({-1, 1, 0, -2})}});               // crops
    r.push_back({PadAttrs{m}, {x, ints({5, 7, 9, 6})}});                 // beyond the dim
    r.push_back({PadAttrs{m}, {x, ints({2, 3}), absent(), ints({1})}});  // axes
    r.push_back({PadAttrs{m}, {x, ints({1, 2, 3, 0}), absent(), ints({-1, 0})}});
    r.push_back({PadAttrs{m}, {data(dt, {2, 3, 5, 7}), ints({0, 0, 1, 2, 0, 0, 2, 1})}});  // NCHW spatial
    r.push_back({PadAttrs{m}, {data(dt, {1, 4}), ints({0, 0, 0, 0})}});
    r.push_back({PadAttrs{m}, {data(dt, {2, 1, 3}), ints({0, 0, 1, 0, 0, 0})}});
    // The channels-last pass's stem: [N, H, W, 3] -> [N, H, W, 4] on the last axis.
    r.push_back({PadAttrs{m}, {data(dt, {2, 5, 6, 3}), ints({0, 0, 0, 0, 0, 0, 0, 1})}});
  }
  r.push_back({PadAttrs{}, {x, ints({1, 1, 1, 1}), scalar(7, dt)}});
  r.push_back({PadAttrs{}, {data(dt, {0, 3}), ints({1, 0, 1, 0}), scalar(-3, dt)}});
  r.push_back({PadAttrs{}, {x, ints({0, -2, 0, -2}), scalar(5, dt)}});
  r.push_back({PadAttrs{}, {scalar(2, dt), ints({})}});
  r.push_back({PadAttrs{}, {data(dt, {129, 33}), ints({1, 3, 2, 4}), scalar(1, dt)}});
  return r;
}

// ---- index cases -------------------------------------------------------------------------------
Runs gather_runs(DT dt) {
  return {
      {AxisAttrs{0}, {data(dt, {5, 4}), indices({3}, 5)}},
      {AxisAttrs{1}, {data(dt, {5, 4}), indices({2, 2}, 4, DT::kInt32)}},
      {AxisAttrs{-1}, {data(dt, {2, 3, 4}), indices({5}, 4)}},
      {AxisAttrs{1}, {data(dt, {2, 3, 4}), indices({}, 3)}},  // scalar index drops the axis
      {AxisAttrs{0}, {data(dt, {3}), indices({}, 3, DT::kInt32)}},
      {AxisAttrs{0}, {data(dt, {10, 64}), indices({7}, 10)}},  // wide words
      {AxisAttrs{0}, {data(dt, {4, 0}), indices({2}, 4)}},     // empty output, indices still checked
      {AxisAttrs{0}, {data(dt, {4, 3}), indices({0}, 4)}},
      {AxisAttrs{1}, {data(dt, {33, 129}), indices({3, 5}, 129)}},
  };
}

Runs gather_elements_runs(DT dt) {
  return {
      {AxisAttrs{0}, {data(dt, {3, 4}), indices({2, 4}, 3)}},
      {AxisAttrs{1}, {data(dt, {3, 4}), indices({3, 6}, 4, DT::kInt32)}},
      {AxisAttrs{-1}, {data(dt, {2, 3, 5}), indices({1, 2, 3}, 5)}},
      {AxisAttrs{1}, {data(dt, {2, 3, 5}), indices({2, 7, 5}, 3)}},
      {AxisAttrs{0}, {data(dt, {4}), indices({9}, 4)}},
      {AxisAttrs{0}, {data(dt, {4, 2}), indices({0, 2}, 4)}},
      {AxisAttrs{0}, {data(dt, {65, 63}), indices({129, 60}, 65)}},
  };
}

Runs gather_nd_runs(DT dt) {
  return {
      {GatherNDAttrs{0}, {data(dt, {2, 3, 4}), make(DT::kInt64, {2, 2}, {1, -1, 0, 2})}},
      {GatherNDAttrs{0}, {data(dt, {2, 3, 4}), make(DT::kInt64, {3}, {1, 2, -4})}},
      {GatherNDAttrs{0}, {data(dt, {2, 3, 4}), make(DT::kInt32, {2, 2, 1}, {1, 0, -1, -2})}},
      {GatherNDAttrs{1}, {data(dt, {2, 3, 4}), make(DT::kInt64, {2, 1}, {2, -3})}},
      {GatherNDAttrs{1}, {data(dt, {2, 3, 4}), make(DT::kInt64, {2, 5, 2}, {0, 1, 2, 3, -1, -4, 1, 1, 2, 0})}},
      {GatherNDAttrs{2}, {data(dt, {2, 3, 4}), make(DT::kInt64, {2, 3, 1}, {0, 1, 2, 3, -1, -4})}},
      {GatherNDAttrs{0}, {data(dt, {4, 8, 16}), make(DT::kInt64, {3, 1}, {3, 0, -2})}},  // wide words
      {GatherNDAttrs{0}, {data(dt, {2, 3, 0}), make(DT::kInt64, {1, 2}, {1, 2})}},       // empty output
      {GatherNDAttrs{0}, {data(dt, {2, 3}), make(DT::kInt64, {0, 2}, {0})}},
  };
}

// Indices for ScatterElements along `axis` of data shape xs: distinct within every line along the
// axis when `distinct` (reduction none: duplicates have no defined winner on the GPU), each
// randomly written as its negative alias.
HostTensor scatter_elements_indices(const Shape& xs, const Shape& is, int64_t axis, bool distinct, DT dt) {
  HostTensor t{dt, is, std::vector<uint8_t>(static_cast<size_t>(numel(is)) * dtype_size(dt))};
  const int64_t dim = xs[axis];
  std::map<std::vector<int64_t>, std::vector<int64_t>> perms;  // line (axis coordinate 0) -> values
  std::uniform_int_distribution<int64_t> any(0, dim - 1);
  for (int64_t e = 0; e < numel(is); ++e) {
    std::vector<int64_t> id(is.size());
    for (int64_t rem = e, d = static_cast<int64_t>(is.size()) - 1; d >= 0; --d) {
      id[d] = rem % is[d];
      rem /= is[d];
    }
    const int64_t pos = id[axis];
    id[axis] = 0;
    int64_t v = any(rng());
    if (distinct) {
      auto& p = perms[id];
      if (p.empty()) {
        p.resize(dim);
        std::iota(p.begin(), p.end(), 0);
        std::shuffle(p.begin(), p.end(), rng());
      }
      v = p[pos];
    }
    if (rng()() & 1) v -= dim;
    set(t, e, static_cast<double>(v));
  }
  return t;
}

// ScatterND indices [tuples, k] into the first k dims of xs, distinct tuples when `distinct`.
HostTensor scatter_nd_indices(const Shape& xs, int64_t tuples, int64_t k, bool distinct, DT dt) {
  const Shape lead(xs.begin(), xs.begin() + k);
  std::vector<int64_t> pos(numel(lead));
  std::iota(pos.begin(), pos.end(), 0);
  std::shuffle(pos.begin(), pos.end(), rng());
  HostTensor t{dt, {tuples, k}, std::vector<uint8_t>(static_cast<size_t>(tuples * k) * dtype_size(dt))};
  std::uniform_int_distribution<int64_t> any(0, numel(lead) - 1);
  for (int64_t i = 0; i < tuples; ++i) {
    int64_t p = distinct ? pos[i] : any(rng());
    for (int64_t j = k - 1; j >= 0; --j) {
      int64_t v = p % lead[j];
      p /= lead[j];
      if (rng()() & 1) v -= lead[j];
      set(t, i * k + j, static_cast<double>(v));
    }
  }
  return t;
}

// Integers in [lo, hi] (never -0): sums, products and extremes of a few duplicates are then exact
// in every type and independent of the order the GPU combines them in.
HostTensor small_ints(DT dt, Shape s, int lo, int hi) {
  HostTensor t{dt, std::move(s), {}};
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
  std::uniform_int_distribution<int> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, u(rng()));
  return t;
}
// Products stay exact in bfloat16 too when every factor but the data's is 0, +-1 or +-2.
HostTensor updates(DT dt, Shape s, ScatterReduction red) {
  return red == ScatterReduction::kMul ? small_ints(dt, std::move(s), -2, 2) : small_ints(dt, std::move(s), -3, 3);
}

Runs scatter_elements_runs(DT dt, ScatterReduction red) {
  const bool distinct = red == ScatterReduction::kNone;
  struct C {
    Shape xs, is;
    int64_t axis;
  };
  const std::vector<C> cases = {
      {{4, 5}, {2, 5}, 0}, {{4, 5}, {4, 3}, 1}, {{4, 5}, {3, 5}, -1},    {{2, 3, 4}, {2, 2, 4}, 1},
      {{7}, {5}, 0},       {{3, 4}, {0, 4}, 0}, {{33, 40}, {20, 40}, 0},
  };
  Runs r;
  for (const C& c : cases) {
    const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.xs.size()) : c.axis;
    const DT it = r.size() % 2 ? DT::kInt32 : DT::kInt64;
    r.push_back({ScatterAttrs{c.axis, red},
                 {small_ints(dt, c.xs, -9, 9), scatter_elements_indices(c.xs, c.is, axis, distinct, it),
                  updates(dt, c.is, red)}});
  }
  return r;
}

Runs scatter_nd_runs(DT dt, ScatterReduction red) {
  const bool distinct = red == ScatterReduction::kNone;
  struct C {
    Shape xs;
    int64_t tuples, k;
  };
  const std::vector<C> cases = {{{4, 5, 6}, 2, 1}, {{4, 5, 6}, 3, 2}, {{4, 5, 6}, 2, 3},
                                {{8}, 5, 1},       {{4, 0}, 2, 1},    {{40, 33}, 30, 1}};
  Runs r;
  for (const C& c : cases) {
    Shape us = {c.tuples};
    us.insert(us.end(), c.xs.begin() + c.k, c.xs.end());
    const DT it = r.size() % 2 ? DT::kInt32 : DT::kInt64;
    r.push_back(
        {ScatterAttrs{0, red},
         {small_ints(dt, c.xs, -9, 9), scatter_nd_indices(c.xs, c.tuples, c.k, distinct, it), updates(dt, us, red)}});
  }
  return r;
}

// ---- generator cases ---------------------------------------------------------------------------
Runs shape_runs(DT dt) {
  const int64_t kEnd = std::numeric_limits<int64_t>::max();
  Runs r;
  for (auto [s, e] : std::vector<std::pair<int64_t, int64_t>>{{0, kEnd}, {1, kEnd}, {-2, -1}, {0, 0}, {-9, 9}})
    r.push_back({ShapeAttrs{s, e}, {data(dt, {2, 3, 4})}});
  r.push_back({ShapeAttrs{}, {data(dt, {})}});
  r.push_back({ShapeAttrs{}, {data(dt, {0, 5})}});
  r.push_back({ShapeAttrs{}, {data(dt, Shape(18, 1))}});  // more values than one launch writes
  return r;
}

Runs size_runs(DT dt) {
  return {{NoAttrs{}, {data(dt, {3, 7})}}, {NoAttrs{}, {data(dt, {0, 5})}}, {NoAttrs{}, {data(dt, {})}}};
}

Scalar scalar_attr(DT dt, double v) {
  Scalar s;
  s.dtype = dt;
  const HostTensor t = scalar(v, dt);
  std::copy(t.bytes.begin(), t.bytes.end(), s.bytes.begin());
  return s;
}

Runs constant_of_shape_runs(DT dt) {
  Runs r;
  for (double v : {0.0, 2.5, -7.0, 1.0})
    for (const auto& s : std::vector<std::vector<int64_t>>{{2, 3}, {}, {4, 0}, {4099}})
      r.push_back({ConstantOfShapeAttrs{scalar_attr(dt, v)}, {ints(s)}});
  return r;
}

Runs range_runs(DT dt) {
  struct C {
    double s, l, d;
  };
  std::vector<C> cases = {{0, 10, 1}, {10, 0, -3}, {-5, 5, 2}, {3, 3, 1}, {5, 1, 1}, {-100, 100, 7}};
  if (is_float(dt)) cases.insert(cases.end(), {{1.5, 7, 0.25}, {0.1, 1.3, 0.3}, {-2, 2, 0.125}, {0, 2000, 1}});
  if (dt != DT::kInt8 && dt != DT::kUInt8) cases.push_back({0, 5000, 3});
  Runs r;
  for (const C& c : cases) {
    if (dt == DT::kUInt8 && (c.s < 0 || c.l < 0)) continue;
    r.push_back({NoAttrs{}, {scalar(c.s, dt), scalar(c.l, dt), scalar(c.d, dt)}});
  }
  return r;
}

Runs eye_like_runs(DT dt) {
  Runs r;
  for (const Shape& s : std::vector<Shape>{{3, 3}, {2, 5}, {5, 2}, {0, 3}, {1, 1}, {65, 33}})
    for (int64_t k : {0, 1, -1, 4, -7}) r.push_back({EyeLikeAttrs{dt, k}, {data(DT::kFloat32, s)}});
  return r;
}

Runs trilu_runs(DT dt) {
  Runs r;
  for (int64_t upper : {0, 1}) {
    for (const Shape& s : std::vector<Shape>{{4, 5}, {2, 3, 3}, {5, 4}, {1, 1}, {0, 3}, {3, 0, 2}, {2, 33, 65}}) {
      r.push_back({TriluAttrs{upper}, {data(dt, s)}});
      for (int64_t k : {0, 1, -1, 10, -10, 2})
        r.push_back({TriluAttrs{upper}, {data(dt, s), ints({k}, k == 2 ? DT::kInt32 : DT::kInt64)}});
    }
    r.push_back({TriluAttrs{upper}, {data(dt, {3, 4}), scalar(-1, DT::kInt64)}});
  }
  return r;
}

// The values' type is the case's type; the indices come in several types, with values out of
// range (a row of off values), negative (counting from the end) and fractional (truncated).
Runs one_hot_runs(DT dt) {
  Runs r;
  const HostTensor vals = make(dt, {2}, {2, 5});
  for (DT it : {DT::kInt64, DT::kInt32, DT::kFloat32, DT::kFloat16, DT::kInt8, DT::kUInt8, DT::kFloat64}) {
    const bool sig = it != DT::kUInt8;
    std::vector<double> v = {0, 1, 4, 2, 9, 3};
    if (sig) v.insert(v.end(), {-1, -5, -6, -100});
    if (is_float(it)) v.insert(v.end(), {1.7, -1.5, -0.5, 4.99, 5.0, kNaN});
    const HostTensor ind = make(it, {static_cast<int64_t>(v.size())}, v);
    for (int64_t axis : {-1, 0})
      r.push_back({OneHotAttrs{axis}, {ind, scalar(5, it == DT::kFloat32 ? DT::kFloat32 : DT::kInt64), vals}});
  }
  const HostTensor ind2 = make(DT::kInt64, {2, 3}, {0, -1, 2, 7, 1, -3});
  for (int64_t axis : {0, 1, 2, -1, -2, -3}) r.push_back({OneHotAttrs{axis}, {ind2, scalar(4, DT::kInt64), vals}});
  r.push_back({OneHotAttrs{-1}, {make(DT::kInt64, {0, 3}, {0}), scalar(4, DT::kInt64), vals}});
  r.push_back({OneHotAttrs{1}, {indices({33, 40}, 37), scalar(37, DT::kInt64), vals}});
  return r;
}

// ---- data-dependent ops --------------------------------------------------------------------------
// About half the elements zero (floats: some of them -0.0, which is zero too).
HostTensor sparse(DT dt, Shape s) {
  std::vector<double> v(static_cast<size_t>(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t r = rng()() % 8;
    v[i] = r < 3 ? 0.0 : r == 3 ? -0.0 : static_cast<double>(r - 2);
  }
  return make(dt, std::move(s), v);
}

Runs nonzero_runs(DT dt) {
  Runs r;
  for (Shape s :
       {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{2, 0, 3}, Shape{2, 3, 4, 5}, Shape{5000}, Shape{3, 700, 9}})
    r.push_back({NoAttrs{}, {sparse(dt, s)}, 2});
  r.push_back({NoAttrs{}, {make(dt, {4, 4}, std::vector<double>(16, 0.0))}, 2});  // none
  r.push_back({NoAttrs{}, {make(dt, {3, 3}, std::vector<double>(9, 1.0))}, 2});   // all
  return r;
}

// Either branch, at shapes that differ in every way one rank allows (and a scalar, an empty
// tensor, two outputs at once); the condition as a one-element tensor of rank 0 and 1.
Runs select_branch_runs(DT dt) {
  Runs r;
  const HostTensor yes = scalar(1, DT::kBool), no = make(DT::kBool, {1}, {0});
  for (const HostTensor& cond : {yes, no}) {
    r.push_back({NoAttrs{}, {cond, data(dt, {3, 4}), data(dt, {3, 4})}});
    r.push_back({NoAttrs{}, {cond, data(dt, {5}), data(dt, {0})}});
    r.push_back({NoAttrs{}, {cond, data(dt, {2, 7, 1}), data(dt, {6, 3, 2})}});
    r.push_back({NoAttrs{}, {cond, data(dt, {}), data(dt, {})}});
    r.push_back({NoAttrs{}, {cond, data(dt, {4}), data(dt, {2, 2}), data(dt, {9}), data(dt, {1, 3})}, 2});
  }
  return r;
}

// Boxes as [y1, x1, y2, x2] corners in any order, or [x_center, y_center, w, h]: random ones in a
// 10 x 10 field, so that many overlap.
HostTensor random_boxes(int64_t batches, int64_t n, bool center) {
  HostTensor t = rand_tensor(DT::kFloat32, {batches, n, 4}, 0, 10);
  if (center)
    for (int64_t i = 0; i < batches * n; ++i)
      for (int64_t k = 2; k < 4; ++k) set(t, i * 4 + k, std::abs(get(t, i * 4 + k)) / 3);
  return t;
}

// n small boxes [x_center, y_center, w, h] over a 100 x 100 field, most of them kept, and scores
// rounded to tenths, so that ties span many candidates.
std::pair<HostTensor, HostTensor> sparse_boxes(int64_t classes, int64_t n) {
  HostTensor boxes = rand_tensor(DT::kFloat32, {1, n, 4}, 0, 100);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 2; k < 4; ++k) set(boxes, i * 4 + k, get(boxes, i * 4 + k) / 40);
  HostTensor scores = rand_tensor(DT::kFloat32, {1, classes, n}, 0, 1);
  for (int64_t i = 0; i < classes * n; ++i) set(scores, i, std::round(get(scores, i) * 10) / 10);
  return {boxes, scores};
}

Runs nms_runs(DT) {
  const DT f = DT::kFloat32, l = DT::kInt64;
  Runs r;
  // onnx's suppress_by_IOU example: two clusters of three and one box apart.
  const HostTensor boxes = make(f, {1, 6, 4}, {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                               0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101});
  const HostTensor scores = make(f, {1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
  for (int64_t m : {0, 1, 3, 10})
    r.push_back({NmsAttrs{}, {boxes, scores, scalar(m, l), scalar(0.5, f), scalar(0.0, f)}, 2});
  r.push_back({NmsAttrs{}, {boxes, scores, scalar(3, l), scalar(0.5, f), scalar(0.4, f)}, 2});
  r.push_back({NmsAttrs{}, {boxes, scores, scalar(3, l)}, 2});  // iou 0: any overlap suppresses
  r.push_back({NmsAttrs{}, {boxes, scores}, 2});                // no max: nothing selected
  // Ties, a box with no area, a NaN score.
  const HostTensor odd_boxes = make(f, {1, 4, 4}, {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 2, 3, 0, 0, 1, 1});
  const HostTensor odd_scores = make(f, {1, 2, 4}, {0.5, 0.5, 0.7, kNaN, 0.1, 0.9, 0.9, 0.9});
  r.push_back({NmsAttrs{}, {odd_boxes, odd_scores, scalar(4, l), scalar(0.5, f)}, 2});
  r.push_back({NmsAttrs{}, {odd_boxes, odd_scores, scalar(4, l), scalar(1.0, f)}, 2});
  for (int64_t center : {0, 1})
    r.push_back({NmsAttrs{center},
                 {random_boxes(2, 60, center == 1), rand_tensor(f, {2, 3, 60}, 0, 1), scalar(12, l), scalar(0.4, f),
                  scalar(0.25, f)},
                 2});
  r.push_back({NmsAttrs{},
               {random_boxes(1, 1500, false), rand_tensor(f, {1, 2, 1500}, 0, 1), scalar(200, l), scalar(0.3, f),
                scalar(0.05, f)},
               2});
  r.push_back({NmsAttrs{}, {random_boxes(2, 0, false), make(f, {2, 3, 0}, {}), scalar(5, l)}, 2});
  // Thousands of candidates a class, most kept (the GPU's mask words and their greedy steps).
  const auto [many, tied] = sparse_boxes(2, 2500);
  r.push_back({NmsAttrs{1}, {many, tied, scalar(100000, l), scalar(0.3, f)}, 2});
  r.push_back({NmsAttrs{1}, {many, tied, scalar(777, l), scalar(0.1, f), scalar(0.35, f)}, 2});
  return r;
}

// ---- the case table ----------------------------------------------------------------------------
std::vector<TensorCase> all_cases() {
  using K = OpKind;
  std::vector<TensorCase> c = {
      {"Reshape", K::kReshape, kBytes, reshape_runs},
      {"Flatten", K::kFlatten, kBytes, flatten_runs},
      {"Squeeze", K::kSqueeze, kBytes, squeeze_runs},
      {"Unsqueeze", K::kUnsqueeze, kBytes, unsqueeze_runs},
      {"Transpose", K::kTranspose, kBytes, transpose_runs},
      {"Slice", K::kSlice, kBytes, slice_runs},
      {"Expand", K::kExpand, kBytes, expand_runs},
      {"Tile", K::kTile, kBytes, tile_runs},
      {"Concat", K::kConcat, kBytes, concat_runs},
      {"Split", K::kSplit, kBytes, split_runs},
      {"Pad", K::kPad, kBytes, pad_runs},
      {"Gather", K::kGather, kBytes, gather_runs},
      {"GatherElements", K::kGatherElements, kBytes, gather_elements_runs},
      {"GatherND", K::kGatherND, kBytes, gather_nd_runs},
      {"Shape", K::kShape, {DT::kFloat32, DT::kInt8}, shape_runs},
      {"Size", K::kSize, {DT::kFloat16, DT::kInt64}, size_runs},
      {"ConstantOfShape",
       K::kConstantOfShape,
       {DT::kFloat32, DT::kFloat16, DT::kInt8, DT::kInt64, DT::kBool, DT::kFloat64, DT::kInt32},
       constant_of_shape_runs},
      {"Range", K::kRange, kNumeric, range_runs},
      {"EyeLike",
       K::kEyeLike,
       {DT::kFloat32, DT::kFloat16, DT::kBFloat16, DT::kInt8, DT::kInt64, DT::kBool, DT::kFloat64, DT::kUInt16},
       eye_like_runs},
      {"Trilu", K::kTrilu, kBytes, trilu_runs},
      {"OneHot", K::kOneHot, kBytes, one_hot_runs},
      {"NonZero",
       K::kNonZero,
       {DT::kFloat32, DT::kFloat16, DT::kInt8, DT::kInt64, DT::kBool, DT::kFloat64},
       nonzero_runs},
      {"NonMaxSuppression", K::kNonMaxSuppression, {}, nms_runs},
      {"SelectBranch", K::kSelectBranch, kBytes, select_branch_runs},
  };
  for (ScatterReduction red : {ScatterReduction::kNone, ScatterReduction::kAdd, ScatterReduction::kMul,
                               ScatterReduction::kMax, ScatterReduction::kMin}) {
    const std::string suffix = "_" + std::string(kEnumNames<ScatterReduction>[static_cast<size_t>(red)]);
    const std::vector<DT> dts = red == ScatterReduction::kNone ? kBytes : kNumeric;
    c.push_back({"ScatterElements" + suffix, K::kScatterElements, dts,
                 [red](DT dt) { return scatter_elements_runs(dt, red); }});
    c.push_back({"ScatterND" + suffix, K::kScatterND, dts, [red](DT dt) { return scatter_nd_runs(dt, red); }});
  }
  return c;
}

}  // namespace

std::vector<OpCase> tensor_cases() {
  std::vector<OpCase> out;
  for (const TensorCase& c : all_cases())
    out.push_back({c.name, c.kind, c.dtypes, [c](DT dt) {
                     OpRuns runs;
                     for (TensorRun& r : c.runs(dt))
                       runs.push_back({r.attrs, std::move(r.in), r.n_out, accuracy(c.acc)});
                     return runs;
                   }});
  return out;
}

}  // namespace kiln::optest
