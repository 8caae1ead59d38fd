#include "dtrain/optim/lr_schedule.h"

#include "dtrain/core/error.h"

#include <cmath>
#include <numbers>

namespace dtrain::optim {

namespace {

void check_rate(const char* schedule, const char* name, double value) {
  DTRAIN_CHECK(std::isfinite(value) && value >= 0, "{}: {} must be a finite number >= 0, got {}", schedule, name,
               value);
}

void check_step(const char* schedule, std::int64_t step) {
  DTRAIN_CHECK(step >= 0, "{}: step must be >= 0, got {}", schedule, step);
}

}  // namespace

ConstantLr::ConstantLr(double base) : base_(base) { check_rate("ConstantLr", "base", base); }

double ConstantLr::lr_at(std::int64_t step) const {
  check_step("ConstantLr", step);
  return base_;
}

StepLr::StepLr(double base, std::int64_t step_size, double gamma) : base_(base), step_size_(step_size), gamma_(gamma) {
  check_rate("StepLr", "base", base);
  DTRAIN_CHECK(step_size > 0, "StepLr: step_size must be > 0, got {}", step_size);
  DTRAIN_CHECK(std::isfinite(gamma) && gamma > 0, "StepLr: gamma must be a finite number > 0, got {}", gamma);
}

double StepLr::lr_at(std::int64_t step) const {
  check_step("StepLr", step);
  return base_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

CosineLr::CosineLr(double base, std::int64_t total_steps, double min_lr)
    : base_(base), total_steps_(total_steps), min_lr_(min_lr) {
  check_rate("CosineLr", "base", base);
  check_rate("CosineLr", "min_lr", min_lr);
  DTRAIN_CHECK(total_steps > 0, "CosineLr: total_steps must be > 0, got {}", total_steps);
  DTRAIN_CHECK(min_lr <= base, "CosineLr: min_lr {} exceeds base {}", min_lr, base);
}

double CosineLr::lr_at(std::int64_t step) const {
  check_step("CosineLr", step);
  if (step >= total_steps_) return min_lr_;
  const double progress = static_cast<double>(step) / static_cast<double>(total_steps_);
  return min_lr_ + (base_ - min_lr_) * (1 + std::cos(std::numbers::pi * progress)) / 2;
}

WarmupLr::WarmupLr(std::shared_ptr<const LrSchedule> after, std::int64_t warmup_steps, double start_factor)
    : after_(std::move(after)), warmup_steps_(warmup_steps), start_factor_(start_factor) {
  DTRAIN_CHECK(after_ != nullptr, "WarmupLr: the schedule after warmup is null");
  DTRAIN_CHECK(warmup_steps >= 0, "WarmupLr: warmup_steps must be >= 0, got {}", warmup_steps);
  DTRAIN_CHECK(start_factor >= 0 && start_factor <= 1, "WarmupLr: start_factor must be in [0, 1], got {}",
               start_factor);
}

double WarmupLr::lr_at(std::int64_t step) const {
  check_step("WarmupLr", step);
  if (step >= warmup_steps_) return after_->lr_at(step - warmup_steps_);
  const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps_);
  return after_->lr_at(0) * (start_factor_ + (1 - start_factor_) * progress);
}

double linear_scaled_lr(double base_lr, std::int64_t global_batch, std::int64_t base_batch) {
  check_rate("linear_scaled_lr", "base_lr", base_lr);
  DTRAIN_CHECK(global_batch > 0, "linear_scaled_lr: global_batch must be > 0, got {}", global_batch);
  DTRAIN_CHECK(base_batch > 0, "linear_scaled_lr: base_batch must be > 0, got {}", base_batch);
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

}  // namespace dtrain::optim
