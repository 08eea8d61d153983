// channels-last (GPU float16 and INT8 engines; CPU float32 and INT8 engines with oneDNN): 2-D convolutions
// and the ops around them compute on channels-last tensors ([N, H, W, C]), the layout cuDNN's
// tensor-core kernels and oneDNN's CPU convolutions read without transposing internally, and in
// which a 1x1 convolution is one GEMM.
//
// One walk in topological order. A float16 (CPU: float32, constant W only) Conv / FusedConv with
// symmetric pads becomes NhwcConv (its constant W permuted to [M, kh, kw, C/group] once); a kiln.QConv that the GPU's
// channels-last INT8 kernels can run (qconv_fits_nhwc: one group, for cuDNN's and Kiln's tensor-core kernels, or
// depthwise, for Kiln's direct depthwise kernel, W then [C, kh, kw, 1]) becomes NhwcQConv likewise;
// on the CPU, one whose sums oneDNN computes (qconv_fits_onednn: constant int8 W, zero points 0).
// cuDNN reads int8 channels in vectors of 4, so a one-group QConv whose C is not a multiple of 4
// (an RGB stem) computes on C4 = round_up(C, 4) channels:
// its permuted W gets zero weights in the extra channels and its channels-last input a Pad of zeros
// on the last axis (once per value); with zero points 0 an int8 0 is a real 0, so the sums are
// unchanged. MaxPool (float or 8-bit integers) / AveragePool (float) become NhwcMaxPool /
// NhwcAveragePool; layout-agnostic ops follow their inputs: unary elementwise ops, binary and
// variadic ones (constant operands permuted), Concat on the channel axis (then the last),
// per-tensor QuantizeLinear / DequantizeLinear, GlobalAverage/MaxPool (ReduceMean / ReduceMax
// over the two spatial axes) and inference
// BatchNormalization (a Mul and an Add with per-channel constants). Every value computed channels
// last keeps its channels-first original as a Transpose of it, so readers that stay channels-first
// (Flatten, Reshape, graph outputs, ...) are unchanged; a reader converted later reads the twin
// instead, and the Transposes nobody reads are dropped at the end: where two layouts meet, one
// Transpose remains, and transposes that meet cancel (a twin is never transposed back and forth).
// An input of a converted op that has no twin gets a Transpose to channels-last, once per value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"
#include "runtime/cpu/onednn.h"

namespace kiln::passes {

namespace {

using graph::kNoValue;
using graph::Node;
using graph::ValueId;

const std::vector<int64_t> kToLast{0, 2, 3, 1}, kToFirst{0, 3, 1, 2};

std::vector<int64_t> permute(const std::vector<int64_t>& v, const std::vector<int64_t>& perm) {
  std::vector<int64_t> out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = v[static_cast<size_t>(perm[i])];
  return out;
}

class Rewriter {
 public:
  // conv_dtype: the float type whose convolutions are converted. gpu: for the GPU's kernels, which
  // also take INT8 convolutions and weights computed at run time; the CPU's library keeps W in its
  // own layout from the first run (runtime/cpu/onednn.h), so only constant weights there.
  Rewriter(graph::Graph& g, DataType conv_dtype, bool gpu) : g_(g), conv_dtype_(conv_dtype), gpu_(gpu) {}

  PassResult run() {
    std::vector<Node> nodes = std::move(g_.nodes);
    g_.nodes.clear();
    for (Node& n : nodes)
      if (!convert(n)) out_.push_back(std::move(n));
    drop_unread_transposes();
    g_.nodes = std::move(out_);
    PassResult r;
    r.changes = converted_;
    int transposes = 0;
    for (const Node& n : g_.nodes) transposes += n.kind == OpKind::kTranspose && n.origin == kOrigin;
    r.detail = std::to_string(converted_) + " nodes channels-last, " + std::to_string(transposes) + " transposes";
    return r;
  }

