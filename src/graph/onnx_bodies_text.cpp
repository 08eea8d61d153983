// Kiln's bodies for TfIdfVectorizer (onnx_kiln_bodies.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx_kiln_bodies.h"

namespace kiln::graph::detail {

// TfIdfVectorizer over integer tokens (X [L] or [N, L]): for each n-gram length and skip distance
// d (only d = 1 for unigrams, as onnxruntime counts them once), the n slices X[:, j d : ...] are
// compared with all pool n-grams of that length at once ([N, positions, G]), matched positions
// counted, weighted (TF, IDF or TFIDF) and gathered into the positions ngram_indexes gives.
void tfidf_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  auto attr_s = [&](const std::string& name, const std::string& dflt) {
    const onnx::AttributeProto* a = find_attr(n, name);
    return a != nullptr ? a->s() : dflt;
  };
  if (find_attr(n, "pool_strings") != nullptr)
    throw Error("TfIdfVectorizer: string n-grams (pool_strings) are not supported; Kiln has no string tensors");
  const std::string mode = attr_s("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") throw Error("TfIdfVectorizer: mode should be TF, IDF or TFIDF");
  const int64_t min_n = attr_i(n, "min_gram_length", 0), max_n = attr_i(n, "max_gram_length", 0),
                skips = attr_i(n, "max_skip_count", 0);
  const std::vector<int64_t> pool = attr_ints(n, "pool_int64s"), counts = attr_ints(n, "ngram_counts"),
                             indexes = attr_ints(n, "ngram_indexes");
  std::vector<float> weights;
  if (const onnx::AttributeProto* w = find_attr(n, "weights")) weights.assign(w->floats().begin(), w->floats().end());
  if (min_n < 1 || max_n < min_n || max_n > static_cast<int64_t>(counts.size()) || skips < 0 || skips > 64)
    throw Error("TfIdfVectorizer: min_gram_length " + std::to_string(min_n) + ", max_gram_length " +
                std::to_string(max_n) + ", max_skip_count " + std::to_string(skips) + " and " +
                std::to_string(counts.size()) + " ngram_counts do not fit together");
  // The pool's n-grams by length: [start, end) in pool for length k + 1.
  std::vector<std::vector<std::vector<int64_t>>> grams(counts.size());
  size_t total = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t start = counts[k], end = k + 1 < counts.size() ? counts[k + 1] : static_cast<int64_t>(pool.size());
    const int64_t len = static_cast<int64_t>(k) + 1;
    if (start < 0 || end < start || end > static_cast<int64_t>(pool.size()) || (end - start) % len != 0)
      throw Error("TfIdfVectorizer: ngram_counts " + ints_text(counts) + " do not split pool_int64s (" +
                  std::to_string(pool.size()) + " values) into n-grams");
    for (int64_t g = start; g < end; g += len) grams[k].emplace_back(pool.begin() + g, pool.begin() + g + len);
    total += grams[k].size();
  }
  if (indexes.size() != total || (!weights.empty() && weights.size() != total))
    throw Error("TfIdfVectorizer: the pool holds " + std::to_string(total) + " n-grams, ngram_indexes has " +
                std::to_string(indexes.size()) + (weights.empty() ? "" : " and weights " + std::to_string(weights.size())));
  int64_t outputs = 0;
  for (int64_t i : indexes) {
    if (i < 0 || i >= (1 << 20)) throw Error("TfIdfVectorizer: ngram_indexes value " + std::to_string(i) + " is out of range");
    outputs = std::max(outputs, i + 1);
  }
  std::vector<int64_t> sorted = indexes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw Error("TfIdfVectorizer: ngram_indexes names an output position twice");
  if (total * static_cast<size_t>(skips + 1) > 65536)
    throw Error("TfIdfVectorizer: " + std::to_string(total) + " n-grams with " + std::to_string(skips + 1) +
                " skip distances are more than Kiln's body handles (65536 comparisons per position)");
  size_t slices = 0;  // the body's size: one slice per item of each counted length and skip distance
  for (size_t k = 0; k < grams.size(); ++k)
    if (!grams[k].empty() && static_cast<int64_t>(k) + 1 >= min_n && static_cast<int64_t>(k) + 1 <= max_n)
      slices += (k + 1) * (k == 0 ? 1 : static_cast<size_t>(skips + 1));
  if (slices > 4096)
    throw Error("TfIdfVectorizer: n-grams up to length " + std::to_string(max_n) + " with " +
                std::to_string(skips + 1) + " skip distances are more than Kiln's body handles");
  std::string t = R"(
    last = Constant <value_ints = [-1]> ()
    L = Shape <start = -1> (X)
    x_shape = Concat <axis = 0> (last, L)
    X64 = Cast <to = 7> (X)
    x2 = Reshape(X64, x_shape)
    zero = Constant <value_ints = [0]> ()
    one = Constant <value_ints = [1]> ()
    axis1 = Constant <value_ints = [1]> ()
    axis2 = Constant <value_ints = [2]> ()
  )";
  std::vector<std::string> per_length;  // [N, G_k] counts for each length in [min_n, max_n]
  std::vector<int64_t> order;           // pool positions of the n-grams in per_length's order
  size_t pool_pos = 0;
  for (size_t k = 0; k < grams.size(); ++k) {
    const int64_t len = static_cast<int64_t>(k) + 1;
    const size_t first = pool_pos;
    pool_pos += grams[k].size();
    if (len < min_n || len > max_n || grams[k].empty()) continue;
    const std::string g = "g" + std::to_string(len);
    for (int64_t j = 0; j < len; ++j) {  // the j-th item of every n-gram of this length: [1, 1, G]
      std::vector<int64_t> items;
      for (const auto& gram : grams[k]) items.push_back(gram[j]);
      t += g + "_item" + std::to_string(j) + " = Constant <value_ints = " + ints_text(items) + "> ()\n";
    }
    std::vector<std::string> per_skip;
    for (int64_t d = 1; d <= (len == 1 ? 1 : skips + 1); ++d) {
      const std::string p = g + "_d" + std::to_string(d);
      std::string match;
      for (int64_t j = 0; j < len; ++j) {
        const std::string q = p + "_j" + std::to_string(j);
        t += q + "_start = Constant <value_ints = [" + std::to_string(j * d) + "]> ()\n";
        t += q + "_back = Constant <value_ints = [" + std::to_string((len - 1 - j) * d) + "]> ()\n";
        t += q + "_end0 = Sub(L, " + q + "_back)\n" + q + "_end = Max(" + q + "_end0, zero)\n";
        t += q + "_x = Slice(x2, " + q + "_start, " + q + "_end, axis1)\n";
        t += q + "_x3 = Unsqueeze(" + q + "_x, axis2)\n";
        t += q + "_eq = Equal(" + q + "_x3, " + g + "_item" + std::to_string(j) + ")\n";
        if (match.empty()) {
          match = q + "_eq";
        } else {
          t += q + "_and = And(" + match + ", " + q + "_eq)\n";
          match = q + "_and";
        }
      }
      t += p + "_hits = Cast <to = 1> (" + match + ")\n";
      t += p + "_count = ReduceSum <keepdims = 0> (" + p + "_hits, axis1)\n";
      per_skip.push_back(p + "_count");
    }
    std::string sum = per_skip[0];
    for (size_t i = 1; i < per_skip.size(); ++i) {
      t += g + "_sum" + std::to_string(i) + " = Add(" + sum + ", " + per_skip[i] + ")\n";
      sum = g + "_sum" + std::to_string(i);
    }
    per_length.push_back(sum);
    for (size_t i = 0; i < grams[k].size(); ++i) order.push_back(static_cast<int64_t>(first + i));
  }
  std::string all;
  if (per_length.empty()) {  // no n-gram of a counted length: all zeros
    t += "N = Shape <end = 1> (x2)\nz_shape = Concat <axis = 0> (N, one)\nzeros_i = ConstantOfShape(z_shape)\n"
         "tf = Cast <to = 1> (zeros_i)\n";
    order.clear();
    all = "tf";
  } else if (per_length.size() == 1) {
    all = per_length[0];
  } else {
    t += "tf = Concat <axis = 1> (";
    for (size_t i = 0; i < per_length.size(); ++i) t += (i ? ", " : "") + per_length[i];
    t += ")\n";
    all = "tf";
  }
  // Weighting per n-gram, then a zero column appended and each output position gathered from the
  // n-gram that ngram_indexes sends there (or from the zero column).
  const size_t G = order.empty() ? 1 : order.size();
  std::vector<float> w(G, 1.0f);
  std::vector<int64_t> source(static_cast<size_t>(outputs), static_cast<int64_t>(G));
  for (size_t i = 0; i < order.size(); ++i) {
    if (!weights.empty()) w[i] = weights[static_cast<size_t>(order[i])];
    source[static_cast<size_t>(indexes[static_cast<size_t>(order[i])])] = static_cast<int64_t>(i);
  }
  std::string wt = "[";
  for (size_t i = 0; i < w.size(); ++i) wt += (i ? ", " : "") + num_text(w[i]);
  t += "w = Constant <value_floats = " + wt + "]> ()\n";
  if (mode == "TF") {
    t += "weighted = Identity(" + all + ")\n";
  } else if (mode == "IDF") {
    t += "zero_f = Constant <value_float = 0.0> ()\npresent = Greater(" + all +
         ", zero_f)\npresent_f = Cast <to = 1> (present)\nweighted = Mul(present_f, w)\n";
  } else {
    t += "weighted = Mul(" + all + ", w)\n";
  }
  t += R"(
    N = Shape <end = 1> (x2)
    zero_col_shape = Concat <axis = 0> (N, one)
    zero_col_i = ConstantOfShape(zero_col_shape)
    zero_col = Cast <to = 1> (zero_col_i)
    padded = Concat <axis = 1> (weighted, zero_col)
  )";
  t += "source = Constant <value_ints = " + ints_text(source) + "> ()\n";
  t += "Y2 = Gather <axis = 1> (padded, source)\n";
  t += "lead = Shape <end = -1> (X)\nC = Constant <value_ints = [" + std::to_string(outputs) +
       "]> ()\nY_shape = Concat <axis = 0> (lead, C)\nY = Reshape(Y2, Y_shape)\n";
  make_body(f, "TfIdfVectorizer", {"X"}, {"Y"}, t);
}

}  // namespace kiln::graph::detail
