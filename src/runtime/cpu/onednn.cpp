#include "runtime/cpu/onednn.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "runtime/cpu/thread_pool.h"

#if defined(KILN_HAVE_ONEDNN)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace kiln::cpu::onednn {

#if defined(KILN_HAVE_ONEDNN)

namespace {

using dnnl::algorithm;
using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

// The library's instruction sets, capped once before its first kernel: no AMX. oneDNN 2.6's AMX
// int8 convolution with a source zero point corrupted the heap on the H200 machine's Sapphire
// Rapids host ("double free", qconv_nhwc_gpu_test's CPU reference, 2026-12-01); capped at
// AVX512-VNNI the same tests pass. Kiln's float32 kernels never use AMX (it is int8 and bf16 only).
// A user's ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) is kept: the tests run the AVX2 kernels on
// an AVX-512 machine with it.
void cap_isa() {
  static const bool once = [] {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("DNNL_MAX_CPU_ISA")) return true;
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_vnni);
    } catch (const dnnl::error&) {  // too late (ONEDNN_MAX_CPU_ISA or an earlier call decided)
    }
    return true;
  }();
  (void)once;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine e = [] {
    cap_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

int threads_of(const KernelEnv& env) { return env.pool ? env.pool->team() : 1; }

// The library's threads while it lives: the run's (its pool's team), not every core. oneDNN
// splits the work when a primitive is made, so it is made and run under the same count (part of
// the state's key); the calling thread's own OpenMP count is restored after.
class ThreadsScope {
 public:
  explicit ThreadsScope(const KernelEnv& env) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads_of(env)); }
  ~ThreadsScope() { omp_set_num_threads(saved_); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int saved_;
};

// A primitive's attributes: its scratchpad is the state's (user mode), so that a context's
// primitives may run on any thread, not only the one that made them.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// Runs p with its scratchpad; oneDNN's errors as kiln::Error.
void execute(const dnnl::primitive& p, std::unordered_map<int, memory> args, const memory& scratch) {
  args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
  try {
    p.execute(cpu_stream(), args);
    cpu_stream().wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN: ") + e.what());
  }
}

// An epilogue activation as an eltwise post-op; false for one the library lacks.
bool append_activation(dnnl::post_ops& po, Activation a, float alpha, float beta) {
  switch (a) {
    case Activation::kNone: return true;
    case Activation::kRelu: po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); return true;
    case Activation::kLeakyRelu: po.append_eltwise(1.f, algorithm::eltwise_relu, alpha, 0.f); return true;
    case Activation::kClip: po.append_eltwise(1.f, algorithm::eltwise_clip, alpha, beta); return true;
    case Activation::kSigmoid: po.append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f); return true;
    case Activation::kTanh: po.append_eltwise(1.f, algorithm::eltwise_tanh, 0.f, 0.f); return true;
    case Activation::kSilu: po.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f); return true;
    case Activation::kHardSwish: po.append_eltwise(1.f, algorithm::eltwise_hardswish, 0.f, 0.f); return true;
    case Activation::kGelu: po.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f); return true;
    case Activation::kGeluTanh: po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f); return true;
    case Activation::kHardSigmoid: return false;  // not in oneDNN 2.6
  }
  return false;
}

// What a kernel's first run made, for the shapes and weights it was made for (key).
struct State {
  virtual ~State() = default;
  std::vector<int64_t> key;
  bool unsupported = false;
};

struct ConvState : State {
  std::optional<dnnl::convolution_forward> prim;
  memory scratch;  // the primitive's scratchpad
  // W in the primitive's layout, made on the first run: the CPU's channels-last pass converts only
  // convolutions of constant weights.
  memory weights;
  memory::desc src, dst, bias, z;
  // X channels-first: the primitive may want it in another layout (a stem's 3 channels), then X
  // is reordered into x_buf each run.
  memory::desc x_user;
  std::optional<dnnl::reorder> x_reorder;
  memory x_buf, x_scratch;
  int z_arg = 0;  // the residual's argument (a binary post-op's second source)
};

// An int8 convolution: the sums alone (QConvState) or with the epilogue (QFusedState).
struct Int8ConvState : State {
  std::optional<dnnl::convolution_forward> prim;
  memory scratch;
  memory weights;  // W in the primitive's layout (with the library's compensation), made once
  memory::desc src, dst;
};

struct QConvState : Int8ConvState {
  std::vector<int32_t> sums;  // the output, kept between runs (no allocation, no page faults per run)
};

