// Range engines (docs/decisions/55-shape-ranges.md): one engine for a range of batch sizes or
// sequence lengths. The oracles are fixed engines built the usual way: a range engine's rows must
// equal the rows of the fixed engine of its bucket bit for bit, and those of a fixed engine of the
// exact shape within float tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "build/build.h"
#include "build/range_build.h"
#include "onnx_model_util.h"
#include "runtime/copy_corner.h"

namespace kiln {
namespace {

using test::I64s;
using test::OnnxModel;

// An input whose dimensions are sizes (>= 0) or names (a symbolic dimension).
void sym_input(OnnxModel& m, const std::string& name, const std::vector<std::string>& dims) {
  auto* tt = m.g()->add_input();
  tt->set_name(name);
  auto* t = tt->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (const std::string& d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0])))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

// Conv -> Relu -> MaxPool -> Flatten -> Gemm over a symbolic batch: every row on its own.
OnnxModel convnet() {
  OnnxModel m("rangenet");
  sym_input(m, "x", {"N", "3", "8", "8"});
  m.init_rand("w", {4, 3, 3, 3});
  m.init_rand("b", {4});
  m.init_rand("fw", {5, 36});
  m.init_rand("fb", {5});
  m.node("Conv", "conv", {"x", "w", "b"}, {"c"});
  m.node("Relu", "relu", {"c"}, {"r"});
  auto* pool = m.node("MaxPool", "pool", {"r"}, {"p"});
  test::attr_ints(pool, "kernel_shape", {2, 2});
  test::attr_ints(pool, "strides", {2, 2});
  m.node("Flatten", "flatten", {"p"}, {"f"});
  auto* gemm = m.node("Gemm", "fc", {"f", "fw", "fb"}, {"y"});
  test::attr_int(gemm, "transB", 1);
  m.output("y");
  return m;
}

std::vector<uint8_t> build_with(const OnnxModel& m, build::BuildOptions o, build::BuildReport* r = nullptr) {
  graph::Graph g = m.import();
  return build::build_engine(g, o, r);
}

build::BuildOptions batch_range(int64_t lo, int64_t hi) {
  build::BuildOptions o;
  o.batch_range = {lo, hi};
  o.batch = hi;
  return o;
}

std::vector<float> run(const Engine& e, const std::string& in, const I64s& shape, const std::vector<float>& x,
                       const std::string& out) {
  auto ctx = e.create_context(2);
  if (!e.ranges().empty()) ctx->set_input_shape(in, shape);
  ctx->set_input(in, x.data(), x.size() * 4);
  ctx->run();
  auto bytes = ctx->output(out);
  std::vector<float> y(bytes.size() / 4);
  std::memcpy(y.data(), bytes.data(), bytes.size());
  return y;
}

TEST(RangeEngine, RowsEqualTheBucketsFixedEngine) {
  const OnnxModel m = convnet();
  build::BuildReport report;
  auto range = Engine::from_bytes(build_with(m, batch_range(1, 8), &report), "range.kiln");
  ASSERT_EQ(range->ranges().size(), 1u);
  const ShapeRangeInfo& r = range->ranges()[0];
  EXPECT_EQ(r.name, "batch");
  EXPECT_EQ(r.buckets, (I64s{1, 2, 4, 8}));
  EXPECT_TRUE(r.pad_rows) << r.why_exact;
  EXPECT_EQ(report.plans, 4u);
  EXPECT_EQ(range->inputs()[0].shape, (I64s{8, 3, 8, 8}));  // a new context starts at the top
  for (int64_t bucket : {1, 2, 4, 8}) {
    build::BuildOptions fo;
    fo.batch = bucket;
    auto fixed = Engine::from_bytes(build_with(m, fo), "fixed.kiln");
    for (int64_t n = bucket / 2 + 1; n <= bucket; ++n) {
      SCOPED_TRACE("batch " + std::to_string(n) + " on bucket " + std::to_string(bucket));
      const std::vector<float> x = test::random_vec(static_cast<size_t>(n * 3 * 64), static_cast<uint32_t>(n));
      const std::vector<float> y = run(*range, "x", {n, 3, 8, 8}, x, "y");
      ASSERT_EQ(y.size(), static_cast<size_t>(n * 5));
      std::vector<float> padded(static_cast<size_t>(bucket * 3 * 64), 0.f);
      std::copy(x.begin(), x.end(), padded.begin());
      const std::vector<float> want = run(*fixed, "x", {bucket, 3, 8, 8}, padded, "y");
      EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0);
      build::BuildOptions eo;
      eo.batch = n;
      const std::vector<float> exact =
          run(*Engine::from_bytes(build_with(m, eo), "exact.kiln"), "x", {n, 3, 8, 8}, x, "y");
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], exact[i], 1e-5f);
    }
  }
}

