// Solvers and schedules (see solver.h).
#include "train/solver.h"

#include <cmath>

namespace kiln::train {

SolverKind parse_solver(const std::string& s) {
  if (s == "sgd") return SolverKind::kSgd;
  if (s == "adam") return SolverKind::kAdam;
  if (s == "adamw") return SolverKind::kAdamW;
  throw Error("--solver " + s + ": expected sgd, adam or adamw");
}

ScheduleKind parse_schedule(const std::string& s) {
  if (s == "constant") return ScheduleKind::kConstant;
  if (s == "step") return ScheduleKind::kStep;
  if (s == "cosine") return ScheduleKind::kCosine;
  throw Error("--lr-schedule " + s + ": expected constant, step or cosine");
}

std::string solver_name(SolverKind k) {
  switch (k) {
    case SolverKind::kSgd: return "sgd";
    case SolverKind::kAdam: return "adam";
    case SolverKind::kAdamW: return "adamw";
  }
  return "?";
}

std::string schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kConstant: return "constant";
    case ScheduleKind::kStep: return "step";
    case ScheduleKind::kCosine: return "cosine";
  }
  return "?";
}

double learning_rate(const SolverConfig& c, int64_t step, int64_t total_steps) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  const int64_t s = step - c.warmup_steps;
  switch (c.schedule) {
    case ScheduleKind::kConstant: return c.lr;
    case ScheduleKind::kStep: return c.step_size > 0 ? c.lr * std::pow(c.gamma, s / c.step_size) : c.lr;
    case ScheduleKind::kCosine: {
      const int64_t span = total_steps - c.warmup_steps - 1;
      const double t = span > 0 ? std::min(1.0, static_cast<double>(s) / static_cast<double>(span)) : 1.0;
      return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1 + std::cos(M_PI * t));
    }
  }
  return c.lr;
}

Solver::Solver(const SolverConfig& config, Backend& be, std::vector<Param*> params) : config_(config), be_(be) {
  if (!(config.lr > 0)) throw Error("the learning rate must be positive");
  if (config.weight_decay < 0) throw Error("the weight decay must not be negative");
  if (config.kind == SolverKind::kSgd && !(config.momentum >= 0 && config.momentum < 1))
    throw Error("the momentum must be in [0, 1)");
  const bool adam = config.kind != SolverKind::kSgd;
  for (Param* p : params) {
    ParamSlot s;
    s.value = p->value;
    s.grad = p->grad;
    s.decay = p->decay;
    s.m = be.alloc(p->value.dtype(), p->value.shape());
    be.fill(s.m, 0);
    if (adam) {
      s.v = be.alloc(p->value.dtype(), p->value.shape());
      be.fill(s.v, 0);
    }
    names_.push_back(p->name);
    slots_.push_back(std::move(s));
  }
}

void Solver::step(int64_t step, double lr) {
  if (config_.kind == SolverKind::kSgd) {
    SgdStep s;
    s.lr = static_cast<float>(lr);
    s.momentum = static_cast<float>(config_.momentum);
    s.weight_decay = static_cast<float>(config_.weight_decay);
    be_.sgd_step(slots_, s);
    return;
  }
  AdamStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.weight_decay = static_cast<float>(config_.weight_decay);
  s.decoupled = config_.kind == SolverKind::kAdamW;
  s.t = step + 1;
  be_.adam_step(slots_, s);
}

std::vector<std::pair<std::string, Tensor>> Solver::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    out.emplace_back(names_[i] + ".m", slots_[i].m);
    if (slots_[i].v.defined()) out.emplace_back(names_[i] + ".v", slots_[i].v);
  }
  return out;
}

}  // namespace kiln::train