 private:
  static constexpr const char* kOrigin = "channels-last";
  graph::Graph& g_;
  const DataType conv_dtype_;
  const bool gpu_;
  std::vector<Node> out_;
  std::map<ValueId, ValueId> twin_;    // channels-first value -> its channels-last twin
  std::map<ValueId, ValueId> padded_;  // channels-first value -> its channels-last twin padded to C4
  std::set<ValueId> back_;             // channels-first values written by a Transpose back
  int converted_ = 0;

  const graph::Value& val(ValueId v) const { return g_.value(v); }
  bool rank4_conv_type(ValueId v) const {
    return v != kNoValue && val(v).dtype == conv_dtype_ && val(v).shape.size() == 4;
  }

  ValueId new_value(ValueId like, const std::vector<int64_t>& shape) {
    graph::Value v;
    v.name = g_.unique_name(val(like).name + "_nhwc");
    v.dtype = val(like).dtype;
    v.shape = shape;
    v.has_shape = true;
    return g_.add_value(std::move(v));
  }
  void emit(OpKind kind, Attrs attrs, std::string name, std::string origin, std::vector<ValueId> ins,
            std::vector<ValueId> outs) {
    Node n;
    n.kind = kind;
    n.attrs = std::move(attrs);
    n.name = g_.unique_name(name);
    n.origin = std::move(origin);
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    // The new value shapes follow from the inputs.
    std::vector<TensorView> views;
    for (ValueId v : n.inputs) views.push_back(v == kNoValue ? absent_tensor() : val(v).view());
    const std::vector<OutputType> types = infer_shapes(n.kind, n.attrs, views, n.outputs.size());
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      graph::Value& o = g_.value(n.outputs[i]);
      o.dtype = types[i].dtype;
      o.shape = types[i].shape;
      o.has_shape = true;
    }
    out_.push_back(std::move(n));
  }
  ValueId transpose(ValueId v, const std::vector<int64_t>& perm, ValueId into = kNoValue) {
    if (into == kNoValue) into = new_value(v, permute(val(v).shape, perm));
    TransposeAttrs a;
    a.perm = perm;
    emit(OpKind::kTranspose, a, val(v).name + ".transpose", kOrigin, {v}, {into});
    return into;
  }
  // A constant of rank <= 4 as its channels-last counterpart (rank 4, leading 1s added first), its
  // last axis padded with zero bytes up to `channels` where that is larger.
  ValueId permuted_constant(ValueId c, int64_t channels = 0) {
    const graph::Value& cv = val(c);
    std::vector<int64_t> s4(4 - cv.shape.size(), 1);
    s4.insert(s4.end(), cv.shape.begin(), cv.shape.end());
    const std::vector<int64_t> in_last = permute(s4, kToLast);
    std::vector<int64_t> out_shape = in_last;
    out_shape[3] = std::max(out_shape[3], channels);
    const size_t es = dtype_size(cv.dtype);
    const std::vector<int64_t> in_strides = strides_of(s4), out_strides = strides_of(out_shape);
    std::vector<uint8_t> bytes(static_cast<size_t>(out_shape[0] * out_strides[0]) * es, 0);
    for (int64_t a = 0; a < in_last[0]; ++a)
      for (int64_t b = 0; b < in_last[1]; ++b)
        for (int64_t c2 = 0; c2 < in_last[2]; ++c2)
          for (int64_t d = 0; d < in_last[3]; ++d) {
            // out index (a, b, c2, d) = in index (a, d, b, c2)
            const int64_t src = a * in_strides[0] + d * in_strides[1] + b * in_strides[2] + c2 * in_strides[3];
            const int64_t dst = a * out_strides[0] + b * out_strides[1] + c2 * out_strides[2] + d;
            std::memcpy(bytes.data() + static_cast<size_t>(dst) * es, cv.data->data() + static_cast<size_t>(src) * es,
                        es);
          }
    return g_.add_constant(g_.unique_name(cv.name + "_nhwc"), cv.dtype, out_shape, std::move(bytes));
  }
  // v channels-last: its twin, a permuted constant, or a Transpose emitted now (kept as the twin).
  ValueId to_last(ValueId v) {
    if (auto it = twin_.find(v); it != twin_.end()) return it->second;
    const ValueId t = val(v).is_constant() ? permuted_constant(v) : transpose(v, kToLast);
    twin_[v] = t;
    return t;
  }
  // v channels-last with its channels zero-padded to `channels` (a Pad of the twin, once per value).
  ValueId to_last_padded(ValueId v, int64_t channels) {
    if (auto it = padded_.find(v); it != padded_.end()) return it->second;
    const ValueId t = to_last(v);
    const std::vector<int64_t> pads{0, 0, 0, 0, 0, 0, 0, channels - val(t).shape[3]};
    std::vector<uint8_t> b(pads.size() * sizeof(int64_t));
    std::memcpy(b.data(), pads.data(), b.size());
    const ValueId p = g_.add_constant(g_.unique_name(val(v).name + ".pads"), DataType::kInt64, {8}, std::move(b));
    const ValueId out = new_value(v, {});
    emit(OpKind::kPad, PadAttrs{}, val(v).name + ".pad_channels", kOrigin, {t, p}, {out});
    padded_[v] = out;
    return out;
  }
  // The converted node `n` computes channels-last twins of `firsts`; each original becomes a
  // Transpose of its twin, for the readers that stay channels-first.
  void emit_converted(Node& n, OpKind kind, Attrs attrs, std::vector<ValueId> ins, const std::vector<ValueId>& firsts) {
    std::vector<ValueId> lasts;
    for (ValueId f : firsts) lasts.push_back(new_value(f, {}));
    emit(kind, std::move(attrs), n.name, origin_of(n), std::move(ins), lasts);
    for (size_t i = 0; i < firsts.size(); ++i) {
      transpose(lasts[i], kToFirst, firsts[i]);
      twin_[firsts[i]] = lasts[i];
      back_.insert(firsts[i]);
    }
    ++converted_;
  }

