// CPU kernel of Einsum.
//
// Plan: convert every operand to a working type W (float for float32/float16/bfloat16, double for
// float64, uint64 for integers: wrapping mod 2^64 then narrowing equals the element type's own
// wrapping arithmetic); take diagonals of repeated labels; sum out labels no one else needs; then
// contract operands left to right, each pair as a batched GEMM:
//   A[batch, a_only, contracted] x B[batch, contracted, b_only] -> C[batch, a_only, b_only]
// Broadcast ellipsis dims of size 1 are expanded with stride 0 while packing. Finally permute to
// the output order.
#include <algorithm>

#include "core/infer/reduce_util.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/reduce/reduce_internal.h"

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

constexpr int kMaxLabels = 64 + EinsumPlan::kEllipsisBase;

template <class W>
struct Term {
  std::vector<int> labels;
  std::vector<int64_t> dims;
  std::vector<W> data;  // contiguous, row-major over dims
};

int64_t product(std::span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// out[i0, i1, ...] = src[sum_k i_k * strides[k]], contiguous over dims.
template <class W>
std::vector<W> gather(const W* src, std::span<const int64_t> dims, std::span<const int64_t> strides) {
  int64_t n = product(dims);
  std::vector<W> out(static_cast<size_t>(n));
  if (n == 0) return out;
  size_t r = dims.size();
  if (r == 0) {
    out[0] = src[0];
    return out;
  }
  const int64_t last = dims[r - 1], ls = strides[r - 1];
  std::vector<int64_t> idx(r - 1, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < n; o += last) {
    const W* p = src + off;
    W* q = out.data() + o;
    for (int64_t j = 0; j < last; ++j) q[j] = p[j * ls];
    for (size_t d = r - 1; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < dims[d]) break;
      off -= strides[d] * dims[d];
      idx[d] = 0;
    }
  }
  return out;
}

// Repeated labels within one operand select its diagonal: one index with the summed strides.
template <class W>
void diagonalize(Term<W>& t) {
  std::vector<int> labels;
  std::vector<int64_t> dims, strides;
  std::vector<int64_t> src_strides = strides_of(t.dims);
  for (size_t i = 0; i < t.labels.size(); ++i) {
    auto it = std::find(labels.begin(), labels.end(), t.labels[i]);
    if (it == labels.end()) {
      labels.push_back(t.labels[i]);
      dims.push_back(t.dims[i]);
      strides.push_back(src_strides[i]);
    } else {
      strides[it - labels.begin()] += src_strides[i];
    }
  }
  if (labels.size() == t.labels.size()) return;
  t.data = gather(t.data.data(), dims, strides);
  t.labels = std::move(labels);
  t.dims = std::move(dims);
}

// Sums over every label of t for which keep(label) is false.
template <class W, class Keep>
void sum_out(Term<W>& t, Keep keep) {
  std::vector<int> kept_l, drop_l;
  std::vector<int64_t> kept_d, drop_d, perm_d, perm_s;
  std::vector<int64_t> src_strides = strides_of(t.dims);
  std::vector<int64_t> kept_s, drop_s;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    bool k = keep(t.labels[i]);
    (k ? kept_l : drop_l).push_back(t.labels[i]);
    (k ? kept_d : drop_d).push_back(t.dims[i]);
    (k ? kept_s : drop_s).push_back(src_strides[i]);
  }
  if (drop_l.empty()) return;
  perm_d = kept_d;
  perm_d.insert(perm_d.end(), drop_d.begin(), drop_d.end());
  perm_s = kept_s;
  perm_s.insert(perm_s.end(), drop_s.begin(), drop_s.end());
  std::vector<W> permuted = gather(t.data.data(), perm_d, perm_s);
  int64_t rows = product(kept_d), len = product(drop_d);
  std::vector<W> out(static_cast<size_t>(rows), W{0});
  for (int64_t r = 0; r < rows; ++r) {
    W acc{0};
    for (int64_t j = 0; j < len; ++j) acc += permuted[r * len + j];
    out[r] = acc;
  }
  t.labels = std::move(kept_l);
  t.dims = std::move(kept_d);
  t.data = std::move(out);
}

