// Tests for the engine file: build -> load -> run against a float64 reference, deterministic output,
// and the loader's defences: truncation, damage caught by the checksum, foreign or newer files, and
// crafted files whose checksum is valid but whose contents lie (rebuilt with the flatbuffer schema).
// Also the Context's errors and several contexts running one engine on several threads.
#include <engine_schema_generated.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "build/build.h"
#include "graph/onnx_import.h"
#include "kiln/engine.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/engine_format.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// ---- the model: X[1,1,4,4] -> Conv(2x1x3x3, bias) -> Relu -> Flatten -> Gemm(8x3, bias) -> Y[1,3]

std::vector<float> x_values(float shift = 0.f) {
  std::vector<float> x(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.25f - 0.5f + shift;
  return x;
}
std::vector<float> conv_w() {
  std::vector<float> w(18);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  return w;
}
const std::vector<float> kConvB = {0.05f, -0.1f};
std::vector<float> gemm_w() {
  std::vector<float> w(24);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i) - 0.4f;
  return w;
}
const std::vector<float> kGemmC = {0.1f, 0.2f, -0.3f};

// The model's output computed in double.
std::vector<double> reference(const std::vector<float>& x) {
  std::vector<float> w = conv_w(), w2 = gemm_w();
  std::vector<double> f(8);
  for (int oc = 0; oc < 2; ++oc)
    for (int oy = 0; oy < 2; ++oy)
      for (int ox = 0; ox < 2; ++ox) {
        double s = kConvB[oc];
        for (int ky = 0; ky < 3; ++ky)
          for (int kx = 0; kx < 3; ++kx) s += double(x[(oy + ky) * 4 + ox + kx]) * double(w[oc * 9 + ky * 3 + kx]);
        f[oc * 4 + oy * 2 + ox] = std::max(s, 0.0);
      }
  std::vector<double> y(3);
  for (int j = 0; j < 3; ++j) {
    double s = kGemmC[j];
    for (int k = 0; k < 8; ++k) s += f[k] * double(w2[k * 3 + j]);
    y[j] = s;
  }
  return y;
}

void add_init(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims,
              const std::vector<float>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}

void add_io(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name, int32_t elem,
            const std::vector<int64_t>& dims) {
  auto* vi = list->Add();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, const std::string& name,
                          const std::vector<std::string>& ins, const std::vector<std::string>& outs) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}

std::vector<uint8_t> serialize(const onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return {s.begin(), s.end()};
}

onnx::ModelProto new_model(const std::string& name) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  m.mutable_graph()->set_name(name);
  return m;
}

std::vector<uint8_t> convnet_onnx() {
  onnx::ModelProto m = new_model("convnet");
  auto* g = m.mutable_graph();
  add_io(g->mutable_input(), "X", onnx::TensorProto::FLOAT, {1, 1, 4, 4});
  add_io(g->mutable_output(), "Y", onnx::TensorProto::FLOAT, {1, 3});
  add_init(g, "W", {2, 1, 3, 3}, conv_w());
  add_init(g, "B", {2}, kConvB);
  add_init(g, "W2", {8, 3}, gemm_w());
  add_init(g, "C", {3}, kGemmC);
  add_node(g, "Conv", "conv", {"X", "W", "B"}, {"c"});
  add_node(g, "Relu", "relu", {"c"}, {"r"});
  add_node(g, "Flatten", "flatten", {"r"}, {"f"});
  add_node(g, "Gemm", "gemm", {"f", "W2", "C"}, {"Y"});
  return serialize(m);
}

std::vector<uint8_t> build(const std::vector<uint8_t>& onnx_bytes, std::vector<std::string> disabled = {}) {
  graph::Graph g = graph::import_onnx_bytes(onnx_bytes, "model.onnx", "");
  build::BuildOptions o;
  o.disabled_passes = std::move(disabled);
  o.disabled_passes.push_back("fuse-epilogue");  // the crafted-file tests address the Relu step
  return build::build_engine(g, o);
}

// Built with its Flatten as a step (not a view), so that the crafted engines below can address each
// of the model's four nodes; engine_views_test.cpp covers views.
const std::vector<uint8_t>& convnet_engine() {
  static const std::vector<uint8_t> bytes = build(convnet_onnx(), {"view-reshapes"});
  return bytes;
}

std::vector<float> run_convnet(const Engine& e, const std::vector<float>& x) {
  auto ctx = e.create_context(1);
  ctx->set_input("X", x.data(), x.size() * 4);
  ctx->run();
  auto out = ctx->output("Y");
  std::vector<float> y(out.size() / 4);
  std::memcpy(y.data(), out.data(), out.size());
  return y;
}

// The message of the kiln::Error that loading `bytes` throws; "" if it loads.
std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    Engine::from_bytes(bytes, "crafted.kiln");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- build, run, load ----------------------------------------------------------------------------

TEST(EngineFile, ConvReluGemmMatchesFloat64Reference) {
  auto e = Engine::from_bytes(convnet_engine(), "convnet.kiln");
  ASSERT_EQ(e->inputs().size(), 1u);
  EXPECT_EQ(e->inputs()[0].name, "X");
  EXPECT_EQ(e->inputs()[0].dtype, DataType::kFloat32);
  EXPECT_EQ(e->inputs()[0].shape, (std::vector<int64_t>{1, 1, 4, 4}));
  ASSERT_EQ(e->outputs().size(), 1u);
  EXPECT_EQ(e->outputs()[0].name, "Y");
  EXPECT_EQ(e->outputs()[0].shape, (std::vector<int64_t>{1, 3}));
  for (float shift : {0.f, 0.3f, -1.f}) {
    std::vector<float> x = x_values(shift);
    std::vector<float> y = run_convnet(*e, x);
    std::vector<double> ref = reference(x);
    ASSERT_EQ(y.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(y[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i])) << "shift " << shift << " i " << i;
  }
}

