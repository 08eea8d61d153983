// The training loop on the CPU: the MLP learns a Fashion-MNIST subset to above 80% validation
// accuracy in two epochs (its speed shows in the demo's summary, not in a unit test); the same seed
// gives bit-identical weights; a run stopped after a checkpoint and resumed reaches the same weights
// as an uninterrupted one; resuming another run or a damaged checkpoint is refused; a diverging
// loss stops with the step named.
#include <gtest/gtest.h>

#include <fstream>

#include "data/dataset.h"
#include "train/checkpoint.h"
#include "train/cpu_backend.h"
#include "train/trainer.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

// The first `limit` Fashion-MNIST training images, read once per test program.
const TrainingData& fashion(int64_t limit) {
  static std::map<int64_t, std::unique_ptr<TrainingData>> cache;
  static data::LabelledImages all = data::load_labelled_images(kFashion, data::Split::kTrain);
  auto& d = cache[limit];
  if (!d) d = std::make_unique<TrainingData>(all, DataOptions{0.1, limit});
  return *d;
}

#define SKIP_WITHOUT_FASHION_MNIST() \
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed"

std::vector<std::vector<float>> weights(Trainer& t) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, tensor] : t.network().state()) {
    std::vector<float> v(static_cast<size_t>(tensor.numel()));
    t.network().backend().download(tensor, v.data());
    out.push_back(std::move(v));
  }
  return out;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_train_trainer_test_" + name);
  fs::remove_all(d);
  return d;
}

TEST(TrainTrainer, MlpLearnsFashionMnistSubsetAbove80Percent) {
  SKIP_WITHOUT_FASHION_MNIST();
  const TrainingData& data = fashion(12000);
  CpuBackend be(2);
  TrainConfig c;
  c.epochs = 2;
  c.batch = 64;
  c.solver.kind = SolverKind::kAdam;
  c.solver.lr = 1e-3;
  c.log_every = 20;
  Trainer t(load_net_description("mlp"), data, be, c);
  int reports = 0;
  t.run([&](const Progress& p) { reports += p.epoch_end != nullptr; });
  ASSERT_EQ(t.history().epochs.size(), 2u);
  EXPECT_EQ(reports, 2);
  const EpochRecord& last = t.history().epochs.back();
  EXPECT_GT(last.val_accuracy, 0.80) << "validation accuracy after 2 epochs";
  EXPECT_LT(last.train_loss, t.history().steps.front().loss);
  EXPECT_EQ(t.history().steps.size(), static_cast<size_t>(2 * (10800 / 64) / 20));
}

// A small CNN with every kind of state: batch-norm running statistics, dropout masks, Adam moments.
const char* kStatefulNet = R"(
name: "stateful"
layer { name: "conv" conv { out_channels: 4 kernel: 3 stride: 2 } }
layer { name: "bn" batch_norm {} }
layer { name: "relu" relu {} }
layer { name: "pool" max_pool { kernel: 2 } }
layer { name: "flat" flatten {} }
layer { name: "drop" dropout { p: 0.2 } }
layer { name: "fc" linear {} }
)";

TrainConfig stateful_config() {
  TrainConfig c;
  c.epochs = 3;
  c.batch = 32;
  c.seed = 7;
  c.solver.kind = SolverKind::kAdamW;
  c.solver.lr = 2e-3;
  c.solver.weight_decay = 0.01;
  c.solver.schedule = ScheduleKind::kCosine;
  c.solver.warmup_steps = 5;
  c.log_every = 7;
  return c;
}

TEST(TrainTrainer, SameSeedGivesBitIdenticalWeights) {
  SKIP_WITHOUT_FASHION_MNIST();
  const TrainingData& data = fashion(1000);
  NetDescription desc = parse_net_description(kStatefulNet, "stateful");
  auto train = [&](uint64_t seed, int threads) {
    CpuBackend be(threads);
    TrainConfig c = stateful_config();
    c.seed = seed;
    Trainer t(desc, data, be, c);
    t.run();
    return weights(t);
  };
  auto a = train(7, 2);
  EXPECT_EQ(train(7, 2), a);
  EXPECT_EQ(train(7, 1), a);  // the thread count does not change the bits
  EXPECT_NE(train(8, 2), a);
}

