#include "runtime/cuda/quant/conv/cudnn_graph.cuh"

#include <thread>
#include <utility>

#include "kiln/types.h"

namespace kiln::gpu::cudnn_graph {

namespace {

[[noreturn]] void fail(const std::string& what, cudnnStatus_t st) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw Error(what + ": cuDNN: " + cudnnGetErrorString(st) + (detail[0] ? std::string(" (") + detail + ")" : ""));
}

void check(cudnnStatus_t st, const std::string& what) {
  if (st != CUDNN_STATUS_SUCCESS) fail(what, st);
}

// At most this many candidates per graph: each is finalized (maybe compiled) and timed at build
// time. On an H200 (2026-11-28), the heuristics' first three held the fastest of six within 5% for
// 263 of the sweep's 268 INT8 convolutions and within 17% for all (geometric mean 0.4%), and
// finalizing six took DenseNet-121's INT8 build to 73 s (28 s with three).
constexpr size_t kMaxCandidates = 3;

}  // namespace

Desc::Desc(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_), "creating a cuDNN graph descriptor");
}

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Desc& Desc::operator=(Desc&& o) noexcept {
  std::swap(d_, o.d_);
  return *this;
}

void Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
               const void* values) {
  check(cudnnBackendSetAttribute(d_, name, type, count, values),
        "setting cuDNN graph attribute " + std::to_string(static_cast<int>(name)));
}

void Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& value) {
  cudnnBackendDescriptor_t v = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

void Desc::finalize(const std::string& what) { check(cudnnBackendFinalize(d_), what); }

bool Desc::try_finalize() { return cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS; }

Desc tensor(int64_t uid, cudnnDataType_t dtype, std::span<const int64_t> dims, std::span<const int64_t> strides,
            bool is_virtual, int64_t alignment, bool by_value) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  t.finalize("cuDNN graph tensor " + std::to_string(uid));
  return t;
}

Desc scalar(int64_t uid, cudnnDataType_t dtype, size_t rank) {
  const std::vector<int64_t> ones(rank, 1);
  return tensor(uid, dtype, ones, ones, false, 16, true);
}

std::vector<int64_t> channels_last_strides(std::span<const int64_t> dims) {
  // Memory order N, spatial..., C.
  std::vector<int64_t> s(dims.size(), 1);
  int64_t step = dims.size() > 1 ? dims[1] : 1;
  for (size_t i = dims.size(); i-- > 2;) {
    s[i] = step;
    step *= dims[i];
  }
  if (!dims.empty()) s[0] = step;
  return s;
}

Desc conv_forward(const Desc& x, const Desc& w, const Desc& y, const ConvGeometry& g, cudnnDataType_t compute) {
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t rank = static_cast<int64_t>(g.strides.size());
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  c.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  c.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &rank);
  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, rank, g.pads_begin.data());
  c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, rank, g.pads_end.data());
  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, rank, g.strides.data());
  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, rank, g.dilations.data());
  c.finalize("cuDNN graph convolution");

  Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, c);
  const float alpha = 1, beta = 0;
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  op.finalize("cuDNN graph convolution operation");
  return op;
}

Desc matmul(const Desc& a, const Desc& b, const Desc& c, cudnnDataType_t compute) {
  Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  mm.finalize("cuDNN graph matmul");
  Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  op.finalize("cuDNN graph matmul operation");
  return op;
}

namespace {

Desc pointwise_op(const Desc& pw, const Desc& x, const Desc* b, const Desc& y) {
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  op.finalize("cuDNN graph pointwise operation");
  return op;
}

Desc pointwise_desc(cudnnPointwiseMode_t mode) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  return pw;
}

}  // namespace

Desc pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y) {
  Desc pw = pointwise_desc(mode);
  pw.finalize("cuDNN graph pointwise descriptor");
  return pointwise_op(pw, x, b, y);
}

Desc sdpa_forward(const Desc& q, const Desc& k, const Desc& v, const Desc& o, const Desc& scale) {
#if CUDNN_VERSION < 91301
  throw Error("cuDNN's attention operation needs cuDNN 9.13.1 or later (built with " +
              std::to_string(CUDNN_VERSION) + ")");
#else
  if (cudnnGetVersion() < 91301)
    throw Error("cuDNN's attention operation needs cuDNN 9.13.1 or later (loaded " +
                std::to_string(cudnnGetVersion()) + ")");
  Desc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q);
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k);
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v);
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o);
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale);
  op.finalize("cuDNN graph attention operation");
  return op;
#endif
}