TEST(EngineFile, SummaryDescribesTheEngine) {
  auto e = Engine::from_bytes(convnet_engine(), "convnet.kiln");
  EngineSummary s = e->summary();
  EXPECT_EQ(s.format_version, format::kVersion);
  EXPECT_EQ(s.format_version, engine_format_version());
  EXPECT_EQ(s.producer, "kiln " + std::string(kiln_version()));
  EXPECT_EQ(s.target, "cpu");
  EXPECT_EQ(s.model_name, "convnet");
  EXPECT_EQ(s.file_bytes, convnet_engine().size());
  EXPECT_GE(s.weight_bytes, (18u + 2u + 24u + 3u) * 4u);
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.steps[0].op, "Conv");
  EXPECT_EQ(s.steps[0].name, "conv");
  EXPECT_EQ(s.steps[0].inputs, (std::vector<std::string>{"X", "W", "B"}));
  EXPECT_EQ(s.steps[1].op, "Relu");
  EXPECT_EQ(s.steps[2].op, "Flatten");
  EXPECT_EQ(s.steps[3].op, "Gemm");
  EXPECT_EQ(s.steps[3].outputs, (std::vector<std::string>{"Y"}));
}

TEST(EngineFile, BuildingTwiceGivesIdenticalBytes) {
  std::vector<uint8_t> a = build(convnet_onnx()), b = build(convnet_onnx());
  EXPECT_EQ(Engine::from_bytes(a)->summary().views.size(), 1u);  // the Flatten
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b);
  format::EngineHeader h;
  std::memcpy(&h, a.data(), sizeof h);
  EXPECT_EQ(h.weights_offset % format::kWeightAlign, 0u);
  EXPECT_EQ(h.weights_offset + h.weights_bytes, a.size());
}

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& stem)
      : path(fs::temp_directory_path() / (stem + "_" + std::to_string(getpid()) + ".kiln")) {}
  ~TempFile() { fs::remove(path); }
  void write(const std::vector<uint8_t>& bytes) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
};

TEST(EngineFile, LoadFromPath) {
  TempFile f("kiln_engine_file_test");
  f.write(convnet_engine());
  auto e = Engine::load(f.path);
  std::vector<float> y = run_convnet(*e, x_values());
  std::vector<double> ref = reference(x_values());
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], ref[i], 1e-5);
  // A truncated file on disk is reported with its path.
  std::vector<uint8_t> half(convnet_engine().begin(), convnet_engine().begin() + 100);
  f.write(half);
  try {
    Engine::load(f.path);
    FAIL() << "a truncated file loaded";
  } catch (const Error& err) {
    EXPECT_TRUE(has(err.what(), f.path.string() + ": file is truncated")) << err.what();
  }
  try {
    Engine::load(f.path.string() + ".missing");
    FAIL() << "a missing file loaded";
  } catch (const Error& err) {
    EXPECT_TRUE(has(err.what(), "cannot open the engine file")) << err.what();
  }
}

// ---- damaged files -------------------------------------------------------------------------------

TEST(EngineFileDamage, TruncatedAtEveryLength) {
  const std::vector<uint8_t>& full = convnet_engine();
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 200; ++n) lengths.push_back(n);
  for (size_t n : {size_t{256}, size_t{1000}, size_t{4095}, size_t{4096}, size_t{4097}, full.size() / 2,
                   full.size() - 64, full.size() - 1})
    lengths.push_back(n);
  for (size_t n : lengths) {
    ASSERT_LT(n, full.size());
    std::string e = load_error({full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)});
    ASSERT_FALSE(e.empty()) << "loaded when truncated to " << n << " bytes";
    EXPECT_TRUE(has(e, "crafted.kiln: ")) << e;
    if (n < sizeof(format::EngineHeader)) {
      EXPECT_TRUE(has(e, "too short to be a Kiln engine (" + std::to_string(n) + " bytes)")) << e;
    } else {
      EXPECT_TRUE(has(e, "file is truncated or its section table is damaged")) << n << ": " << e;
      EXPECT_TRUE(has(e, "expected " + std::to_string(full.size()) + " bytes, found " + std::to_string(n))) << e;
    }
  }
}

TEST(EngineFileDamage, TrailingBytes) {
  std::vector<uint8_t> b = convnet_engine();
  b.push_back(0);
  EXPECT_TRUE(has(load_error(b), "trailing bytes after the weights"));
}

TEST(EngineFileDamage, AnyFlippedByteAfterTheHeaderFailsTheChecksum) {
  const std::vector<uint8_t>& full = convnet_engine();
  std::vector<uint8_t> b = full;
  for (size_t i = sizeof(format::EngineHeader); i < b.size(); ++i) {
    b[i] ^= 0x5a;
    std::string e = load_error(b);
    b[i] ^= 0x5a;
    ASSERT_TRUE(has(e, "checksum mismatch: the file is damaged")) << "byte " << i << ": " << e;
  }
  EXPECT_TRUE(load_error(b).empty());
}

// The checksum covers the header too: every flipped header byte is refused.
TEST(EngineFileDamage, FlippedHeaderByteIsRefused) {
  const std::vector<uint8_t>& full = convnet_engine();
  for (size_t i = 0; i < sizeof(format::EngineHeader); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> b = full;
      b[i] ^= mask;
      EXPECT_FALSE(load_error(b).empty()) << "header byte " << i << " ^ " << int(mask) << " was accepted";
    }
  }
}

format::EngineHeader header_of(const std::vector<uint8_t>& b) {
  format::EngineHeader h;
  std::memcpy(&h, b.data(), sizeof h);
  return h;
}

std::vector<uint8_t> with_header(std::vector<uint8_t> b, const std::function<void(format::EngineHeader&)>& edit) {
  format::EngineHeader h = header_of(b);
  edit(h);
  std::memcpy(b.data(), &h, sizeof h);
  return b;
}

TEST(EngineFileDamage, WrongMagic) {
  std::string e = load_error(with_header(convnet_engine(), [](auto& h) { h.magic[3] = 'X'; }));
  EXPECT_TRUE(has(e, "not a Kiln engine file (bad magic)")) << e;
  std::vector<uint8_t> onnx = convnet_onnx();
  onnx.resize(std::max<size_t>(onnx.size(), 64));
  EXPECT_TRUE(has(load_error(onnx), "bad magic"));
}

