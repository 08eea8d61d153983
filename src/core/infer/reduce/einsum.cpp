// Shape inference of the reduce family's Einsum, and the equation parsing (parse_einsum,
// core/infer/reduce_util.h) its CPU and CUDA kernels share.
#include <algorithm>
#include <string>

#include "core/infer/reduce/reduce_internal.h"
#include "core/infer/reduce_util.h"

namespace kiln {

namespace {

struct Term {
  std::vector<int> letters;  // letter labels in order; kEllipsisMark where "..." stands
  bool has_ellipsis = false;
  int letter_count = 0;
};
constexpr int kEllipsisMark = -1;

int letter_label(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

// ASCII order of labels, as numpy's implicit output uses: 'A'..'Z' before 'a'..'z'.
int ascii_of(int label) { return label < 26 ? 'a' + label : 'A' + (label - 26); }

[[noreturn]] void bad(std::string_view eq, const std::string& why) {
  throw Error("Einsum equation \"" + std::string(eq) + "\": " + why);
}

Term parse_term(std::string_view eq, std::string_view s) {
  Term t;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '.') {
      if (s.substr(i, 3) != "...") bad(eq, "'.' must be part of an ellipsis \"...\"");
      if (t.has_ellipsis) bad(eq, "a term has more than one ellipsis");
      t.has_ellipsis = true;
      t.letters.push_back(kEllipsisMark);
      i += 3;
      continue;
    }
    int l = letter_label(c);
    if (l < 0) bad(eq, std::string("invalid character '") + c + "' (only letters, ',', '->' and '...' are allowed)");
    t.letters.push_back(l);
    ++t.letter_count;
    ++i;
  }
  return t;
}

}  // namespace

EinsumPlan parse_einsum(std::string_view equation, std::span<const TensorView> inputs) {
  std::string eq;
  for (char c : equation)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') eq.push_back(c);
  if (eq.empty()) bad(equation, "empty equation");
  std::string_view lhs = eq, rhs;
  bool explicit_out = false;
  if (size_t arrow = eq.find("->"); arrow != std::string::npos) {
    lhs = std::string_view(eq).substr(0, arrow);
    rhs = std::string_view(eq).substr(arrow + 2);
    explicit_out = true;
  }
  if (rhs.find('-') != std::string_view::npos || rhs.find('>') != std::string_view::npos ||
      lhs.find('-') != std::string_view::npos || lhs.find('>') != std::string_view::npos)
    bad(equation, "misplaced '-' or '>' (one \"->\" at most)");
  if (rhs.find(',') != std::string_view::npos) bad(equation, "the output term cannot contain ','");

  std::vector<Term> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(equation, lhs.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (terms.size() != inputs.size())
    bad(equation, "has " + std::to_string(terms.size()) + " input terms but the node has " +
                      std::to_string(inputs.size()) + " inputs");

  EinsumPlan plan;
  for (size_t i = 0; i < terms.size(); ++i) {
    int64_t rank = static_cast<int64_t>(inputs[i].rank());
    const Term& t = terms[i];
    if (t.has_ellipsis ? rank < t.letter_count : rank != t.letter_count)
      bad(equation, "term " + std::to_string(i) + " has " + std::to_string(t.letter_count) + " letters" +
                        (t.has_ellipsis ? " and an ellipsis" : "") + " but input " + std::to_string(i) + " has rank " +
                        std::to_string(rank));
    if (t.has_ellipsis) plan.ell_rank = std::max<int>(plan.ell_rank, static_cast<int>(rank - t.letter_count));
  }
  plan.label_dims.assign(EinsumPlan::kEllipsisBase + plan.ell_rank, -1);
  std::vector<int> letter_count(EinsumPlan::kEllipsisBase, 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const auto shape = inputs[i].shape;
    int e = static_cast<int>(shape.size()) - t.letter_count;
    std::vector<int>& labels = plan.in_labels.emplace_back();
    for (int l : t.letters) {
      if (l != kEllipsisMark) {
        ++letter_count[l];
        labels.push_back(l);
        continue;
      }
      for (int j = 0; j < e; ++j) labels.push_back(EinsumPlan::kEllipsisBase + plan.ell_rank - e + j);
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      int l = labels[d];
      int64_t& known = plan.label_dims[l];
      int64_t dim = shape[d];
      if (l >= EinsumPlan::kEllipsisBase) {  // ellipsis dims broadcast numpy-style
        if (known == -1 || known == 1)
          known = dim;
        else if (dim != 1 && dim != known)
          bad(equation, "ellipsis dimensions of input " + std::to_string(i) + " cannot be broadcast (" +
                            std::to_string(dim) + " vs " + std::to_string(known) + ")");
      } else if (known == -1) {
        known = dim;
      } else if (known != dim) {
        bad(equation, std::string("label '") + static_cast<char>(ascii_of(l)) + "' has dimension " +
                          std::to_string(dim) + " in input " + std::to_string(i) + " but " + std::to_string(known) +
                          " elsewhere");
      }
    }
  }

  auto push_ellipsis = [&] {
    for (int j = 0; j < plan.ell_rank; ++j) plan.out_labels.push_back(EinsumPlan::kEllipsisBase + j);
  };
  if (explicit_out) {
    Term out = parse_term(equation, rhs);
    std::vector<bool> seen(EinsumPlan::kEllipsisBase, false);
    for (int l : out.letters) {
      if (l == kEllipsisMark) {
        push_ellipsis();
        continue;
      }
      if (seen[l]) bad(equation, std::string("output label '") + static_cast<char>(ascii_of(l)) + "' repeats");
      if (letter_count[l] == 0)
        bad(equation, std::string("output label '") + static_cast<char>(ascii_of(l)) + "' is in no input");
      seen[l] = true;
      plan.out_labels.push_back(l);
    }
    if (!out.has_ellipsis && plan.ell_rank > 0)
      bad(equation, "inputs have ellipsis dimensions but the output has no \"...\"");
  } else {
    push_ellipsis();
    std::vector<int> once;
    for (int l = 0; l < EinsumPlan::kEllipsisBase; ++l)
      if (letter_count[l] == 1) once.push_back(l);
    std::sort(once.begin(), once.end(), [](int a, int b) { return ascii_of(a) < ascii_of(b); });
    plan.out_labels.insert(plan.out_labels.end(), once.begin(), once.end());
  }
  for (int l : plan.out_labels) plan.out_shape.push_back(plan.label_dims[l]);
  return plan;
}

namespace reduce_infer {

std::vector<OutputType> infer_einsum(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                     size_t num_outputs) {
  DataType t = inputs[0].dtype;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].exists) throw Error("Einsum input " + std::to_string(i) + " is missing");
    if (inputs[i].dtype != t)
      throw Error("Einsum inputs must share one element type: input 0 is " + std::string(dtype_name(t)) + ", input " +
                  std::to_string(i) + " is " + std::string(dtype_name(inputs[i].dtype)));
  }
  if (t == DataType::kBool) throw_unsupported_dtype(t, "Einsum");
  dispatch_numeric(t, "Einsum", [](auto) {});
  EinsumPlan plan = parse_einsum(attrs_as<EinsumAttrs>(attrs).equation, inputs);
  return {OutputType{t, plan.out_shape}};
}

}  // namespace reduce_infer

}  // namespace kiln