struct QFusedState : Int8ConvState {
  std::vector<float> bias;  // bias / alpha per channel: oneDNN 2.x adds an int8 convolution's bias before its scale
  memory::desc bias_desc;
};

struct QMatMulState : State {
  std::optional<dnnl::matmul> prim;
  memory scratch;
  memory::desc src, weights, dst;
  std::vector<int32_t> sums;
};

struct PoolState : State {
  std::optional<dnnl::pooling_forward> prim;
  memory scratch;
  memory::desc src, dst;
};

// A step's state (its slot, KernelEnv::state) holds one state of each kind its kernel asked for
// (NhwcQConv: the fused convolution, and the sums where that one cannot run), each for the shapes
// and weights it was made for (key).
struct States {
  std::vector<std::shared_ptr<State>> all;
};

struct EltwiseState : State {
  std::optional<dnnl::eltwise_forward> prim;
  memory scratch;
  memory::desc data;
};

// pd's primitive and scratchpad into st, refusing oneDNN's reference code (slower than Kiln's).
template <class S, class PD>
void take_primitive(S& st, const PD& pd) {
  if (std::string(pd.impl_info_str()).find("ref") != std::string::npos) throw dnnl::error(dnnl_unimplemented, "ref");
  st.prim.emplace(pd);
  st.scratch = memory(pd.scratchpad_desc(), cpu_engine());
}

// The step's state of type S for `key`, made where it has none. Two keys of a type are kept (the
// oldest replaced): a run's thread count is part of the key, and under the process's thread
// budget (thread_budget.h) a context's runs alternate between its count alone and its share.
// Without a slot (a kernel called outside a context) in `local`.
template <class S>
S& state_for(KernelEnv& env, const std::vector<int64_t>& key, std::shared_ptr<void>& local) {
  constexpr int kKeysPerType = 2;
  std::shared_ptr<void>& slot = env.state ? *env.state : local;
  if (!slot) slot = std::make_shared<States>();
  auto& states = *static_cast<States*>(slot.get());
  std::shared_ptr<State>* oldest = nullptr;
  int same_type = 0;
  for (std::shared_ptr<State>& p : states.all)
    if (auto* s = dynamic_cast<S*>(p.get())) {
      if (s->key == key) return *s;
      if (!oldest) oldest = &p;
      ++same_type;
    }
  if (same_type >= kKeysPerType) states.all.erase(states.all.begin() + (oldest - states.all.data()));
  auto fresh = std::make_shared<S>();
  fresh->key = key;
  states.all.push_back(fresh);
  return *fresh;
}

Dims nchw_dims(std::span<const int64_t> nhwc) { return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]}; }

// A 2-D window (core/infer/nn_geometry.h's, which resolves the attributes' defaults and auto_pad)
// in oneDNN's terms: dilations count the gaps (d - 1), and the right pads are those that make
// geo.out outputs (more than the model's where ceil_mode lets the last window pass the input).
struct Window {
  Dims kernel, strides, dilations, pad_l, pad_r;
};
Window window_of(const nn::WindowGeometry& geo) {
  Window w;
  for (size_t i = 0; i < 2; ++i) {
    w.kernel.push_back(geo.kernel[i]);
    w.strides.push_back(geo.strides[i]);
    w.dilations.push_back(geo.dilations[i] - 1);
    w.pad_l.push_back(geo.pads[i]);
    w.pad_r.push_back((geo.out[i] - 1) * geo.strides[i] + (geo.kernel[i] - 1) * geo.dilations[i] + 1 - geo.in[i] -
                      geo.pads[i]);
  }
  return w;
}

// W from Kiln's [M, kh, kw, C/group] (w_dims [M, C/g, kh, kw] or, grouped, [g, M/g, C/g, kh, kw])
// into the primitive's layout `want`, once.
memory reordered_weights(const TensorView& w, const Dims& w_dims, memory::data_type dt, const memory::desc& want) {
  // One input channel a group: [.., kh, kw, 1] is [.., 1, kh, kw] too, and the library reorders
  // int8 weights with their compensation from that layout only (LeNet's first convolution).
  const bool one_channel = w.shape[3] == 1;
  const Tag tag = w_dims.size() == 4 ? (one_channel ? Tag::oihw : Tag::ohwi) : (one_channel ? Tag::goihw : Tag::gohwi);
  memory user_w({w_dims, dt, tag}, cpu_engine(), w.data);
  memory out(want, cpu_engine());
  dnnl::reorder(user_w, out).execute(cpu_stream(), user_w, out);
  cpu_stream().wait();
  return out;
}

