// Shape and type inference of the reduce family: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax,
// CumSum, TopK, Einsum (reduce_einsum.cpp) and the normalizations (LayerNormalization,
// InstanceNormalization, BatchNormalization, LRN).
#include <cmath>
#include <string>

#include "core/infer/reduce_util.h"
#include "core/shape_infer.h"

namespace kiln {

std::vector<OutputType> infer_einsum(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                     size_t num_outputs);

namespace {

std::string name_of(OpKind k) { return std::string(op_name(k)); }

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

void require_float(OpKind k, DataType t, const char* what) {
  if (!is_float(t))
    throw Error(name_of(k) + ": " + what + " must be a float tensor (float32, float64, float16, bfloat16), got " +
                std::string(dtype_name(t)));
}

void require_bool_attr(OpKind k, const char* name, int64_t v) {
  if (v != 0 && v != 1) throw Error(name_of(k) + ": attribute " + name + " must be 0 or 1, got " + std::to_string(v));
}

void require_epsilon(OpKind k, float eps) {
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    throw Error(name_of(k) + ": epsilon must be a finite non-negative number, got " + std::to_string(eps));
}

std::vector<int64_t> shape_vec(const TensorView& v) { return {v.shape.begin(), v.shape.end()}; }

// Element types ONNX allows for Reduce*: floats, 32/64-bit integers; Max/Min also 8-bit ints and bool.
void check_reduce_dtype(OpKind k, DataType t, bool small_ints) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kInt32:
    case DataType::kUInt32:
    case DataType::kInt64:
    case DataType::kUInt64: return;
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kBool:
      if (small_ints) return;
      break;
    case DataType::kInt16:
    case DataType::kUInt16: break;
  }
  throw_unsupported_dtype(t, op_name(k).data());
}

std::vector<OutputType> infer_reduce(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<ReduceAttrs>(attrs);
  require_bool_attr(kind, "keepdims", a.keepdims);
  require_bool_attr(kind, "noop_with_empty_axes", a.noop_with_empty_axes);
  const TensorView& x = inputs[0];
  check_reduce_dtype(kind, x.dtype, kind == OpKind::kReduceMax || kind == OpKind::kReduceMin);
  const TensorView* axes = inputs.size() > 1 && inputs[1].exists ? &inputs[1] : nullptr;
  std::vector<bool> mask = reduce_axes_mask(a, x, axes);
  OutputType out{x.dtype, {}};
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!mask[i])
      out.shape.push_back(x.shape[i]);
    else if (a.keepdims)
      out.shape.push_back(1);
  }
  return {out};
}

std::vector<OutputType> infer_arg_reduce(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<ArgReduceAttrs>(attrs);
  require_bool_attr(kind, "keepdims", a.keepdims);
  require_bool_attr(kind, "select_last_index", a.select_last_index);
  const TensorView& x = inputs[0];
  dispatch_numeric(x.dtype, op_name(kind).data(), [](auto) {});
  int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  OutputType out{DataType::kInt64, {}};
  for (size_t i = 0; i < x.rank(); ++i) {
    if (static_cast<int64_t>(i) != axis)
      out.shape.push_back(x.shape[i]);
    else if (a.keepdims)
      out.shape.push_back(1);
  }
  if (x.shape[axis] == 0) {
    int64_t n = 1;
    for (int64_t d : out.shape) n *= d;
    if (n > 0) throw Error(name_of(kind) + ": cannot take the index of an extreme over an empty axis");
  }
  return {out};
}

std::vector<OutputType> infer_softmax(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<SoftmaxAttrs>(attrs);
  require_bool_attr(kind, "coerce_2d", a.coerce_2d);
  const TensorView& x = inputs[0];
  require_float(kind, x.dtype, "input");
  normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  return {OutputType{x.dtype, shape_vec(x)}};
}

std::vector<OutputType> infer_cumsum(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<CumSumAttrs>(attrs);
  require_bool_attr(kind, "exclusive", a.exclusive);
  require_bool_attr(kind, "reverse", a.reverse);
  const TensorView& x = inputs[0];
  check_reduce_dtype(kind, x.dtype, false);
  const TensorView& ax = inputs[1];
  if (ax.rank() > 1 || ax.numel() != 1) throw Error("CumSum: axis must be a scalar or a 1-element tensor");
  int64_t axis = ax.to_int64()[0];
  normalize_axis(axis, static_cast<int64_t>(x.rank()));
  return {OutputType{x.dtype, shape_vec(x)}};
}