TEST(RangeEngine, WeightsAreStoredOnce) {
  const OnnxModel m = convnet();
  build::BuildReport rr, fr;
  auto range = Engine::from_bytes(build_with(m, batch_range(1, 64), &rr), "range.kiln");
  build::BuildOptions fo;
  fo.batch = 64;
  auto fixed = Engine::from_bytes(build_with(m, fo, &fr), "fixed.kiln");
  const EngineSummary s = range->summary();
  EXPECT_EQ(s.weight_bytes, fixed->summary().weight_bytes);
  ASSERT_EQ(s.buckets.size(), 7u);  // 1, 2, 4, ..., 64
  EXPECT_EQ(s.buckets.back().sizes, (I64s{64}));
  EXPECT_EQ(s.buckets.back().arena_bytes, s.arena_bytes);
  EXPECT_LT(s.buckets.front().arena_bytes, s.arena_bytes);
  EXPECT_EQ(rr.weight_bytes, fr.weight_bytes);
}

TEST(RangeEngine, ShapeErrorsNameTheInputAndTheRange) {
  const OnnxModel m = convnet();
  auto range = Engine::from_bytes(build_with(m, batch_range(2, 8)), "range.kiln");
  auto ctx = range->create_context(1);
  auto error_of = [&](const I64s& shape) {
    try {
      ctx->set_input_shape("x", shape);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({9, 3, 8, 8}).find("input 'x' dimension 0 ('batch') is 9, outside the engine's range 2..8"),
            std::string::npos);
  EXPECT_NE(error_of({1, 3, 8, 8}).find("outside the engine's range 2..8"), std::string::npos);
  EXPECT_NE(error_of({4, 3, 8, 9}).find("differs from the engine's [8,3,8,8] on dimension 3"), std::string::npos);
  EXPECT_NE(error_of({4, 3, 8}).find("has rank 3"), std::string::npos);
  EXPECT_NE(error_of({4, 3, 8}).find("input 'x'"), std::string::npos);
  // A buffer bound at one shape does not fit another: the input is unbound, and run says so.
  std::vector<float> x(8 * 3 * 64, 0.5f);
  ctx->set_input("x", x.data(), x.size() * 4);
  ctx->set_input_shape("x", {3, 3, 8, 8});
  EXPECT_EQ(ctx->input_shape("x"), (I64s{3, 3, 8, 8}));
  EXPECT_EQ(ctx->output_shape("y"), (I64s{3, 5}));
  EXPECT_EQ(ctx->bucket(), (I64s{4}));
  EXPECT_THROW(ctx->run(), Error);
  EXPECT_THROW(ctx->set_input("x", x.data(), x.size() * 4), Error);
  ctx->set_input("x", x.data(), 3 * 3 * 64 * 4);
  ctx->run();
  EXPECT_EQ(ctx->output("y").size(), 3u * 5 * 4);
  // A fixed engine takes its own shape and no other.
  build::BuildOptions fo;
  fo.batch = 4;
  auto fixed = Engine::from_bytes(build_with(m, fo), "fixed.kiln");
  auto fctx = fixed->create_context(1);
  fctx->set_input_shape("x", {4, 3, 8, 8});
  try {
    fctx->set_input_shape("x", {2, 3, 8, 8});
    FAIL() << "a fixed engine took another shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the engine has one fixed shape"), std::string::npos) << e.what();
  }
}