bool make_conv(ConvState& st, const FusedConvAttrs& a, std::span<const TensorView> in, const TensorView& y) {
  const TensorView &x = in[0], &w = in[1];
  const bool has_b = in.size() > 2 && in[2].exists, has_z = in.size() > 3 && in[3].exists;
  const int64_t g = a.group, m = w.shape[0], kh = w.shape[1], kw = w.shape[2], cg = w.shape[3];
  dnnl::post_ops po;
  if (!append_activation(po, a.activation, a.activation_alpha, a.activation_beta)) return false;
  // X channels-first (x_channels_first: the stem reading the image as it is) or channels-last.
  const bool x_first = a.x_channels_first != 0;
  const Dims x_nchw = x_first ? Dims(x.shape.begin(), x.shape.end()) : nchw_dims(x.shape);
  st.x_user = memory::desc(x_nchw, memory::data_type::f32, x_first ? Tag::nchw : Tag::nhwc);
  st.src = x_first ? memory::desc(st.x_user.dims(), memory::data_type::f32, Tag::any) : st.x_user;
  st.dst = memory::desc(nchw_dims(y.shape), memory::data_type::f32, Tag::nhwc);
  if (has_z) {
    st.z = st.dst;
    st.z_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(po.len()) | DNNL_ARG_SRC_1;
    po.append_binary(algorithm::binary_add, st.z);
    if (!append_activation(po, a.activation2, a.activation2_alpha, a.activation2_beta)) return false;
  }
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_post_ops(po);
  const Dims w_dims = g == 1 ? Dims{m, cg, kh, kw} : Dims{g, m / g, cg, kh, kw};
  const memory::desc w_any(w_dims, memory::data_type::f32, Tag::any);
  st.bias = memory::desc({m}, memory::data_type::f32, Tag::x);
  const Window win = window_of(nn::conv_geometry(a, x_nchw, std::array<int64_t, 4>{m, cg, kh, kw}));
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, algorithm::convolution_direct, st.src,
                                          w_any, has_b ? st.bias : memory::desc(), st.dst, win.strides, win.dilations,
                                          win.pad_l, win.pad_r);
  const dnnl::convolution_forward::primitive_desc pd(d, attr, cpu_engine());
  // oneDNN's reference implementation is slower than Kiln's own kernel.
  if (std::string(pd.impl_info_str()).find("ref") != std::string::npos) return false;
  st.prim.emplace(pd);
  st.scratch = memory(pd.scratchpad_desc(), cpu_engine());
  if (pd.src_desc() != st.x_user) {
    st.src = pd.src_desc();
    st.x_buf = memory(st.src, cpu_engine());
    const dnnl::reorder::primitive_desc rd(cpu_engine(), st.x_user, cpu_engine(), st.src, user_scratchpad());
    st.x_reorder.emplace(rd);
    st.x_scratch = memory(rd.scratchpad_desc(), cpu_engine());
  }
  st.weights = reordered_weights(w, w_dims, memory::data_type::f32, pd.weights_desc());
  return true;
}

memory::data_type q8_type(DataType t) { return t == DataType::kInt8 ? memory::data_type::s8 : memory::data_type::u8; }

// int8 products accumulated exactly: VNNI's vpdpbusd. Without it oneDNN multiplies pairs with
// vpmaddubsw, whose 16-bit sums saturate.
bool exact_int8() {
  static const bool vnni = [] {
    cap_isa();
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto has = [&](dnnl_cpu_isa_t want) { return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want); };
    return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni);
  }();
  return vnni;
}

// Whether the library's implementation `impl` is one of its JIT kernels for `isa` ("vnni": int8
// products summed exactly, whatever else the CPU has, nor AMX: cap_isa; "avx2"), not its
// reference code.
bool jit_kernel(const std::string& impl, const char* isa) {
  return impl.find("ref") == std::string::npos && impl.find(isa) != std::string::npos;
}

// oneDNN's int8 kernels for AVX2 without VNNI (jit_uni_int8:avx2, jit_uni_int8_1x1:avx2): the
// library's x86 CPUs without VNNI all have AVX2 (older ones get its reference code, not used).
bool avx2_int8() {
  static const bool avx2 = [] {
    cap_isa();
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & static_cast<unsigned>(dnnl_cpu_isa_avx2)) == static_cast<unsigned>(dnnl_cpu_isa_avx2);
  }();
  return avx2;
}