Desc relu(const Desc& x, const Desc& y, float lower, std::optional<float> upper) {
  Desc pw = pointwise_desc(CUDNN_POINTWISE_RELU_FWD);
  const double lo = lower, hi = upper.value_or(0.0f);
  pw.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lo);
  if (upper) pw.set(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &hi);
  pw.finalize("cuDNN graph ReLU descriptor");
  return pointwise_op(pw, x, nullptr, y);
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

Graph::Graph(cudnnHandle_t handle, std::span<const Desc* const> ops, size_t max_workspace, const std::string& what)
    : what_(what), handle_(handle), max_workspace_(max_workspace), graph_(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc* op : ops) raw.push_back(op->get());
  graph_.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
             raw.data());
  graph_.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph_.finalize(what + ": the operation graph");

  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph_);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (!heur.try_finalize()) continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        count == 0)
      continue;
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw_cfgs;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw_cfgs.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                 raw_cfgs.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int64_t i = 0; i < got && cfgs_.size() < kMaxCandidates; ++i) cfgs_.push_back(std::move(cfgs[static_cast<size_t>(i)]));
    if (!cfgs_.empty()) break;
  }
  if (cfgs_.empty())
    throw Error(what + ": cuDNN has no engine for this fused graph on this GPU (shapes, layout or data types)");
  plans_.resize(cfgs_.size());
  state_.assign(cfgs_.size(), 0);
  workspace_.assign(cfgs_.size(), 0);
}

std::unique_ptr<Desc> Graph::finalize_plan(size_t i, size_t* workspace) const try {
  auto p = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  cudnnHandle_t h = handle_;
  p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  p->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs_[i]);
  int64_t ws = 0;
  if (!p->try_finalize() ||
      cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr, &ws) !=
          CUDNN_STATUS_SUCCESS ||
      ws < 0 || static_cast<size_t>(ws) > max_workspace_)
    return nullptr;
  *workspace = static_cast<size_t>(ws);
  return p;
} catch (const Error&) {
  return nullptr;
}

void Graph::prepare_all() const {
  std::vector<size_t> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < cfgs_.size(); ++i)
      if (state_[i] == 0) todo.push_back(i);
  }
  std::vector<std::unique_ptr<Desc>> made(todo.size());
  std::vector<size_t> ws(todo.size(), 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < todo.size(); ++k)
    threads.emplace_back([&, k] { made[k] = finalize_plan(todo[k], &ws[k]); });
  for (std::thread& t : threads) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < todo.size(); ++k) {
    const size_t i = todo[k];
    if (state_[i] != 0) continue;
    state_[i] = made[k] ? 1 : -1;
    workspace_[i] = ws[k];
    plans_[i] = std::move(made[k]);
  }
}

const Desc* Graph::plan(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= cfgs_.size()) return nullptr;
  if (state_[i] == 0) {
    size_t ws = 0;
    plans_[i] = finalize_plan(i, &ws);
    state_[i] = plans_[i] ? 1 : -1;
    workspace_[i] = ws;
  }
  return state_[i] == 1 ? plans_[i].get() : nullptr;
}

bool Graph::built(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return i < cfgs_.size() && state_[i] == 1;
}

std::optional<size_t> Graph::usable(size_t from) const {
  for (size_t i = from; i < cfgs_.size(); ++i)
    if (plan(i)) return i;
  return std::nullopt;
}

size_t Graph::workspace(size_t i) const {
  if (!plan(i))
    throw Error(what_ + ": cuDNN's candidate plan " + std::to_string(i) + " does not build on this GPU");
  std::lock_guard<std::mutex> lock(mu_);
  return workspace_[i];
}

std::vector<int32_t> Graph::tactics(int32_t first, int32_t count) const {
  prepare_all();
  std::vector<int32_t> t;
  for (size_t i = 0; i < cfgs_.size() && i < static_cast<size_t>(count); ++i)
    if (builds(i)) t.push_back(first + static_cast<int32_t>(i));
  return t;
}

bool Graph::runs(size_t i, size_t workspace_bytes, cudaStream_t stream) const {
  if (i >= cfgs_.size()) return false;
  const bool ready = capturing(stream) ? built(i) : builds(i);
  return ready && workspace(i) <= workspace_bytes;
}

void Graph::run(cudnnHandle_t handle, size_t i, std::span<const int64_t> uids, std::span<void* const> data,
                void* workspace) const {
  const Desc* p = plan(i);
  if (!p) throw Error(what_ + ": cuDNN's candidate plan " + std::to_string(i) + " does not build on this GPU");
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(data.size()),
           data.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize(what_ + ": the variant pack");
  check(cudnnBackendExecute(handle, p->get(), pack.get()), what_);
}

}  // namespace kiln::gpu::cudnn_graph
