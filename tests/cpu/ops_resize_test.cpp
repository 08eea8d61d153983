// The resize family (Resize): shape inference + CPU kernels against plain float64 references
// written here, on random inputs, several dtypes, with and without a thread pool; also against
// expected values produced by the ONNX reference implementation (onnx 1.23).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/shape_infer.h"
#include "nn_test_util.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;      // Shape, Tensor, make, numel
using namespace kiln::test::nn;  // random_tensor, tolerance, forward_window, expect_infer_error

// ---- Resize --------------------------------------------------------------------------------

struct ResizeCase {
  const char* name;
  void (*set)(ResizeAttrs&);
  DataType dtype;
  Shape x;
  std::vector<double> xv, roi, scales;
  std::vector<int64_t> sizes;
  Shape y;
  std::vector<double> yv;
};

// Generated once with onnx.reference.ReferenceEvaluator (onnx 1.23) on random inputs.
const ResizeCase kResizeCases[] = {
    {"linear_antialias_scales",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kLinear;
       a.antialias = 1;
     },
     DataType::kFloat32,
     {1, 1, 5, 5},
     {0.5,          1.58899999,  1.10300004,   -1.09899998,  -0.799000025, 1.49399996,   -1.97899997,
      1.28499997,   1.18799996,  -0.128000006, -0.787999988, -0.885999978, -0.981000006, -0.219999999,
      0.0179999992, 0.214000002, 1.98199999,   1.171,        0.488999993,  1.95599997,   -1.13900006,
      -1.35899997,  0.449999988, -1.824,       -1.85699999},
     {},
     {1, 1, 0.600000024, 0.600000024},
     {},
     {1, 1, 3, 3},
     {0.63959378, 0.652833343, -0.432624936, -0.220722228, -0.0531481989, 0.354055494, -0.434562355, 0.164041802,
      -0.625687182}},
    {"cubic_antialias_sizes",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kCubic;
       a.antialias = 1;
     },
     DataType::kFloat32,
     {1, 1, 4, 5},
     {0.0599999987, -0.135000005, 1.66900003,  0.51700002,   0.0560000017, -0.0130000003, -1.00999999,
      -1.95299995,  -1.23000002,  0.768000007, -1.19799995,  -0.522000015, -1.98500001,   1.32000005,
      -1.38199997,  -0.930000007, 1.52100003,  0.0390000008, 1.38900006,   0.559000015},
     {},
     {},
     {1, 1, 3, 2},
     {1, 1, 3, 2},
     {0.0695616156, 0.288333565, -1.1480298, -0.722631454, -0.0579229295, 0.589597046}},
    {"nearest_axes_not_larger",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kNearest;
       a.axes = {3, 2};
       a.keep_aspect_ratio_policy = AspectRatioPolicy::kNotLarger;
     },
     DataType::kFloat32,
     {1, 1, 3, 4},
     {0.967000008, -1.63399994, 0.165000007, 0.0309999995, 1.48500001, -0.555000007, 0.393000007, -1.76300001,
      -0.449000001, -0.708000004, -1.39900005, 1.26499999},
     {},
     {},
     {7, 5},
     {1, 1, 5, 7},
     {0.967000008,  0.967000008,  -1.63399994,  0.165000007, 0.165000007, 0.0309999995, 0.0309999995,
      0.967000008,  0.967000008,  -1.63399994,  0.165000007, 0.165000007, 0.0309999995, 0.0309999995,
      1.48500001,   1.48500001,   -0.555000007, 0.393000007, 0.393000007, -1.76300001,  -1.76300001,
      -0.449000001, -0.449000001, -0.708000004, -1.39900005, -1.39900005, 1.26499999,   1.26499999,
      -0.449000001, -0.449000001, -0.708000004, -1.39900005, -1.39900005, 1.26499999,   1.26499999}},
    {"linear_axes_not_smaller",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kLinear;
       a.axes = {2, 3};
       a.keep_aspect_ratio_policy = AspectRatioPolicy::kNotSmaller;
     },
     DataType::kFloat32,
     {1, 2, 3, 4},
     {-0.481999993, 1.91499996,   0.360000014, 0.419999987, 0.551999986, 0.70599997,  -1.39699996,  -0.238999993,
      -1.04200006,  -0.389999986, -1.61300004, 1.87100005,  -1.13999999, 0.686999977, -0.797999978, 1.49600005,
      0.648999989,  -1.47399998,  1.38,        1.77999997,  1.61600006,  0.279000014, -1.41799998,  -1.23000002},
     {},
     {},
     {5, 5},
     {1, 2, 5, 7},
     {-0.481999993, 0.476799995,  1.91499996,   0.981999993,  0.372000009,  0.407999992,   0.419999987,   -0.068400003,
      0.531520009,  1.43139994,   0.36688,      -0.242959976, 0.0565600023, 0.156399995,   0.551999986,   0.613599956,
      0.70599997,   -0.555799961, -1.16539991,  -0.470599979, -0.238999993, -0.404400051,  -0.223280028,  0.048399996,
      -0.896600008, -1.01587999,  0.516280055,  1.02700007,   -1.04200006,  -0.781200051,  -0.389999986,  -1.12380004,
      -0.916200042, 1.17420006,   1.87100005,   -1.13999999,  -0.409200013, 0.686999977,   -0.203999996,  -0.33919996,
      1.03720009,   1.49600005,   -0.424400002, -0.325599998, -0.177400008, -0.0270399954, 0.380480021,   1.30232,
      1.60960007,   0.648999989,  -0.200199991, -1.47399998,  0.238400012,  1.46000004,    1.69999993,    1.77999997,
      1.22920001,   0.568640053,  -0.422199994, -0.348159999, -0.244240001, -0.0805600137, -0.0260000229, 1.61600006,
      1.0812,       0.279000014,  -0.739199996, -1.38039994,  -1.26760006,  -1.23000002}},
    {"tf_crop_extrapolate",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kLinear;
       a.coordinate_transformation_mode = CoordinateTransform::kTfCropAndResize;
       a.extrapolation_value = 10.0f;
     },
     DataType::kFloat32,
     {1, 1, 4, 4},
     {1.71200001, 0.209000006, -1.278, 1.53600001, 0.565999985, 0.279000014, -0.495000005, -0.356000006, -1.04200006,
      -1.84800005, 1.505, -0.128999993, 0.191, -0.711000025, 1.005, -1.89900005},
     {0, 0, 0.400000006, 0.600000024, 1, 1, 1.20000005, 0.899999976},
     {},
     {1, 1, 3, 3},
     {1, 1, 3, 3},
     {-0.105279945, -0.148899928, -0.245919958, 0.765360177, 0.769499838, -0.194400072, 10, 10, 10}},
    {"cubic_asym_exclude",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kCubic;
       a.coordinate_transformation_mode = CoordinateTransform::kAsymmetric;
       a.cubic_coeff_a = -0.5f;
       a.exclude_outside = 1;
     },
     DataType::kFloat32,
     {1, 1, 3, 3},
     {-0.510999978, -1.87899995, -1.50800002, 1.86899996, 0.630999982, -0.287, 0.0949999988, 1.49100006, -0.623000026},
     {},
     {1, 1, 1.70000005, 1.70000005},
     {},
     {1, 1, 5, 5},
     {-0.510999978, -1.33050561,  -1.90771055,  -1.60023642, -1.46772695,  0.991326094,  0.157150492,
      -0.608470321, -0.753337204, -0.808389783, 1.76041794,  1.33973706,   0.686023295,  -0.0750372931,
      -0.388214409, 0.453626513,  1.12809289,   1.17396653,  -0.182483047, -0.749276161, -0.0975725427,
      1.03129745,   1.3685298,    -0.23217769,  -0.903047562}},
    {"linear_hps",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kLinear;
       a.coordinate_transformation_mode = CoordinateTransform::kHalfPixelSymmetric;
     },
     DataType::kFloat32,
     {1, 1, 4, 5},
     {0.361000001, 0.735000014, -0.578000009, 0.0759999976, 1.06099999,  1.63699996,   -1.39600003,
      1.73399997,  -1.97899997, 1.01199996,   1.24199998,   -1.45299995, -0.324000001, 1.26100004,
      -1.94299996, 0.513999999, 1.17200005,   0.0520000011, 0.902999997, -1.09399998},
     {},
     {1, 1, 0.699999988, 1.29999995},
     {},
     {1, 1, 2, 6},
     {1.18642318, -0.585060358, 0.400906533, 0.170412034, -1.14462078, 0.825489163, 0.933961689, -0.58642292,
      -0.492302179, 0.305692345, 0.731153727, -1.53450561}},
    {"linear_pytorch_to1",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kLinear;
       a.coordinate_transformation_mode = CoordinateTransform::kPytorchHalfPixel;
     },
     DataType::kFloat32,
     {1, 1, 3, 4},
     {-1.20599997, -0.546999991, -1.28199995, -0.615999997, 1.79200006, 0.293000013, -0.639999986, -0.913999975,
      1.80799997, -0.222000003, 1.92200005, 0.061999999},
     {},
     {},
     {1, 1, 1, 3},
     {1, 1, 1, 3},
     {-1.09616661, -0.914499998, -0.726999998}},
    {"nearest_ceil_align3d",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kNearest;
       a.coordinate_transformation_mode = CoordinateTransform::kAlignCorners;
       a.nearest_mode = NearestMode::kRoundPreferCeil;
     },
     DataType::kFloat32,
     {2, 3, 4},
     {0.0850000009, 1.58599997,   0.971000016,  0.323000014,  -0.293000013, 1.51300001,  -0.352999985, 1.69099998,
      -1.72500002,  -0.280000001, 0.0780000016, 1.80400002,   -0.995999992, 1.22399998,  0.70599997,   0.867999971,
      0.518000007,  1.88600004,   -0.66900003,  -0.407000005, -1.18799996,  -1.79700005, -1.148,       1.66199994},
     {},
     {1.5, 1, 1.75},
     {},
     {3, 3, 7},
     {0.0850000009, 1.58599997,   1.58599997,   0.971000016,  0.971000016, 0.323000014,  0.323000014,  -0.293000013,
      1.51300001,   1.51300001,   -0.352999985, -0.352999985, 1.69099998,  1.69099998,   -1.72500002,  -0.280000001,
      -0.280000001, 0.0780000016, 0.0780000016, 1.80400002,   1.80400002,  -0.995999992, 1.22399998,   1.22399998,
      0.70599997,   0.70599997,   0.867999971,  0.867999971,  0.518000007, 1.88600004,   1.88600004,   -0.66900003,
      -0.66900003,  -0.407000005, -0.407000005, -1.18799996,  -1.79700005, -1.79700005,  -1.148,       -1.148,
      1.66199994,   1.66199994,   -0.995999992, 1.22399998,   1.22399998,  0.70599997,   0.70599997,   0.867999971,
      0.867999971,  0.518000007,  1.88600004,   1.88600004,   -0.66900003, -0.66900003,  -0.407000005, -0.407000005,
      -1.18799996,  -1.79700005,  -1.79700005,  -1.148,       -1.148,      1.66199994,   1.66199994}},
    {"linear_3d_all_axes",
     [](ResizeAttrs& a) { a.mode = ResizeMode::kLinear; },
     DataType::kFloat32,
     {2, 3, 4},
     {1.36099994,   -1.54999995, 0.414999992, -0.0829999968, 0.379000008, 0.637000024,  -0.773000002, 1.84500003,
      -0.136999995, 0.512000024, 0.541000009, -1.26400006,   -1.75300002, -0.354000002, 1.05599999,   1.26100004,
      0.920000017,  -1.54700005, 1.653,       1.20799994,    1.51100004,  0.0930000022, 1.66299999,   -1.81299996},
     {},
     {2, 0.670000017, 1.5},
     {},
     {4, 2, 6},
     {1.11916411,   0.0538768545,  -0.822436571,   -0.066541031, 0.257119387,  0.391805947,  -0.00222384557,
      0.271212727,  0.486839563,   0.255600691,    -0.127078325, -0.451947629, 0.565692127,  -0.177407667,
      -0.701659501, 0.173732281,   0.499210805,    0.605841398,  0.337490708,  0.331069052,  0.364446193,
      0.523641407,  -0.0157518182, -0.594943881,   -0.541251898, -0.63997668,  -0.460105419, 0.654278934,
      0.983393669,  1.0339123,     1.01691973,     0.450781673,  0.119659454,  1.0597229,    0.206901193,
      -0.880936384, -1.09472394,   -0.871261239,   -0.339328349, 0.894552231,  1.22548509,   1.24794781,
      1.35663438,   0.510637999,   -0.00273391837, 1.32776368,   0.318227708,  -1.0239327}},
    {"cubic_3d_all_axes",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kCubic;
       a.coordinate_transformation_mode = CoordinateTransform::kAlignCorners;
     },
     DataType::kFloat32,
     {3, 3, 3},
     {-1.87899995, -1.91900003, -0.989000022, -1.00600004,  -1.25,        0.268000007, -1.84399998,
      0.361999989, -1.33599997, 0.711000025,  -1.91600001,  -0.758000016, 1.75300002,  0.153999999,
      1.24600005,  0.632000029, 0.442999989,  -1.23500001,  0.298000008,  -1.84099996, 1.20700002,
      1.84000003,  1.41600001,  -1.79700005,  -0.644999981, -0.727999985, -1.54900002},
     {},
     {},
     {4, 2, 5},
     {4, 2, 5},
     {-1.87899995,  -1.98618746,  -1.91900003,   -1.45775008,  -0.989000022, -1.84399998,  -0.581812501, 0.361999989,
      -0.280187488, -1.33599997,  -0.0584809966, -1.07402492,  -1.92527723,  -1.66217852,  -1.04905546,  -0.00559207425,
      0.437839299,  0.547611058,  -0.29028517,   -1.23190701,  0.868759274,  -0.678366542, -1.89205503,  -1.26171505,
      -0.113722473, 0.505092859,  0.426033169,   0.083352007,  -0.659176826, -1.32262921,  0.298000008,  -1.05725002,
      -1.84099996,  -0.517531216, 1.20700002,    -0.644999981, -0.609531224, -0.727999985, -1.14628124,  -1.54900002}},
    {"linear_uint8",
     [](ResizeAttrs& a) { a.mode = ResizeMode::kLinear; },
     DataType::kUInt8,
     {1, 1, 2, 3},
     {76, 159, 32, 203, 77, 79},
     {},
     {1, 1, 2.5, 1.5},
     {},
     {1, 1, 5, 4},
     {76, 118, 138, 53, 89, 120, 132, 56, 140, 129, 108, 66, 190, 138, 83, 76, 203, 140, 77, 79}},
    {"nearest_floor_int64",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kNearest;
       a.nearest_mode = NearestMode::kFloor;
       a.coordinate_transformation_mode = CoordinateTransform::kHalfPixel;
     },
     DataType::kInt64,
     {1, 2, 3},
     {169, 220, 111, 203, 77, 32},
     {},
     {1, 1.5, 2.4000001},
     {},
     {1, 3, 7},
     {169, 169, 169, 169, 220, 220, 111, 169, 169, 169, 169, 220, 220, 111, 203, 203, 203, 203, 77, 77, 32}},
    {"cubic_antialias_axes",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kCubic;
       a.antialias = 1;
       a.axes = {1, -1};
     },
     DataType::kFloat32,
     {2, 7, 6},
     {1.06700003,   1.52999997,   -1.21099997,  0.294999987,  0.555000007,  0.437000006,  -1.61500001,  0.644999981,
      0.527999997,  1.296,        1.21399999,   -0.690999985, 0.888000011,  1.46899998,   1.57200003,   -1.35399997,
      -1.89300001,  0.602999985,  -1.14100003,  0.254999995,  1.77900004,   -0.48300001,  -0.989000022, -0.173999995,
      0.629000008,  -1.59599996,  -0.477999985, -1.46500003,  0.649999976,  1.32200003,   -0.493000001, -0.513000011,
      0.158000007,  -1.13999999,  -1.00999999,  -0.680999994, -0.170000002, -1.67400002,  1.01100004,   0.316000015,
      -0.800999999, -1.69000006,  1.05299997,   -1.47599995,  -1.46700001,  -1.477,       -1.67499995,  1.62600005,
      -0.922999978, -0.773999989, 1.33099997,   0.479999989,  -1.25100005,  -0.261000007, 1.53600001,   -0.499000013,
      0.843999982,  -1.61300004,  0.908999979,  1.10599995,   1.30299997,   0.697000027,  -0.51700002,  -1.74300003,
      0.075000003,  1.02999997,   -1.23699999,  -0.935000002, 0.143999994,  0.992999971,  1.58599997,   -1.49699998,
      -1.26300001,  1.19799995,   0.578000009,  0.884000003,  1.98699999,   1.75699997,   1.37199998,   1.10800004,
      -0.419999987, 0.564999998,  -1.26199996,  1.03799999},
     {},
     {0.449999988, 0.5},
     {},
     {2, 3, 3},
     {0.515675426, 0.424301118, 0.201284543, 0.216134682, 0.0318024866, -0.333582073, -0.551677644, -0.434475601,
      -0.525404394, -0.196745023, -0.68744272, -0.16613929, 0.313004524, -0.241675198, 0.371847272, -0.0278907418,
      0.628790796, 0.832670987}},
    {"linear_antialias_up_down",
     [](ResizeAttrs& a) {
       a.mode = ResizeMode::kLinear;
       a.antialias = 1;
       a.coordinate_transformation_mode = CoordinateTransform::kAlignCorners;
     },
     DataType::kFloat32,
     {1, 9, 3},
     {1.03100002,   0.88499999,   -0.221000001, -0.486999989, -0.32100001,  -1.86699998, 1.37699997,
      0.169,        -0.449999988, 0.192000002,  0.887000024,  -0.474000007, 1.32299995,  1.67799997,
      -0.449999988, -1.449,       1.04100001,   1.972,        -1.40799999,  0.851000011, 1.301,
      1.68200004,   -1.50600004,  -1.63300002,  1.95099998,   -1.53299999,  -1.29299998},
     {},
     {},
     {1, 4, 5},
     {1, 4, 5},
     {0.686047614, 0.624904752, 0.56376189,   -0.0300238114, -0.623809516, 0.69538331,  0.679549992,
      0.663716674, 0.019600004, -0.624516666, -0.562533319,  0.118966661,  0.800466657, 0.847683311,
      0.894900024, 1.727,       0.156976178,  -1.41304767,   -1.33173811,  -1.25042856}},
};

