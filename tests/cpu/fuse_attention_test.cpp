// Tests for the fuse-attention pass: scaled dot-product attention spelled out in MatMul / Div or
// Mul / Add / Softmax / MatMul (as BERT's and PyTorch's exports write it) becomes one Attention,
// with numeric parity against the pass disabled (the separate MatMul and Softmax kernels); every
// guard leaves the ops in place.
#include <gtest/gtest.h>

#include <limits>

#include "graph/onnx_export.h"
#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "fuse-attention";

struct AttnOptions {
  I64s q_shape{2, 3, 7, 8};  // [batch, heads, q_len, head_size]
  int64_t kv_len = 9;
  int64_t kv_heads = 3;
  // How the keys reach the first MatMul: "input" (kt is a graph input, already [b, h, d, kv]),
  // "transpose" (k [b, h, kv, d] transposed by [0, 1, 3, 2]), "bshd" (k [b, kv, h, d] transposed by
  // [0, 2, 3, 1], as BERT's export does).
  std::string keys = "bshd";
  std::string scale = "div";    // "div", "mul", "none", or "sides" (q and kt each times a constant)
  I64s mask_shape{2, 1, 1, 9};  // empty: no mask
  bool mask_first = false;      // Add(mask, scores)
  int64_t softmax_axis = -1;
  bool scores_output = false;  // the probabilities are also a graph output
  // masked_fill(scores, tril == 0, -inf) as GPT-2 writes it: "causal" (the lower triangle),
  // "pattern" (another one, every query keeping a key), "" none.
  std::string fill;
};