// Without VNNI the library multiplies pairs of (uint8 x, int8 w') with vpmaddubsw into saturating
// int16 sums; int8 x is made uint8 by adding 128, with a compensation. Its weights' description
// may carry a scale adjustment (0.5 for int8 x): w' = w * adjust, rounded. The sums are exact where
// every w' is w * adjust exactly and |w'| <= 64 (2 * 255 * 64 = 32,640 <= 32,767).
bool pairs_within_16_bits(std::span<const int8_t> w, bool halved) {
  for (int8_t v : w)
    if (std::abs(v) > (halved ? 128 : 64) || (halved && v % 2 != 0)) return false;
  return true;
}
bool pairs_exact(const TensorView& w, const memory::desc& library_w) {
  const dnnl_memory_extra_desc_t& extra = library_w.data.extra;
  const bool adjusted = (extra.flags & dnnl_memory_extra_flag_scale_adjust) != 0;
  if (adjusted && extra.scale_adjust != 0.5f) return false;
  return pairs_within_16_bits({w.as<const int8_t>(), static_cast<size_t>(w.numel())}, adjusted);
}

// The primitive of st (its src and dst set) for x and int8 w, with `bias` (or none) and `attr`, and
// W reordered into its layout; false where its kernel does not sum exactly (not a VNNI one, nor an
// AVX2 one whose pairs of products W keeps within 16 bits).
bool make_int8_conv(Int8ConvState& st, const ConvAttrs& a, const TensorView& x, const TensorView& w,
                    const memory::desc& bias, const dnnl::primitive_attr& attr) {
  const int64_t g = a.group, m = w.shape[0], kh = w.shape[1], kw = w.shape[2], cg = w.shape[3];
  const Dims w_dims = g == 1 ? Dims{m, cg, kh, kw} : Dims{g, m / g, cg, kh, kw};
  const memory::desc w_any(w_dims, memory::data_type::s8, Tag::any);
  const Window win = window_of(nn::conv_geometry(a, nchw_dims(x.shape), std::array<int64_t, 4>{m, cg, kh, kw}));
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, algorithm::convolution_direct, st.src,
                                          w_any, bias, st.dst, win.strides, win.dilations, win.pad_l, win.pad_r);
  const dnnl::convolution_forward::primitive_desc pd(d, attr, cpu_engine());
  const std::string impl = pd.impl_info_str();
  if (!jit_kernel(impl, "vnni") && !(jit_kernel(impl, "avx2") && pairs_exact(w, pd.weights_desc()))) return false;
  st.prim.emplace(pd);
  st.scratch = memory(pd.scratchpad_desc(), cpu_engine());
  st.weights = reordered_weights(w, w_dims, memory::data_type::s8, pd.weights_desc());
  return true;
}

bool make_qconv(QConvState& st, const ConvAttrs& a, const TensorView& x, const TensorView& w,
                std::span<const int64_t> y_shape) {
  st.src = memory::desc(nchw_dims(x.shape), q8_type(x.dtype), Tag::nhwc);
  st.dst = memory::desc(nchw_dims(y_shape), memory::data_type::s32, Tag::nhwc);
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  return make_int8_conv(st, a, x, w, memory::desc(), attr);
}

memory::data_type y_type(DataType t) { return t == DataType::kFloat32 ? memory::data_type::f32 : q8_type(t); }

// The float's bits, for a state's key.
int64_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

bool make_qconv_fused(QFusedState& st, const ConvAttrs& a, const TensorView& x, const TensorView& w, const QEpilogue& e,
                      const TensorView& y) {
  const int64_t m = w.shape[0];
  // The library's output: y / y_scale + y_zero. Its scale per channel is alpha / y_scale, and
  // every term after it (the residual, the activation's bounds) is divided by y_scale too.
  const float ys = e.quantize ? e.y_scale : 1.0f;
  if (!(ys > 0.0f) || !std::isfinite(ys) || static_cast<int64_t>(e.alpha.size()) != m ||
      static_cast<int64_t>(e.bias.size()) != m)
    return false;
  std::vector<float> scales(static_cast<size_t>(m));
  st.bias.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    const float alpha = e.alpha[i];
    if (!(alpha != 0.0f) || !std::isfinite(alpha) || !std::isfinite(e.bias[i])) return false;
    scales[i] = alpha / ys;
    st.bias[i] = e.bias[i] / alpha;
  }
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_output_scales(1 << 1, scales);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (e.quantize && e.y_zero != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {e.y_zero});
  dnnl::post_ops po;
  if (e.z) {
    // sum: y += z_scale / y_scale * (z - z_zero), z copied into y before the run.
    if (e.z->dtype != y.dtype || !(e.z_scale > 0.0f) || !std::isfinite(e.z_scale)) return false;
    if (e.quantize)
      po.append_sum(e.z_scale / ys, e.z_zero, y_type(y.dtype));
    else
      po.append_sum(1.0f);
  }
  switch (static_cast<QActivation>(e.act)) {
    case QActivation::kNone: break;
    case QActivation::kRelu: po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); break;
    case QActivation::kLeakyRelu: po.append_eltwise(1.f, algorithm::eltwise_relu, e.act_alpha, 0.f); break;
    case QActivation::kClip: po.append_eltwise(1.f, algorithm::eltwise_clip, e.act_alpha / ys, e.act_beta / ys); break;
  }
  attr.set_post_ops(po);
  st.src = memory::desc(nchw_dims(x.shape), q8_type(x.dtype), Tag::nhwc);
  st.dst = memory::desc(nchw_dims(y.shape), y_type(y.dtype), Tag::nhwc);
  st.bias_desc = memory::desc({m}, memory::data_type::f32, Tag::x);
  return make_int8_conv(st, a, x, w, st.bias_desc, attr);
}