std::vector<Tensor> run_resize(const ResizeAttrs& a, const Tensor& x, const std::vector<double>& roi,
                               const std::vector<double>& scales, const std::vector<int64_t>& sizes,
                               cpu::ThreadPool* pool = nullptr) {
  Tensor r = make(DataType::kFloat32, {int64_t(roi.size())}, roi);
  Tensor s = make(DataType::kFloat32, {int64_t(scales.size())}, scales);
  Tensor z = make(DataType::kInt64, {int64_t(sizes.size())}, std::vector<double>(sizes.begin(), sizes.end()));
  return run(OpKind::kResize, a,
             {&x, roi.empty() ? nullptr : &r, scales.empty() ? nullptr : &s, sizes.empty() ? nullptr : &z}, 1, pool);
}

TEST(NnResize, OnnxReferenceCases) {
  for (const ResizeCase& c : kResizeCases) {
    ResizeAttrs a;
    c.set(a);
    Tensor x = make(c.dtype, c.x, c.xv);
    auto y = run_resize(a, x, c.roi, c.scales, c.sizes);
    ASSERT_EQ(y[0].shape, c.y) << c.name;
    expect_near(y[0].values(), c.yv, is_float(c.dtype) ? 2e-6 : 0, c.name);
  }
}

// Textbook bilinear / nearest on random inputs, all float types, with and without threads.
TEST(NnResize, MatchesTextbookInterpolation) {
  std::mt19937 rng(8);
  cpu::ThreadPool pool(3);
  for (DataType dt :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kUInt8}) {
    for (CoordinateTransform ct :
         {CoordinateTransform::kHalfPixel, CoordinateTransform::kAlignCorners, CoordinateTransform::kAsymmetric}) {
      for (const auto& [xs, ys] :
           {std::pair{Shape{2, 3, 5, 7}, Shape{2, 3, 8, 4}}, std::pair{Shape{1, 3, 40, 33}, Shape{1, 3, 67, 50}}}) {
        Tensor x = random_tensor(dt, xs, rng, 0, 255);
        std::vector<double> xv = x.values(), want;
        auto src = [&](int64_t o, int64_t in, int64_t out) {
          const double s = double(out) / double(in);
          double v = ct == CoordinateTransform::kHalfPixel    ? (o + 0.5) / s - 0.5
                     : ct == CoordinateTransform::kAsymmetric ? o / s
                                                              : double(o) * (in - 1) / double(out - 1);
          return std::clamp(v, 0.0, double(in - 1));
        };
        const int64_t H = xs[2], W = xs[3];
        for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
          for (int64_t h = 0; h < ys[2]; ++h)
            for (int64_t w = 0; w < ys[3]; ++w) {
              const double fy = src(h, H, ys[2]), fx = src(w, W, ys[3]);
              const int64_t y0 = int64_t(fy), x0 = int64_t(fx), y1 = std::min(y0 + 1, H - 1),
                            x1 = std::min(x0 + 1, W - 1);
              const double ty = fy - y0, tx = fx - x0;
              auto at = [&](int64_t i, int64_t j) { return xv[(p * H + i) * W + j]; };
              double v =
                  (1 - ty) * ((1 - tx) * at(y0, x0) + tx * at(y0, x1)) + ty * ((1 - tx) * at(y1, x0) + tx * at(y1, x1));
              want.push_back(v);
            }
        ResizeAttrs a;
        a.mode = ResizeMode::kLinear;
        a.coordinate_transformation_mode = ct;
        for (cpu::ThreadPool* p : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
          auto y = run_resize(a, x, {}, {}, ys, p);
          ASSERT_EQ(y[0].shape, ys);
          if (dt == DataType::kUInt8) {  // rounded to nearest: within half a unit of the exact value
            std::vector<double> got = y[0].values();
            for (size_t i = 0; i < got.size(); ++i) ASSERT_LE(std::abs(got[i] - want[i]), 0.5 + 1e-9) << i;
          } else {
            expect_near(y[0].values(), want, tolerance(dt), "Resize linear " + std::string(dtype_name(dt)));
          }
        }
      }
    }
  }
  // Nearest, asymmetric + floor, integer scale 2 on H and 3 on W: y[h][w] = x[h / 2][w / 3], any dtype.
  for (DataType dt : {DataType::kInt8, DataType::kInt64, DataType::kBool, DataType::kFloat16, DataType::kUInt16}) {
    Tensor x = random_tensor(dt, {2, 3, 4}, rng, 0, 1);
    ResizeAttrs a;
    a.coordinate_transformation_mode = CoordinateTransform::kAsymmetric;
    a.nearest_mode = NearestMode::kFloor;
    a.axes = {-2, -1};
    auto y = run_resize(a, x, {}, {2.0, 3.0}, {});
    ASSERT_EQ(y[0].shape, (Shape{2, 6, 12}));
    std::vector<double> xv = x.values(), want;
    for (int64_t i = 0; i < 2 * 6 * 12; ++i) want.push_back(xv[(i / 72 * 3 + i / 12 % 6 / 2) * 4 + i % 12 / 3]);
    expect_near(y[0].values(), want, 0, "Resize nearest " + std::string(dtype_name(dt)));
  }
}

