// Learning-rate schedules: pure functions of the step, so a resumed run gets the same
// rate from its step count alone. The training loop applies one before each step:
//   optimizer.set_lr(schedule.lr_at(optimizer.steps()));
#pragma once

#include <cstdint>
#include <memory>

namespace dtrain::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The rate for step `step` (>= 0; the first step is 0).
  virtual double lr_at(std::int64_t step) const = 0;
};

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double base);
  double lr_at(std::int64_t step) const override;

 private:
  double base_;
};

// base * gamma^(step / step_size), the division rounding down.
class StepLr final : public LrSchedule {
 public:
  StepLr(double base, std::int64_t step_size, double gamma);
  double lr_at(std::int64_t step) const override;

 private:
  double base_;
  std::int64_t step_size_;
  double gamma_;
};

// Cosine annealing: min_lr + (base - min_lr) * (1 + cos(pi * step / total_steps)) / 2,
// then min_lr from total_steps on.
class CosineLr final : public LrSchedule {
 public:
  CosineLr(double base, std::int64_t total_steps, double min_lr = 0);
  double lr_at(std::int64_t step) const override;

 private:
  double base_;
  std::int64_t total_steps_;
  double min_lr_;
};

// Linear warmup (Goyal et al.) in front of another schedule: from
// start_factor * after.lr_at(0) up to after.lr_at(0) over warmup_steps, then
// after.lr_at(step - warmup_steps), so `after` starts where warmup ends.
class WarmupLr final : public LrSchedule {
 public:
  WarmupLr(std::shared_ptr<const LrSchedule> after, std::int64_t warmup_steps, double start_factor = 0);
  double lr_at(std::int64_t step) const override;

 private:
  std::shared_ptr<const LrSchedule> after_;
  std::int64_t warmup_steps_;
  double start_factor_;
};

// The linear scaling rule (Goyal et al., "Accurate, Large Minibatch SGD"): a rate tuned
// for base_batch, scaled by global_batch / base_batch for a larger global batch.
double linear_scaled_lr(double base_lr, std::int64_t global_batch, std::int64_t base_batch);

}  // namespace dtrain::optim