bool env_allows() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CPU_KERNELS");
    return !(v && std::strcmp(v, "kiln") == 0);
  }();
  return on;
}

}  // namespace

std::atomic<bool> g_enabled{true};
std::atomic<uint64_t> g_qconv_runs{0}, g_qconv_fused_runs{0};
std::atomic<bool> g_int8_epilogue{true};

uint64_t qconv_sums_runs() { return g_qconv_runs.load(); }
uint64_t qconv_fused_runs() { return g_qconv_fused_runs.load(); }

bool available() { return env_allows() && g_enabled.load(); }

bool sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads) {
  if (!available() || m <= 0 || n <= 0 || k <= 0) return false;
  cap_isa();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(std::max(threads, 1));
  const dnnl_status_t st =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  omp_set_num_threads(saved);
  return st == dnnl_success;
}
void set_enabled(bool on) { g_enabled = on; }
bool int8_sums_available() { return available() && (exact_int8() || avx2_int8()); }

bool int8_weights_exact(std::span<const int8_t> w, DataType x) {
  if (exact_int8()) return true;
  // pairs_exact's rule for the adjustment the library chooses: 0.5 for int8 x, none for uint8 x.
  return pairs_within_16_bits(w, x == DataType::kInt8);
}

bool int8_even_weights() { return available() && !exact_int8() && avx2_int8(); }

bool int8_epilogue_in_library() {
  static const bool env_on = [] {
    const char* v = std::getenv("KILN_CPU_INT8_EPILOGUE");
    return !(v && std::strcmp(v, "kiln") == 0);
  }();
  return env_on && g_int8_epilogue.load() && int8_sums_available();
}
void set_int8_epilogue_in_library(bool on) { g_int8_epilogue = on; }

bool nhwc_conv(const FusedConvAttrs& a, std::span<const TensorView> in, const TensorView& y, KernelEnv& env) {
  if (!available() || in.size() < 2 || (in.size() > 4 && in[4].exists)) return false;
  const TensorView &x = in[0], &w = in[1];
  if (x.rank() != 4 || w.rank() != 4 || y.rank() != 4 || x.dtype != DataType::kFloat32 ||
      w.dtype != DataType::kFloat32 || y.dtype != DataType::kFloat32 || a.auto_pad != AutoPad::kNotSet)
    return false;
  const bool has_b = in.size() > 2 && in[2].exists, has_z = in.size() > 3 && in[3].exists;
  if ((has_b && in[2].dtype != DataType::kFloat32) ||
      (has_z && (in[3].dtype != DataType::kFloat32 ||
                 !std::equal(in[3].shape.begin(), in[3].shape.end(), y.shape.begin(), y.shape.end()))))
    return false;
  std::vector<int64_t> key(x.shape.begin(), x.shape.end());
  key.insert(key.end(), y.shape.begin(), y.shape.end());
  key.insert(key.end(), {static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.data)), has_b, has_z,
                         a.x_channels_first != 0, threads_of(env)});
  std::shared_ptr<void> local;
  ConvState& st = state_for<ConvState>(env, key, local);
  if (st.unsupported) return false;
  const ThreadsScope threads(env);
  if (!st.prim) {
    try {
      if (!make_conv(st, a, in, y)) st.unsupported = true;
    } catch (const dnnl::error&) {
      st.unsupported = true;
    }
    if (st.unsupported) return false;
  }
  memory src(st.x_user, cpu_engine(), x.data), dst(st.dst, cpu_engine(), y.data);
  if (st.x_reorder) {
    execute(*st.x_reorder, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, st.x_buf}}, st.x_scratch);
    src = st.x_buf;
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, st.weights}, {DNNL_ARG_DST, dst}};
  if (has_b) args.emplace(DNNL_ARG_BIAS, memory(st.bias, cpu_engine(), in[2].data));
  if (has_z) args.emplace(st.z_arg, memory(st.z, cpu_engine(), in[3].data));
  execute(*st.prim, std::move(args), st.scratch);
  return true;
}