  bool convert(Node& n) {
    if (n.outputs.size() != 1 || n.outputs[0] == kNoValue || n.inputs.empty()) return false;
    const ValueId x = n.inputs[0];
    if (n.kind == OpKind::kConv || n.kind == OpKind::kFusedConv) return convert_conv(n);
    if (n.kind == OpKind::kQConv) return (gpu_ || cpu::onednn::int8_sums_available()) && convert_qconv(n);
    const bool has_twin = twin_.count(x) > 0;
    if (has_trait(n.kind, kPerElement)) {
      if (!has_twin) return false;
      for (size_t i = 1; i < n.inputs.size(); ++i)
        if (n.inputs[i] != kNoValue && val(n.inputs[i]).view().numel() != 1) return false;
      std::vector<ValueId> ins = n.inputs;
      ins[0] = twin_[x];
      emit_converted(n, n.kind, n.attrs, ins, n.outputs);
      return true;
    }
    if (has_trait(n.kind, kBroadcast)) return convert_broadcasting(n);
    if (!has_twin) return false;
    switch (n.kind) {
      case OpKind::kMaxPool:
      case OpKind::kAveragePool: {
        // The channels-last pooling kernels take float types, and MaxPool 8-bit integers too (an
        // int8 MaxPool is what fuse-qdq makes by moving a QuantizeLinear above it).
        const DataType dt = val(x).dtype;
        const bool int8_max = n.kind == OpKind::kMaxPool && (dt == DataType::kInt8 || dt == DataType::kUInt8);
        if (val(x).shape.size() != 4 || !(float_type(dt) || int8_max)) return false;
        emit_converted(n, n.kind == OpKind::kMaxPool ? OpKind::kNhwcMaxPool : OpKind::kNhwcAveragePool, n.attrs,
                       {twin_[x]}, n.outputs);
        return true;
      }
      case OpKind::kGlobalAveragePool:
      case OpKind::kGlobalMaxPool: {
        const std::vector<int64_t> axes{1, 2};
        std::vector<uint8_t> b(16);
        std::memcpy(b.data(), axes.data(), 16);
        const ValueId ax = g_.add_constant(g_.unique_name(n.name + ".axes"), DataType::kInt64, {2}, std::move(b));
        emit_converted(n, n.kind == OpKind::kGlobalAveragePool ? OpKind::kReduceMean : OpKind::kReduceMax,
                       ReduceAttrs{}, {twin_[x], ax}, n.outputs);
        return true;
      }
      case OpKind::kConcat: {
        if (normalize_axis(std::get<AxisAttrs>(n.attrs).axis, 4) != 1) return false;
        std::vector<ValueId> ins;
        for (ValueId v : n.inputs) {
          if (!twin_.count(v)) return false;
          ins.push_back(twin_[v]);
        }
        emit_converted(n, OpKind::kConcat, AxisAttrs{3}, ins, n.outputs);
        return true;
      }
      case OpKind::kBatchNormalization: return convert_batchnorm(n);
      default: return false;
    }
  }