// q, keys, v (and mask) -> attention -> y.
PassModel attention(const AttnOptions& o) {
  PassModel m("attention", 17);
  const int64_t b = o.q_shape[0], h = o.q_shape[1], d = o.q_shape[3], hk = o.kv_heads, kv = o.kv_len;
  m.input("q", o.q_shape);
  m.input("v", {b, hk, kv, d + 4});
  std::string kt = "kt";
  if (o.keys == "input") {
    m.input("kt", {b, hk, d, kv});
  } else if (o.keys == "transpose") {
    m.input("k", {b, hk, kv, d});
    attr_ints(m.node("Transpose", "tk", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  } else {
    m.input("k", {b, kv, hk, d});
    attr_ints(m.node("Transpose", "tk", {"k"}, {"kt"}), "perm", {0, 2, 3, 1});
  }
  std::string q = "q";
  if (o.scale == "sides") {
    m.init_f("sq", {}, {0.5f});
    m.init_f("sk", {}, {0.6f});
    m.node("Mul", "mul_q", {"q", "sq"}, {"qs"});
    m.node("Mul", "mul_k", {"sk", kt}, {"kts"});
    q = "qs";
    kt = "kts";
  }
  m.node("MatMul", "qk", {q, kt}, {"s0"});
  std::string s = "s0";
  if (o.scale == "div" || o.scale == "mul") {
    m.init_f("c", {}, {o.scale == "div" ? 2.828f : 0.35f});
    m.node(o.scale == "div" ? "Div" : "Mul", "scale", {s, "c"}, {"s1"});
    s = "s1";
  }
  if (!o.fill.empty()) {
    const int64_t sq = o.q_shape[2];
    std::vector<float> tril(static_cast<size_t>(sq * kv));
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < kv; ++j)
        tril[static_cast<size_t>(i * kv + j)] = o.fill == "causal" ? (j <= i) : ((i + 2 * j) % 3 != 0 || j == i);
    m.init_f("tril", {1, 1, sq, kv}, tril);
    m.init_f("zero", {}, {0.f});
    m.init_f("neg_inf", {}, {-std::numeric_limits<float>::infinity()});
    m.node("Equal", "eq", {"tril", "zero"}, {"cond"});
    m.node("Where", "fill", {"cond", "neg_inf", s}, {"s_f"});
    s = "s_f";
  }
  if (!o.mask_shape.empty()) {
    m.input("mask", o.mask_shape);
    m.node("Add", "add_mask", o.mask_first ? Strings{"mask", s} : Strings{s, "mask"}, {"s2"});
    s = "s2";
  }
  attr_int(m.node("Softmax", "softmax", {s}, {"p"}), "axis", o.softmax_axis);
  m.node("MatMul", "pv", {"p", "v"}, {"y"});
  m.output("y");
  if (o.scores_output) m.output("p");
  return m;
}

Strings outputs_of(const AttnOptions& o) { return o.scores_output ? Strings{"y", "p"} : Strings{"y"}; }

TEST(FuseAttention, BertStyle) {
  Built on = check_pass(attention({}), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Transpose", "Attention"}));
  EXPECT_EQ(step_names(on.engine).back(), "qk + scale + add_mask + softmax + pv");
  EXPECT_EQ(on.detail, "Attention 1");
}

TEST(FuseAttention, Variants) {
  AttnOptions in_place;  // kt given: the first MatMul's node becomes the Transpose
  in_place.keys = "input";
  AttnOptions transposed;  // k transposed by [0,1,3,2]: the Transpose goes
  transposed.keys = "transpose";
  transposed.scale = "mul";
  transposed.mask_first = true;
  AttnOptions sdpa;  // PyTorch's scaled_dot_product_attention: q and kt scaled, no mask
  sdpa.scale = "sides";
  sdpa.keys = "transpose";
  sdpa.mask_shape = {};
  AttnOptions plain;  // no scale, a full mask, one key/value head for three query heads
  plain.scale = "none";
  plain.mask_shape = {2, 3, 7, 9};
  plain.kv_heads = 1;
  plain.keys = "transpose";
  AttnOptions axis3;
  axis3.softmax_axis = 3;
  for (const AttnOptions& o : {in_place, transposed, sdpa, plain, axis3}) {
    Built on = check_pass(attention(o), kPass, 1, {"y"});
    const Strings ops = step_ops(on.engine);
    EXPECT_EQ(count_of(ops, "Attention"), 1);
    EXPECT_EQ(count_of(ops, "Softmax"), 0);
    EXPECT_EQ(count_of(ops, "MatMul"), 0);
    EXPECT_EQ(count_of(ops, "Transpose"), o.keys == "transpose" ? 0 : 1) << o.keys;
  }
}

TEST(FuseAttention, MaskedFill) {
  AttnOptions causal;  // GPT-2: the causal triangle becomes is_causal
  causal.fill = "causal";
  causal.mask_shape = {};
  causal.q_shape = {1, 3, 9, 8};
  causal.keys = "transpose";
  causal.scale = "mul";
  AttnOptions pattern;  // another constant condition: a bool mask, beside no additive one
  pattern.fill = "pattern";
  pattern.mask_shape = {};
  for (const AttnOptions& o : {causal, pattern}) {
    Built on = check_pass(attention(o), kPass, 1, {"y"});
    EXPECT_EQ(count_of(step_ops(on.engine), "Attention"), 1);
    EXPECT_EQ(count_of(step_ops(on.engine), "Where"), 0);
  }
}

// ---- whole self-attention blocks: the 3-D form and packed Q, K, V ------------------------------

// x [b, s, h * d] -> projections -> heads split (Reshape, Transpose) -> attention -> heads merged
// (Transpose, Reshape) -> output projection -> y, as Hugging Face's BERT exports it (three
// projections with biases, an additive mask) or GPT-2 (one packed projection and a Split, scaled
// by a Mul, no mask).
PassModel self_attention(bool gpt2) {
  const int64_t b = 2, s = 5, h = 2, d = 8, hd = h * d;
  PassModel m(gpt2 ? "gpt2_block" : "bert_block", 17);
  m.input("x", {b, s, hd});
  m.init_i64("heads", {4}, {b, s, h, d});
  m.init_i64("merged", {3}, {b, s, hd});
  auto split_heads = [&](const std::string& x3, const std::string& name) {
    m.node("Reshape", name + "_view", {x3, "heads"}, {name + "4"});
    attr_ints(m.node("Transpose", name + "_heads", {name + "4"}, {name + "h"}), "perm", {0, 2, 1, 3});
  };
  if (gpt2) {
    m.init_rand("w_qkv", {hd, 3 * hd}, -0.5f, 0.5f);
    m.init_rand("b_qkv", {3 * hd});
    m.init_i64("thirds", {3}, {hd, hd, hd});
    m.node("MatMul", "qkv", {"x", "w_qkv"}, {"qkv0"});
    m.node("Add", "qkv_bias", {"qkv0", "b_qkv"}, {"qkv1"});
    attr_int(m.node("Split", "split", {"qkv1", "thirds"}, {"q3", "k3", "v3"}), "axis", 2);
  } else {
    for (const char* n : {"q", "k", "v"}) {
      const std::string w = std::string("w_") + n, bias = std::string("b_") + n;
      m.init_rand(w, {hd, hd}, -0.5f, 0.5f);
      m.init_rand(bias, {hd});
      m.node("MatMul", std::string(n) + "_proj", {"x", w}, {std::string(n) + "0"});
      m.node("Add", std::string(n) + "_bias", {std::string(n) + "0", bias}, {std::string(n) + "3"});
    }
  }
  for (const char* n : {"q", "k", "v"}) split_heads(std::string(n) + "3", n);
  attr_ints(m.node("Transpose", "k_t", {"kh"}, {"kt"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", "qk", {"qh", "kt"}, {"s0"});
  m.init_f("c", {}, {gpt2 ? 0.35f : 2.828f});
  m.node(gpt2 ? "Mul" : "Div", "scale", {"s0", "c"}, {"s1"});
  std::string sc = "s1";
  if (!gpt2) {
    m.input("mask", {b, 1, 1, s});
    m.node("Add", "add_mask", {"s1", "mask"}, {"s2"});
    sc = "s2";
  }
  attr_int(m.node("Softmax", "softmax", {sc}, {"p"}), "axis", -1);
  m.node("MatMul", "pv", {"p", "vh"}, {"y4"});
  attr_ints(m.node("Transpose", "merge", {"y4"}, {"y4t"}), "perm", {0, 2, 1, 3});
  m.node("Reshape", "merge_view", {"y4t", "merged"}, {"y3"});
  m.init_rand("w_o", {hd, hd}, -0.5f, 0.5f);
  m.init_rand("b_o", {hd});
  m.node("MatMul", "o_proj", {"y3", "w_o"}, {"o0"});
  m.node("Add", "o_bias", {"o0", "b_o"}, {"y"});
  m.output("y");
  return m;
}

// The engine of m with every pass, or every pass but fuse-attention.
std::vector<uint8_t> build_with(const PassModel& m, bool on, build::BuildReport* report) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  if (!on) o.disabled_passes.push_back(kPass);
  return build::build_engine(g, o, report);
}

// Every pass on (fuse-epilogue included): with fuse-attention the block is three steps, the packed
// projection, the Attention reading it in place and the output projection; without, the separate
// steps. The outputs agree.
TEST(FuseAttention, SelfAttentionBlocks) {
  for (bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "GPT-2" : "BERT");
    const PassModel m = self_attention(gpt2);
    build::BuildReport report;
    const std::vector<uint8_t> on = build_with(m, true, &report), off = build_with(m, false, nullptr);
    EXPECT_EQ(step_ops(on), (Strings{"FusedMatMul", "Attention", "FusedMatMul"}));
    EXPECT_GT(count_of(step_ops(off), "Transpose"), 0);
    for (const build::PassReport& p : report.passes) {
      if (p.name == kPass)
        EXPECT_EQ(p.detail, gpt2 ? "Attention 1, Attention 3-D 1, Attention packed 1" : "Attention 1, Attention 3-D 1");
      if (p.name == "fuse-siblings" && !gpt2) EXPECT_EQ(p.detail, "FusedMatMul (packed Q, K, V) 3 into 1");
    }
    std::map<std::string, std::vector<float>> feed{{"x", random_vec(2 * 5 * 16, 3)}};
    if (!gpt2) {
      std::vector<float> mask(2 * 5, 0.f);
      mask[4] = mask[8] = mask[9] = -10000.f;
      feed["mask"] = mask;
    }
    auto y_on = run_engine(on, feed, {"y"}), y_off = run_engine(off, feed, {"y"});
    expect_close(y_on["y"], y_off["y"], 1e-5f);
  }
}

// nn.MultiheadAttention (batch_first) as PyTorch exports it: x transposed to [s, b, E], one packed
// projection, the heads taken out by Reshape, Unsqueeze, Transpose, Squeeze and three Gathers,
// q and kt each scaled, an optional padding mask, the heads merged by Transpose and Reshape to
// [s * b, E] rows, the output Gemm, reshaped and transposed back, and the residual Add.
PassModel multihead_export(int64_t b, bool mask, bool in_bias) {
  const int64_t s = 5, h = 2, d = 8, E = h * d;
  PassModel m("mha_block", 17);
  m.input("x", {b, s, E});
  attr_ints(m.node("Transpose", "x_seq_first", {"x"}, {"xt"}), "perm", {1, 0, 2});
  m.init_rand("w_in", {E, 3 * E}, -0.5f, 0.5f);
  m.node("MatMul", "in_proj", {"xt", "w_in"}, {in_bias ? "p0" : "p"});
  if (in_bias) {
    m.init_rand("b_in", {3 * E});
    m.node("Add", "in_bias", {"b_in", "p0"}, {"p"});
  }
  m.init_i64("unflatten", {4}, {s, b, 3, E});
  m.init_i64("axis0", {1}, {0});
  m.init_i64("axis3", {1}, {3});
  m.node("Reshape", "unflatten", {"p", "unflatten"}, {"p4"});
  m.node("Unsqueeze", "unsqueeze", {"p4", "axis0"}, {"p5"});
  attr_ints(m.node("Transpose", "qkv_first", {"p5"}, {"p5t"}), "perm", {3, 1, 2, 0, 4});
  m.node("Squeeze", "squeeze", {"p5t", "axis3"}, {"qkv"});
  m.init_i64("seq_heads", {3}, {s, b * h, d});
  m.init_i64("heads", {4}, {b, h, s, d});
  const char* names[] = {"q", "k", "v"};
  for (int64_t k = 0; k < 3; ++k) {
    const std::string n = names[k];
    m.init_i64("i" + n, {}, {k});
    attr_int(m.node("Gather", "take_" + n, {"qkv", "i" + n}, {n + "3"}), "axis", 0);
    m.node("Reshape", n + "_seq_heads", {n + "3", "seq_heads"}, {n + "_sbh"});
    attr_ints(m.node("Transpose", n + "_batch_heads", {n + "_sbh"}, {n + "_bhs"}), "perm", {1, 0, 2});
    m.node("Reshape", n + "_heads", {n + "_bhs", "heads"}, {n + "h"});
  }
  m.init_f("root_scale", {}, {0.5946f});  // sqrt(1 / sqrt(8))
  m.node("Mul", "scale_q", {"qh", "root_scale"}, {"qs"});
  attr_ints(m.node("Transpose", "k_t", {"kh"}, {"kt"}), "perm", {0, 1, 3, 2});
  m.node("Mul", "scale_k", {"kt", "root_scale"}, {"kts"});
  m.node("MatMul", "qk", {"qs", "kts"}, {"s0"});
  std::string sc = "s0";
  if (mask) {
    m.input("mask", {b, 1, 1, s});
    m.node("Add", "add_mask", {"s0", "mask"}, {"s1"});
    sc = "s1";
  }
  attr_int(m.node("Softmax", "softmax", {sc}, {"pr"}), "axis", -1);
  m.node("MatMul", "pv", {"pr", "vh"}, {"y4"});
  attr_ints(m.node("Transpose", "merge", {"y4"}, {"y4t"}), "perm", {2, 0, 1, 3});
  m.init_i64("rows", {2}, {s * b, E});
  m.node("Reshape", "merge_rows", {"y4t", "rows"}, {"y2"});
  m.init_rand("w_o", {E, E}, -0.5f, 0.5f);
  m.init_rand("b_o", {E});
  attr_int(m.node("Gemm", "out_proj", {"y2", "w_o", "b_o"}, {"o2"}), "transB", 1);
  m.init_i64("seq_first", {3}, {s, b, E});
  m.node("Reshape", "unrows", {"o2", "seq_first"}, {"o3"});
  attr_ints(m.node("Transpose", "batch_first", {"o3"}, {"o3t"}), "perm", {1, 0, 2});
  m.node("Add", "residual", {"x", "o3t"}, {"y"});
  m.output("y");
  return m;
}

// The export's block becomes the packed projection, the Attention reading it in place and the
// output projection: no Transpose, Gather or copy left; the outputs agree with the pass off.
TEST(FuseAttention, MultiheadAttentionExport) {
  for (int64_t b : {1, 3})
    for (bool mask : {false, true})
      for (bool in_bias : {false, true}) {
        SCOPED_TRACE("batch " + std::to_string(b) + (mask ? ", mask" : "") + (in_bias ? ", in_proj bias" : ""));
        const PassModel m = multihead_export(b, mask, in_bias);
        build::BuildReport report;
        const std::vector<uint8_t> on = build_with(m, true, &report), off = build_with(m, false, nullptr);
        const Strings ops = step_ops(on);
        EXPECT_EQ(count_of(ops, "Attention"), 1);
        EXPECT_EQ(count_of(ops, "Transpose"), 0);
        EXPECT_EQ(count_of(ops, "Gather"), 0);
        EXPECT_LE(ops.size(), 3u) << ::testing::PrintToString(ops);
        for (const build::PassReport& p : report.passes)
          if (p.name == kPass) EXPECT_EQ(p.detail, "Attention 1, Attention packed (MultiheadAttention) 1");
        std::map<std::string, std::vector<float>> feed{{"x", random_vec(static_cast<size_t>(b * 5 * 16), 3)}};
        if (mask) {
          std::vector<float> mv(static_cast<size_t>(b * 5), 0.f);
          mv[4] = -10000.f;
          if (b > 1) mv[8] = mv[9] = -10000.f;
          feed["mask"] = mv;
        }
        auto y_on = run_engine(on, feed, {"y"}), y_off = run_engine(off, feed, {"y"});
        expect_close(y_on["y"], y_off["y"], 1e-5f);
      }
}

// Swin's window attention as torchvision writes it: x [windows, n, C] -> one packed projection ->
// Reshape [windows, n, 3, h, d] -> Transpose(2 0 3 1 4) -> Gathers; q scaled; the scores plus the
// relative position bias [h, n, n]; in a shifted block the window mask added through a 5-D view
// [1, windows, h, n, n]; Softmax; heads merged by Transpose(0 2 1 3) and Reshape; the output
// projection.
PassModel window_attention(bool shifted, int64_t images = 1, bool position_bias = true) {
  const int64_t w = 4, n = 9, h = 2, d = 4, C = h * d, per_image = w / images;
  PassModel m("swin_block", 17);
  m.input("x", {w, n, C});
  m.init_rand("w_qkv", {C, 3 * C}, -0.5f, 0.5f);
  m.init_rand("b_qkv", {3 * C});
  m.node("MatMul", "qkv", {"x", "w_qkv"}, {"p0"});
  m.node("Add", "qkv_bias", {"p0", "b_qkv"}, {"p"});
  m.init_i64("heads5", {5}, {w, n, 3, h, d});
  m.node("Reshape", "split_heads", {"p", "heads5"}, {"p5"});
  attr_ints(m.node("Transpose", "qkv_first", {"p5"}, {"qkv"}), "perm", {2, 0, 3, 1, 4});
  const char* names[] = {"q", "k", "v"};
  for (int64_t k = 0; k < 3; ++k) {
    m.init_i64(std::string("i") + names[k], {}, {k});
    attr_int(m.node("Gather", std::string("take_") + names[k], {"qkv", std::string("i") + names[k]},
                    {std::string(names[k]) + "h"}),
             "axis", 0);
  }
  m.init_f("scale", {}, {0.5f});
  m.node("Mul", "scale_q", {"qh", "scale"}, {"qs"});
  attr_ints(m.node("Transpose", "k_t", {"kh"}, {"kt"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", "qk", {"qs", "kt"}, {position_bias ? "s0" : "s1"});
  if (position_bias) {
    m.init_rand("rel_bias", {h, n, n}, -1.f, 1.f);
    m.node("Add", "add_bias", {"s0", "rel_bias"}, {"s1"});
  }
  std::string sc = "s1";
  if (shifted) {
    m.init_i64("view5", {5}, {images, per_image, h, n, n});
    m.init_i64("view4", {4}, {w, h, n, n});
    // -100 between tokens from different parts of a shifted window: another pattern per window and row.
    std::vector<float> mask(static_cast<size_t>(per_image * n * n), 0.f);
    for (int64_t win = 0; win < per_image; ++win)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < n; ++c)
          if ((win + r * n + c) % 3 == 0 || (win + r) % 4 == c % 4)
            mask[static_cast<size_t>((win * n + r) * n + c)] = -100.f;
    m.init_f("window_mask", {1, per_image, 1, n, n}, mask);
    m.node("Reshape", "scores5", {"s1", "view5"}, {"s5"});
    m.node("Add", "add_window_mask", {"s5", "window_mask"}, {"s6"});
    m.node("Reshape", "scores4", {"s6", "view4"}, {"s7"});
    sc = "s7";
  }
  attr_int(m.node("Softmax", "softmax", {sc}, {"pr"}), "axis", -1);
  m.node("MatMul", "pv", {"pr", "vh"}, {"y4"});
  attr_ints(m.node("Transpose", "merge", {"y4"}, {"y4t"}), "perm", {0, 2, 1, 3});
  m.init_i64("merged", {3}, {w, n, C});
  m.node("Reshape", "merge_view", {"y4t", "merged"}, {"y3"});
  m.init_rand("w_o", {C, C}, -0.5f, 0.5f);
  m.init_rand("b_o", {C});
  m.node("MatMul", "proj", {"y3", "w_o"}, {"o0"});
  m.node("Add", "proj_bias", {"o0", "b_o"}, {"y"});
  m.output("y");
  return m;
}

// The window block becomes the packed projection, the Attention (its mask the bias, or the bias and
// the window mask as one constant; with two images the window mask repeats along the batch:
// mask_period; with four, one window an image, it broadcasts) and the output projection; the
// outputs agree with the pass off.
TEST(FuseAttention, SwinWindowAttention) {
  for (const auto& [shifted, images] : {std::pair{false, 1}, {true, 1}, {true, 2}, {true, 4}}) {
    SCOPED_TRACE(std::string(shifted ? "shifted windows" : "windows") + ", images " + std::to_string(images));
    const PassModel m = window_attention(shifted, images);
    build::BuildReport report;
    const std::vector<uint8_t> on = build_with(m, true, &report), off = build_with(m, false, nullptr);
    EXPECT_EQ(step_ops(on), (Strings{"FusedMatMul", "Attention", "FusedMatMul"}));
    for (const build::PassReport& p : report.passes)
      if (p.name == kPass)
        EXPECT_EQ(p.detail, !shifted ? "Attention 1, Attention packed (batch-first heads) 1"
                            : images == 1
                                ? "Attention 1, Attention packed (batch-first heads) 1, window mask 1"
                                : "Attention 1, Attention packed (batch-first heads) 1, window mask along the batch 1");
    for (const StepInfo& st : Engine::from_bytes(on)->summary().steps)
      if (st.op == "Attention") EXPECT_EQ(st.attrs.find("mask_period") != std::string::npos, shifted && images == 2);
    std::map<std::string, std::vector<float>> feed{{"x", random_vec(4 * 9 * 8, 5)}};
    auto y_on = run_engine(on, feed, {"y"}), y_off = run_engine(off, feed, {"y"});
    expect_close(y_on["y"], y_off["y"], 1e-5f);
    // The packed (and periodic) Attention is Kiln's own form: exporting the optimized graph says so
    // (fuse-epilogue off: its FusedMatMul would be refused first).
    graph::Graph g = m.import();
    build::BuildOptions o;
    o.disabled_passes = {"fuse-epilogue"};
    build::build_engine(g, o);
    try {
      graph::export_onnx_bytes(g);
      ADD_FAILURE() << "exported Kiln's own Attention form";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Kiln's own"), std::string::npos) << e.what();
    }
  }
}

// Shifted windows of two images without a position bias: nothing for window_mask_at to fold;
// fuse-attention reads the 5-D view's mask as the periodic mask directly.
TEST(FuseAttention, SwinWindowMaskWithoutBias) {
  const PassModel m = window_attention(true, 2, false);
  build::BuildReport report;
  const std::vector<uint8_t> on = build_with(m, true, &report), off = build_with(m, false, nullptr);
  EXPECT_EQ(step_ops(on), (Strings{"FusedMatMul", "Attention", "FusedMatMul"}));
  for (const StepInfo& st : Engine::from_bytes(on)->summary().steps)
    if (st.op == "Attention") EXPECT_NE(st.attrs.find("mask_period"), std::string::npos) << st.attrs;
  std::map<std::string, std::vector<float>> feed{{"x", random_vec(4 * 9 * 8, 6)}};
  auto y_on = run_engine(on, feed, {"y"}), y_off = run_engine(off, feed, {"y"});
  expect_close(y_on["y"], y_off["y"], 1e-5f);
}

// A chain that does not take the heads from P as the Attention reads them (the Gathers swapped:
// k read as q) stays as it is.
TEST(FuseAttentionGuards, MultiheadAttentionHeadsOutOfOrder) {
  PassModel m = multihead_export(2, false, true);
  for (onnx::NodeProto& n : *m.g()->mutable_node())
    if (n.name() == "take_q")
      n.set_input(1, "ik");
    else if (n.name() == "take_k")
      n.set_input(1, "iq");
  graph::Graph g = m.import();
  build::BuildReport report;
  const std::vector<uint8_t> on = build::build_engine(g, build::BuildOptions{}, &report);
  EXPECT_EQ(count_of(step_ops(on), "Attention"), 1);
  EXPECT_GT(count_of(step_ops(on), "Gather") + count_of(step_ops(on), "Transpose"), 0);
}

// ---- guards: nothing fuses -------------------------------------------------------------------

void expect_kept(const AttnOptions& o) {
  Built on = check_pass(attention(o), kPass, 0, outputs_of(o));
  EXPECT_EQ(count_of(step_ops(on.engine), "Attention"), 0);
  EXPECT_EQ(count_of(step_ops(on.engine), "Softmax"), 1);
}

TEST(FuseAttentionGuards, SoftmaxOverAnotherAxis) {
  AttnOptions o;
  o.softmax_axis = 2;
  o.q_shape = {2, 3, 9, 8};  // q_len = kv_len: the shapes stay valid
  expect_kept(o);
}

TEST(FuseAttentionGuards, ProbabilitiesReadElsewhere) {
  AttnOptions o;
  o.scores_output = true;
  expect_kept(o);
}

TEST(FuseAttentionGuards, MaskEnlargesTheScores) {
  // A mask [4, 1, 1, 7, 9] would broadcast the scores to rank 5: not an attention mask.
  AttnOptions o;
  o.mask_shape = {4, 1, 1, 7, 9};
  Built on = check_pass(attention(o), kPass, 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Attention"), 0);
}

TEST(FuseAttentionGuards, MaskedFillAndAnAdditiveMask) {
  AttnOptions o;  // a bool mask from the fill and an additive one: Attention takes one
  o.fill = "pattern";
  expect_kept(o);
}

TEST(FuseAttentionGuards, NotRankFour) {
  AttnOptions o;
  o.q_shape = {6, 7, 8};
  o.keys = "input";
  o.mask_shape = {};
  PassModel m("attention3", 17);
  m.input("q", {6, 7, 8});
  m.input("kt", {6, 8, 9});
  m.input("v", {6, 9, 5});
  m.node("MatMul", "qk", {"q", "kt"}, {"s"});
  attr_int(m.node("Softmax", "softmax", {"s"}, {"p"}), "axis", -1);
  m.node("MatMul", "pv", {"p", "v"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Attention"), 0);
}

}  // namespace
}  // namespace kiln::passes
