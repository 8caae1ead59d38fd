// Switches for the CPU backend's convolution and product kernels. They change speed only:
// results agree to float rounding, and tests compare the settings.
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

// How convolutions and matrix products of bf16 operands (autocast, autocast.h) run: on
// oneDNN's bf16 kernels, which multiply bf16 pairs with the CPU's bf16 instructions and sum
// in f32, or emulated: the operands widened to f32 exactly and the f32 kernels. Both form
// the same exact products and sum them in f32, in different orders; results are rounded
// alike (to bf16 where cuDNN writes bf16). Auto takes the bf16 kernels only with AMX: on
// AVX-512 BF16 alone oneDNN 2.6's bf16 convolutions and matmuls run slower than the f32
// ones (0.7x and 0.5x on a Sapphire Rapids-class Xeon without AMX, bench_train --precision
// bf16), so there emulation is faster. Native takes them wherever the CPU has AVX-512 BF16
// (cpu_has_bf16_dot()); Emulated never. DTRAIN_CPU_BF16=auto|native|emulate sets it at start.
enum class Bf16Products { Auto, Native, Emulated };
Bf16Products cpu_bf16_products();
void set_cpu_bf16_products(Bf16Products mode);
bool cpu_has_bf16_dot();
// Whether bf16 products run on oneDNN's bf16 kernels now (the mode and the CPU).
bool cpu_native_bf16();

}  // namespace dtrain