  bool convert_conv(Node& n) {
    const ValueId x = n.inputs[0], w = n.inputs.size() > 1 ? n.inputs[1] : kNoValue;
    if (!rank4_conv_type(x) || w == kNoValue || val(w).shape.size() != 4) return false;
    if (!gpu_ && !val(w).is_constant()) return false;
    FusedConvAttrs a;
    if (n.kind == OpKind::kConv)
      static_cast<ConvAttrs&>(a) = std::get<ConvAttrs>(n.attrs);
    else
      a = std::get<FusedConvAttrs>(n.attrs);
    // Explicit, symmetric pads only (the kernels pad channels-last tensors symmetrically).
    const nn::WindowGeometry geo = nn::conv_geometry(a, val(x).shape, val(w).shape);
    for (size_t i = 0; i < 2; ++i)
      if (geo.pads[i] != geo.pads[2 + i]) return false;
    a.auto_pad = AutoPad::kNotSet;
    a.pads = geo.pads;
    std::vector<ValueId> ins{to_last(x), val(w).is_constant() ? permuted_constant(w) : transpose(w, kToLast)};
    ins.push_back(n.inputs.size() > 2 ? n.inputs[2] : kNoValue);
    if (n.inputs.size() > 3 && n.inputs[3] != kNoValue) ins.push_back(to_last(n.inputs[3]));
    while (ins.back() == kNoValue) ins.pop_back();
    emit_converted(n, OpKind::kNhwcConv, a, ins, n.outputs);
    return true;
  }

  // Input i of n is absent or an int8 constant of zeros (a zero point).
  bool zero_or_absent(const Node& n, size_t i) const {
    if (!has_input(n, i)) return true;
    const graph::Value& v = val(n.inputs[i]);
    if (!v.is_constant() || v.dtype != DataType::kInt8) return false;
    return std::all_of(v.data->begin(), v.data->end(), [](uint8_t b) { return b == 0; });
  }

  // A depthwise convolution: group = input channels = output channels (W [C, 1, kh, kw]).
  bool depthwise(const Node& n, const QConvAttrs& a) const {
    const std::vector<int64_t>& ws = val(n.inputs[3]).shape;
    return a.group != 1 && a.group == val(n.inputs[0]).shape[1] && ws[0] == a.group && ws[1] == 1;
  }

