// Mixed precision in the spirit of torch.autocast: while an AutocastGuard lives on this
// thread, matmul, linear and conv2d round their f32 operands to a 16-bit float (bf16 or
// f16) and multiply those, summing in f32 and returning f32; their backward products do
// the same. On a GPU that runs them on the tensor cores. Everything else stays f32:
// parameters ("master weights"), gradients, activations, normalization, losses.
//
//   optim::LossScaler scaler;  // f16 needs it (its range is small); bf16 rarely does
//   {
//     AutocastGuard autocast(DType::bf16);
//     loss = cross_entropy(model->forward(x), y);
//   }
//   scaler.scale(loss).backward();  // backward follows what forward recorded
//   scaler.step(optimizer);
//   scaler.update();
//
// On the CPU the products are computed from the rounded operands in f32: the same numbers
// as a GPU's, without the speed, which is what makes mixed precision testable here.
#pragma once

#include "dtrain/tensor/dtype.h"

#include <optional>

namespace dtrain {

class AutocastGuard {
 public:
  // dtype: f16 or bf16 (anything else throws). enabled = false turns autocast off in its
  // scope, under an outer guard too, so that one code path serves both:
  // AutocastGuard guard(DType::bf16, use_amp).
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The 16-bit dtype of the innermost live guard on this thread, if any.
std::optional<DType> autocast_dtype();

}  // namespace dtrain