// A model that mixes the positions of its ranged dimension (Softmax along it): sizes between
// buckets would change the outputs, so only the buckets' sizes run.
OnnxModel softmax_over_sequence() {
  OnnxModel m("seqnet");
  sym_input(m, "tokens", {"B", "seq"});
  sym_input(m, "mask", {"B", "seq"});
  m.node("Add", "add", {"tokens", "mask"}, {"s"});
  auto* sm = m.node("Softmax", "softmax", {"s"}, {"p"});
  test::attr_int(sm, "axis", 1);
  m.output("p");
  return m;
}

TEST(RangeEngine, RowsThatMixRunOnlyAtTheBuckets) {
  const OnnxModel m = softmax_over_sequence();
  build::BuildOptions o;
  o.shape_ranges["tokens"] = {{1, 1}, {2, 8}};
  auto range = Engine::from_bytes(build_with(m, o), "seq.kiln");
  ASSERT_EQ(range->ranges().size(), 1u);
  const ShapeRangeInfo& r = range->ranges()[0];
  EXPECT_EQ(r.name, "seq");
  EXPECT_FALSE(r.pad_rows);
  EXPECT_NE(r.why_exact.find("softmax"), std::string::npos) << r.why_exact;
  // mask follows tokens by the dimension's name.
  ASSERT_EQ(r.inputs.size(), 2u);
  auto ctx = range->create_context(1);
  ctx->set_input_shape("tokens", {1, 4});
  EXPECT_EQ(ctx->input_shape("mask"), (I64s{1, 4}));
  const std::vector<float> t = {0.1f, 0.5f, -0.3f, 2.f}, z(4, 0.f);
  ctx->set_input("tokens", t.data(), 16);
  ctx->set_input("mask", z.data(), 16);
  ctx->run();
  std::vector<float> p(4);
  std::memcpy(p.data(), ctx->output("p").data(), 16);
  double sum = 0;
  for (float v : t) sum += std::exp(double(v));
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p[i], std::exp(double(t[i])) / sum, 1e-6);
  try {
    ctx->set_input_shape("tokens", {1, 3});
    FAIL() << "a size between buckets ran on a model that mixes rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs only at the sizes the engine was built for (2,4,8)"), std::string::npos)
        << e.what();
  }
  o.buckets = {3, 8};  // --buckets: the sizes the user runs
  auto listed = Engine::from_bytes(build_with(m, o), "seq3.kiln");
  auto c3 = listed->create_context(1);
  c3->set_input_shape("tokens", {1, 3});
  EXPECT_EQ(c3->bucket(), (I64s{3}));
}