  // The INT8 convolutions the GPU runs channels-last (runtime/cuda/quant/conv/nhwc.cu): 2-D,
  // one group (cuDNN's and Kiln's tensor-core kernels) or depthwise (Kiln's direct kernel),
  // symmetric explicit pads, int8 data and weights with zero points 0, output channels
  // a multiple of 4 (cuDNN's int8 vector, the depthwise kernel's; a one-group convolution's input
  // channels are padded to one, see convert_qconv), an int8 (zero point 0) or float32 output and
  // residual, and an activation cuDNN's ReLU expresses (none, relu, clip).
  bool qconv_fits_nhwc(const Node& n, const QConvAttrs& a, const nn::WindowGeometry& geo) const {
    const ValueId x = n.inputs[0];
    if (n.inputs.size() < 5 || val(x).dtype != DataType::kInt8 || val(x).shape.size() != 4) return false;
    const graph::Value& w = val(n.inputs[3]);
    if (!w.is_constant() || w.dtype != DataType::kInt8 || w.shape.size() != 4) return false;
    if ((a.group != 1 && !depthwise(n, a)) || w.shape[0] % 4 != 0) return false;
    if (!zero_or_absent(n, 2) || !zero_or_absent(n, 5) || !zero_or_absent(n, 8) || !zero_or_absent(n, 11)) return false;
    const DataType y = val(n.outputs[0]).dtype;
    if (y != DataType::kInt8 && y != DataType::kFloat32) return false;
    if (has_input(n, 9) && val(n.inputs[9]).dtype != DataType::kInt8 && val(n.inputs[9]).dtype != DataType::kFloat32)
      return false;
    if (a.activation == QActivation::kLeakyRelu) return false;
    for (size_t i = 0; i < 2; ++i)
      if (geo.pads[i] != geo.pads[2 + i]) return false;
    return true;
  }

  // The INT8 convolutions oneDNN runs channels-last on the CPU (runtime/cpu/onednn.h): 2-D, int8
  // or uint8 data, constant int8 weights with zero points 0 that its kernels for this CPU sum
  // exactly (all with VNNI; AVX2 alone: int8_weights_exact); any groups, pads and outputs (Kiln's
  // epilogue follows the library's sums).
  bool qconv_fits_onednn(const Node& n) const {
    const DataType x = val(n.inputs[0]).dtype;
    const graph::Value& w = val(n.inputs[3]);
    if (!((x == DataType::kInt8 || x == DataType::kUInt8) && w.is_constant() && w.dtype == DataType::kInt8 &&
          zero_or_absent(n, 5)))
      return false;
    const TensorView wv = w.view();
    return cpu::onednn::int8_weights_exact({wv.as<const int8_t>(), static_cast<size_t>(wv.numel())}, x);
  }

  bool convert_qconv(Node& n) {
    QConvAttrs a = std::get<QConvAttrs>(n.attrs);
    const ValueId x = n.inputs[0];
    if (n.inputs.size() < 5 || val(x).shape.size() != 4 || val(n.inputs[3]).shape.size() != 4) return false;
    const nn::WindowGeometry geo = nn::conv_geometry(a.conv(), val(x).shape, val(n.inputs[3]).shape);
    if (gpu_ ? !qconv_fits_nhwc(n, a, geo) : !qconv_fits_onednn(n)) return false;
    a.auto_pad = AutoPad::kNotSet;
    a.pads = geo.pads;
    // GPU: zero channels up to a multiple of 4 in x and W (zero points are 0: int8 0 is a real 0);
    // a depthwise convolution's C is one already (qconv_fits_nhwc), and its W [C, kh, kw, 1] stays
    // so.
    const int64_t c = val(x).shape[1], c4 = gpu_ ? (c + 3) / 4 * 4 : c;
    std::vector<ValueId> ins = n.inputs;
    ins[0] = c4 == c ? to_last(x) : to_last_padded(x, c4);
    ins[3] = permuted_constant(n.inputs[3], a.group == 1 ? c4 : 0);
    if (has_input(n, 9)) ins[9] = to_last(n.inputs[9]);
    emit_converted(n, OpKind::kNhwcQConv, a, ins, n.outputs);
    return true;
  }