std::vector<OutputType> infer_topk(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<TopKAttrs>(attrs);
  require_bool_attr(kind, "largest", a.largest);
  require_bool_attr(kind, "sorted", a.sorted);
  const TensorView& x = inputs[0];
  dispatch_numeric(x.dtype, "TopK", [](auto) {});
  int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  const TensorView& kv = inputs[1];
  if (kv.rank() > 1 || kv.numel() != 1) throw Error("TopK: K must be a 1-element tensor");
  int64_t k = kv.to_int64()[0];
  if (k < 0 || k > x.shape[axis])
    throw Error("TopK: K = " + std::to_string(k) + " is out of range for axis dimension " +
                std::to_string(x.shape[axis]));
  std::vector<int64_t> shape = shape_vec(x);
  shape[axis] = k;
  return {OutputType{x.dtype, shape}, OutputType{DataType::kInt64, shape}};
}

// True if `p` broadcasts (numpy, unidirectionally) to `target`.
bool broadcasts_to(std::span<const int64_t> p, std::span<const int64_t> target) {
  if (p.size() > target.size()) return false;
  size_t off = target.size() - p.size();
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != 1 && p[i] != target[off + i]) return false;
  return true;
}

std::vector<OutputType> infer_layer_norm(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                         size_t num_outputs) {
  const auto& a = attrs_as<LayerNormAttrs>(attrs);
  require_epsilon(kind, a.epsilon);
  const TensorView& x = inputs[0];
  require_float(kind, x.dtype, "X");
  int64_t r = static_cast<int64_t>(x.rank());
  if (r == 0) throw Error("LayerNormalization: X must have rank >= 1");
  int64_t axis = normalize_axis(a.axis, r);
  DataType stash = static_cast<DataType>(a.stash_type);
  if (a.stash_type < 0 || a.stash_type > 255 || !is_float(stash))
    throw Error("LayerNormalization: stash_type " + std::to_string(a.stash_type) +
                " is not a float element type (1 = float32)");
  std::span<const int64_t> norm_shape = x.shape.subspan(static_cast<size_t>(axis));
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!inputs[i].exists) continue;
    const char* what = i == 1 ? "Scale" : "B";
    if (inputs[i].dtype != x.dtype)
      throw Error(std::string("LayerNormalization: ") + what + " must have X's element type " +
                  std::string(dtype_name(x.dtype)));
    if (!broadcasts_to(inputs[i].shape, norm_shape))
      throw Error(std::string("LayerNormalization: ") + what + " shape " + shape_string(shape_vec(inputs[i])) +
                  " does not broadcast to the normalized shape " +
                  shape_string({norm_shape.begin(), norm_shape.end()}));
  }
  std::vector<OutputType> out{OutputType{x.dtype, shape_vec(x)}};
  std::vector<int64_t> stat_shape = shape_vec(x);
  for (int64_t i = axis; i < r; ++i) stat_shape[i] = 1;
  for (size_t i = 1; i < num_outputs; ++i) out.push_back(OutputType{stash, stat_shape});
  return out;
}

// X [N, C, ...] with per-channel 1-D parameters of length C (inputs first..last).
void check_channel_params(OpKind kind, std::span<const TensorView> inputs, size_t min_rank, bool same_dtype) {
  const TensorView& x = inputs[0];
  require_float(kind, x.dtype, "X");
  if (x.rank() < min_rank)
    throw Error(name_of(kind) + ": X must have rank >= " + std::to_string(min_rank) + " ([N, C, ...]), got " +
                shape_string(shape_vec(x)));
  for (size_t i = 1; i < inputs.size(); ++i) {
    const TensorView& p = inputs[i];
    require_float(kind, p.dtype, "every parameter");
    if (same_dtype && p.dtype != x.dtype)
      throw Error(name_of(kind) + ": input " + std::to_string(i) + " must have X's element type " +
                  std::string(dtype_name(x.dtype)));
    if (p.rank() != 1 || p.shape[0] != x.shape[1])
      throw Error(name_of(kind) + ": input " + std::to_string(i) + " must have shape [C] = [" +
                  std::to_string(x.shape[1]) + "], got " + shape_string(shape_vec(p)));
  }
}