// A transformer layer over a ranged sequence: position embeddings gathered by Range(0, S), masked
// self-attention ((1 - mask) * -10000 on the scores) and a pooler reading position 0. The analysis
// proves that zero padding is masked out, so sizes between buckets run padded.
OnnxModel attention_over_sequence() {
  OnnxModel m("seqattn");
  sym_input(m, "x", {"1", "S", "8"});
  auto* mask = m.g()->add_input();
  mask->set_name("mask");
  auto* mt = mask->mutable_type()->mutable_tensor_type();
  mt->set_elem_type(onnx::TensorProto::INT64);
  mt->mutable_shape()->add_dim()->set_dim_value(1);
  mt->mutable_shape()->add_dim()->set_dim_param("S");
  m.init_rand("pos", {16, 8});
  for (const char* w : {"wq", "wk", "wv"}) m.init_rand(w, {8, 8}, -0.5f, 0.5f);
  auto scalar = [&](const std::string& name, int64_t v, bool f) {
    auto* t = m.g()->add_initializer();
    t->set_name(name);
    t->set_data_type(f ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT64);
    if (f)
      t->add_float_data(static_cast<float>(v));
    else
      t->add_int64_data(v);
  };
  scalar("i0", 0, false);
  scalar("i1", 1, false);
  scalar("one", 1, true);
  scalar("big", -10000, true);
  auto* axes = m.g()->add_initializer();
  axes->set_name("ax1");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(1);
  m.node("Shape", "shape", {"x"}, {"xs"});
  m.node("Gather", "len", {"xs", "i1"}, {"len"});
  m.node("Range", "range", {"i0", "len", "i1"}, {"ids"});
  m.node("Gather", "posemb", {"pos", "ids"}, {"pe"});
  m.node("Add", "addpos", {"x", "pe"}, {"h"});
  m.node("MatMul", "q", {"h", "wq"}, {"q"});
  m.node("MatMul", "k", {"h", "wk"}, {"k"});
  m.node("MatMul", "v", {"h", "wv"}, {"v"});
  test::attr_ints(m.node("Transpose", "kt", {"k"}, {"kt"}), "perm", {0, 2, 1});
  m.node("MatMul", "scores", {"q", "kt"}, {"s"});
  test::attr_int(m.node("Cast", "cast", {"mask"}, {"mf"}), "to", onnx::TensorProto::FLOAT);
  m.node("Sub", "inv", {"one", "mf"}, {"inv"});
  m.node("Mul", "neg", {"inv", "big"}, {"add"});
  m.node("Unsqueeze", "u", {"add", "ax1"}, {"add3"});
  m.node("Add", "masked", {"s", "add3"}, {"sm"});
  test::attr_int(m.node("Softmax", "softmax", {"sm"}, {"p"}), "axis", -1);
  m.node("MatMul", "pv", {"p", "v"}, {"y"});
  test::attr_int(m.node("Gather", "pool", {"y", "i0"}, {"pooled"}), "axis", 1);
  m.output("y");
  m.output("pooled");
  return m;
}

TEST(RangeEngine, MaskedSequenceRunsPaddedBetweenBuckets) {
  const OnnxModel m = attention_over_sequence();
  build::BuildOptions o;
  o.shape_ranges["x"] = {{1, 1}, {2, 16}, {8, 8}};
  auto range = Engine::from_bytes(build_with(m, o), "seq.kiln");
  ASSERT_EQ(range->ranges().size(), 1u);
  EXPECT_TRUE(range->ranges()[0].pad_rows) << range->ranges()[0].why_exact;
  for (int64_t n : {2, 3, 5, 7, 11, 16}) {
    SCOPED_TRACE("length " + std::to_string(n));
    int64_t bucket = 2;
    while (bucket < n) bucket *= 2;
    const std::vector<float> x = test::random_vec(static_cast<size_t>(n * 8), static_cast<uint32_t>(n));
    std::vector<int64_t> mask(static_cast<size_t>(n), 1);
    auto run_at = [&](const Engine& e, int64_t len, const std::vector<float>& xs, const std::vector<int64_t>& ms) {
      auto ctx = e.create_context(1);
      if (!e.ranges().empty()) ctx->set_input_shape("x", {1, len, 8});
      ctx->set_input("x", xs.data(), xs.size() * 4);
      ctx->set_input("mask", ms.data(), ms.size() * 8);
      ctx->run();
      std::vector<float> y(ctx->output("y").size() / 4), p(8);
      std::memcpy(y.data(), ctx->output("y").data(), y.size() * 4);
      std::memcpy(p.data(), ctx->output("pooled").data(), 32);
      return std::pair{y, p};
    };
    const auto [y, pooled] = run_at(*range, n, x, mask);
    ASSERT_EQ(y.size(), static_cast<size_t>(n * 8));
    // The bucket's fixed engine on inputs padded with zeros (a padded mask of 0s): the same bits.
    build::BuildOptions bo;
    bo.input_shapes["x"] = {1, bucket, 8};
    std::vector<float> xp(static_cast<size_t>(bucket * 8), 0.f);
    std::copy(x.begin(), x.end(), xp.begin());
    std::vector<int64_t> mp(static_cast<size_t>(bucket), 0);
    std::fill(mp.begin(), mp.begin() + n, 1);
    const auto [yb, pb] = run_at(*Engine::from_bytes(build_with(m, bo), "bucket.kiln"), bucket, xp, mp);
    EXPECT_EQ(std::memcmp(y.data(), yb.data(), y.size() * 4), 0);
    EXPECT_EQ(pooled, pb);
    // The exact shape's fixed engine: the same within rounding.
    build::BuildOptions eo;
    eo.input_shapes["x"] = {1, n, 8};
    const auto [ye, pe] = run_at(*Engine::from_bytes(build_with(m, eo), "exact.kiln"), n, x, mask);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ye[i], 1e-5f);
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(pooled[i], pe[i], 1e-5f);
  }
}