// c[b] = a[b] (m x k) * b[b] (k x n) for every batch b.
template <class W>
void batched_gemm(int64_t nb, int64_t m, int64_t n, int64_t k, const W* a, const W* b, W* c, KernelEnv& env) {
  if (nb * m * n == 0) return;
  if (k == 0) {
    std::fill_n(c, nb * m * n, W{0});
    return;
  }
  if constexpr (std::is_same_v<W, float>) {
    bool many_small = env.pool && nb >= 2 * env.pool->team() && m * n * k < (1 << 18);
    if (many_small) {
      parallel_for(env, nb, m * n * k, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          sgemm(false, false, m, n, k, 1.0f, a + i * m * k, k, b + i * k * n, n, 0.0f, c + i * m * n, n, nullptr);
      });
    } else {
      for (int64_t i = 0; i < nb; ++i)
        sgemm(false, false, m, n, k, 1.0f, a + i * m * k, k, b + i * k * n, n, 0.0f, c + i * m * n, n, env.pool);
    }
  } else {
    parallel_for(env, nb * m, n * k, [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        int64_t i = row / m;
        const W* ar = a + row * k;
        const W* bm = b + i * k * n;
        W* cr = c + row * n;
        std::fill_n(cr, n, W{0});
        for (int64_t kk = 0; kk < k; ++kk) {
          const W av = ar[kk];
          const W* br = bm + kk * n;
          for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
        }
      }
    });
  }
}

template <class W>
Term<W> contract(Term<W>& a, Term<W>& b, const std::vector<bool>& needed_later, KernelEnv& env) {
  auto in = [](const Term<W>& t, int l) { return std::find(t.labels.begin(), t.labels.end(), l) != t.labels.end(); };
  sum_out(a, [&](int l) { return needed_later[l] || in(b, l); });
  sum_out(b, [&](int l) { return needed_later[l] || in(a, l); });
  std::vector<int> batch, a_only, contracted, b_only;
  for (int l : a.labels) {
    if (!in(b, l))
      a_only.push_back(l);
    else
      (needed_later[l] ? batch : contracted).push_back(l);
  }
  for (int l : b.labels)
    if (!in(a, l)) b_only.push_back(l);
  auto dim_of = [](const Term<W>& t, int l) -> int64_t {
    auto it = std::find(t.labels.begin(), t.labels.end(), l);
    return it == t.labels.end() ? 1 : t.dims[it - t.labels.begin()];
  };
  auto full_dim = [&](int l) {  // numpy broadcast; a missing label counts as size 1 (0 stays 0)
    int64_t da = dim_of(a, l), db = dim_of(b, l);
    return da == 1 ? db : da;
  };
  // Pack t over `order` (labels t lacks or holds with size 1 are broadcast: stride 0).
  auto pack = [&](const Term<W>& t, std::initializer_list<const std::vector<int>*> groups) {
    std::vector<int64_t> dims, strides, ts = strides_of(t.dims);
    for (const std::vector<int>* g : groups) {
      for (int l : *g) {
        auto it = std::find(t.labels.begin(), t.labels.end(), l);
        int64_t d = full_dim(l);
        dims.push_back(d);
        strides.push_back(it == t.labels.end() || t.dims[it - t.labels.begin()] != d ? 0 : ts[it - t.labels.begin()]);
      }
    }
    return gather(t.data.data(), dims, strides);
  };
  std::vector<W> pa = pack(a, {&batch, &a_only, &contracted});
  std::vector<W> pb = pack(b, {&batch, &contracted, &b_only});
  auto prod_of = [&](const std::vector<int>& g) {
    int64_t n = 1;
    for (int l : g) n *= full_dim(l);
    return n;
  };
  int64_t nb = prod_of(batch), m = prod_of(a_only), k = prod_of(contracted), n = prod_of(b_only);
  Term<W> r;
  for (const std::vector<int>* g : {&batch, &a_only, &b_only})
    for (int l : *g) r.labels.push_back(l), r.dims.push_back(full_dim(l));
  r.data.resize(static_cast<size_t>(nb * m * n));
  batched_gemm<W>(nb, m, n, k, pa.data(), pb.data(), r.data.data(), env);
  return r;
}