std::vector<OutputType> infer_instance_norm(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                            size_t) {
  require_epsilon(kind, attrs_as<EpsilonAttrs>(attrs).epsilon);
  check_channel_params(kind, inputs, 3, true);
  return {OutputType{inputs[0].dtype, shape_vec(inputs[0])}};
}

std::vector<OutputType> infer_batch_norm(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                         size_t num_outputs) {
  const auto& a = attrs_as<BatchNormAttrs>(attrs);
  if (a.training_mode != 0)
    throw Error(
        "BatchNormalization: training_mode = 1 (training-mode BatchNormalization) is not supported in an "
        "inference engine; export the model in eval mode");
  if (num_outputs != 1)
    throw Error("BatchNormalization: running_mean / running_var outputs exist only in training mode");
  require_epsilon(kind, a.epsilon);
  // ONNX lets scale/B (T1) and mean/var (T2) have float types other than X's.
  check_channel_params(kind, inputs, 2, false);
  return {OutputType{inputs[0].dtype, shape_vec(inputs[0])}};
}

std::vector<OutputType> infer_lrn(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<LrnAttrs>(attrs);
  if (a.size < 1) throw Error("LRN: size must be >= 1, got " + std::to_string(a.size));
  if (!std::isfinite(a.alpha) || !std::isfinite(a.beta) || !std::isfinite(a.bias))
    throw Error("LRN: alpha, beta and bias must be finite");
  check_channel_params(kind, inputs, 2, true);
  return {OutputType{inputs[0].dtype, shape_vec(inputs[0])}};
}

constexpr InferEntry kEntries[] = {
    {OpKind::kReduceL1, infer_reduce},
    {OpKind::kReduceL2, infer_reduce},
    {OpKind::kReduceLogSum, infer_reduce},
    {OpKind::kReduceLogSumExp, infer_reduce},
    {OpKind::kReduceMax, infer_reduce},
    {OpKind::kReduceMean, infer_reduce},
    {OpKind::kReduceMin, infer_reduce},
    {OpKind::kReduceProd, infer_reduce},
    {OpKind::kReduceSum, infer_reduce},
    {OpKind::kReduceSumSquare, infer_reduce},
    {OpKind::kArgMax, infer_arg_reduce},
    {OpKind::kArgMin, infer_arg_reduce},
    {OpKind::kSoftmax, infer_softmax},
    {OpKind::kLogSoftmax, infer_softmax},
    {OpKind::kHardmax, infer_softmax},
    {OpKind::kCumSum, infer_cumsum},
    {OpKind::kTopK, infer_topk},
    {OpKind::kEinsum, infer_einsum},
    {OpKind::kLayerNormalization, infer_layer_norm},
    {OpKind::kInstanceNormalization, infer_instance_norm},
    {OpKind::kBatchNormalization, infer_batch_norm},
    {OpKind::kLRN, infer_lrn},
};

}  // namespace

std::vector<bool> reduce_axes_mask(const ReduceAttrs& attrs, const TensorView& data, const TensorView* axes) {
  int64_t rank = static_cast<int64_t>(data.rank());
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  if (axes && axes->exists && axes->numel() > 0) {
    if (axes->dtype != DataType::kInt64 && axes->dtype != DataType::kInt32)
      throw Error("axes must be an int64 tensor, got " + std::string(dtype_name(axes->dtype)));
    if (axes->rank() != 1) throw Error("axes must be a 1-D tensor, got rank " + std::to_string(axes->rank()));
    if (!axes->data) throw Error("axes must be a constant");
    for (int64_t a : axes->to_int64()) {
      int64_t n = normalize_axis(a, rank, "reduction axis");
      if (mask[n]) throw Error("reduction axis " + std::to_string(a) + " is repeated");
      mask[n] = true;
    }
    return mask;
  }
  if (axes && axes->exists && axes->rank() != 1)
    throw Error("axes must be a 1-D tensor, got rank " + std::to_string(axes->rank()));
  if (!attrs.noop_with_empty_axes) mask.assign(mask.size(), true);
  return mask;
}

std::span<const InferEntry> reduce_infer_entries() { return kEntries; }

}  // namespace kiln