TEST(EngineFileDamage, NewerFormatVersion) {
  std::string e = load_error(with_header(convnet_engine(), [](auto& h) { h.format_version = format::kVersion + 1; }));
  EXPECT_TRUE(has(e, "engine format version " + std::to_string(format::kVersion + 1) +
                         " is newer than this runtime reads (" + std::to_string(format::kVersion) + ")"))
      << e;
  e = load_error(with_header(convnet_engine(), [](auto& h) { h.format_version = 0; }));
  EXPECT_TRUE(has(e, "version 0 is invalid")) << e;
  // Format 1 had no views; such files are refused with the remedy rather than read half-way.
  e = load_error(with_header(convnet_engine(), [](auto& h) { h.format_version = format::kVersion - 1; }));
  EXPECT_TRUE(has(e, "engine format version " + std::to_string(format::kVersion - 1) +
                         " is older than this runtime reads (" + std::to_string(format::kVersion) +
                         "); rebuild the engine with `kiln optimize`"))
      << e;
  e = load_error(with_header(convnet_engine(), [](auto& h) { h.header_bytes = 128; }));
  EXPECT_TRUE(has(e, "unexpected header size")) << e;
}

TEST(EngineFileDamage, HeaderOffsetsBeyondTheFile) {
  const std::vector<uint8_t>& full = convnet_engine();
  const uint64_t size = full.size();
  std::vector<std::function<void(format::EngineHeader&)>> edits = {
      [](auto& h) { h.toc_offset = 4096; },
      [](auto& h) { h.toc_bytes = uint64_t{1} << 40; },
      [](auto& h) { h.toc_bytes = ~uint64_t{0}; },
      [&](auto& h) { h.weights_offset = format::align_up(size + 1, format::kWeightAlign); },
      [](auto& h) { h.weights_offset = ~uint64_t{0} - 4095; },
      [](auto& h) { h.weights_bytes = ~uint64_t{0}; },
      [](auto& h) { h.weights_bytes += 1; },
      [](auto& h) { h.weights_offset = 64; },  // overlaps the table of contents
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    std::string e = load_error(with_header(full, edits[i]));
    EXPECT_TRUE(has(e, "file is truncated or its section table is damaged")) << "edit " << i << ": " << e;
  }
}

// ---- crafted engines: valid checksum, bad contents ----------------------------------------------

struct TensorDesc {
  std::string name;
  uint8_t dtype = 1;
  std::vector<int64_t> shape;
  fb::TensorKind kind = fb::TensorKind::Activation;
  uint64_t offset = 0;
  int32_t base = -1;
};
struct StepDesc {
  uint16_t op = 0;
  std::string name;
  std::vector<int32_t> inputs, outputs;
  std::vector<uint8_t> attrs;
};
struct RangeDesc {
  std::string name;
  int64_t lo = 1, hi = 1;
  std::vector<int32_t> input_axes, output_axes;
  bool pad_rows = false;
  std::string why_exact;
};
struct EngineDesc;
struct BucketDesc {
  std::vector<int64_t> sizes;
  std::vector<EngineDesc> plan;  // one: the bucket's plan (a vector: EngineDesc is incomplete here)
};
struct EngineDesc {
  uint32_t format_version = format::kVersion;
  std::string producer, target, model_name;
  int cuda_version = 0, cudnn_version = 0, cublaslt_version = 0, kernel_arch = 0;
  std::vector<TensorDesc> tensors;
  std::vector<StepDesc> steps;
  std::vector<int32_t> inputs, outputs;
  uint64_t arena_bytes = 0;
  std::vector<uint8_t> weights;
  std::vector<RangeDesc> ranges;
  std::vector<BucketDesc> buckets;
  int find(const std::string& name) const {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == name) return static_cast<int>(i);
    throw std::runtime_error("no tensor " + name);
  }
};

EngineDesc decode_plan(const fb::Engine* root) {
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  EngineDesc d;
  d.producer = str(root->producer());
  d.target = str(root->target());
  d.model_name = str(root->model_name());
  d.cuda_version = root->cuda_version();
  d.cudnn_version = root->cudnn_version();
  d.cublaslt_version = root->cublaslt_version();
  d.kernel_arch = root->kernel_arch();
  for (const fb::Tensor* t : *root->tensors())
    d.tensors.push_back(
        {str(t->name()), t->dtype(), {t->shape()->begin(), t->shape()->end()}, t->kind(), t->offset(), t->base()});
  for (const fb::Step* s : *root->steps())
    d.steps.push_back({s->op(),
                       str(s->name()),
                       {s->inputs()->begin(), s->inputs()->end()},
                       {s->outputs()->begin(), s->outputs()->end()},
                       {s->attrs()->begin(), s->attrs()->end()}});
  d.inputs.assign(root->inputs()->begin(), root->inputs()->end());
  d.outputs.assign(root->outputs()->begin(), root->outputs()->end());
  d.arena_bytes = root->arena_bytes();
  if (root->ranges())
    for (const fb::Range* r : *root->ranges())
      d.ranges.push_back({str(r->name()),
                          r->lo(),
                          r->hi(),
                          {r->input_axes()->begin(), r->input_axes()->end()},
                          r->output_axes() ? std::vector<int32_t>(r->output_axes()->begin(), r->output_axes()->end())
                                           : std::vector<int32_t>{},
                          r->pad_rows(),
                          str(r->why_exact())});
  if (root->buckets())
    for (const fb::Bucket* b : *root->buckets())
      d.buckets.push_back({{b->sizes()->begin(), b->sizes()->end()}, {decode_plan(b->plan())}});
  return d;
}

EngineDesc decode(const std::vector<uint8_t>& file) {
  format::EngineHeader h = header_of(file);
  EngineDesc d = decode_plan(fb::GetEngine(file.data() + h.toc_offset));
  d.format_version = h.format_version;
  d.weights.assign(file.begin() + static_cast<std::ptrdiff_t>(h.weights_offset), file.end());
  return d;
}

