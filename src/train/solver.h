// Solvers (SGD with momentum, Adam, AdamW) and learning-rate schedules. A solver owns the state
// tensors of every parameter (velocity, moments) on the network's backend and updates all
// parameters with one Backend call per step. The learning rate is a function of the global step
// alone, so a resumed run continues the same schedule.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "train/backend.h"
#include "train/layers.h"

namespace kiln::train {

enum class SolverKind { kSgd, kAdam, kAdamW };
enum class ScheduleKind { kConstant, kStep, kCosine };

struct SolverConfig {
  SolverKind kind = SolverKind::kSgd;
  double lr = 0.01;
  double momentum = 0.9;  // SGD
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  ScheduleKind schedule = ScheduleKind::kConstant;
  int64_t warmup_steps = 0;  // linear from lr / warmup_steps up to lr
  int64_t step_size = 0;     // kStep: multiply by gamma every step_size steps (after warm-up)
  double gamma = 0.1;
  double min_lr = 0;  // kCosine: the rate at the last step
};

SolverKind parse_solver(const std::string& s);      // sgd, adam, adamw
ScheduleKind parse_schedule(const std::string& s);  // constant, step, cosine
std::string solver_name(SolverKind k);
std::string schedule_name(ScheduleKind k);

// The learning rate of step `step` (from 0) of a run of `total_steps`.
double learning_rate(const SolverConfig& c, int64_t step, int64_t total_steps);

class Solver {
 public:
  Solver(const SolverConfig& config, Backend& be, std::vector<Param*> params);

  // Applies the gradients of global step `step` (from 0) with learning rate `lr`.
  void step(int64_t step, double lr);
  // State tensors by name ("fc1.weight.m", ...), in a fixed order, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;

 private:
  SolverConfig config_;
  Backend& be_;
  std::vector<std::string> names_;
  std::vector<ParamSlot> slots_;
};

}  // namespace kiln::train
