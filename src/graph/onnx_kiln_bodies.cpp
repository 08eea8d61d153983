// Kiln's own function bodies, for op types ONNX defines without one (onnx_functions.cpp expands
// them). Written in ONNX's text syntax at opset 17 and built per node, from its attributes (as
// ONNX's context-dependent functions are). Shapes enter as Shape ops, which the builder folds once
// the input shapes are bound, so each body becomes a few kernels and constants.
#include <charconv>
#include <map>

#include "graph/onnx_kiln_bodies.h"

namespace kiln::graph::detail {

int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->i() : dflt;
}
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}
std::string num_text(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
  return s;
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
bool has_input(const onnx::NodeProto& n, int i) { return n.input_size() > i && !n.input(i).empty(); }

void make_body(onnx::FunctionProto& f, const std::string& op, const std::vector<std::string>& inputs,
               const std::vector<std::string>& outputs, const std::string& text) {
  f.set_name(op);
  f.set_domain("");
  for (const auto& i : inputs) f.add_input(i);
  for (const auto& o : outputs) f.add_output(o);
  auto* o = f.add_opset_import();
  o->set_domain("");
  o->set_version(kKilnBodyOpset);
  onnx::FunctionBuilder(f).Add(text.c_str());
}
float attr_f(const onnx::NodeProto& n, const std::string& name, float dflt) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->f() : dflt;
}

std::string body_key(const std::string& domain, const std::string& op_type) {
  return default_domain(domain) ? op_type : domain + "::" + op_type;
}

const std::map<std::string, KilnBody>& kiln_bodies() {
  static const std::map<std::string, KilnBody> bodies = {
      {"DFT", {dft_body, "y = DFT <onesided = 1> (x, length)"}},
      {"GridSample", {grid_sample_body, "y = GridSample <mode = \"bicubic\"> (x, grid)"}},
      {"MaxUnpool", {max_unpool_body, "y = MaxUnpool <kernel_shape = [2, 2]> (x, i, shape)"}},
      {"MelWeightMatrix", {mel_weight_matrix_body, "y = MelWeightMatrix (m, l, r, lo, hi)"}},
      {"ReverseSequence", {reverse_sequence_body, "y = ReverseSequence (x, lens)"}},
      {"RoiAlign", {roi_align_body, "y = RoiAlign <sampling_ratio = 2, mode = \"max\"> (x, rois, batch)"}},
      {"STFT", {stft_body, "y = STFT (x, step, window, length)"}},
      {"TfIdfVectorizer",
       {tfidf_body, "y = TfIdfVectorizer <mode = \"TFIDF\", min_gram_length = 1, max_gram_length = 2, "
                    "max_skip_count = 1, pool_int64s = [1, 2, 3], ngram_counts = [0, 1], ngram_indexes = [0, 1]> (x)"}},
      {"ai.onnx.preview.training::Adagrad", {adagrad_body, "y, h = Adagrad (r, t, x, g, h)"}},
      {"ai.onnx.preview.training::Adam", {adam_body, "y, v, h = Adam (r, t, x, g, v, h)"}},
      {"ai.onnx.preview.training::Momentum",
       {momentum_body, "y, v = Momentum <alpha = 0.5, beta = 0.5, mode = \"nesterov\"> (r, t, x, g, v)"}},
  };
  return bodies;
}

}  // namespace kiln::graph::detail