const int32_t* nhwc_qconv_sums(const ConvAttrs& a, const TensorView& x, int32_t x_zero, const TensorView& w,
                               std::span<const int64_t> y_shape, KernelEnv& env, std::shared_ptr<void>& hold) {
  if (!int8_sums_available() || x.rank() != 4 || w.rank() != 4 || y_shape.size() != 4 ||
      (x.dtype != DataType::kInt8 && x.dtype != DataType::kUInt8) || w.dtype != DataType::kInt8 ||
      a.auto_pad != AutoPad::kNotSet)
    return nullptr;
  for (auto dims : {std::span<const int64_t>(x.shape), std::span<const int64_t>(w.shape), y_shape})
    for (int64_t d : dims)
      if (d <= 0) return nullptr;  // nothing to sum (and the library divides by the sizes)
  std::vector<int64_t> key(x.shape.begin(), x.shape.end());
  key.insert(key.end(), y_shape.begin(), y_shape.end());
  key.insert(key.end(), {static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.data)), static_cast<int64_t>(x.dtype),
                         threads_of(env)});
  std::shared_ptr<void>& local = hold;  // the state when the step has no slot: the caller keeps it
  QConvState& st = state_for<QConvState>(env, key, local);
  if (st.unsupported) return nullptr;
  const ThreadsScope threads(env);
  if (!st.prim) {
    try {
      if (make_qconv(st, a, x, w, y_shape)) {
        int64_t n = 1;
        for (int64_t d : y_shape) n *= d;
        st.sums.resize(static_cast<size_t>(n));
      } else {
        st.unsupported = true;
      }
    } catch (const dnnl::error&) {
      st.unsupported = true;
    }
    if (st.unsupported) return nullptr;
  }
  int32_t zero = x_zero;
  memory zp({{1}, memory::data_type::s32, Tag::x}, cpu_engine(), &zero);
  execute(*st.prim,
          {{DNNL_ARG_SRC, memory(st.src, cpu_engine(), x.data)},
           {DNNL_ARG_WEIGHTS, st.weights},
           {DNNL_ARG_DST, memory(st.dst, cpu_engine(), st.sums.data())},
           {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp}},
          st.scratch);
  g_qconv_runs.fetch_add(1, std::memory_order_relaxed);
  return st.sums.data();
}