// Every nearest_mode, including exact ties (onnx reference values).
TEST(NnResize, NearestModes) {
  Tensor x = make(DataType::kFloat32, {4}, {0, 1, 2, 3});
  const std::tuple<float, NearestMode, std::vector<double>> cases[] = {
      {2.0f, NearestMode::kRoundPreferFloor, {0, 0, 1, 1, 2, 2, 3, 3}},
      {2.0f, NearestMode::kRoundPreferCeil, {0, 1, 1, 2, 2, 3, 3, 3}},
      {2.0f, NearestMode::kFloor, {0, 0, 1, 1, 2, 2, 3, 3}},
      {2.0f, NearestMode::kCeil, {0, 1, 1, 2, 2, 3, 3, 3}},
      {2.5f, NearestMode::kRoundPreferFloor, {0, 0, 1, 1, 2, 2, 2, 3, 3, 3}},
      {2.5f, NearestMode::kFloor, {0, 0, 0, 1, 1, 2, 2, 2, 3, 3}},
      {2.5f, NearestMode::kCeil, {0, 1, 1, 2, 2, 2, 3, 3, 3, 3}},
  };
  for (const auto& [scale, mode, want] : cases) {
    ResizeAttrs a;
    a.nearest_mode = mode;
    a.coordinate_transformation_mode = CoordinateTransform::kAsymmetric;
    auto y = run_resize(a, x, {}, {scale}, {});
    expect_near(y[0].values(), want, 0, std::string(kEnumNames<NearestMode>[int(mode)]));
  }
}

