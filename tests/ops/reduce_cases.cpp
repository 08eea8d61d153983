// The reduce family's op cases (tests/ops/op_case.h): Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/
// Hardmax, CumSum, TopK and Einsum on odd, 1-element, zero-size and long shapes (the long ones take
// the GPU kernels' split, block-per-row and sort paths), contiguous and scattered axis sets,
// attribute variants, special values (NaN, +-inf, ties), and every element type the CPU kernel of
// each op takes (the four float types and the integer types). Float sums run in a different order
// on another backend (and for float32 and the half types in float rather than double), so their
// tolerance grows with the number of summed elements; float64 sums are in double on both sides,
// so theirs is about 1e-8 of float32's.
#include "ops/op_case.h"

namespace kiln::optest {
namespace {

// One run: the op's attributes, the inputs, and how many elements the longest sum in it adds
// (scales the tolerance).
struct Set {
  Attrs attrs;
  Inputs in;
  double n = 1;
};
using Sets = std::vector<Set>;

enum class Tol {
  kExact,  // bit-identical (indices, selections, integer results)
  kNear,   // equal, except that -0 matches +0 (Max/Min may pick either zero of a tie)
  kSum,    // float sums: 1e-5 relative + 1e-6 * n * magnitude absolute (float16: + half rounding)
  kMath,   // transcendental results of sums: 1e-4 relative + the kSum absolute term
};

struct ReduceCase {
  std::string name;
  OpKind kind;
  std::vector<DT> dtypes;
  std::function<Sets(DT)> sets;
  Tol tol = Tol::kExact;
  double magnitude = 1;  // typical |term| of the sums, for the absolute tolerance
  size_t n_out = 1;
};

const std::vector<DT> kFloat = {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16};
const std::vector<DT> kInt = {DT::kInt8,  DT::kUInt8,  DT::kInt16, DT::kUInt16,
                              DT::kInt32, DT::kUInt32, DT::kInt64, DT::kUInt64};
std::vector<DT> join(std::vector<DT> a, const std::vector<DT>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<DT> kNumeric = join(kFloat, kInt);
// Reduce* and CumSum: floats and 32- and 64-bit integers; Max and Min also 8-bit ones and bool.
const std::vector<DT> kReduceTypes = join(kFloat, {DT::kInt32, DT::kUInt32, DT::kInt64, DT::kUInt64});
const std::vector<DT> kMaxMinTypes = join(kReduceTypes, {DT::kInt8, DT::kUInt8, DT::kBool});

bool is_unsigned(DT t) { return t == DT::kUInt8 || t == DT::kUInt16 || t == DT::kUInt32 || t == DT::kUInt64; }

Tolerance tolerance(const ReduceCase& c, DT out, double n) {
  if (c.tol == Tol::kExact || !is_float(out)) return {};
  if (c.tol == Tol::kNear) return {0, 1e-300};
  const double sum_abs = 1e-6 * std::max(1.0, n) * c.magnitude;
  Tolerance t{c.tol == Tol::kMath ? 1e-4 : 1e-5, 1e-6 + sum_abs};
  if (out == DT::kFloat64) t = {t.rel * 1e-8, t.abs * 1e-8};
  if (out == DT::kFloat16) t = {std::max(t.rel, 2e-3), t.abs + 1e-3};
  if (out == DT::kBFloat16) t = {std::max(t.rel, 8e-3), t.abs + 1e-3};  // one bfloat16 ulp: up to 2^-7
  return t;
}

// check_op with a per-run tolerance; shape inference sees the host copies of constant inputs
// (axes, K, the CumSum axis), as the builder's does.

HostTensor i64(std::vector<double> v) { return make(DT::kInt64, {static_cast<int64_t>(v.size())}, v); }
HostTensor empty_i64() { return HostTensor{DT::kInt64, {0}, {}}; }

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// ---- Reduce* -------------------------------------------------------------------------------------
struct ReduceShape {
  Shape shape;
  std::vector<double> axes;  // empty: no axes input, or an empty one
  bool empty_axes_input = false;
};

// Contiguous and scattered axis sets, everything, nothing reduced (size-1 axes), zero-size dims,
// and long ones: a block per output and split reductions ([3, 70000] rows, [50000, 3] columns,
// the whole [129, 257]).
const std::vector<ReduceShape> kReduceShapes = {
    {{7}, {}},
    {{7}, {}, true},
    {{}, {}},
    {{1}, {0}},
    {{3, 5, 2}, {1}},
    {{3, 5, 2}, {0, 2}},
    {{3, 5, 2}, {0, 1}},
    {{3, 5, 2}, {-1}},
    {{3, 5, 2}, {2, 0, 1}},
    {{4, 1, 33}, {1}},
    {{2, 3, 4, 5}, {0, 2}},
    {{2, 3, 4, 5}, {1, 3}},
    {{2, 3, 4, 5, 6}, {0, 2, 4}},
    {{2, 0, 3}, {1}},
    {{2, 0, 3}, {0}},
    {{129, 257}, {1}},
    {{129, 257}, {0}},
    {{129, 257}, {}},
    {{3, 70000}, {1}},
    {{50000, 3}, {0}},
    {{6, 9000}, {1}},
    {{256, 7, 7}, {1, 2}},
    {{3, 7, 7, 64}, {1, 2}},    // a channels-last global pool: 16-byte loads of neighbouring channels
    {{1, 7, 7, 2048}, {1, 2}},  // ResNet-50's at batch 1: a warp shares each vector's 49 rows
    {{16, 7, 7, 512}, {1, 2}},  // 8 lanes per vector (float32), or a warp (narrower types)
    {{64, 7, 7, 512}, {1, 2}},  // 8 lanes per vector
    {{4, 3, 64}, {1}},          // rows too short to share: one lane per vector
    {{5, 9, 48}, {1}},
    {{2, 5, 12}, {1}},  // 12 channels: 16-byte loads for 4-byte types only
    {{7, 20}, {1}},
    {{100, 300}, {1}},
    {{100, 600}, {-1}},
};

double reduced_count(const ReduceShape& r) {
  if (r.axes.empty()) return static_cast<double>(numel(r.shape));
  double n = 1;
  for (double a : r.axes) n *= static_cast<double>(r.shape[static_cast<size_t>(a < 0 ? a + r.shape.size() : a)]);
  return n;
}

ReduceCase reduce_case(OpKind k, ReduceAttrs attrs, std::string variant, std::vector<DT> dtypes, double lo, double hi,
                       Tol tol, bool specials) {
  const double mag = std::max(std::abs(lo), std::abs(hi));
  const bool squares = k == OpKind::kReduceSumSquare || k == OpKind::kReduceL2;
  // Cancelling sums (Sum) and long products get an absolute tolerance that grows with their
  // length; the rest are sums of positive terms (relative error) or divide by the length.
  const bool scaled = k == OpKind::kReduceSum || k == OpKind::kReduceProd;
  return {std::string(op_name(k)) + "_" + variant,
          k,
          std::move(dtypes),
          [=](DT dt) {
            Sets s;
            // Unsigned values stay small and non-negative (negative ones would wrap to huge values,
            // whose squares the double-valued L2 and LogSum round differently in another order).
            const double tlo = is_unsigned(dt) ? std::max(lo, 0.0) : lo;
            for (const ReduceShape& r : kReduceShapes) {
              Inputs in{rand_tensor(dt, r.shape, tlo, hi)};
              if (!r.axes.empty())
                in.push_back(i64(r.axes));
              else if (r.empty_axes_input)
                in.push_back(empty_i64());
              s.push_back({attrs, std::move(in), scaled ? reduced_count(r) : 1.0});
            }
            if (specials && is_float(dt)) {
              s.push_back({attrs, {special_tensor(dt, {5, 37}, lo, hi), i64({1})}, 37});
              s.push_back({attrs, {special_tensor(dt, {37, 5}, lo, hi), i64({0})}, 37});
              s.push_back({attrs, {special_tensor(dt, {37, 16}, lo, hi), i64({0})}, 37});
              s.push_back({attrs, {special_tensor(dt, {3, 5000}, lo, hi), i64({1})}, 5000});
            }
            return s;
          },
          tol,
          squares ? mag * mag : mag};
}

// bfloat16 products: factors 2^k (exact in any order) and a few others, short rows.
ReduceCase bf16_prod_case() {
  return {"ReduceProd_bfloat16", OpKind::kReduceProd, {DT::kBFloat16}, [](DT dt) {
            Sets s;
            for (const ReduceShape& r : std::vector<ReduceShape>{
                     {{7}, {}}, {{3, 5, 2}, {1}}, {{2, 3, 4, 5}, {0, 2}}, {{129, 7}, {1}}, {{2, 0, 3}, {1}}}) {
              HostTensor x = rand_tensor(dt, r.shape, -2, 2, true);
              for (int64_t i = 0; i < x.numel(); ++i) set(x, i, std::ldexp(i % 3 == 2 ? -1.0 : 1.0, int(get(x, i))));
              s.push_back({ReduceAttrs{1, 0}, {std::move(x), i64(r.axes)}});
            }
            s.push_back({ReduceAttrs{1, 0}, {make(dt, {2, 3}, {1.5, 1.25, 3, 0.5, -1.75, 2.5}), i64({1})}});
            return s;
          }};
}

// ---- ArgMax / ArgMin ---------------------------------------------------------------------------
struct AxisShape {
  Shape shape;
  int64_t axis;
};

const std::vector<AxisShape> kArgShapes = {
    {{7}, 0},    {{1}, 0},        {{3, 5, 2}, 1},  {{3, 5, 2}, 0},  {{3, 5, 2}, -1}, {{0, 3}, 1},
    {{4099}, 0}, {{129, 257}, 0}, {{129, 257}, 1}, {{3, 70000}, 1}, {{50000, 3}, 0}, {{2, 1, 5}, 1},
};

// Integer-valued inputs in [-3, 3]: ties everywhere, so first/last index matters.
ReduceCase arg_case(OpKind k, int64_t keepdims, int64_t last) {
  return {std::string(op_name(k)) + (keepdims ? "_keep" : "_drop") + (last ? "_last" : "_first"), k, kNumeric,
          [=](DT dt) {
            Sets s;
            for (const AxisShape& a : kArgShapes)
              s.push_back({ArgReduceAttrs{a.axis, keepdims, last}, {rand_tensor(dt, a.shape, -3, 3, true)}});
            if (is_float(dt)) {
              s.push_back({ArgReduceAttrs{1, keepdims, last}, {special_tensor(dt, {5, 37}, -3, 3)}});
              s.push_back({ArgReduceAttrs{0, keepdims, last}, {special_tensor(dt, {37, 5}, -3, 3)}});
              s.push_back({ArgReduceAttrs{1, keepdims, last}, {special_tensor(dt, {2, 9000}, -3, 3)}});
            }
            return s;
          }};
}

// ---- Softmax / LogSoftmax / Hardmax ------------------------------------------------------------
// Last-axis rows of every width class of the register kernel (1, 2, 3, 17, 33, 130, 600, 1000,
// 1024), longer rows (a warp, a block per row), attention-like [B, H, S, S], other axes (a thread
// or a warp per line), coerce_2d, zero-size.
struct SoftmaxShape {
  Shape shape;
  int64_t axis;
  int64_t coerce = 0;
};

const std::vector<SoftmaxShape> kSoftmaxShapes = {
    {{7, 1}, -1},   {{5, 2}, -1},    {{5, 3}, 1},     {{2, 17}, -1},     {{4, 33}, -1},      {{2, 3, 130}, -1},
    {{2, 600}, -1}, {{3, 1000}, -1}, {{1, 1024}, -1}, {{2, 1025}, -1},   {{2, 5000}, -1},    {{2, 4, 64, 64}, -1},
    {{2, 4, 9}, 1}, {{300, 3}, 0},   {{2, 3, 4}, 0},  {{2, 3, 4}, 1, 1}, {{0, 5}, -1},       {{5, 0}, 0},
    {{1, 1000}, 0}, {{7}, 0},        {{2, 9000}, -1}, {{2048, 520}, -1}, {{2050, 1000}, -1}, {{3, 256}, -1},
    {{5, 200}, -1}, {{6, 48}, -1},   {{4, 128}, -1},  {{3, 5, 40}, -1},
};

// The sums inside are relative-error problems (every term <= 1), so no length-scaled term: n = 1.
ReduceCase softmax_case(OpKind k) {
  const bool hard = k == OpKind::kHardmax;
  return {std::string(op_name(k)), k, kFloat,
          [=](DT dt) {
            Sets s;
            for (const SoftmaxShape& a : kSoftmaxShapes)
              s.push_back({SoftmaxAttrs{a.axis, a.coerce}, {rand_tensor(dt, a.shape, -5, 5, hard)}});
            s.push_back({SoftmaxAttrs{-1, 0}, {rand_tensor(dt, {3, 1000}, -100, 100)}});  // large exponents
            s.push_back({SoftmaxAttrs{-1, 0}, {special_tensor(dt, {5, 37}, -5, 5)}});
            s.push_back({SoftmaxAttrs{0, 0}, {special_tensor(dt, {37, 5}, -5, 5)}});
            s.push_back({SoftmaxAttrs{-1, 0}, {special_tensor(dt, {2, 3000}, -5, 5)}});
            s.push_back({SoftmaxAttrs{-1, 0}, {make(dt, {2, 4}, {-kInf, -kInf, -kInf, -kInf, 1, kInf, 2, 3})}});
            return s;
          },
          hard ? Tol::kExact : Tol::kMath};
}

// ---- CumSum ------------------------------------------------------------------------------------
ReduceCase cumsum_case(int64_t exclusive, int64_t reverse) {
  const std::string name = std::string("CumSum") + (exclusive ? "_exclusive" : "") + (reverse ? "_reverse" : "");
  return {name,
          OpKind::kCumSum,
          kReduceTypes,
          [=](DT dt) {
            const CumSumAttrs attrs{exclusive, reverse};
            Sets s;
            const std::vector<AxisShape> shapes = {{{7}, 0},        {{1}, 0},      {{3, 5, 2}, 1}, {{3, 5, 2}, 0},
                                                   {{3, 5, 2}, -1}, {{2, 100}, 1}, {{1, 5000}, 1}, {{300, 4}, 0},
                                                   {{0, 5}, 1},     {{5, 0}, 1},   {{4, 33}, -1},  {{2, 40, 3}, 1}};
            for (size_t i = 0; i < shapes.size(); ++i) {
              const AxisShape& a = shapes[i];
              // The axis as int64 [1], int32 [1] or an int64 scalar.
              HostTensor axis = i % 3 == 0   ? make(DT::kInt64, {1}, {static_cast<double>(a.axis)})
                                : i % 3 == 1 ? make(DT::kInt32, {1}, {static_cast<double>(a.axis)})
                                             : make(DT::kInt64, {}, {static_cast<double>(a.axis)});
              const int64_t r = static_cast<int64_t>(a.shape.size());
              const double len = static_cast<double>(a.shape[static_cast<size_t>(a.axis < 0 ? a.axis + r : a.axis)]);
              s.push_back({attrs, {rand_tensor(dt, a.shape, -2, 2), std::move(axis)}, len});
            }
            if (is_float(dt)) {
              s.push_back({attrs, {special_tensor(dt, {5, 37}, -2, 2), i64({1})}, 37});
              s.push_back({attrs, {special_tensor(dt, {37, 5}, -2, 2), i64({0})}, 37});
            }
            return s;
          },
          Tol::kSum,
          2};
}

// ---- TopK --------------------------------------------------------------------------------------
// Ties (integer values in [-3, 3]), NaN and +-inf, k = 0 and k = n, lines short enough for the
// shared-memory sort and long ones (CUB), an axis that is not the last.
ReduceCase topk_case(int64_t largest, int64_t sorted) {
  const std::string name = std::string("TopK") + (largest ? "_largest" : "_smallest") + (sorted ? "" : "_unsorted");
  return {name, OpKind::kTopK, kNumeric, [=](DT dt) {
            struct K {
              Shape shape;
              int64_t axis, k;
            };
            const std::vector<K> shapes = {
                {{7}, 0, 3},          {{1}, 0, 1},          {{1}, 0, 0},     {{3, 5, 2}, 1, 2},
                {{3, 5, 2}, 0, 3},    {{3, 5, 2}, -1, 2},   {{5, 10}, 1, 0}, {{5, 10}, 1, 10},
                {{4, 100}, -1, 7},    {{2, 2048}, 1, 2048}, {{4099}, 0, 10}, {{3, 3000}, 1, 3000},
                {{2, 2049, 2}, 1, 5}, {{0, 5}, 1, 2},       {{6, 3}, 0, 6},  {{2, 1000, 3}, 1, 17}};
            Sets s;
            for (const K& k : shapes) {
              const TopKAttrs attrs{k.axis, largest, sorted};
              s.push_back({attrs, {rand_tensor(dt, k.shape, -3, 3, true), i64({static_cast<double>(k.k)})}});
            }
            if (is_float(dt)) {
              s.push_back({TopKAttrs{1, largest, sorted}, {special_tensor(dt, {5, 37}, -3, 3), i64({37})}});
              s.push_back({TopKAttrs{1, largest, sorted}, {special_tensor(dt, {5, 37}, -3, 3), i64({6})}});
              s.push_back({TopKAttrs{0, largest, sorted}, {special_tensor(dt, {5000}, -3, 3), i64({300})}});
              s.push_back({TopKAttrs{0, largest, sorted}, {special_tensor(dt, {5000}, -3, 3), i64({5000})}});
            }
            return s;
          }};
}

// ---- Einsum ------------------------------------------------------------------------------------
struct EinsumCase {
  std::string eq;
  std::vector<Shape> shapes;
  double n;  // the summed length
};

const std::vector<EinsumCase> kEinsumCases = {
    {"ij,jk->ik", {{3, 4}, {4, 5}}, 4},
    {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, 4},
    {"ii->i", {{4, 4}}, 1},
    {"ii", {{4, 4}}, 4},
    {"ij->ji", {{3, 5}}, 1},
    {"ij->", {{3, 5}}, 15},
    {"ij", {{3, 5}}, 1},
    {"i,i->", {{7}, {7}}, 7},
    {"i,j->ij", {{3}, {4}}, 1},
    {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}, 4},
    {"bhqd,bhkd->bhqk", {{2, 3, 16, 8}, {2, 3, 16, 8}}, 8},
    {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, 12},
    {"iij->j", {{3, 3, 4}}, 3},
    {"ij,jk->ik", {{3, 0}, {0, 5}}, 0},
    {"ij,jk->ik", {{0, 4}, {4, 5}}, 4},
    {"i,i->", {{100000}, {100000}}, 100000},
    {"ij->i", {{3, 50000}}, 50000},
    {"ij->j", {{3000, 5}}, 3000},
    {"bij,bkj->bik", {{4, 64, 32}, {4, 48, 32}}, 32},
};

ReduceCase einsum_case() {
  return {"Einsum",
          OpKind::kEinsum,
          kNumeric,
          [](DT dt) {
            Sets s;
            for (const EinsumCase& e : kEinsumCases) {
              Inputs in;
              for (const Shape& sh : e.shapes) in.push_back(rand_tensor(dt, sh, -2, 2));
              s.push_back({EinsumAttrs{e.eq}, std::move(in), e.n});
            }
            return s;
          },
          Tol::kSum,
          4};
}

// ---- the op table --------------------------------------------------------------------------------
std::vector<ReduceCase> all_cases() {
  using K = OpKind;
  std::vector<ReduceCase> c;
  for (int64_t keep : {1, 0}) {
    const ReduceAttrs a{keep, 0};
    const std::string v = keep ? "keep" : "drop";
    c.push_back(reduce_case(K::kReduceSum, a, v, kReduceTypes, -2, 2, Tol::kSum, true));
    c.push_back(reduce_case(K::kReduceMean, a, v, kReduceTypes, -2, 2, Tol::kSum, true));
    c.push_back(reduce_case(K::kReduceMax, a, v, kMaxMinTypes, -50, 50, Tol::kNear, true));
    c.push_back(reduce_case(K::kReduceMin, a, v, kMaxMinTypes, -50, 50, Tol::kNear, true));
    // bfloat16 cannot hold these factors (its spacing at 1 is 2^-7): its products are tested below.
    c.push_back(reduce_case(K::kReduceProd, a, v, {DT::kFloat32, DT::kFloat16, DT::kFloat64}, 0.9995, 1.0005, Tol::kSum,
                            false));
    c.push_back(reduce_case(K::kReduceL1, a, v, kReduceTypes, -2, 2, Tol::kSum, true));
    c.push_back(reduce_case(K::kReduceL2, a, v, kReduceTypes, -2, 2, Tol::kMath, true));
    c.push_back(reduce_case(K::kReduceLogSum, a, v, kReduceTypes, 0.1, 2, Tol::kMath, false));
    c.push_back(reduce_case(K::kReduceLogSumExp, a, v, kReduceTypes, -5, 5, Tol::kMath, true));
    c.push_back(reduce_case(K::kReduceSumSquare, a, v, kReduceTypes, -2, 2, Tol::kSum, true));
  }
  c.push_back(bf16_prod_case());
  // Integer products wrap modulo 2^bits: exact whatever the values.
  c.push_back(reduce_case(K::kReduceProd, ReduceAttrs{1, 0}, "int", {DT::kInt32, DT::kUInt32, DT::kInt64, DT::kUInt64},
                          -3, 3, Tol::kExact, false));
  c.push_back(reduce_case(K::kReduceSum, ReduceAttrs{1, 1}, "noop_empty_axes", kReduceTypes, -2, 2, Tol::kSum, false));
  c.push_back(reduce_case(K::kReduceMax, ReduceAttrs{0, 1}, "noop_empty_axes", kReduceTypes, -2, 2, Tol::kNear, false));
  for (K k : {K::kArgMax, K::kArgMin})
    for (int64_t keep : {1, 0})
      for (int64_t last : {0, 1}) c.push_back(arg_case(k, keep, last));
  for (K k : {K::kSoftmax, K::kLogSoftmax, K::kHardmax}) c.push_back(softmax_case(k));
  for (int64_t ex : {0, 1})
    for (int64_t rev : {0, 1}) c.push_back(cumsum_case(ex, rev));
  c.push_back(topk_case(1, 1));
  c.push_back(topk_case(0, 1));
  c.push_back(topk_case(1, 0));
  c.push_back(einsum_case());
  for (ReduceCase& k : c)
    if (k.kind == K::kTopK) k.n_out = 2;
  return c;
}

}  // namespace

std::vector<OpCase> reduce_cases() {
  std::vector<OpCase> out;
  for (const ReduceCase& c : all_cases())
    out.push_back({c.name, c.kind, c.dtypes, [c](DT dt) {
                     OpRuns runs;
                     for (const Set& s : c.sets(dt))
                       runs.push_back({s.attrs, s.in, c.n_out,
                                       [c, n = s.n](const HostTensor& want) { return tolerance(c, want.dtype, n); }});
                     return runs;
                   }});
  return out;
}

}  // namespace kiln::optest
