// kiln train: a network description (or zoo name), a data folder and a solver in; training with a
// live progress line; a summary table, metrics, a plot, checkpoints and the ONNX model out.
// Everything that can be refused (GPU options without a GPU backend, output file types, the data,
// the description) is checked before the first step.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/train_report.h"
#include "data/dataset.h"
#include "train/export.h"
#include "train/trainer.h"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;

void require_extension(const std::string& path, const char* option, std::initializer_list<const char*> exts) {
  if (path.empty()) return;
  const std::string ext = fs::path(path).extension().string();
  std::string list;
  for (const char* e : exts) {
    if (ext == e) return;
    list += (list.empty() ? "" : " or ") + std::string(e);
  }
  throw Error(std::string(option) + " " + path + ": expected a " + list + " file");
}

train::SolverConfig solver_config(const TrainOptions& o, int64_t steps_per_epoch) {
  train::SolverConfig s;
  s.kind = train::parse_solver(o.solver);
  s.lr = o.lr > 0 ? o.lr : (s.kind == train::SolverKind::kSgd ? 0.01 : 1e-3);
  s.momentum = o.momentum;
  s.weight_decay = o.weight_decay;
  s.schedule = train::parse_schedule(o.lr_schedule);
  s.warmup_steps = o.warmup;
  if (o.lr_step_epochs < 0) throw Error("--lr-step must not be negative");
  s.step_size = std::max<int64_t>(1, static_cast<int64_t>(o.lr_step_epochs * static_cast<double>(steps_per_epoch)));
  if (s.schedule == train::ScheduleKind::kStep && o.lr_step_epochs <= 0)
    throw Error("--lr-schedule step needs --lr-step EPOCHS (the epochs between rate drops)");
  s.gamma = o.lr_gamma;
  s.min_lr = o.min_lr;
  return s;
}

void write_example(const fs::path& dir, train::Trainer& t, const train::TrainingData& data, int64_t batch) {
  train::ExampleBatch ex = train::example_batch(t.network(), data, batch);
  fs::create_directories(dir);
  write_tensor_file(dir / "input_0.pb", ex.images);
  write_tensor_file(dir / "output_0.pb", ex.logits);
}

}  // namespace

int run_train(const TrainOptions& o) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  // A checkpoint folder keeps the GPU's algorithm choices, so that a resumed run computes the same bits.
  const std::string ckpt_dir = !o.checkpoint.empty() ? o.checkpoint : o.resume;
  const std::string device = resolve_device(o.device, "training");
  std::string timing_cache = o.timing_cache;
  if (timing_cache.empty() && !ckpt_dir.empty() && device == "gpu") {
    if (!o.checkpoint.empty()) fs::create_directories(o.checkpoint);
    timing_cache = (fs::path(ckpt_dir) / "timing_cache.json").string();
  }
  if (!timing_cache.empty() && device != "gpu") throw Error("--timing-cache is for GPU training (--device gpu)");
  std::unique_ptr<train::Backend> be = train::make_backend({device, o.threads, o.fp16, o.gpus, timing_cache});
  if (be->compute_dtype() != DataType::kFloat32 && !o.example.empty())
    throw Error("--example checks an export against float32 logits; train without --fp16 for it");
  require_extension(o.output, "-o", {".onnx"});
  require_extension(o.plot, "--plot", {".svg"});
  require_extension(o.metrics, "--metrics", {".csv", ".json"});
  if (o.checkpoint_every < 0) throw Error("--checkpoint-every must not be negative");

  train::NetDescription desc = train::load_net_description(o.net);
  const data::Layout layout = data::detect_layout(o.data);
  train::TrainingData data(data::load_labelled_images(o.data, data::Split::kTrain), {o.val_split, o.limit});
  if (o.batch < 1) throw Error("--batch must be at least 1");
  const int64_t steps_per_epoch = data.train_size() / std::max<int64_t>(o.batch, 1);

  train::TrainConfig tc;
  tc.epochs = o.epochs;
  tc.batch = o.batch;
  tc.seed = o.seed;
  tc.solver = solver_config(o, steps_per_epoch);
  tc.log_every = std::max<int64_t>(1, std::min<int64_t>(o.log_every, steps_per_epoch));
  tc.checkpoint_dir = !o.checkpoint.empty() ? o.checkpoint : o.resume;
  if (o.checkpoint_every > 0 && tc.checkpoint_dir.empty()) throw Error("--checkpoint-every needs --checkpoint DIR");
  if (!tc.checkpoint_dir.empty()) tc.checkpoint_every = o.checkpoint_every > 0 ? o.checkpoint_every : steps_per_epoch;

  train::Trainer trainer(desc, data, *be, tc);
  const train::Shape image = data.image_shape();
  fmt::print("training {} ({} parameters) on {} ({}: {} training and {} validation images {}x{}x{}, {} classes)\n",
             trainer.network().name(), grouped(static_cast<double>(trainer.network().num_parameters())), o.data,
             data::layout_name(layout), data.train_size(), data.val_size(), image[0], image[1], image[2],
             data.classes());
  fmt::print("{}, {} lr {:g} ({}), batch {}, {} epochs of {} steps, seed {}\n", be->name(), o.solver, tc.solver.lr,
             o.lr_schedule, o.batch, o.epochs, steps_per_epoch, o.seed);
  if (!o.resume.empty()) {
    trainer.resume(o.resume);
    fmt::print("resumed from {} at step {} (epoch {})\n", o.resume, trainer.global_step(),
               trainer.global_step() / steps_per_epoch + 1);
  }
  std::fflush(stdout);

  // The live line goes to a terminal only, at most ten times a second; logs get the epoch lines.
  const bool tty = isatty(fileno(stderr));
  Clock::time_point last_draw{};
  trainer.run([&](const train::Progress& p) {
    if (p.epoch_end) {
      fmt::print(stderr, "{}{}\n", tty ? "\r\033[K" : "", epoch_line(p));
      return;
    }
    if (!tty || Clock::now() - last_draw < std::chrono::milliseconds(100)) return;
    last_draw = Clock::now();
    fmt::print(stderr, "\r\033[K{}", progress_line(p));
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  fmt::print("\n{}", summary_table(trainer.history(), trainer.network().num_parameters(), seconds));

  if (!o.metrics.empty()) {
    write_metrics(o.metrics, trainer.history());
    fmt::print("wrote metrics to {}\n", o.metrics);
  }
  if (!o.plot.empty()) {
    write_plot_svg(o.plot, trainer.history(), fmt::format("{} on {}", trainer.network().name(), o.data));
    fmt::print("wrote the training curves to {}\n", o.plot);
  }
  if (!o.output.empty()) {
    train::export_onnx(trainer.network(), data.normalization(), o.output);
    fmt::print("wrote {} (inference form; input 'image' float32 [batch,{},{},{}] in [0, 1], output 'logits')\n",
               o.output, image[0], image[1], image[2]);
  }
  if (!o.example.empty()) {
    write_example(o.example, trainer, data, o.batch);
    fmt::print(
        "wrote a validation batch and its logits to {} (check an export with: kiln run MODEL.onnx --inputs {} "
        "--expect {})\n",
        o.example, o.example, o.example);
  }
  return kExitOk;
}

}  // namespace kiln::cli
