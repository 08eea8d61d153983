// The pool, norm and resize families' op cases (tests/ops/op_case.h), with DepthToSpace and
// SpaceToDepth of the tensor family: MaxPool (with Indices), AveragePool, GlobalAveragePool,
// GlobalMaxPool, BatchNormalization, InstanceNormalization, LRN, LayerNormalization, Resize. Per op:
// the shapes and attribute variants of the CPU tests (tests/cpu/ops_pool_test.cpp,
// ops_resize_test.cpp, ops_reduce_test.cpp) plus odd, size-1, zero-size and model-sized shapes, and
// every element type the CPU kernel takes (the four float types, and the integer and bool types an
// op takes).
//
// Tolerances (another backend against the reference): the window pools, BatchNormalization, Resize
// and the copies do the same float operations in the same order, so they must match bit for bit.
// The statistics (Layer/InstanceNormalization, GlobalAveragePool) are float reductions on the GPU
// and double ones on the CPU: reduce_tol() allows a few float roundings of the row, growing with
// its length; LRN uses powf. float64's tolerance is float32's times 1e-8. bfloat16 takes one of
// its ulps (2^-7 relative at most) where float16 takes one of its own.
#include "ops/op_case.h"

namespace kiln::optest {
namespace {

using InputSets = std::vector<Inputs>;
using K = OpKind;

const Tolerance kExactTol{};
const Tolerance kHalfTol{2e-3, 1e-3};  // one float16 rounding apart

// float32 results of a float reduction over `len` elements against the CPU's double one.
Tolerance reduce_tol(int64_t len) {
  const double grow = std::max(1.0, std::sqrt(static_cast<double>(len)) / 16);
  return {1e-5 * grow, 1e-6 * grow};
}

struct PoolCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;               // the main input's element types
  std::function<InputSets(DT)> inputs;  // input sets (one run each) for a dtype
  Tolerance f32 = kExactTol;            // float32 outputs (float64: scaled by 1e-8)
  Tolerance f16 = kExactTol;            // float16 outputs (bfloat16: at least one ulp)
  size_t n_out = 1;
};

Tolerance tol_for(const PoolCase& c, DT out) {
  if (out == DT::kFloat16) return c.f16;
  if (out == DT::kBFloat16) return c.f16.rel == 0 ? c.f16 : Tolerance{std::max(c.f16.rel, 8e-3), c.f16.abs};
  if (out == DT::kFloat64) return {c.f32.rel * 1e-8, c.f32.abs * 1e-8};
  return is_float(out) ? c.f32 : kExactTol;
}

const std::vector<DT> kFloat = {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16};

// ---- MaxPool / AveragePool -------------------------------------------------------------------
struct PoolShape {
  Shape x, k, s, d, pads;
  AutoPad auto_pad = AutoPad::kNotSet;
  int64_t ceil_mode = 0, include_pad = 0, storage_order = 0;
};

// tests/cpu/ops_pool_test.cpp's cases, then model and odd ones.
const std::vector<PoolShape> kPoolShapes = {
    {{2, 3, 9}, {3}, {2}, {}, {1, 1}, AutoPad::kNotSet, 0, 0, 0},
    {{1, 2, 7}, {2}, {3}, {2}, {1, 0}, AutoPad::kNotSet, 1, 1, 0},
    {{2, 2, 6, 7}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, AutoPad::kNotSet, 0, 1, 1},
    {{1, 3, 5, 5}, {3, 2}, {2, 2}, {}, {1, 0, 1, 1}, AutoPad::kNotSet, 1, 0, 0},
    {{1, 3, 5, 5}, {3, 3}, {3, 3}, {}, {1, 1, 1, 1}, AutoPad::kNotSet, 1, 1, 1},  // last window on the pad
    {{1, 1, 8, 6}, {2, 3}, {1, 2}, {2, 2}, {1, 1, 0, 2}, AutoPad::kNotSet, 1, 1, 0},
    {{2, 2, 7, 8}, {3, 2}, {2, 3}, {}, {}, AutoPad::kSameUpper, 0, 1, 1},
    {{1, 2, 7, 8}, {3, 3}, {2, 2}, {2, 1}, {}, AutoPad::kSameLower, 0, 0, 0},
    {{1, 2, 7, 8}, {2, 3}, {2, 2}, {}, {}, AutoPad::kValid, 0, 0, 1},
    {{1, 2, 5, 4, 6}, {2, 3, 2}, {2, 1, 2}, {1, 1, 2}, {1, 1, 0, 0, 1, 1}, AutoPad::kNotSet, 1, 1, 1},  // 3-D
    {{0, 2, 5, 5}, {2, 2}, {}, {}, {}},
    {{1, 1, 2, 2}, {1, 1}, {2, 2}, {}, {}, AutoPad::kNotSet, 1, 0, 0},               // ceil, size reduced
    {{1, 1, 2, 2}, {3, 3}, {3, 3}, {}, {1, 1, 1, 1}, AutoPad::kNotSet, 1, 1, 0},     // ceil, on the pad
    {{2, 16, 56, 57}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, AutoPad::kNotSet, 0, 0, 1},  // ResNet stem
    {{1, 5, 1, 1}, {1, 1}, {}, {}, {}},                                              // size 1
    {{3, 4, 33}, {5}, {1}, {3}, {4, 4}, AutoPad::kNotSet, 0, 1, 1},                  // 1-D dilated
    {{1, 3, 3, 4, 5}, {3, 3, 3}, {1, 1, 1}, {}, {1, 1, 1, 1, 1, 1}, AutoPad::kNotSet, 0, 1, 1},
};

PoolAttrs pool_attrs(const PoolShape& p) {
  PoolAttrs a;
  a.kernel_shape = p.k;
  a.strides = p.s;
  a.dilations = p.d;
  a.pads = p.pads;
  a.auto_pad = p.auto_pad;
  a.ceil_mode = p.ceil_mode;
  a.count_include_pad = p.include_pad;
  a.storage_order = p.storage_order;
  return a;
}

HostTensor pool_input(DT dt, const Shape& s, bool specials) {
  if (dt == DT::kUInt8) return rand_tensor(dt, s, 0, 255);
  if (dt == DT::kInt8) return rand_tensor(dt, s, -128, 127);
  return specials ? special_tensor(dt, s, -9, 9) : rand_tensor(dt, s, -9, 9);
}

void add_pool_cases(std::vector<PoolCase>& cases) {
  for (size_t i = 0; i < kPoolShapes.size(); ++i) {
    const PoolShape& p = kPoolShapes[i];
    const std::string tag = std::to_string(p.x.size() - 2) + "d_" + std::to_string(i);
    auto in = [p](DT dt) { return InputSets{{pool_input(dt, p.x, false)}, {pool_input(dt, p.x, true)}}; };
    const std::vector<DT> max_types = {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16, DT::kInt8, DT::kUInt8};
    cases.push_back({"MaxPool_" + tag, K::kMaxPool, pool_attrs(p), max_types, in});
    PoolCase idx{"MaxPoolIndices_" + tag, K::kMaxPool, pool_attrs(p), max_types, in};
    idx.n_out = 2;
    cases.push_back(idx);
    cases.push_back({"AveragePool_" + tag, K::kAveragePool, pool_attrs(p), kFloat, in});
  }
}

// ---- GlobalAveragePool / GlobalMaxPool ----------------------------------------------------------
// Plane lengths 1 .. 5000: the shared-memory tiles (odd and even lengths, partial tiles), a warp
// per plane and a block per plane.
const std::vector<Shape> kGlobalShapes = {{2, 3, 4, 5},   {1, 2, 7},    {2, 1, 2, 3, 2}, {0, 3, 4, 4},  {1, 4, 60, 70},
                                          {8, 256, 7, 7}, {3, 5, 1, 1}, {2, 3, 33},      {2, 2, 1024},  {1, 3, 5000},
                                          {5, 7, 3, 3},   {2, 9, 130},  {3, 100, 8, 8},  {1, 129, 2, 3}};

void add_global_cases(std::vector<PoolCase>& cases) {
  auto in = [](DT dt) {
    InputSets s;
    for (const Shape& sh : kGlobalShapes) s.push_back({rand_tensor(dt, sh, -1, 1)});
    return s;
  };
  PoolCase avg{"GlobalAveragePool", K::kGlobalAveragePool, NoAttrs{}, kFloat, in, reduce_tol(5000), kHalfTol};
  cases.push_back(avg);
  cases.push_back({"GlobalMaxPool", K::kGlobalMaxPool, NoAttrs{}, kFloat, [in](DT dt) {
                     InputSets s = in(dt);
                     for (const Shape& sh : kGlobalShapes) s.push_back({special_tensor(dt, sh, -1, 1)});
                     // Signed zeros: the first of equal maxima wins, as on the CPU.
                     s.push_back({make(dt, {1, 2, 40}, {-0.0, 0.0, -1.0, 0.0, -0.0})});
                     s.push_back({make(dt, {1, 2, 40}, {0.0, -0.0, -2.0})});
                     s.push_back({make(dt, {1, 1, 5000}, {-kInf})});
                     return s;
                   }});
}

// ---- normalizations ----------------------------------------------------------------------------
struct LayerNormShape {
  Shape x;
  int64_t axis;
  Shape scale, bias;
  bool has_bias;
};

// tests/cpu/ops_reduce_test.cpp's cases, then the warp kernels' widths and the block kernel.
const std::vector<LayerNormShape> kLayerNormShapes = {
    {{2, 3, 4}, -1, {4}, {4}, true},
    {{2, 3, 4}, 1, {3, 4}, {3, 4}, true},
    {{2, 3, 4}, 1, {4}, {1, 4}, true},
    {{2, 3, 4}, 0, {2, 3, 4}, {}, false},
    {{2, 3, 4}, -2, {3, 1}, {1}, true},
    {{5, 7}, 1, {7}, {}, false},
    {{6}, 0, {6}, {6}, true},
    {{0, 4}, 1, {4}, {4}, true},
    {{4, 300}, -1, {300}, {300}, true},
    {{3, 2, 5}, 2, {1}, {5}, true},
    {{4, 128, 768}, -1, {768}, {768}, true},  // BERT
    {{3, 1000}, 1, {1000}, {1000}, true},
    {{2, 17, 33}, 1, {17, 33}, {33}, true},
    {{5, 2048}, -1, {2048}, {}, false},
    {{2, 3000}, -1, {3000}, {3000}, true},
    {{3, 20000}, 1, {20000}, {1}, true},
    {{9, 1}, -1, {1}, {1}, true},
    {{2, 0}, 1, {0}, {0}, true},
    {{3, 8000}, -1, {8000}, {8000}, true},
    {{2, 1536}, -1, {1536}, {1}, true},
    // Short rows, several a warp (4, 8 or 16 lanes a row; 192 float16 channels: one a warp, 24 of
    // its lanes), row counts that leave warps part empty: Swin's 96 and 192 channels, head-sized rows.
    {{37, 96}, -1, {96}, {96}, true},
    {{3, 5, 192}, -1, {192}, {192}, true},
    {{13, 32}, -1, {32}, {32}, true},
    {{11, 64}, -1, {64}, {}, false},
    {{7, 16}, -1, {16}, {16}, true},
};

void add_layer_norm_cases(std::vector<PoolCase>& cases) {
  // The axis is an attribute: one case per axis, with the shapes that use it.
  for (int64_t axis : {-1, 0, 1, 2, -2}) {
    auto in = [axis](DT dt) {
      InputSets s;
      for (const LayerNormShape& c : kLayerNormShapes) {
        if (c.axis != axis) continue;
        Inputs i{rand_tensor(dt, c.x, -3, 3), rand_tensor(dt, c.scale, 0.5, 2)};
        if (c.has_bias) i.push_back(rand_tensor(dt, c.bias, -1, 1));
        s.push_back(std::move(i));
      }
      return s;
    };
    std::string ax = std::to_string(axis);
    if (axis < 0) ax[0] = 'm';
    // stash_type 1 (float32), 10 (float16), 11 (float64): the element type of Mean and InvStdDev.
    for (size_t n_out : {1, 3}) {
      for (int64_t stash : {1, 10, 11}) {
        if (n_out == 1 && stash != 1) continue;
        cases.push_back({"LayerNorm_axis" + ax + "_out" + std::to_string(n_out) + "_stash" + std::to_string(stash),
                         K::kLayerNormalization, LayerNormAttrs{axis, 1e-5f, stash}, kFloat, in, reduce_tol(20000),
                         kHalfTol, n_out});
      }
    }
  }
}

// X [N, C, ...] shapes of the per-channel ops: the CPU tests', plus the warp kernel's vector path,
// rank 2 (BatchNorm1d), empty planes, and planes short enough to share a warp (64 and 32 elements:
// 4 to 16 lanes a plane).
const std::vector<Shape> kChannelShapes = {{2, 3, 5},       {1, 4, 3, 3},   {2, 3, 1, 1},    {2, 2, 2, 2, 3},
                                           {0, 3, 4},       {2, 8, 70, 70}, {2, 16, 16, 16}, {1, 3, 0},
                                           {3, 64, 28, 28}, {2, 5, 1025},   {2, 5, 8, 8},    {3, 3, 4, 8}};

void add_channel_cases(std::vector<PoolCase>& cases) {
  cases.push_back(
      {"InstanceNorm", K::kInstanceNormalization, EpsilonAttrs{1e-3f}, kFloat,
       [](DT dt) {
         InputSets s;
         for (const Shape& sh : kChannelShapes)
           s.push_back({rand_tensor(dt, sh, -3, 3), rand_tensor(dt, {sh[1]}, 0.5, 2), rand_tensor(dt, {sh[1]}, -1, 1)});
         return s;
       },
       reduce_tol(4900), kHalfTol});
  // BatchNormalization's parameters may each have another float type than X.
  cases.push_back({"BatchNorm", K::kBatchNormalization, BatchNormAttrs{1e-5f, 0.9f, 0}, kFloat, [](DT dt) {
                     InputSets s;
                     std::vector<Shape> shapes = kChannelShapes;
                     shapes.push_back({4, 3});
                     shapes.push_back({1, 1});
                     for (const Shape& sh : shapes) {
                       const Shape c{sh[1]};
                       s.push_back({rand_tensor(dt, sh, -3, 3), rand_tensor(dt, c, 0.5, 2), rand_tensor(dt, c, -1, 1),
                                    rand_tensor(DT::kFloat64, c, -1, 1), rand_tensor(DT::kFloat64, c, 0.1, 2)});
                       s.push_back({rand_tensor(dt, sh, -3, 3), rand_tensor(DT::kFloat16, c, 0.5, 2),
                                    rand_tensor(DT::kFloat32, c, -1, 1), rand_tensor(DT::kBFloat16, c, -1, 1),
                                    rand_tensor(dt, c, 0.1, 2)});
                     }
                     s.push_back({special_tensor(dt, {2, 3, 37}, -3, 3), rand_tensor(dt, {3}, 0.5, 2),
                                  rand_tensor(dt, {3}, -1, 1), rand_tensor(dt, {3}, -1, 1),
                                  rand_tensor(dt, {3}, 0, 2)});
                     return s;
                   }});
  for (int64_t size : {1, 2, 3, 5}) {
    cases.push_back({"LRN_size" + std::to_string(size),
                     K::kLRN,
                     LrnAttrs{0.02f, 0.75f, 1.5f, size},
                     kFloat,
                     [](DT dt) {
                       InputSets s;
                       for (const Shape& sh :
                            std::vector<Shape>{{2, 5, 3, 3}, {1, 4, 7}, {2, 7}, {1, 16, 40, 40}, {0, 3, 2}, {1, 1, 5}})
                         s.push_back({rand_tensor(dt, sh, -3, 3)});
                       return s;
                     },
                     {1e-4, 1e-6},
                     kHalfTol});
  }
  cases.push_back({"LRN_alexnet",
                   K::kLRN,
                   LrnAttrs{1e-4f, 0.75f, 2.0f, 5},
                   kFloat,
                   [](DT dt) {
                     return InputSets{{rand_tensor(dt, {2, 96, 27, 27}, -50, 50)}};
                   },
                   {1e-4, 1e-6},
                   kHalfTol});
}

// ---- Resize ------------------------------------------------------------------------------------
struct ResizeShape {
  std::string name;
  std::function<void(ResizeAttrs&)> set;
  Shape x;
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
  std::vector<DT> dtypes = kFloat;
};

HostTensor f32_vec(const std::vector<double>& v) { return make(DT::kFloat32, {int64_t(v.size())}, v); }

Inputs resize_inputs(DT dt, const ResizeShape& r) {
  Inputs in{dt == DT::kBool ? rand_tensor(dt, r.x, 0, 1)
                            : rand_tensor(dt, r.x, is_float(dt) ? -2 : 0, is_float(dt) ? 2 : 255)};
  in.push_back(r.roi.empty() ? absent() : f32_vec(r.roi));
  in.push_back(r.scales.empty() ? absent() : f32_vec(r.scales));
  if (!r.sizes.empty())
    in.push_back(make(DT::kInt64, {int64_t(r.sizes.size())}, std::vector<double>(r.sizes.begin(), r.sizes.end())));
  return in;
}

using RA = ResizeAttrs;
using CT = CoordinateTransform;

std::vector<ResizeShape> resize_shapes() {
  const std::vector<DT> kInterp = {DT::kFloat32, DT::kFloat16, DT::kBFloat16, DT::kFloat64, DT::kInt8,  DT::kUInt8,
                                   DT::kInt16,   DT::kUInt16,  DT::kInt32,    DT::kUInt32,  DT::kInt64, DT::kUInt64};
  const std::vector<DT> kAny = {DT::kFloat32, DT::kFloat16, DT::kInt8, DT::kInt64, DT::kBool, DT::kBFloat16};
  std::vector<ResizeShape> v = {
      // tests/cpu/ops_resize_test.cpp's onnx reference cases, on random data.
      {"linear_antialias_scales",
       [](RA& a) { a.mode = ResizeMode::kLinear, a.antialias = 1; },
       {1, 1, 5, 5},
       {},
       {1, 1, 0.6, 0.6},
       {}},
      {"cubic_antialias_sizes",
       [](RA& a) { a.mode = ResizeMode::kCubic, a.antialias = 1; },
       {1, 1, 4, 5},
       {},
       {},
       {1, 1, 3, 2}},
      {"nearest_axes_not_larger",
       [](RA& a) {
         a.axes = {3, 2}, a.keep_aspect_ratio_policy = AspectRatioPolicy::kNotLarger;
       },
       {1, 1, 3, 4},
       {},
       {},
       {7, 5},
       kAny},
      {"linear_axes_not_smaller",
       [](RA& a) {
         a.mode = ResizeMode::kLinear, a.axes = {2, 3}, a.keep_aspect_ratio_policy = AspectRatioPolicy::kNotSmaller;
       },
       {1, 2, 3, 4},
       {},
       {},
       {5, 5}},
      {"tf_crop_extrapolate",
       [](RA& a) {
         a.mode = ResizeMode::kLinear, a.coordinate_transformation_mode = CT::kTfCropAndResize;
         a.extrapolation_value = 10.0f;
       },
       {1, 1, 4, 4},
       {0, 0, 0.4, 0.6, 1, 1, 1.2, 0.9},
       {},
       {1, 1, 3, 3},
       kInterp},
      {"cubic_asym_exclude",
       [](RA& a) {
         a.mode = ResizeMode::kCubic, a.coordinate_transformation_mode = CT::kAsymmetric, a.cubic_coeff_a = -0.5f;
         a.exclude_outside = 1;
       },
       {1, 1, 3, 3},
       {},
       {1, 1, 1.7, 1.7},
       {}},
      {"linear_hps",
       [](RA& a) { a.mode = ResizeMode::kLinear, a.coordinate_transformation_mode = CT::kHalfPixelSymmetric; },
       {1, 1, 4, 5},
       {},
       {1, 1, 0.7, 1.3},
       {}},
      {"linear_pytorch_to1",
       [](RA& a) { a.mode = ResizeMode::kLinear, a.coordinate_transformation_mode = CT::kPytorchHalfPixel; },
       {1, 1, 3, 4},
       {},
       {},
       {1, 1, 1, 3}},
      {"nearest_ceil_align3d",
       [](RA& a) {
         a.coordinate_transformation_mode = CT::kAlignCorners, a.nearest_mode = NearestMode::kRoundPreferCeil;
       },
       {2, 3, 4},
       {},
       {1.5, 1, 1.75},
       {},
       kAny},
      {"linear_3d_all_axes", [](RA& a) { a.mode = ResizeMode::kLinear; }, {2, 3, 4}, {}, {2, 0.67, 1.5}, {}, kInterp},
      {"cubic_3d_all_axes",
       [](RA& a) { a.mode = ResizeMode::kCubic, a.coordinate_transformation_mode = CT::kAlignCorners; },
       {3, 3, 3},
       {},
       {},
       {4, 2, 5}},
      {"linear_uint8", [](RA& a) { a.mode = ResizeMode::kLinear; }, {1, 1, 2, 3}, {}, {1, 1, 2.5, 1.5}, {}, kInterp},
      {"nearest_floor_int64",
       [](RA& a) { a.nearest_mode = NearestMode::kFloor, a.coordinate_transformation_mode = CT::kHalfPixel; },
       {1, 2, 3},
       {},
       {1, 1.5, 2.4},
       {},
       kAny},
      {"cubic_antialias_axes",
       [](RA& a) {
         a.mode = ResizeMode::kCubic, a.antialias = 1, a.axes = {1, -1};
       },
       {2, 7, 6},
       {},
       {0.45, 0.5},
       {}},
      {"linear_antialias_up_down",
       [](RA& a) {
         a.mode = ResizeMode::kLinear, a.antialias = 1, a.coordinate_transformation_mode = CT::kAlignCorners;
       },
       {1, 9, 3},
       {},
       {},
       {1, 4, 5}},
      // Model-like and edge shapes.
      {"nearest_2x_yolo",
       [](RA& a) { a.coordinate_transformation_mode = CT::kAsymmetric, a.nearest_mode = NearestMode::kFloor; },
       {2, 16, 20, 20},
       {},
       {1, 1, 2, 2},
       {},
       kAny},
      {"linear_unet",
       [](RA& a) { a.mode = ResizeMode::kLinear, a.coordinate_transformation_mode = CT::kAlignCorners; },
       {1, 8, 33, 40},
       {},
       {},
       {1, 8, 67, 80},
       kInterp},
      {"linear_down", [](RA& a) { a.mode = ResizeMode::kLinear; }, {2, 3, 40, 33}, {}, {}, {2, 3, 17, 50}, kInterp},
      {"cubic_up", [](RA& a) { a.mode = ResizeMode::kCubic; }, {1, 3, 9, 11}, {}, {1, 1, 2.3, 1.9}, {}, kInterp},
      {"cubic_antialias_down4",
       [](RA& a) { a.mode = ResizeMode::kCubic, a.antialias = 1; },
       {1, 2, 40, 36},
       {},
       {},
       {1, 2, 10, 9},
       kInterp},
      {"linear_5d",
       [](RA& a) { a.mode = ResizeMode::kLinear; },
       {2, 3, 4, 5, 3},
       {},
       {1, 1.5, 0.8, 1.4, 2},
       {},
       kInterp},
      {"cubic_4axes_tf_crop",
       [](RA& a) {
         a.mode = ResizeMode::kCubic, a.coordinate_transformation_mode = CT::kTfCropAndResize;
         a.extrapolation_value = -3.5f;
       },
       {3, 4, 5, 6},
       {0.1, -0.2, 0.0, 0.3, 0.8, 1.1, 1.2, 0.9},
       {},
       {4, 3, 6, 5},
       kInterp},
      {"nearest_tf_crop",
       [](RA& a) { a.coordinate_transformation_mode = CT::kTfCropAndResize, a.extrapolation_value = 7.0f; },
       {2, 5, 6},
       {0, -0.5, 0.2, 1, 1.5, 0.8},
       {},
       {2, 7, 9},
       kAny},
      {"nearest_ceil_down",
       [](RA& a) { a.nearest_mode = NearestMode::kCeil; },
       {1, 2, 9, 10},
       {},
       {1, 1, 0.5, 0.34},
       {},
       kAny},
      {"nearest_prefer_ceil_hps",
       [](RA& a) {
         a.nearest_mode = NearestMode::kRoundPreferCeil, a.coordinate_transformation_mode = CT::kHalfPixelSymmetric;
       },
       {1, 3, 7},
       {},
       {1, 1, 2.5},
       {},
       kAny},
      {"identity", [](RA& a) { a.mode = ResizeMode::kCubic; }, {2, 3, 4}, {}, {1, 1, 1}, {}, kInterp},
      {"empty_out", [](RA& a) { a.mode = ResizeMode::kLinear; }, {2, 3, 4}, {}, {1, 0.2, 1}, {}},
      {"empty_in", [](RA& a) { a.mode = ResizeMode::kCubic; }, {0, 3, 4}, {}, {}, {0, 6, 2}},
      {"one_to_many", [](RA& a) { a.mode = ResizeMode::kLinear; }, {1, 1, 1, 1}, {}, {}, {1, 1, 3, 4}, kInterp},
  };
  return v;
}

void add_resize_cases(std::vector<PoolCase>& cases) {
  for (const ResizeShape& r : resize_shapes()) {
    ResizeAttrs a;
    r.set(a);
    cases.push_back({"Resize_" + r.name, K::kResize, a, r.dtypes, [r](DT dt) {
                       return InputSets{resize_inputs(dt, r), resize_inputs(dt, r)};
                     }});
  }
}

// ---- DepthToSpace / SpaceToDepth ---------------------------------------------------------------
void add_depth_cases(std::vector<PoolCase>& cases) {
  const std::vector<DT> types = {DT::kFloat32, DT::kFloat16, DT::kInt64, DT::kBool, DT::kInt8};
  auto sets = [](std::vector<Shape> shapes) {
    return [shapes](DT dt) {
      InputSets s;
      for (const Shape& sh : shapes) s.push_back({rand_tensor(dt, sh, -100, 100)});
      return s;
    };
  };
  for (DepthToSpaceMode m : {DepthToSpaceMode::kDcr, DepthToSpaceMode::kCrd}) {
    const std::string mode = m == DepthToSpaceMode::kDcr ? "DCR" : "CRD";
    cases.push_back({"DepthToSpace_b2_" + mode, K::kDepthToSpace, DepthToSpaceAttrs{2, m}, types,
                     sets({{1, 8, 2, 3}, {0, 4, 2, 2}, {1, 4, 1, 1}, {3, 12, 5, 7}, {2, 64, 16, 17}})});
    cases.push_back({"DepthToSpace_b3_" + mode, K::kDepthToSpace, DepthToSpaceAttrs{3, m}, types,
                     sets({{2, 18, 3, 4}, {1, 9, 1, 1}})});
    cases.push_back(
        {"DepthToSpace_b1_" + mode, K::kDepthToSpace, DepthToSpaceAttrs{1, m}, types, sets({{2, 3, 4, 5}})});
  }
  cases.push_back({"SpaceToDepth_b2", K::kSpaceToDepth, DepthToSpaceAttrs{2, DepthToSpaceMode::kDcr}, types,
                   sets({{1, 2, 4, 6}, {0, 2, 2, 2}, {3, 5, 8, 10}, {2, 16, 32, 34}})});
  cases.push_back({"SpaceToDepth_b3", K::kSpaceToDepth, DepthToSpaceAttrs{3, DepthToSpaceMode::kDcr}, types,
                   sets({{2, 3, 6, 9}, {1, 1, 3, 3}})});
}

std::vector<PoolCase> all_cases() {
  std::vector<PoolCase> c;
  add_pool_cases(c);
  add_global_cases(c);
  add_layer_norm_cases(c);
  add_channel_cases(c);
  add_resize_cases(c);
  add_depth_cases(c);
  return c;
}

}  // namespace

std::vector<OpCase> pool_norm_resize_cases() {
  std::vector<OpCase> out;
  for (const PoolCase& c : all_cases())
    out.push_back({c.name, c.kind, c.dtypes, [c](DT dt) {
                     return runs_of(c.attrs, c.inputs(dt), c.n_out,
                                    [c](const HostTensor& want) { return tol_for(c, want.dtype); });
                   }});
  return out;
}

}  // namespace kiln::optest
