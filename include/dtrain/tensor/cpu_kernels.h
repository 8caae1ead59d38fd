// Switches for the CPU backend's f32 convolution kernels. Both change speed only: results
// agree to float rounding, and tests compare the settings.
#pragma once

namespace dtrain {

// Whether activations stay in oneDNN's blocked-channel layout from one layer to the next
// (see StorageLayout in storage.h). On by default; DTRAIN_CPU_BLOCKED=0 in the environment
// turns it off at start.
bool cpu_blocked_layout();
void set_cpu_blocked_layout(bool enabled);

// How weight gradients are computed: oneDNN's direct kernels, or im2col and oneDNN's GEMM
// over a few images at a time. Auto takes GEMM where the CPU lacks AVX-512, for kernels of
// 3x3 and smaller or a single input channel: there oneDNN 2.6's AVX2 direct kernels
// compute weight gradients at 10-60% of the core's peak (bench_ops --filter conv); with
// AVX-512 they reach 70-85%, and Auto keeps them. DTRAIN_CONV_WEIGHT_GRAD=direct|gemm sets
// it at start.
enum class ConvWeightGrad { Auto, Direct, Gemm };
ConvWeightGrad cpu_conv_weight_grad();
void set_cpu_conv_weight_grad(ConvWeightGrad mode);

}  // namespace dtrain