TEST(TrainTrainer, KillAndResumeReachesTheSameWeights) {
  SKIP_WITHOUT_FASHION_MNIST();
  const TrainingData& data = fashion(1000);  // 900 training samples: 28 steps per epoch
  NetDescription desc = parse_net_description(kStatefulNet, "stateful");
  CpuBackend be(2);

  TrainConfig whole = stateful_config();
  Trainer uninterrupted(desc, data, be, whole);
  uninterrupted.run();

  // Checkpoints every 10 steps; "killed" at step 45, 5 steps after the checkpoint of step 40
  // (in the middle of epoch 2).
  TrainConfig first = stateful_config();
  first.checkpoint_every = 10;
  first.checkpoint_dir = fresh_dir("resume");
  first.stop_after = 45;
  {
    Trainer killed(desc, data, be, first);
    killed.run();
    EXPECT_EQ(killed.global_step(), 45);
  }
  TrainConfig second = first;
  second.stop_after = 0;
  Trainer resumed(desc, data, be, second);
  resumed.resume(first.checkpoint_dir);
  EXPECT_EQ(resumed.global_step(), 40);
  resumed.run();
  EXPECT_EQ(weights(resumed), weights(uninterrupted));
  ASSERT_EQ(resumed.history().epochs.size(), uninterrupted.history().epochs.size());
  for (size_t i = 0; i < resumed.history().epochs.size(); ++i) {
    EXPECT_EQ(resumed.history().epochs[i].train_loss, uninterrupted.history().epochs[i].train_loss) << i;
    EXPECT_EQ(resumed.history().epochs[i].val_accuracy, uninterrupted.history().epochs[i].val_accuracy) << i;
  }
  ASSERT_EQ(resumed.history().steps.size(), uninterrupted.history().steps.size());
  EXPECT_EQ(resumed.history().steps.back().loss, uninterrupted.history().steps.back().loss);

  // The finished run wrote a final checkpoint; with a cosine schedule its length is part of the
  // run, so more epochs are refused.
  TrainConfig more = second;
  more.epochs = 4;
  Trainer extended(desc, data, be, more);
  EXPECT_THROW(extended.resume(first.checkpoint_dir), Error);
}

TEST(TrainTrainer, ResumeRefusesAnotherRunOrADamagedFile) {
  SKIP_WITHOUT_FASHION_MNIST();
  const TrainingData& data = fashion(1000);
  NetDescription desc = parse_net_description(kStatefulNet, "stateful");
  CpuBackend be(2);
  TrainConfig c = stateful_config();
  c.epochs = 1;
  c.checkpoint_every = 10;
  c.checkpoint_dir = fresh_dir("refuse");
  Trainer(desc, data, be, c).run();
  EXPECT_TRUE(fs::exists(checkpoint_path(c.checkpoint_dir)));
  EXPECT_FALSE(fs::exists(checkpoint_path(c.checkpoint_dir).string() + ".tmp"));

  auto error_of = [&](const TrainConfig& other, const NetDescription& d) {
    try {
      Trainer(d, data, be, other).resume(c.checkpoint_dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TrainConfig other = c;
  other.batch = 16;
  other.seed = 99;
  std::string e = error_of(other, desc);
  EXPECT_NE(e.find("batch: 32 in the checkpoint, 16 now"), std::string::npos) << e;
  EXPECT_NE(e.find("seed: 7 in the checkpoint, 99 now"), std::string::npos) << e;
  e = error_of(c, load_net_description("mlp"));
  EXPECT_NE(e.find("the network description differs"), std::string::npos) << e;
  e = error_of(c, desc);
  EXPECT_EQ(e, "");  // the same run resumes

  // One flipped byte in the middle of the file.
  fs::path file = checkpoint_path(c.checkpoint_dir);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
  char byte = 0;
  f.read(&byte, 1);
  f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
  byte = static_cast<char>(byte ^ 0x10);
  f.write(&byte, 1);
  f.close();
  e = error_of(c, desc);
  EXPECT_NE(e.find("damaged checkpoint (checksum mismatch)"), std::string::npos) << e;
  fs::resize_file(file, 20);
  e = error_of(c, desc);
  EXPECT_NE(e.find("latest.ckpt"), std::string::npos) << e;
  e = error_of(c, desc);
  fs::remove(file);
  e = error_of(c, desc);
  EXPECT_NE(e.find("no checkpoint"), std::string::npos) << e;
}

TEST(TrainTrainer, DivergingLossStopsNamingTheStep) {
  SKIP_WITHOUT_FASHION_MNIST();
  const TrainingData& data = fashion(1000);
  CpuBackend be(2);
  TrainConfig c;
  c.epochs = 5;
  c.batch = 32;
  c.solver.lr = 1e6;  // diverges within a few steps
  Trainer t(load_net_description("mlp"), data, be, c);
  try {
    t.run();
    FAIL() << "training did not stop";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("the training loss became NaN or Inf at step "), std::string::npos) << m;
    EXPECT_NE(m.find("Lower --lr"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kiln::train