bool nhwc_qconv_fused(const ConvAttrs& a, const TensorView& x, const TensorView& w, const QEpilogue& e,
                      const TensorView& y, KernelEnv& env) {
  if (!int8_epilogue_in_library() || x.rank() != 4 || w.rank() != 4 || y.rank() != 4 ||
      (x.dtype != DataType::kInt8 && x.dtype != DataType::kUInt8) || w.dtype != DataType::kInt8 ||
      (e.quantize ? y.dtype != DataType::kInt8 && y.dtype != DataType::kUInt8 : y.dtype != DataType::kFloat32) ||
      a.auto_pad != AutoPad::kNotSet)
    return false;
  for (auto dims :
       {std::span<const int64_t>(x.shape), std::span<const int64_t>(w.shape), std::span<const int64_t>(y.shape)})
    for (int64_t d : dims)
      if (d <= 0) return false;
  if (e.z && !std::equal(e.z->shape.begin(), e.z->shape.end(), y.shape.begin(), y.shape.end())) return false;
  // The residual is summed from y's buffer: y must not overlap x.
  const auto* xb = static_cast<const char*>(x.data);
  const auto* yb = static_cast<const char*>(y.data);
  if (e.z && yb < xb + x.bytes() && xb < yb + y.bytes()) return false;
  std::vector<int64_t> key(x.shape.begin(), x.shape.end());
  key.insert(key.end(), y.shape.begin(), y.shape.end());
  key.insert(key.end(), {static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.data)), static_cast<int64_t>(x.dtype),
                         static_cast<int64_t>(y.dtype), threads_of(env), e.act, bits(e.act_alpha), bits(e.act_beta),
                         e.quantize, bits(e.y_scale), e.y_zero, e.z != nullptr, bits(e.z_scale), e.z_zero});
  for (size_t i = 0; i < e.alpha.size(); ++i) key.insert(key.end(), {bits(e.alpha[i]), bits(e.bias[i])});
  std::shared_ptr<void> local;
  QFusedState& st = state_for<QFusedState>(env, key, local);
  if (st.unsupported) return false;
  const ThreadsScope threads(env);
  if (!st.prim) {
    try {
      if (!make_qconv_fused(st, a, x, w, e, y)) st.unsupported = true;
    } catch (const dnnl::error&) {
      st.unsupported = true;
    }
    if (st.unsupported) return false;
  }
  if (e.z && e.z->data != y.data) std::memcpy(y.data, e.z->data, static_cast<size_t>(y.bytes()));
  int32_t zero = e.x_zero;
  memory zp({{1}, memory::data_type::s32, Tag::x}, cpu_engine(), &zero);
  execute(*st.prim,
          {{DNNL_ARG_SRC, memory(st.src, cpu_engine(), x.data)},
           {DNNL_ARG_WEIGHTS, st.weights},
           {DNNL_ARG_BIAS, memory(st.bias_desc, cpu_engine(), st.bias.data())},
           {DNNL_ARG_DST, memory(st.dst, cpu_engine(), y.data)},
           {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp}},
          st.scratch);
  g_qconv_fused_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool gelu_inplace(Activation a, float* y, int64_t n, KernelEnv& env) {
  if (!available() || n <= 0 || (a != Activation::kGelu && a != Activation::kGeluTanh)) return false;
  const std::vector<int64_t> key{n, static_cast<int64_t>(a), threads_of(env)};
  std::shared_ptr<void> local;
  EltwiseState& st = state_for<EltwiseState>(env, key, local);
  if (st.unsupported) return false;
  const ThreadsScope threads(env);
  if (!st.prim) {
    try {
      st.data = memory::desc({n}, memory::data_type::f32, Tag::x);
      const algorithm alg = a == Activation::kGelu ? algorithm::eltwise_gelu_erf : algorithm::eltwise_gelu_tanh;
      const dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, st.data, 0.f, 0.f), user_scratchpad(),
          cpu_engine());
      take_primitive(st, pd);
    } catch (const dnnl::error&) {
      st.unsupported = true;
      return false;
    }
  }
  memory data(st.data, cpu_engine(), y);
  execute(*st.prim, {{DNNL_ARG_SRC, data}, {DNNL_ARG_DST, data}}, st.scratch);
  return true;
}

const int32_t* qmatmul_sums(const TensorView& x, int64_t rows, int32_t x_zero, const TensorView& w, KernelEnv& env,
                            std::shared_ptr<void>& hold) {
  if (!available() || !exact_int8() || w.rank() != 2 || (x.dtype != DataType::kInt8 && x.dtype != DataType::kUInt8) ||
      w.dtype != DataType::kInt8)
    return nullptr;
  const int64_t n = w.shape[0], k = w.shape[1];
  if (rows <= 0 || n <= 0 || k <= 0) return nullptr;  // the library divides by them
  const std::vector<int64_t> key{rows, k, n, static_cast<int64_t>(x.dtype), threads_of(env)};
  std::shared_ptr<void>& local = hold;
  QMatMulState& st = state_for<QMatMulState>(env, key, local);
  if (st.unsupported) return nullptr;
  const ThreadsScope threads(env);
  if (!st.prim) {
    try {
      st.src = memory::desc({rows, k}, q8_type(x.dtype), Tag::ab);
      st.weights = memory::desc({k, n}, memory::data_type::s8, Tag::ba);  // w [N, K] as it is
      st.dst = memory::desc({rows, n}, memory::data_type::s32, Tag::ab);
      dnnl::primitive_attr attr = user_scratchpad();
      attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(st.src, st.weights, st.dst), attr, cpu_engine());
      if (!jit_kernel(pd.impl_info_str(), "vnni")) throw dnnl::error(dnnl_unimplemented, "not a VNNI kernel");
      st.prim.emplace(pd);
      st.scratch = memory(pd.scratchpad_desc(), cpu_engine());
      st.sums.resize(static_cast<size_t>(rows * n));
    } catch (const dnnl::error&) {
      st.unsupported = true;
      return nullptr;
    }
  }
  int32_t zero = x_zero;
  memory zp({{1}, memory::data_type::s32, Tag::x}, cpu_engine(), &zero);
  execute(*st.prim,
          {{DNNL_ARG_SRC, memory(st.src, cpu_engine(), x.data)},
           {DNNL_ARG_WEIGHTS, memory(st.weights, cpu_engine(), w.data)},
           {DNNL_ARG_DST, memory(st.dst, cpu_engine(), st.sums.data())},
           {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp}},
          st.scratch);
  return st.sums.data();
}