flatbuffers::Offset<fb::Engine> encode_plan(flatbuffers::FlatBufferBuilder& fbb, const EngineDesc& d) {
  std::vector<flatbuffers::Offset<fb::Bucket>> buckets;
  for (const BucketDesc& b : d.buckets) {
    auto plan = encode_plan(fbb, b.plan.at(0));
    buckets.push_back(fb::CreateBucket(fbb, fbb.CreateVector(b.sizes), plan));
  }
  std::vector<flatbuffers::Offset<fb::Range>> ranges;
  for (const RangeDesc& r : d.ranges)
    ranges.push_back(fb::CreateRange(fbb, fbb.CreateString(r.name), r.lo, r.hi, fbb.CreateVector(r.input_axes),
                                     fbb.CreateVector(r.output_axes), r.pad_rows, fbb.CreateString(r.why_exact)));
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const TensorDesc& t : d.tensors) {
    auto name = fbb.CreateString(t.name);
    auto shape = fbb.CreateVector(t.shape);
    tensors.push_back(fb::CreateTensor(fbb, name, t.dtype, shape, t.kind, t.offset, t.base));
  }
  std::vector<flatbuffers::Offset<fb::Step>> steps;
  for (const StepDesc& s : d.steps) {
    auto name = fbb.CreateString(s.name);
    auto ins = fbb.CreateVector(s.inputs);
    auto outs = fbb.CreateVector(s.outputs);
    auto attrs = fbb.CreateVector(s.attrs);
    steps.push_back(fb::CreateStep(fbb, s.op, name, ins, outs, attrs));
  }
  auto producer = fbb.CreateString(d.producer);
  auto target = fbb.CreateString(d.target);
  auto model = fbb.CreateString(d.model_name);
  auto tv = fbb.CreateVector(tensors);
  auto sv = fbb.CreateVector(steps);
  auto iv = fbb.CreateVector(d.inputs);
  auto ov = fbb.CreateVector(d.outputs);
  auto rv = d.ranges.empty() ? 0 : fbb.CreateVector(ranges);
  auto bv = d.buckets.empty() ? 0 : fbb.CreateVector(buckets);
  return fb::CreateEngine(fbb, producer, target, model, tv, sv, iv, ov, d.arena_bytes, rv, bv, d.cuda_version,
                          d.cudnn_version, d.cublaslt_version, d.kernel_arch);
}

// Writes d as an engine file with a correct header and checksum.
std::vector<uint8_t> encode(const EngineDesc& d) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.ForceDefaults(true);
  fbb.Finish(encode_plan(fbb, d));

  format::EngineHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.format_version = d.format_version;
  h.header_bytes = sizeof h;
  h.toc_offset = sizeof h;
  h.toc_bytes = fbb.GetSize();
  h.weights_offset = format::align_up(h.toc_offset + h.toc_bytes, format::kWeightAlign);
  h.weights_bytes = d.weights.size();
  std::vector<uint8_t> file(h.weights_offset + h.weights_bytes, 0);
  std::memcpy(file.data() + h.toc_offset, fbb.GetBufferPointer(), h.toc_bytes);
  std::copy(d.weights.begin(), d.weights.end(), file.begin() + static_cast<std::ptrdiff_t>(h.weights_offset));
  std::memcpy(file.data(), &h, sizeof h);  // checksum 0 while it is computed
  h.checksum = format::checksum(file);
  std::memcpy(file.data(), &h, sizeof h);
  return file;
}

std::string crafted_error(const std::function<void(EngineDesc&)>& edit) {
  EngineDesc d = decode(convnet_engine());
  edit(d);
  return load_error(encode(d));
}

TEST(EngineFileCrafted, UnmodifiedRebuildLoadsAndRuns) {
  std::vector<uint8_t> b = encode(decode(convnet_engine()));
  auto e = Engine::from_bytes(b);
  std::vector<double> ref = reference(x_values());
  std::vector<float> y = run_convnet(*e, x_values());
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], ref[i], 1e-5);
}

// Engines say what they need (issue 41): a sound engine whose header names a Jetson's GPU (sm_87
// Orin, sm_110 Thor) and JetPack's libraries loads, reports them, and a context refuses it naming
// the GPU and what to do, here on a machine without a GPU (the GPU tests refuse it on an H200).
TEST(EngineFileCrafted, JetsonEnginesSayWhatTheyNeed) {
  for (const char* arch : {"sm_87", "sm_110"}) {
    EngineDesc d = decode(convnet_engine());
    d.target = arch;
    d.cuda_version = 12060;
    d.cudnn_version = 90300;
    d.cublaslt_version = 120604;
    auto e = Engine::from_bytes(encode(d), "jetson.kiln");
    EXPECT_TRUE(e->is_gpu());
    const EngineSummary s = e->summary();
    EXPECT_EQ(s.target, arch);
    EXPECT_EQ(s.cuda_version, 12060);
    EXPECT_EQ(s.cudnn_version, 90300);
    EXPECT_EQ(s.cublaslt_version, 120604);
    EXPECT_EQ(gpu::describe_libraries({s.cuda_version, s.cudnn_version, s.cublaslt_version}),
              "CUDA 12.6, cuDNN 9.3.0, cuBLASLt 12.6.4");
    if (gpu::gpu_available()) continue;  // context_gpu_test checks the refusal on a GPU
    try {
      e->create_context();
      ADD_FAILURE() << "a context of an engine for " << arch << " on a machine without a GPU";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_TRUE(has(m, "jetson.kiln: the engine targets " + gpu::describe_arch(arch))) << m;
      EXPECT_TRUE(has(m, "--device cpu")) << m;
    }
  }
  EXPECT_EQ(gpu::describe_arch("sm_87"), "sm_87 (Jetson Orin)");
  EXPECT_EQ(gpu::describe_arch("sm_110"), "sm_110 (Jetson Thor)");
  EXPECT_EQ(gpu::describe_arch("sm_999"), "sm_999");
}

// An engine built with --target-arch sm_87 on an H200 records the limit its contexts run it with;
// a value no GPU has is refused.
TEST(EngineFileCrafted, KernelArchLimitIsRecorded) {
  EngineDesc d = decode(convnet_engine());
  d.target = "sm_90";
  d.kernel_arch = 87;
  EXPECT_EQ(Engine::from_bytes(encode(d))->summary().kernel_arch, 87);
  for (int bad : {-1, 7, 1000}) {
    d.kernel_arch = bad;
    const std::string e = load_error(encode(d));
    EXPECT_TRUE(has(e, "kernel architecture " + std::to_string(bad) + " is not a GPU's")) << e;
  }
  d.target = "cpu";
  d.kernel_arch = 87;
  const std::string e = load_error(encode(d));
  EXPECT_TRUE(has(e, "a CPU engine records GPU kernels (sm_87)")) << e;
}

// The limit's names and shared memory; it belongs to the thread that sets it.
TEST(KernelArch, NamesLimitsAndThreads) {
  EXPECT_EQ(gpu::parse_arch("sm_87"), 87);
  EXPECT_EQ(gpu::parse_arch("87"), 87);
  EXPECT_EQ(gpu::parse_arch("8.7"), 87);
  EXPECT_EQ(gpu::parse_arch("sm_110"), 110);
  EXPECT_EQ(gpu::parse_arch("11.0"), 110);
  for (const char* bad : {"", "sm_", "sm_8x", "ampere", "8", "08", "sm_1100", "8.77", ".87"})
    EXPECT_EQ(gpu::parse_arch(bad), 0) << bad;
  EXPECT_EQ(gpu::max_block_smem_of(87), 166912u);  // 163 KiB: Orin
  EXPECT_EQ(gpu::max_block_smem_of(90), 232448u);  // 227 KiB: Hopper
  EXPECT_EQ(gpu::max_block_smem_of(0), 48u * 1024);
  const int before = gpu::kernel_arch_limit();
  {
    const gpu::KernelArchScope s(87);
    EXPECT_EQ(gpu::kernel_arch_limit(), 87);
    int other = -1;
    std::thread([&] { other = gpu::kernel_arch_limit(); }).join();
    EXPECT_EQ(other, before);
    const gpu::KernelArchScope none(0);  // 0 leaves it as it is
    EXPECT_EQ(gpu::kernel_arch_limit(), 87);
  }
  EXPECT_EQ(gpu::kernel_arch_limit(), before);
}

// --memory-limit's sizes, in powers of 1024.
TEST(DeviceMemory, ParseBytes) {
  EXPECT_EQ(gpu::parse_bytes("2G", "--memory-limit"), size_t{2} << 30);
  EXPECT_EQ(gpu::parse_bytes("1.5GiB", "--memory-limit"), size_t{3} << 29);
  EXPECT_EQ(gpu::parse_bytes("512M", "--memory-limit"), size_t{512} << 20);
  EXPECT_EQ(gpu::parse_bytes("64k", "--memory-limit"), size_t{64} << 10);
  EXPECT_EQ(gpu::parse_bytes("1000000", "--memory-limit"), size_t{1000000});
  for (const char* bad : {"", "G", "2X", "-1G", "0", "2 G", "nanG", "1e30G"}) {
    try {
      gpu::parse_bytes(bad, "--memory-limit");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), "--memory-limit " + std::string(bad) + ": expected a size such as 2G")) << e.what();
    }
  }
}

// What makes a GPU engine unusable on another machine, each named with both sides: the GPU, the
// CUDA major version, cuDNN's major.minor, cuBLASLt's major; versions 0 (unknown) are not compared.
TEST(EngineFileCrafted, MismatchNamesBothSides) {
  const gpu::LibraryVersions orin{12060, 90300, 120604}, h200{13000, 91900, 130100};
  EXPECT_EQ(gpu::engine_mismatch("sm_90", h200, "sm_90", h200), "");
  EXPECT_EQ(gpu::engine_mismatch("sm_90", h200, "sm_90", {13020, 91905, 130400}), "");  // patch and minor releases
  EXPECT_EQ(gpu::engine_mismatch("sm_87", orin, "sm_90", h200),
            "the engine was built for sm_87 (Jetson Orin) but this GPU is sm_90 (Hopper: H100, H200)");
  EXPECT_EQ(gpu::engine_mismatch("sm_87", orin, "sm_87", h200),
            "the engine was built with CUDA 12.6 but this Kiln runs CUDA 13.0");
  EXPECT_TRUE(has(gpu::engine_mismatch("sm_87", {13000, 90300, 130100}, "sm_87", h200),
                  "the engine was built with cuDNN 9.3.0 but this machine has cuDNN 9.19.0"));
  EXPECT_EQ(gpu::engine_mismatch("sm_87", {13000, 91900, 120604}, "sm_87", h200),
            "the engine was built with cuBLASLt 12.6.4 but this machine has cuBLASLt 13.1.0");
  EXPECT_EQ(gpu::engine_mismatch("sm_87", {0, 0, 0}, "sm_87", h200), "");
}

TEST(EngineFileCrafted, OutputShapeThatTheOpDoesNotCompute) {
  std::string e = crafted_error([](EngineDesc& d) { d.tensors[d.find("Y")].shape = {1, 2}; });
  EXPECT_TRUE(has(e, "step 'gemm' (Gemm) output 'Y' is recorded as float32[1,2] but the op computes float32[1,3]"))
      << e;
  e = crafted_error([](EngineDesc& d) { d.tensors[d.find("r")].shape = {1, 2, 1, 2}; });
  EXPECT_TRUE(
      has(e, "step 'relu' (Relu) output 'r' is recorded as float32[1,2,1,2] but the op computes float32[1,2,2,2]"))
      << e;
  e = crafted_error([](EngineDesc& d) { d.tensors[d.find("c")].dtype = static_cast<uint8_t>(DataType::kFloat16); });
  EXPECT_TRUE(
      has(e, "step 'conv' (Conv) output 'c' is recorded as float16[1,2,2,2] but the op computes float32[1,2,2,2]"))
      << e;
}

TEST(EngineFileCrafted, StepReadingTensorIndexOutOfRange) {
  std::string e = crafted_error([](EngineDesc& d) { d.steps[0].inputs[0] = 999; });
  EXPECT_TRUE(has(e, "step 'conv' (Conv) refers to tensor 999, which does not exist")) << e;
  e = crafted_error([](EngineDesc& d) { d.steps[1].inputs[0] = -2; });
  EXPECT_TRUE(has(e, "step 'relu' (Relu) refers to tensor -2, which does not exist")) << e;
  e = crafted_error([](EngineDesc& d) { d.steps[3].outputs[0] = static_cast<int32_t>(d.tensors.size()); });
  EXPECT_TRUE(has(e, "step 'gemm' (Gemm) refers to tensor " + std::to_string(decode(convnet_engine()).tensors.size())))
      << e;
  e = crafted_error([](EngineDesc& d) { d.inputs[0] = 77; });
  EXPECT_TRUE(has(e, "engine input refers to tensor 77")) << e;
  e = crafted_error([](EngineDesc& d) { d.outputs[0] = -1; });
  EXPECT_TRUE(has(e, "engine output refers to tensor -1")) << e;
}

TEST(EngineFileCrafted, UnknownOpCode) {
  std::string e = crafted_error([](EngineDesc& d) { d.steps[1].op = 9999; });
  EXPECT_TRUE(has(e, "step 'relu' has unknown op code 9999")) << e;
  e = crafted_error([](EngineDesc& d) { d.steps[1].op = static_cast<uint16_t>(kOpCount); });
  EXPECT_TRUE(has(e, "unknown op code " + std::to_string(kOpCount))) << e;
}

TEST(EngineFileCrafted, OtherLies) {
  std::string e = crafted_error([](EngineDesc& d) { d.tensors[d.find("W")].offset = d.weights.size(); });
  EXPECT_TRUE(has(e, "tensor 'W' lies outside its memory region")) << e;
  e = crafted_error([](EngineDesc& d) { d.tensors[d.find("r")].offset = d.arena_bytes; });
  EXPECT_TRUE(has(e, "tensor 'r' lies outside its memory region")) << e;
  e = crafted_error([](EngineDesc& d) { d.tensors[d.find("W2")].dtype = 200; });
  EXPECT_TRUE(has(e, "tensor 'W2' has an invalid element type")) << e;
  e = crafted_error([](EngineDesc& d) { d.tensors[d.find("X")].shape = {1, -4, 4, 4}; });
  EXPECT_TRUE(has(e, "tensor 'X' has an invalid dimension -4")) << e;
  e = crafted_error([](EngineDesc& d) { d.tensors[d.find("X")].shape = {1 << 30, 1 << 30, 1 << 30}; });
  EXPECT_TRUE(has(e, "tensor 'X' is implausibly large")) << e;
  e = crafted_error([](EngineDesc& d) { d.steps[2].outputs[0] = d.find("X"); });
  EXPECT_TRUE(has(e, "step 'flatten' (Flatten) writes 'X', which is an input, a weight or written twice")) << e;
  e = crafted_error([](EngineDesc& d) { std::swap(d.steps[1], d.steps[2]); });
  EXPECT_TRUE(has(e, "step 'flatten' (Flatten) reads 'r' before it is written")) << e;
  e = crafted_error([](EngineDesc& d) { d.steps[0].attrs.resize(3); });
  EXPECT_TRUE(has(e, "step 'conv' (Conv): ")) << e;
  e = crafted_error([](EngineDesc& d) { d.steps.pop_back(); });
  EXPECT_TRUE(has(e, "engine output 'Y' is never computed")) << e;
  e = crafted_error([](EngineDesc& d) { d.arena_bytes = uint64_t{1} << 50; });
  EXPECT_TRUE(has(e, "activation arena size is implausible")) << e;
}

// ---- crafted views ---------------------------------------------------------------------------------

// The same model with its Flatten output 'f' a view of the Relu output 'r' (no Flatten step).
const std::vector<uint8_t>& views_engine() {
  static const std::vector<uint8_t> bytes = build(convnet_onnx());
  return bytes;
}

std::string crafted_view_error(const std::function<void(EngineDesc&)>& edit) {
  EngineDesc d = decode(views_engine());
  edit(d);
  return load_error(encode(d));
}

TEST(EngineFileViews, ViewEngineRoundTripsAndRuns) {
  EngineDesc d = decode(views_engine());
  ASSERT_EQ(d.steps.size(), 3u);
  EXPECT_EQ(d.tensors[d.find("f")].base, d.find("r"));
  EXPECT_EQ(d.tensors[d.find("f")].offset, 0u);
  auto e = Engine::from_bytes(encode(d));
  const EngineSummary s = e->summary();
  ASSERT_EQ(s.views.size(), 1u);
  EXPECT_EQ(s.views[0].name, "f");
  EXPECT_EQ(s.views[0].base, "r");
  EXPECT_EQ(s.views[0].bytes, 32u);
  std::vector<double> ref = reference(x_values());
  std::vector<float> y = run_convnet(*e, x_values());
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], ref[i], 1e-5);
}

TEST(EngineFileViews, BaseThatDoesNotExist) {
  for (int32_t bad : {999, -2}) {
    std::string e = crafted_view_error([&](EngineDesc& d) { d.tensors[d.find("f")].base = bad; });
    EXPECT_TRUE(has(e, "tensor 'f' is a view of tensor " + std::to_string(bad) + ", which does not exist")) << e;
  }
}

TEST(EngineFileViews, OnlyActivationsAreViews) {
  std::string e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("Y")].base = d.find("r"); });
  EXPECT_TRUE(has(e, "tensor 'Y' is a view but not an activation")) << e;
  e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("W2")].base = d.find("r"); });
  EXPECT_TRUE(has(e, "tensor 'W2' is a view but not an activation")) << e;
}

TEST(EngineFileViews, BaseMustBeAnActivationOrOutput) {
  for (const char* base : {"X", "W"}) {
    std::string e = crafted_view_error([&](EngineDesc& d) { d.tensors[d.find("f")].base = d.find(base); });
    EXPECT_TRUE(has(e, "tensor 'f' is a view of '" + std::string(base) + "', which is not an activation or output"))
        << e;
  }
}

TEST(EngineFileViews, BaseThatIsAViewItself) {
  std::string e = crafted_view_error([](EngineDesc& d) {
    d.tensors[d.find("c")].base = d.find("f");  // c -> f -> r: a chain, not a root
  });
  EXPECT_TRUE(has(e, "tensor 'c' is a view of 'f', which is a view itself")) << e;
}

TEST(EngineFileViews, ElementTypeAlignmentAndBounds) {
  std::string e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("f")].dtype = 10; });
  EXPECT_TRUE(has(e, "tensor 'f' is float16 but its base 'r' is float32; a view has its base's element type")) << e;
  e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("f")].offset = 2; });
  EXPECT_TRUE(has(e, "tensor 'f' lies at byte 2 of 'r', which is not a multiple of its element size")) << e;
  e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("f")].offset = 4; });
  EXPECT_TRUE(has(e, "tensor 'f' lies outside its base 'r' (bytes 4 to 36 of 32)")) << e;
  e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("f")].offset = ~uint64_t{0} - 3; });
  EXPECT_TRUE(has(e, "tensor 'f' lies outside its base 'r'")) << e;
}

TEST(EngineFileViews, ReadOfAViewBeforeItsBaseIsWritten) {
  // The Gemm reads f, a view of r, before the Relu writes r.
  std::string e = crafted_view_error([](EngineDesc& d) { std::swap(d.steps[1], d.steps[2]); });
  EXPECT_TRUE(has(e, "step 'gemm' (Gemm) reads 'f' before it is written")) << e;
  // f moved into a base that no step writes.
  e = crafted_view_error([](EngineDesc& d) {
    TensorDesc spare{"spare", 1, {1, 8}, fb::TensorKind::Activation, 0};
    d.tensors.push_back(spare);
    d.tensors[d.find("f")].base = d.find("spare");
  });
  EXPECT_TRUE(has(e, "step 'gemm' (Gemm) reads 'f' before it is written")) << e;
}

TEST(EngineFileViews, TwoStepsWritingTheSameBytes) {
  // c made a view of r: the Conv writes r's bytes, then the Relu writes them again (in place).
  std::string e = crafted_view_error([](EngineDesc& d) { d.tensors[d.find("c")].base = d.find("r"); });
  EXPECT_TRUE(has(e, "step 'relu' (Relu) writes 'r', whose bytes in 'r' another step already wrote")) << e;
}

// Every tensor made a view of every tensor at a spread of offsets: each engine is refused with a
// kiln::Error, or loads and runs (its kernels stay inside the arena); never anything else.
TEST(EngineFileViews, AnyBaseAndOffsetIsRefusedOrRuns) {
  const EngineDesc original = decode(views_engine());
  int loaded = 0, refused = 0;
  for (size_t t = 0; t < original.tensors.size(); ++t)
    for (int32_t base = -1; base < static_cast<int32_t>(original.tensors.size()); ++base)
      for (uint64_t offset : {uint64_t{0}, uint64_t{4}, uint64_t{16}, uint64_t{28}, uint64_t{64}}) {
        EngineDesc d = original;
        d.tensors[t].base = base;
        d.tensors[t].offset = offset;
        try {
          auto e = Engine::from_bytes(encode(d));
          run_convnet(*e, x_values());
          ++loaded;
        } catch (const Error&) {
          ++refused;
        }
      }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}

// ---- range engines (format 5): crafted ranges and bucket plans -----------------------------------

// The convnet over a symbolic batch, built for batches 1..4: plans of 1, 2 and 4.
const std::vector<uint8_t>& range_engine() {
  static const std::vector<uint8_t> bytes = [] {
    onnx::ModelProto m;
    m.ParseFromArray(convnet_onnx().data(), static_cast<int>(convnet_onnx().size()));
    for (auto* io : {m.mutable_graph()->mutable_input(0), m.mutable_graph()->mutable_output(0)})
      io->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("N");
    graph::Graph g = graph::import_onnx_bytes(serialize(m), "model.onnx", "");
    build::BuildOptions o;
    o.batch_range = {1, 4};
    o.batch = 4;
    return build::build_engine(g, o);
  }();
  return bytes;
}

std::string crafted_range_error(const std::function<void(EngineDesc&)>& edit) {
  EngineDesc d = decode(range_engine());
  edit(d);
  return load_error(encode(d));
}

TEST(EngineFileRanges, RebuiltRangeEngineLoadsAndRunsEveryPlan) {
  auto e = Engine::from_bytes(encode(decode(range_engine())), "range.kiln");
  ASSERT_EQ(e->ranges().size(), 1u);
  EXPECT_EQ(e->ranges()[0].buckets, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_TRUE(e->ranges()[0].pad_rows);
  auto ctx = e->create_context(1);
  for (int64_t n : {1, 2, 3, 4}) {
    std::vector<float> x;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<float> row = x_values(0.1f * static_cast<float>(i));
      x.insert(x.end(), row.begin(), row.end());
    }
    ctx->set_input_shape("X", {n, 1, 4, 4});
    ctx->set_input("X", x.data(), x.size() * 4);
    ctx->run();
    std::vector<float> y(static_cast<size_t>(n) * 3);
    ASSERT_EQ(ctx->output("Y").size(), y.size() * 4);
    std::memcpy(y.data(), ctx->output("Y").data(), y.size() * 4);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<double> ref = reference(x_values(0.1f * static_cast<float>(i)));
      for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(y[static_cast<size_t>(i * 3) + k], ref[k], 1e-5) << n << " " << i;
    }
  }
}

TEST(EngineFileRanges, DamagedRangesAndBucketsAreRefused) {
  struct Case {
    std::function<void(EngineDesc&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](EngineDesc& d) { d.ranges[0].lo = 0; }, "range 'batch' has invalid bounds 0..4"},
      {[](EngineDesc& d) { d.ranges[0].hi = 8; }, "range 'batch' ends at 8 but input 'X' has 4 on axis 0"},
      {[](EngineDesc& d) { d.ranges[0].input_axes = {5}; },
       "range 'batch' names axis 5 of input 'X', which has rank 4"},
      {[](EngineDesc& d) { d.ranges[0].input_axes = {}; }, "range 'batch' does not give an axis for every input"},
      {[](EngineDesc& d) { d.ranges[0].output_axes = {1}; }, "names axis 1 of output 'Y' [4,3] as its rows"},
      {[](EngineDesc& d) { d.ranges.push_back(d.ranges[0]); }, "both range axis 0 of input 'X'"},
      {[](EngineDesc& d) { d.buckets[0].sizes = {9}; }, "bucket [9] is outside range 'batch'"},
      {[](EngineDesc& d) { d.buckets[1].sizes = {1}; }, "bucket [1] is listed twice"},
      {[](EngineDesc& d) { std::swap(d.buckets[0], d.buckets[1]); }, "is out of order"},
      {[](EngineDesc& d) {
         d.buckets[0].sizes = {2};
         d.buckets[1].sizes = {3};
       },
       "bucket [2] input 'X' is [1,1,4,4], expected [2,1,4,4]"},
      {[](EngineDesc& d) { d.buckets[0].plan[0].target = "sm_90"; }, "bucket [1] is for sm_90"},
      {[](EngineDesc& d) {
         d.target = "sm_90";
         for (auto& b : d.buckets) b.plan[0].target = "sm_90";
         d.buckets[0].plan[0].kernel_arch = 87;
       },
       "bucket [1] is limited to sm_87's kernels, the engine to none"},
      {[](EngineDesc& d) { d.buckets[0].plan[0].buckets = {d.buckets[1]}; }, "plan has ranges or buckets of its own"},
      {[](EngineDesc& d) { d.ranges.clear(); }, "engine has bucket plans but no ranges"},
      {[](EngineDesc& d) {
         d.buckets[0].plan[0].tensors[0].shape = {1, 1, 4, 5};
       },
       "bucket [1]"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string e = crafted_range_error(cases[i].edit);
    EXPECT_TRUE(has(e, cases[i].want)) << "case " << i << ": " << e;
  }
}

