// Whether differentiable ops run their fused kernels where a device has them (attention as
// fused_attention.h's two kernels, ...) or the unfused composition of tensor ops that they
// replace. The two agree to float rounding (tests and train_gpt's --fused compare them); the
// fused ones keep less memory and take less time. On by default; DTRAIN_FUSED=0 in the
// environment turns it off at start.
#pragma once

namespace dtrain {

bool fused_kernels();
void set_fused_kernels(bool enabled);

}  // namespace dtrain