  // Inputs with a twin (rank 4) or constants of rank <= 4; at least one twin; a rank-4 output.
  bool convert_broadcasting(Node& n) {
    bool any = false;
    for (ValueId v : n.inputs) {
      if (v == kNoValue) return false;
      if (twin_.count(v))
        any = true;
      else if (!val(v).is_constant() || val(v).shape.size() > 4)
        return false;
    }
    if (!any || val(n.outputs[0]).shape.size() != 4) return false;
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(to_last(v));
    emit_converted(n, n.kind, n.attrs, ins, n.outputs);
    return true;
  }

  // y = x * s + t per channel, s = scale / sqrt(var + eps), t = bias - mean * s.
  bool convert_batchnorm(Node& n) {
    const auto& ba = std::get<BatchNormAttrs>(n.attrs);
    if (ba.training_mode != 0 || n.inputs.size() != 5 || val(n.inputs[0]).shape.size() != 4) return false;
    std::vector<double> p[4];
    const int64_t c = val(n.inputs[0]).shape[1];
    for (size_t i = 0; i < 4; ++i) {
      p[i] = read_doubles(val(n.inputs[i + 1]));
      if (static_cast<int64_t>(p[i].size()) != c) return false;
    }
    std::vector<double> s(static_cast<size_t>(c)), t(static_cast<size_t>(c));
    for (size_t k = 0; k < s.size(); ++k) {
      s[k] = p[0][k] / std::sqrt(p[3][k] + static_cast<double>(ba.epsilon));
      t[k] = p[1][k] - p[2][k] * s[k];
    }
    const DataType dt = val(n.inputs[0]).dtype;
    const ValueId sc = g_.add_constant(g_.unique_name(n.name + ".scale_nhwc"), dt, {1, 1, 1, c}, write_as(dt, s));
    const ValueId sh = g_.add_constant(g_.unique_name(n.name + ".shift_nhwc"), dt, {1, 1, 1, c}, write_as(dt, t));
    const ValueId mid = new_value(n.outputs[0], {});
    emit(OpKind::kMul, NoAttrs{}, n.name + ".scale", origin_of(n), {twin_[n.inputs[0]], sc}, {mid});
    Node add;
    add.name = n.name;
    add.origin = origin_of(n);
    emit_converted(add, OpKind::kAdd, NoAttrs{}, {mid, sh}, n.outputs);
    return true;
  }

  // Transposes back to channels-first that nothing reads any more.
  void drop_unread_transposes() {
    std::vector<int> reads(g_.values.size(), 0);
    for (const Node& n : out_)
      for (ValueId v : n.inputs)
        if (v != kNoValue) ++reads[static_cast<size_t>(v)];
    std::vector<Node> kept;
    for (Node& n : out_) {
      const bool unread_back = n.kind == OpKind::kTranspose && n.origin == kOrigin && back_.count(n.outputs[0]) &&
                               reads[static_cast<size_t>(n.outputs[0])] == 0 && !g_.is_graph_output(n.outputs[0]);
      if (!unread_back) kept.push_back(std::move(n));
    }
    out_ = std::move(kept);
  }
};

}  // namespace

PassResult to_channels_last(graph::Graph& g) { return Rewriter(g, DataType::kFloat16, true).run(); }

PassResult channels_last(graph::Graph& g, const BuildOptions& options) {
  // CPU: float32 and INT8 engines, where oneDNN runs the channels-last convolutions (about twice
  // as fast there as on channels-first data: bench/RESULTS.md) and INT8 convolutions' sums.
  if (options.target == "cpu") {
    if (options.fp16 || !cpu::onednn::available()) return {};
    return Rewriter(g, DataType::kFloat32, false).run();
  }
  if (!(options.fp16 || options.int8)) return {};
  return to_channels_last(g);
}

}  // namespace kiln::passes