TEST(RangeEngine, BuilderRefusesRangesItCannotBuild) {
  auto error_of = [](const OnnxModel& m, const build::BuildOptions& o) {
    try {
      build_with(m, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const OnnxModel net = convnet();
  build::BuildOptions o;
  o.shape_ranges["x"] = {{1, 4}, {3, 3}, {4, 8}, {8, 8}};
  EXPECT_NE(error_of(net, o).find("dimension 2 is fixed at 8 in the model"), std::string::npos);
  o.shape_ranges.clear();
  o.shape_ranges["nope"] = {{1, 4}};
  EXPECT_NE(error_of(net, o).find("--shape nope: the model has no input of that name"), std::string::npos);
  const OnnxModel seq = softmax_over_sequence();
  build::BuildOptions two;
  two.shape_ranges["tokens"] = {{1, 1}, {1, 8}};
  two.shape_ranges["mask"] = {{1, 1}, {2, 8}};
  EXPECT_NE(error_of(seq, two).find("gives dimension 'seq' the range"), std::string::npos);
  build::BuildOptions many;
  many.shape_ranges["tokens"] = {{1, 1024}, {1, 1024}};
  EXPECT_NE(error_of(seq, many).find("the ranges make 121 plans, more than 64"), std::string::npos);
  build::BuildOptions b = batch_range(1, 8);
  b.buckets = {2, 4};
  EXPECT_NE(error_of(net, b).find("--buckets"), std::string::npos);
  b.buckets = {0, 8};
  EXPECT_NE(error_of(net, b).find("--buckets"), std::string::npos);
}

TEST(CopyCorner, PadsAndSlicesLikeAnIndexLoop) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t rank = 1 + rng() % 4;
    I64s from(rank), to(rank);
    for (size_t a = 0; a < rank; ++a) {
      from[a] = rng() % 4;
      to[a] = rng() % 2 ? from[a] : int64_t(rng() % 4);
    }
    const size_t elem = size_t{1} << (rng() % 3);
    std::vector<uint8_t> src(static_cast<size_t>(detail::element_count(from)) * elem);
    for (uint8_t& v : src) v = static_cast<uint8_t>(1 + rng() % 255);
    const size_t n_to = static_cast<size_t>(detail::element_count(to));
    std::vector<uint8_t> dst(n_to * elem, 0xAB), want(n_to * elem, 0);
    for (size_t i = 0; i < n_to; ++i) {
      size_t rest = i, s = 0, stride = 1;
      bool inside = true;
      for (size_t a = rank; a-- > 0;) {
        const size_t c = rest % static_cast<size_t>(to[a]);
        rest /= static_cast<size_t>(to[a]);
        inside &= static_cast<int64_t>(c) < from[a];
        s += c * stride;
        stride *= static_cast<size_t>(from[a]);
      }
      if (inside) std::memcpy(&want[i * elem], &src[s * elem], elem);
    }
    detail::copy_corner(src.data(), from, dst.data(), to, elem, true);
    ASSERT_EQ(dst, want) << "from " << shape_string(from) << " to " << shape_string(to) << ", " << elem << " bytes";
  }
}

}  // namespace
}  // namespace kiln
