// Kiln's bodies for ai.onnx.preview.training's optimizers: one update step, elementwise, per the
// spec's formulas. Inputs R (learning rate), T (step count), then the n tensors X, the n gradients G
// and the n (or 2n, Adam) states; outputs the new X then the new states.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx_kiln_bodies.h"

namespace kiln::graph::detail {

namespace {

// A constant in the type of the first tensor updated (float, double or float16).
std::string float_const(const std::string& name, float v) {
  return name + "_f = Constant <value_float = " + num_text(v) + "> ()\n" + name + " = CastLike(" + name + "_f, X0)\n";
}
// The number of tensors a call updates: (inputs - 2) / per_tensor, checked.
int optimizer_tensors(const onnx::NodeProto& n, int per_tensor) {
  const int k = n.input_size() - 2;
  if (k <= 0 || k % per_tensor != 0 || n.output_size() > k / per_tensor * (per_tensor - 1))
    throw Error(n.op_type() + ": expects R, T and " + std::to_string(per_tensor) + " inputs per tensor (X, G, state" +
                (per_tensor == 4 ? "s" : "") + "), and at most " + std::to_string(per_tensor - 1) +
                " outputs per tensor; got " + std::to_string(n.input_size()) + " inputs and " +
                std::to_string(n.output_size()) + " outputs");
  return k / per_tensor;
}
std::vector<std::string> names(const std::string& prefix, int count) {
  std::vector<std::string> v;
  for (int i = 0; i < count; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

void adagrad_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int k = optimizer_tensors(n, 3);
  std::string t = float_const("decay", attr_f(n, "decay_factor", 0.0f)) + float_const("eps", attr_f(n, "epsilon", 1e-6f)) +
                  float_const("norm", attr_f(n, "norm_coefficient", 0.0f)) + float_const("one", 1.0f) + R"(
    R_x = CastLike(R, X0)
    T_f = CastLike(T, X0)
    decayed = Mul(T_f, decay)
    denom = Add(decayed, one)
    r = Div(R_x, denom)
  )";
  for (int i = 0; i < k; ++i) {
    const std::string s = std::to_string(i);
    t += "nx" + s + " = Mul(norm, X" + s + ")\ng" + s + " = Add(nx" + s + ", G" + s + ")\n";
    t += "g2_" + s + " = Mul(g" + s + ", g" + s + ")\nH_new" + s + " = Add(H" + s + ", g2_" + s + ")\n";
    t += "root" + s + " = Sqrt(H_new" + s + ")\nadaptive" + s + " = Add(root" + s + ", eps)\n";
    t += "rg" + s + " = Mul(r, g" + s + ")\nstep" + s + " = Div(rg" + s + ", adaptive" + s + ")\n";
    t += "X_new" + s + " = Sub(X" + s + ", step" + s + ")\n";
  }
  make_body(f, "Adagrad", concat(concat(concat({"R", "T"}, names("X", k)), names("G", k)), names("H", k)),
            concat(names("X_new", k), names("H_new", k)), t);
}

void momentum_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int k = optimizer_tensors(n, 3);
  auto mode = find_attr(n, "mode");
  const std::string m = mode != nullptr ? mode->s() : "standard";
  if (m != "standard" && m != "nesterov") throw Error("Momentum: mode '" + m + "' is not standard or nesterov");
  if (find_attr(n, "alpha") == nullptr || find_attr(n, "beta") == nullptr)
    throw Error("Momentum: attributes 'alpha' and 'beta' are required");
  std::string t = float_const("alpha", attr_f(n, "alpha", 0.0f)) + float_const("beta", attr_f(n, "beta", 0.0f)) +
                  float_const("norm", attr_f(n, "norm_coefficient", 0.0f)) + float_const("one", 1.0f) + R"(
    R_x = CastLike(R, X0)
    zero_i = Constant <value_int = 0> ()
    started = Greater(T, zero_i)
    beta_t = Where(started, beta, one)
  )";
  for (int i = 0; i < k; ++i) {
    const std::string s = std::to_string(i);
    t += "nx" + s + " = Mul(norm, X" + s + ")\ng" + s + " = Add(nx" + s + ", G" + s + ")\n";
    t += "av" + s + " = Mul(alpha, V" + s + ")\nbg" + s + " = Mul(beta_t, g" + s + ")\nV_new" + s + " = Add(av" + s +
         ", bg" + s + ")\n";
    if (m == "standard") {
      t += "dir" + s + " = Identity(V_new" + s + ")\n";
    } else {
      t += "av_new" + s + " = Mul(alpha, V_new" + s + ")\ndir" + s + " = Add(g" + s + ", av_new" + s + ")\n";
    }
    t += "step" + s + " = Mul(R_x, dir" + s + ")\nX_new" + s + " = Sub(X" + s + ", step" + s + ")\n";
  }
  make_body(f, "Momentum", concat(concat(concat({"R", "T"}, names("X", k)), names("G", k)), names("V", k)),
            concat(names("X_new", k), names("V_new", k)), t);
}

void adam_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int k = optimizer_tensors(n, 4);
  std::string t = float_const("alpha", attr_f(n, "alpha", 0.9f)) + float_const("beta", attr_f(n, "beta", 0.999f)) +
                  float_const("eps", attr_f(n, "epsilon", 1e-6f)) + float_const("norm", attr_f(n, "norm_coefficient", 0.0f)) +
                  float_const("post", attr_f(n, "norm_coefficient_post", 0.0f)) + float_const("one", 1.0f) + R"(
    one_m_alpha = Sub(one, alpha)
    one_m_beta = Sub(one, beta)
    keep = Sub(one, post)
    zero_i = Constant <value_int = 0> ()
    started = Greater(T, zero_i)
    T_f = CastLike(T, X0)
    R_x = CastLike(R, X0)
    alpha_t = Pow(alpha, T_f)
    beta_t = Pow(beta, T_f)
    bias_b = Sub(one, beta_t)
    bias_b_root = Sqrt(bias_b)
    bias_a = Sub(one, alpha_t)
    bias = Div(bias_b_root, bias_a)
    R_bias = Mul(R_x, bias)
    r = Where(started, R_bias, R_x)
  )";
  for (int i = 0; i < k; ++i) {
    const std::string s = std::to_string(i);
    t += "nx" + s + " = Mul(norm, X" + s + ")\ng" + s + " = Add(nx" + s + ", G" + s + ")\n";
    t += "av" + s + " = Mul(alpha, V" + s + ")\nag" + s + " = Mul(one_m_alpha, g" + s + ")\nV_new" + s + " = Add(av" +
         s + ", ag" + s + ")\n";
    t += "g2_" + s + " = Mul(g" + s + ", g" + s + ")\nbh" + s + " = Mul(beta, H" + s + ")\nbg" + s +
         " = Mul(one_m_beta, g2_" + s + ")\nH_new" + s + " = Add(bh" + s + ", bg" + s + ")\n";
    t += "root" + s + " = Sqrt(H_new" + s + ")\nden" + s + " = Add(root" + s + ", eps)\n";
    t += "rv" + s + " = Mul(r, V_new" + s + ")\nstep" + s + " = Div(rv" + s + ", den" + s + ")\nx1_" + s + " = Sub(X" +
         s + ", step" + s + ")\nX_new" + s + " = Mul(x1_" + s + ", keep)\n";
  }
  make_body(f, "Adam",
            concat(concat(concat(concat({"R", "T"}, names("X", k)), names("G", k)), names("V", k)), names("H", k)),
            concat(concat(names("X_new", k), names("V_new", k)), names("H_new", k)), t);
}

}  // namespace kiln::graph::detail
