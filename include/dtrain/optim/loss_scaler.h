// LossScaler: dynamic loss scaling for mixed-precision training, with the semantics of
// torch.cuda.amp.GradScaler. Low-precision gradients underflow to zero when they are
// small; multiplying the loss by a large scale S lifts every gradient by S, and dividing
// the gradients by S before the update restores them. When S is too large some gradient
// overflows to inf (or an op yields NaN): that step is skipped and S shrinks; after a run
// of finite steps S grows again, so it stays near the largest value that does not
// overflow. The same code runs on CPU and CUDA gradients, f32 or f64 (f16/bf16 come with
// CUDA), so it is tested on the CPU.
//
//   optim::LossScaler scaler;
//   for (...) {
//     optimizer.zero_grad();
//     scaler.scale(loss_fn(model, batch)).backward();
//     scaler.unscale(optimizer);          // optional: only to see true gradients,
//     optim::clip_grad_norm(params, 1.0); // e.g. to clip them
//     scaler.step(optimizer);             // skipped when a gradient is inf or NaN
//     scaler.update();
//   }
//
// Data parallel: call unscale()/step() after DataParallel::finish_gradient_sync(). The
// all-reduce averages the scaled gradients, and an inf or NaN on any rank makes the
// average non-finite on every rank, so all ranks skip or take the same step and keep the
// same scale without communicating (given the same options, or the same checkpoint).
#pragma once

#include "dtrain/optim/optimizer.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace dtrain::optim {

struct LossScalerOptions {
  double init_scale = 65536;            // finite, > 0
  double growth_factor = 2;             // finite, > 1
  double backoff_factor = 0.5;          // in (0, 1)
  std::int64_t growth_interval = 2000;  // >= 1: finite steps in a row before growing
  bool enabled = true;                  // false: every method passes through (scale 1)
};

// One step is scale(loss) and backward, then unscale() and/or step() for each optimizer
// that updates from this loss, then update(). Powers of two for the scale and factors
// (the defaults) make scaling and unscaling exact, barring overflow and underflow.
class LossScaler {
 public:
  // Throws on invalid options, naming the option and its value.
  explicit LossScaler(LossScalerOptions options = {});

  // loss * scale_value(), recorded for backward.
  Variable scale(const Variable& loss) const;

  // Divides the gradient of each of the optimizer's parameters (those that have one) by
  // the scale, in place, and records whether any of them holds an inf or NaN. At most
  // once per optimizer per step and never after step() for it: both throw.
  void unscale(Optimizer& optimizer);

  // Unscales first unless unscale() already did this step, then calls optimizer.step()
  // only when every gradient is finite. Returns whether it stepped. Once per optimizer
  // per step: a second call before update() throws. Reads one value per device from
  // device memory (the only host synchronisation of a step).
  bool step(Optimizer& optimizer);
  // After unscale(): counts this step as overflowed for `optimizer` although its own
  // gradients may be finite, because an inf or NaN turned up in gradients that take part
  // in the same step elsewhere (another stage of a pipeline). step() then skips, and
  // update() backs off, as on the stage that found it.
  void mark_nonfinite(Optimizer& optimizer);

  // Ends the step: an inf or NaN seen by any optimizer multiplies the scale by
  // backoff_factor and restarts the count of finite steps; growth_interval finite steps
  // in a row multiply it by growth_factor (unless that would overflow). Throws when no
  // unscale() or step() happened since the last update().
  void update();

  double scale_value() const { return enabled_ ? scale_ : 1.0; }
  bool enabled() const { return enabled_; }

  // Checkpoint state: "scale" (f64 scalar) and "growth_tracker" (i64 scalar, finite steps
  // since the scale last changed). Empty when disabled.
  NamedTensors state() const;
  // Restores what state() returned. Throws on a missing, unknown, repeated or invalid
  // entry and then leaves this unchanged. A disabled scaler ignores the state, so that a
  // checkpoint of a mixed-precision run loads into a full-precision one.
  void load_state(const NamedTensors& state);

 private:
  // What one optimizer has done this step.
  struct Pending {
    const Optimizer* optimizer;
    bool stepped = false;
    // One f64 scalar per device holding gradients: NaN iff one of them is not finite.
    // Read once, into found_inf.
    std::vector<Tensor> nonfinite = {};
    std::optional<bool> found_inf = std::nullopt;
  };

  Pending* find(const Optimizer& optimizer);
  static bool found_inf(Pending& pending);

  double scale_;
  double growth_factor_;
  double backoff_factor_;
  std::int64_t growth_interval_;
  bool enabled_;
  std::int64_t growth_tracker_ = 0;
  std::vector<Pending> pending_;  // cleared by update()
};

}  // namespace dtrain::optim