TEST(NnResize, IdentityAndEmpty) {
  std::mt19937 rng(9);
  Tensor x = random_tensor(DataType::kFloat32, {2, 3, 4}, rng);
  ResizeAttrs a;
  a.mode = ResizeMode::kCubic;
  auto y = run_resize(a, x, {}, {1, 1, 1}, {});
  expect_near(y[0].values(), x.values(), 0, "identity");
  y = run_resize(a, x, {}, {1, 0.2f, 1}, {});  // floor(3 * 0.2) = 0
  EXPECT_EQ(y[0].shape, (Shape{2, 0, 4}));
  Tensor e = random_tensor(DataType::kFloat32, {0, 3, 4}, rng);
  y = run_resize(a, e, {}, {}, {0, 6, 2});
  EXPECT_EQ(y[0].shape, (Shape{0, 6, 2}));
}

// ---- inference errors ----------------------------------------------------------------------

TEST(ResizeInfer, RejectsBadInput) {
  Tensor rx = shaped({1, 1, 4, 4}), sc = make(DataType::kFloat32, {4}, {1, 1, 2, 2}),
         sc3 = make(DataType::kFloat32, {3}, {1, 2, 2});
  Tensor sc0 = make(DataType::kFloat32, {4}, {1, 1, 0, 2}), sz = make(DataType::kInt64, {4}, {1, 1, 8, 8});
  Tensor szn = make(DataType::kInt64, {4}, {1, 1, -8, 8}), sz32 = make(DataType::kInt32, {4}, {1, 1, 8, 8});
  Tensor roi3 = make(DataType::kFloat32, {3}, {0, 0, 1}), rbool = shaped({1, 1, 4, 4}, DataType::kBool);
  auto rs = [](auto f) {
    ResizeAttrs a;
    f(a);
    return Attrs{a};
  };
  auto rnop = [](ResizeAttrs&) {};
  expect_infer_error(OpKind::kResize, rs(rnop), {&rx, nullptr, &sc, &sz}, 1, "scales and sizes");
  expect_infer_error(OpKind::kResize, rs(rnop), {&rx}, 1, "neither");
  expect_infer_error(OpKind::kResize, rs(rnop), {&rx, nullptr, &sc3}, 1, "scales length");
  expect_infer_error(OpKind::kResize, rs(rnop), {&rx, nullptr, &sc0}, 1, "scale 0");
  expect_infer_error(OpKind::kResize, rs(rnop), {&rx, nullptr, nullptr, &szn}, 1, "negative size");
  expect_infer_error(OpKind::kResize, rs(rnop), {&rx, nullptr, nullptr, &sz32}, 1, "int32 sizes");
  expect_infer_error(OpKind::kResize, rs([](ResizeAttrs& a) { a.axes = {2, 2}; }), {&rx, nullptr, &sc3}, 1, "axes dup");
  expect_infer_error(OpKind::kResize, rs([](ResizeAttrs& a) { a.axes = {4}; }), {&rx, nullptr, &sc3}, 1, "axes range");
  expect_infer_error(OpKind::kResize, rs([](ResizeAttrs& a) { a.antialias = 1; }), {&rx, nullptr, &sc}, 1,
                     "antialias nearest");
  expect_infer_error(OpKind::kResize, rs([](ResizeAttrs& a) { a.mode = ResizeMode::kLinear; }), {&rbool, nullptr, &sc},
                     1, "bool linear");
  expect_infer_error(OpKind::kResize, rs([](ResizeAttrs& a) {
                       a.coordinate_transformation_mode = CoordinateTransform::kTfCropAndResize;
                     }),
                     {&rx, &roi3, &sc}, 1, "roi length");
}

}  // namespace
}  // namespace kiln