bool nhwc_pool(OpKind kind, const PoolAttrs& a, const TensorView& x, const TensorView& y, KernelEnv& env) {
  if (!available() || x.rank() != 4 || y.rank() != 4 || x.dtype != DataType::kFloat32 ||
      y.dtype != DataType::kFloat32 || a.kernel_shape.size() != 2 ||
      (a.auto_pad != AutoPad::kNotSet && a.auto_pad != AutoPad::kValid))
    return false;
  for (int64_t d : a.dilations)
    if (d != 1) return false;
  std::vector<int64_t> key(x.shape.begin(), x.shape.end());
  key.insert(key.end(), y.shape.begin(), y.shape.end());
  key.push_back(threads_of(env));
  std::shared_ptr<void> local;
  PoolState& st = state_for<PoolState>(env, key, local);
  if (st.unsupported) return false;
  const ThreadsScope threads(env);
  if (!st.prim) {
    try {
      const nn::WindowGeometry geo = nn::pool_geometry(a, nchw_dims(x.shape));
      const Window win = window_of(geo);
      st.src = memory::desc(nchw_dims(x.shape), memory::data_type::f32, Tag::nhwc);
      st.dst = memory::desc(nchw_dims(y.shape), memory::data_type::f32, Tag::nhwc);
      // Windows that reach past the input with ceil_mode are padding on the right; AveragePool
      // divides by the window's count within the input (or, count_include_pad, within the pads
      // the model gave: a window past those is ONNX's ceil_mode case, left to Kiln's kernel).
      const bool past_given_pads = win.pad_r[0] != geo.pads[2] || win.pad_r[1] != geo.pads[3];
      algorithm alg = algorithm::pooling_max;
      if (kind == OpKind::kNhwcAveragePool) {
        if (a.count_include_pad && past_given_pads) throw dnnl::error(dnnl_unimplemented, "ceil_mode window");
        alg = a.count_include_pad ? algorithm::pooling_avg_include_padding : algorithm::pooling_avg_exclude_padding;
      }
      const dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, alg, st.src, st.dst, win.strides,
                                          win.kernel, win.pad_l, win.pad_r);
      const dnnl::pooling_forward::primitive_desc pd(d, user_scratchpad(), cpu_engine());
      take_primitive(st, pd);
    } catch (const dnnl::error&) {
      st.unsupported = true;
      return false;
    }
  }
  memory src(st.src, cpu_engine(), x.data), dst(st.dst, cpu_engine(), y.data);
  execute(*st.prim, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, st.scratch);
  return true;
}

#else  // built without oneDNN

bool available() { return false; }
bool gelu_inplace(Activation, float*, int64_t, KernelEnv&) { return false; }
bool sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
           int64_t, int) {
  return false;
}
void set_enabled(bool) {}
uint64_t qconv_sums_runs() { return 0; }
bool nhwc_conv(const FusedConvAttrs&, std::span<const TensorView>, const TensorView&, KernelEnv&) { return false; }
bool int8_sums_available() { return false; }
bool int8_weights_exact(std::span<const int8_t>, DataType) { return false; }
bool int8_even_weights() { return false; }
bool int8_epilogue_in_library() { return false; }
void set_int8_epilogue_in_library(bool) {}
uint64_t qconv_fused_runs() { return 0; }
bool nhwc_qconv_fused(const ConvAttrs&, const TensorView&, const TensorView&, const QEpilogue&, const TensorView&,
                      KernelEnv&) {
  return false;
}
const int32_t* nhwc_qconv_sums(const ConvAttrs&, const TensorView&, int32_t, const TensorView&,
                               std::span<const int64_t>, KernelEnv&, std::shared_ptr<void>&) {
  return nullptr;
}
const int32_t* qmatmul_sums(const TensorView&, int64_t, int32_t, const TensorView&, KernelEnv&,
                            std::shared_ptr<void>&) {
  return nullptr;
}
bool nhwc_pool(OpKind, const PoolAttrs&, const TensorView&, const TensorView&, KernelEnv&) { return false; }

#endif

}  // namespace kiln::cpu::onednn