template <class W, class T>
W to_work(T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<W>(static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(v));
  else
    return static_cast<W>(static_cast<ComputeType<T>>(v));
}

template <class T, class W>
void einsum_typed(const EinsumPlan& plan, std::span<const TensorView> inputs, const TensorView& out, KernelEnv& env) {
  const size_t n_in = inputs.size();
  std::vector<Term<W>> terms(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    Term<W>& t = terms[i];
    t.labels = plan.in_labels[i];
    t.dims.assign(inputs[i].shape.begin(), inputs[i].shape.end());
    const T* p = inputs[i].as<const T>();
    t.data.resize(static_cast<size_t>(inputs[i].numel()));
    for (size_t j = 0; j < t.data.size(); ++j) t.data[j] = to_work<W>(p[j]);
    diagonalize(t);
  }
  std::vector<bool> in_out(kMaxLabels, false);
  for (int l : plan.out_labels) in_out[l] = true;
  std::vector<int> occurrences(kMaxLabels, 0);
  for (const Term<W>& t : terms)
    for (int l : t.labels) ++occurrences[l];
  for (Term<W>& t : terms) sum_out(t, [&](int l) { return in_out[l] || occurrences[l] > 1; });

  Term<W> cur = std::move(terms[0]);
  for (size_t i = 1; i < n_in; ++i) {
    std::vector<bool> needed = in_out;
    for (size_t j = i + 1; j < n_in; ++j)
      for (int l : terms[j].labels) needed[l] = true;
    cur = contract(cur, terms[i], needed, env);
  }
  // cur holds exactly the output labels now; permute them into the output order.
  std::vector<int64_t> cs = strides_of(cur.dims), strides;
  for (size_t d = 0; d < plan.out_labels.size(); ++d) {
    auto it = std::find(cur.labels.begin(), cur.labels.end(), plan.out_labels[d]);
    if (it == cur.labels.end()) throw Error("Einsum: internal error: output label lost");
    size_t pos = static_cast<size_t>(it - cur.labels.begin());
    strides.push_back(cur.dims[pos] == plan.out_shape[d] ? cs[pos] : 0);
  }
  std::vector<W> res = gather(cur.data.data(), plan.out_shape, strides);
  T* y = out.as<T>();
  for (size_t i = 0; i < res.size(); ++i) {
    if constexpr (std::is_integral_v<T>)
      y[i] = static_cast<T>(res[i]);  // modular (C++20)
    else
      y[i] = static_cast<T>(static_cast<ComputeType<T>>(res[i]));
  }
}

}  // namespace

void einsum_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                   KernelEnv& env) {
  EinsumPlan plan = parse_einsum(attrs_as<EinsumAttrs>(attrs).equation, inputs);
  if (product(plan.out_shape) != outputs[0].numel()) throw Error("Einsum: output shape does not match the equation");
  dispatch_numeric(inputs[0].dtype, "Einsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>)
      einsum_typed<T, uint64_t>(plan, inputs, outputs[0], env);
    else if constexpr (std::is_same_v<T, double>)
      einsum_typed<T, double>(plan, inputs, outputs[0], env);
    else
      einsum_typed<T, float>(plan, inputs, outputs[0], env);
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kEinsum, einsum_kernel},
};

}  // namespace

std::span<const KernelEntry> reduce_detail::einsum_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu
