// Training on the GPU, whole steps at a time: LeNet-5, ResNet-8 and a network with every layer
// kind match the CPU backend over several steps; the same seed gives the same bits; a step records
// into a CUDA graph (so it neither synchronizes nor allocates) and the graph computes the same
// bits; mixed precision learns like float32 and its loss scale skips overflowing steps; the
// trainer resumes a GPU run to the same bits; data parallel over two GPUs (when there are two)
// matches one GPU with the whole batch, also for uneven and empty shares.
#include <cuda_runtime_api.h>

#include <filesystem>
#include <memory>

#include "train/cpu_backend.h"
#include "train/cuda_backend.h"
#include "train/data_parallel.h"
#include "train/network.h"
#include "train/solver.h"
#include "train/trainer.h"
#include "train_gpu_harness.h"

namespace kiln::train {
namespace {

using gpu_test::get;
using gpu_test::put;
using gpu_test::random_values;
using gpu_test::rel_error;

// Every layer kind: grouped convolution, batch norm on images and features, residual add, concat,
// both poolings, dropout and all activations.
const char* kEveryLayer = R"(
name: "every_layer"
layer { name: "c1" conv { out_channels: 8 kernel: 3 pad: 1 } }
layer { name: "bn1" batch_norm {} }
layer { name: "r1" relu {} }
layer { name: "c2" conv { out_channels: 8 kernel: 3 pad: 1 groups: 2 bias: false } }
layer { name: "g" gelu {} }
layer { name: "add" add {} input: "g" input: "r1" }
layer { name: "cat" concat {} input: "add" input: "c1" }
layer { name: "pool" max_pool { kernel: 2 } }
layer { name: "ap" avg_pool { kernel: 3 stride: 1 pad: 1 } }
layer { name: "lr" leaky_relu { alpha: 0.1 } }
layer { name: "drop" dropout { p: 0.25 } }
layer { name: "flat" flatten {} }
layer { name: "fc1" linear { out_features: 32 } }
layer { name: "bnf" batch_norm {} }
layer { name: "s" sigmoid {} }
layer { name: "fc2" linear { out_features: 24 } }
layer { name: "t" tanh {} }
layer { name: "fc3" linear {} }
)";

struct NetCase {
  std::string name;
  Shape image;
  int64_t batch;
  SolverKind solver;
};

const NetCase kLenet{"lenet5", {1, 28, 28}, 32, SolverKind::kSgd};
const NetCase kResnet{"resnet8", {3, 16, 16}, 16, SolverKind::kAdam};
const NetCase kEvery{"every_layer", {3, 12, 12}, 24, SolverKind::kSgd};

NetDescription description(const std::string& name) {
  return name == "every_layer" ? parse_net_description(kEveryLayer, "every_layer") : load_net_description(name);
}

// A network, its solver and metrics on one backend, stepping through fixed random batches.
struct Trial {
  Trial(Backend& be, const NetCase& c)
      : be(be), c(c), net(description(c.name), {c.image, 10, c.batch}, be, be.compute_dtype()) {
    net.init_params(7);
    SolverConfig sc;
    sc.kind = c.solver;
    sc.lr = c.solver == SolverKind::kSgd ? 0.05 : 1e-3;
    sc.weight_decay = 1e-4;
    solver = std::make_unique<Solver>(sc, be, net.params());
    metrics = be.alloc(DataType::kFloat64, {kMetricsSize});
    const double init[kMetricsSize] = {0, 0, 0, -1};
    be.upload(init, metrics);
  }

  // Uploads batch `b` (the same for every backend): n images and their labels.
  void load(int64_t b, int64_t n) {
    const Tensor images = net.images().with_batch(n);
    be.upload(random_values(images.numel(), 1000 + b).data(), images);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>((i * 3 + b) % 10);
    be.upload(labels.data(), net.labels().with_batch(n));
  }

  // One training step on batch `step`; returns the loss tensor.
  Tensor step(int64_t step, bool upload = true) {
    if (upload) load(step, c.batch);
    net.forward(c.batch, true, 5, step);
    const Tensor loss = net.loss(step, metrics);
    net.backward(5, step);
    solver->step(step, c.solver == SolverKind::kSgd ? 0.05 : 1e-3);
    return loss;
  }

  std::vector<float> losses(int steps) {
    std::vector<float> out;
    for (int s = 0; s < steps; ++s) out.push_back(get(be, step(s))[0]);
    return out;
  }

  std::vector<std::vector<float>> state() {
    std::vector<std::vector<float>> out;
    for (const auto& [name, t] : net.state()) out.push_back(get(be, t));
    return out;
  }

  Backend& be;
  NetCase c;
  Network net;
  std::unique_ptr<Solver> solver;
  Tensor metrics;
};

void expect_states_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                         double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(rel_error(got[i], want[i]), tol) << what << ", state tensor " << i;
}

class TrainGpuSteps : public ::testing::Test {
 protected:
  void SetUp() override { KILN_SKIP_WITHOUT_GPU(); }
};

TEST_F(TrainGpuSteps, StepsMatchTheCpu) {
  for (const NetCase& c : {kLenet, kResnet, kEvery}) {
    CpuBackend cpu(4);
    CudaBackend gpu(0, false);
    Trial a(cpu, c), b(gpu, c);
    const std::vector<float> want = a.losses(3), got = b.losses(3);
    EXPECT_LE(rel_error(got, want), 1e-4) << c.name << ": losses";
    expect_states_close(b.state(), a.state(), 2e-3, c.name);
  }
}

TEST_F(TrainGpuSteps, TheSameSeedGivesTheSameBits) {
  for (const NetCase& c : {kResnet, kEvery}) {
    std::vector<float> losses[2];
    std::vector<std::vector<float>> states[2];
    for (int k = 0; k < 2; ++k) {
      CudaBackend gpu(0, false);
      Trial r(gpu, c);
      losses[k] = r.losses(3);
      states[k] = r.state();
    }
    EXPECT_EQ(losses[0], losses[1]) << c.name;
    EXPECT_EQ(states[0], states[1]) << c.name;
  }
}

TEST_F(TrainGpuSteps, AStepRecordsIntoACudaGraph) {
  CudaBackend ref_be(0, false), be(0, false);
  Trial ref(ref_be, kEvery), run(be, kEvery);
  ref.losses(2);
  run.step(0);  // the first step plans: cuDNN's algorithms, GEMM plans, scratch, the optimizer's table
  run.load(1, kEvery.batch);
  get(be, run.metrics);  // the upload is done
  cudaStream_t s = be.stream();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  std::string error;
  try {
    run.step(1, false);
  } catch (const Error& e) {
    error = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  ASSERT_EQ(error, "") << "a step op failed under stream capture (it synchronizes or allocates)";
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_EQ(run.state(), ref.state());
}

TEST_F(TrainGpuSteps, MixedPrecisionLearnsLikeFloat32) {
  for (const NetCase& c : {kLenet, kResnet}) {
    CudaBackend f32(0, false), f16(0, true);
    ASSERT_EQ(f16.compute_dtype(), DataType::kFloat16);
    Trial a(f32, c), b(f16, c);
    // One batch over and over: both must fit it.
    std::vector<float> want, got;
    for (int s = 0; s < 30; ++s) {
      a.load(0, c.batch);
      b.load(0, c.batch);
      want.push_back(get(f32, a.step(s, false))[0]);
      got.push_back(get(f16, b.step(s, false))[0]);
    }
    EXPECT_NEAR(got[0], want[0], 2e-2 * want[0]) << c.name << ": the first forward pass";
    ASSERT_LT(want.back(), 0.7f * want[0]) << c.name << ": float32 did not fit the batch; the test needs another";
    // float16 may skip its first steps while the loss scale settles; it must still get well on its way.
    EXPECT_LT(got.back(), want.back() + 0.5f * (want[0] - want.back())) << c.name << ": float16 learned less";
    const LossScale ls = f16.loss_scale();
    EXPECT_LT(ls.skipped, 10) << c.name;
    EXPECT_EQ(ls.scale, 65536.0f / static_cast<float>(1 << ls.skipped)) << c.name;
    for (const auto& t : b.state())
      for (float v : t) ASSERT_TRUE(std::isfinite(v)) << c.name;
  }
}

TEST_F(TrainGpuSteps, TheLossScaleSkipsOverflowingStepsAndGrows) {
  CudaBackend be(0, true);
  const std::vector<float> w0 = {1, 2, 3}, g = {65536, -65536, 131072};  // 1, -1, 2 once unscaled
  ParamSlot p{put(be, {3}, w0), put(be, {3}, g), put(be, {3}, {0, 0, 0}), Tensor(), false};
  be.sgd_step({&p, 1}, {0.5f, 0.0f, 0.0f});
  EXPECT_EQ(get(be, p.value), (std::vector<float>{0.5f, 2.5f, 2.0f}));
  be.upload(std::vector<float>{1, INFINITY, 1}.data(), p.grad);
  be.sgd_step({&p, 1}, {0.5f, 0.0f, 0.0f});
  EXPECT_EQ(get(be, p.value), (std::vector<float>{0.5f, 2.5f, 2.0f})) << "an overflowing step must be skipped";
  LossScale ls = be.loss_scale();
  EXPECT_EQ(ls.scale, 32768.0f);
  EXPECT_EQ(ls.skipped, 1);
  be.fill(p.grad, 0);
  for (int i = 0; i < CudaBackend::kGrowthInterval; ++i) be.sgd_step({&p, 1}, {0.5f, 0.0f, 0.0f});
  ls = be.loss_scale();
  EXPECT_EQ(ls.scale, 65536.0f) << "the scale doubles after kGrowthInterval clean steps";
  EXPECT_EQ(ls.clean_steps, 0);
}

// A small separable data set: the label is the brightest of four quadrants (plus two more classes
// by brightness), 12 x 12 single-channel images.
data::LabelledImages quadrants(int64_t n) {
  data::LabelledImages set;
  set.images.dtype = DataType::kFloat32;
  set.images.shape = {n, 1, 12, 12};
  set.images.data.resize(static_cast<size_t>(n * 144) * sizeof(float));
  auto* px = reinterpret_cast<float*>(set.images.data.data());
  for (int64_t i = 0; i < n; ++i) {
    const int q = static_cast<int>(random_bits(99, i) % 4);
    for (int y = 0; y < 12; ++y)
      for (int x = 0; x < 12; ++x)
        px[i * 144 + y * 12 + x] =
            static_cast<float>(uniform_open(100 + i, y * 12 + x)) * 0.3f + ((y / 6) * 2 + x / 6 == q ? 0.7f : 0.0f);
    set.labels.push_back(q);
  }
  set.num_classes = 4;
  return set;
}

TEST_F(TrainGpuSteps, TheTrainerLearnsAndResumesToTheSameBits) {
  namespace fs = std::filesystem;
  const TrainingData data(quadrants(1200), {0.1, 0});
  TrainConfig c;
  c.epochs = 3;
  c.batch = 50;
  c.log_every = 5;
  c.solver.kind = SolverKind::kAdam;
  c.solver.lr = 3e-3;
  c.checkpoint_dir = fs::temp_directory_path() / "kiln_train_steps_gpu_test";
  fs::remove_all(c.checkpoint_dir);
  const NetDescription mlp = load_net_description("mlp");
  std::vector<std::vector<float>> whole, resumed;
  {
    CudaBackend be(0, false);
    Trainer t(mlp, data, be, c);
    t.run();
    ASSERT_FALSE(t.history().epochs.empty());
    EXPECT_GT(t.history().epochs.back().val_accuracy, 0.9);
    for (const auto& [name, tensor] : t.network().state()) whole.push_back(get(be, tensor));
  }
  {
    TrainConfig first = c;
    first.checkpoint_every = 7;
    first.stop_after = 30;
    CudaBackend be(0, false);
    Trainer t(mlp, data, be, first);
    t.run();
  }
  {
    TrainConfig second = c;
    second.checkpoint_every = 7;
    CudaBackend be(0, false);
    Trainer t(mlp, data, be, second);
    t.resume(c.checkpoint_dir);
    t.run();
    for (const auto& [name, tensor] : t.network().state()) resumed.push_back(get(be, tensor));
  }
  EXPECT_EQ(whole, resumed);
  fs::remove_all(c.checkpoint_dir);
}

// ---- data parallel (two GPUs)

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#define SKIP_WITHOUT_TWO_GPUS() \
  if (gpu_count() < 2) GTEST_SKIP() << "data parallel needs two GPUs; this machine has " << gpu_count()

TEST_F(TrainGpuSteps, DataParallelMatchesOneGpuWithTheWholeBatch) {
  SKIP_WITHOUT_TWO_GPUS();
  for (NetCase c : {kEvery, kResnet}) {
    for (int64_t batch : {c.batch, int64_t{5}}) {  // even and uneven shares
      c.batch = batch;
      CudaBackend one(0, false);
      DataParallelBackend two(2, false);
      Trial a(one, c), b(two, c);
      const std::string what = c.name + ", batch " + std::to_string(batch);
      EXPECT_LE(rel_error(b.losses(3), a.losses(3)), 1e-5) << what << ": losses";
      const std::vector<std::vector<float>> want = a.state();
      expect_states_close(b.state(), want, 1e-4, what);
      // Every replica holds the same weights, bit for bit.
      for (const auto& [name, t] : b.net.state()) {
        std::vector<float> r0(static_cast<size_t>(t.numel())), r1(r0.size());
        two.run_on(0, [&](CudaBackend& be) { be.download(two.local(t, 0), r0.data()); });
        two.run_on(1, [&](CudaBackend& be) { be.download(two.local(t, 1), r1.data()); });
        EXPECT_EQ(r0, r1) << what << ": " << name;
      }
      // Inference on one sample: replica 1 has no rows.
      for (Trial* r : {&a, &b}) {
        r->load(9, 1);
        r->net.forward(1, false);
      }
      EXPECT_LE(rel_error(get(two, b.net.loss(0, Tensor())), get(one, a.net.loss(0, Tensor()))), 1e-5) << what;
    }
  }
}

}  // namespace
}  // namespace kiln::train