TEST(EngineFileCrafted, MalformedTableOfContentsWithValidChecksum) {
  std::vector<uint8_t> b = convnet_engine();
  format::EngineHeader h = header_of(b);
  for (uint64_t i = 0; i < h.toc_bytes; ++i) b[h.toc_offset + i] = static_cast<uint8_t>(i * 131 + 7);
  std::memcpy(b.data(), &h, sizeof h);
  h.checksum = format::checksum(b);  // computed as if the checksum field were zero
  std::memcpy(b.data(), &h, sizeof h);
  EXPECT_TRUE(has(load_error(b), "table of contents is malformed"));
}

// ---- Context ---------------------------------------------------------------------------------------

std::string context_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineContext, Errors) {
  auto e = Engine::from_bytes(convnet_engine());
  auto ctx = e->create_context(1);
  std::vector<float> x = x_values();
  std::string m = context_error([&] { ctx->set_input("input", x.data(), 64); });
  EXPECT_TRUE(has(m, "the engine has no input named 'input' (its inputs: X)")) << m;
  m = context_error([&] { ctx->set_input("X", x.data(), 60); });
  EXPECT_TRUE(has(m, "input 'X' expects float32[1,1,4,4] = 64 bytes, got 60")) << m;
  m = context_error([&] { ctx->run(); });
  EXPECT_TRUE(has(m, "input 'X' was not set")) << m;
  std::vector<float> y(3);
  m = context_error([&] { ctx->set_output("Y", y.data(), 8); });
  EXPECT_TRUE(has(m, "output 'Y' expects float32[1,3] = 12 bytes, got 8")) << m;
  m = context_error([&] { ctx->output("Z"); });
  EXPECT_TRUE(has(m, "the engine has no output named 'Z' (its outputs: Y)")) << m;
  // Bound output buffers receive the result.
  ctx->set_input("X", x.data(), 64);
  ctx->set_output("Y", y.data(), 12);
  ctx->run();
  std::vector<double> ref = reference(x);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], ref[i], 1e-5);
  EXPECT_EQ(static_cast<const void*>(ctx->output("Y").data()), static_cast<const void*>(y.data()));
  // Device memory is for GPU engines.
  m = context_error([&] { ctx->output_device("Y"); });
  EXPECT_TRUE(has(m, "output_device: this is a CPU engine")) << m;
  m = context_error([&] { ctx->set_output_device("Y", y.data(), 12); });
  EXPECT_TRUE(has(m, "set_output_device: this is a CPU engine")) << m;
}

std::vector<uint8_t> gather_engine() {
  onnx::ModelProto m = new_model("gather");
  auto* g = m.mutable_graph();
  add_io(g->mutable_input(), "idx", onnx::TensorProto::INT64, {2});
  add_io(g->mutable_output(), "out", onnx::TensorProto::FLOAT, {2, 2});
  add_init(g, "table", {3, 2}, {1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  add_node(g, "Gather", "lookup", {"table", "idx"}, {"out"});
  return build(serialize(m));
}

TEST(EngineContext, GatherIndexOutOfRangeAtRunTimeNamesTheStep) {
  auto e = Engine::from_bytes(gather_engine());
  auto ctx = e->create_context(1);
  std::vector<int64_t> idx = {2, -3};
  ctx->set_input("idx", idx.data(), 16);
  ctx->run();
  std::vector<float> out(4);
  std::memcpy(out.data(), ctx->output("out").data(), 16);
  EXPECT_EQ(out, (std::vector<float>{5.f, 6.f, 1.f, 2.f}));
  for (int64_t bad : {int64_t{3}, int64_t{-4}, int64_t{1} << 40}) {
    idx = {0, bad};
    std::string m = context_error([&] { ctx->run(); });
    EXPECT_TRUE(has(m, "step 'lookup' (Gather) failed")) << m;
    EXPECT_TRUE(has(m, "index " + std::to_string(bad) + " is out of range")) << m;
  }
  idx = {1, 1};  // the context still works after a failed run
  ctx->run();
  std::memcpy(out.data(), ctx->output("out").data(), 16);
  EXPECT_EQ(out, (std::vector<float>{3.f, 4.f, 3.f, 4.f}));
}

TEST(EngineContext, SeveralContextsOnSeveralThreadsAgree) {
  auto e = Engine::from_bytes(convnet_engine());
  constexpr int kThreads = 4, kRuns = 30;
  std::vector<std::vector<float>> want(kRuns);
  for (int r = 0; r < kRuns; ++r) want[r] = run_convnet(*e, x_values(0.1f * static_cast<float>(r)));
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto ctx = e->create_context(t % 2 + 1);
      for (int k = 0; k < kRuns; ++k) {
        int r = (k + t * 7) % kRuns;
        std::vector<float> x = x_values(0.1f * static_cast<float>(r));
        ctx->set_input("X", x.data(), x.size() * 4);
        ctx->run();
        auto out = ctx->output("Y");
        if (out.size() != 12 || std::memcmp(out.data(), want[r].data(), 12) != 0) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace kiln
