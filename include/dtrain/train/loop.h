// The classification training loop the example trainers share: one epoch of
// forward / cross-entropy / backward / (clip) / step with a per-step learning-rate
// schedule, and an evaluation pass. Distribution plugs in through the hooks, so the
// loop itself never knows how it is parallelized. Batches go to the model's device (the
// device of its first parameter), without waiting when the loader pins them.
#pragma once

#include "dtrain/data/dataloader.h"
#include "dtrain/layers/module.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/train/progress.h"

#include <functional>
#include <optional>

namespace dtrain::train {

struct EpochOptions {
  const optim::LrSchedule* schedule = nullptr;  // lr for each global step; null keeps the optimizer's
  std::int64_t first_step = 0;                  // global step number of this epoch's first step
  double clip_grad_norm = 0;                    // 0 disables clipping
  double label_smoothing = 0;
  // Called between backward and the optimizer step (e.g. to finish gradient all-reduce).
  std::function<void()> after_backward = {};
  // Mixed precision: forward and the loss under AutocastGuard(autocast) (f16 or bf16), and
  // with a scaler, the loss scaled, steps with inf/NaN gradients skipped (after clipping
  // the unscaled gradients), the scale updated every step.
  std::optional<DType> autocast = std::nullopt;
  optim::LossScaler* scaler = nullptr;
};

struct EpochStats {
  double mean_loss = 0;  // over this process's steps with a finite loss
  double accuracy = 0;   // training accuracy on this process's samples, in [0, 1]
  std::int64_t samples = 0;
  std::int64_t steps = 0;
  double seconds = 0;
};

EpochStats train_epoch(nn::Module& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                       const EpochOptions& options, Progress* progress = nullptr);

// Sums (not means), so that ranks holding shards can add them up before dividing.
struct EvalStats {
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::int64_t samples = 0;
  double loss() const { return samples ? loss_sum / static_cast<double>(samples) : 0; }
  double accuracy() const { return samples ? static_cast<double>(correct) / static_cast<double>(samples) : 0; }
};

// Runs the model in eval mode without recording gradients (under autocast if given),
// restores the previous mode.
EvalStats evaluate(nn::Module& model, data::DataLoader& loader, std::optional<DType> autocast = std::nullopt);

// Number of rows of `logits` (N, C) whose argmax equals `labels` (N).
std::int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace dtrain::train
